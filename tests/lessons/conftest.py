"""The browser the lesson and book tests drive: Debian's Chromium through pytest-playwright (``SEQLAB_CHROMIUM``
overrides its path). Playwright never downloads a browser here; without Chromium a browser test fails under CI
(``CI`` set) and is skipped elsewhere."""
from __future__ import annotations

import os

import pytest

CHROMIUM = os.environ.get("SEQLAB_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def _missing(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"browser test cannot run in CI: {reason}. Install it with `apt-get install -y chromium` "
                    f"(.ci/run does this when it is missing).", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _missing(f"Chromium not found at {CHROMIUM}")
    try:
        import playwright  # noqa: F401
    except ImportError:
        _missing("playwright (pytest-playwright) is not installed; `pip install -e '.[dev]'`")
    return CHROMIUM


# pytest-playwright fixtures, pointed at Debian's Chromium (no browser download, no sandbox in containers).
@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args, chromium_executable):
    return {**browser_type_launch_args, "executable_path": chromium_executable, "headless": True,
            "args": LAUNCH_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1400, "height": 1000}}
