"""environment.yml (for conda users) must describe the same environment as pyproject.toml."""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")
yaml = pytest.importorskip("yaml")


def _normalise(requirement: str) -> str:
    name, _, rest = re.match(r"\s*([A-Za-z0-9_.\-]+)(.*)", requirement).group(1, 0, 2)
    return name.lower().replace("_", "-") + re.sub(r"\s+", "", rest).replace('"', "'")


def _pyproject_requirements() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + list(project["optional-dependencies"]["dev"])
    return {_normalise(r) for r in reqs}


def _environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def _pip_section(env: dict) -> list[str]:
    for item in env["dependencies"]:
        if isinstance(item, dict) and "pip" in item:
            return item["pip"]
    raise AssertionError("environment.yml has no pip: section")


def test_environment_lists_the_same_dependencies_as_pyproject():
    pip = _pip_section(_environment())
    listed = {_normalise(r) for r in pip if not r.startswith("-e")}
    assert listed == _pyproject_requirements()


def test_environment_installs_the_package_editable_on_python_311():
    env = _environment()
    assert "-e ." in _pip_section(env)
    assert "python=3.11" in env["dependencies"]
    assert "pip" in env["dependencies"]


def test_torch_is_pinned_everywhere():
    assert "torch==2.13.0" in _pyproject_requirements()
    workbench = (ROOT / "workbench.py").read_text()
    assert 'TORCH_PIN = "torch==2.13.0"' in workbench


def test_triton_carries_a_linux_marker():
    triton = [r for r in _pyproject_requirements() if r.startswith("triton")]
    assert triton and all("sys_platform=='linux'" in r for r in triton)


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    last_line = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1].strip()
    assert f"\n{last_line}\n" in readme, f"README does not show CI's command {last_line!r}"
