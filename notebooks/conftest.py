"""How nbval runs the lessons: every lesson's kernel starts with Triton made unavailable
(``SEQLAB_NO_TRITON=1``), as on macOS or Windows, so a lesson that ran to its end here runs to its end
on every platform. The Triton kernels have their own tests (``tests/``); the committed outputs come from
the same switch (``python3 workbench.py execute``)."""
import os

import pytest


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    """Set the switch while nbval starts a lesson's kernel (the kernel inherits the environment when it
    starts), and only then: the unit tests sharing this worker keep Triton."""
    before = os.environ.get("SEQLAB_NO_TRITON")
    os.environ["SEQLAB_NO_TRITON"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SEQLAB_NO_TRITON", None)
        else:
            os.environ["SEQLAB_NO_TRITON"] = before
