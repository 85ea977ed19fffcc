"""The locked environment: requirements.lock is what the lessons were executed with, environment.yml (for conda
users) installs it alone, and the installed packages are the locked ones."""
import importlib.metadata
import json
import re
import subprocess
import sys

import pytest
from helpers import REPO

ROOT = REPO
LOCK = ROOT / "requirements.lock"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")
yaml = pytest.importorskip("yaml")
markers = pytest.importorskip("packaging.markers")
utils = pytest.importorskip("packaging.utils")


def _workbench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("workbench_for_environment", ROOT / "workbench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _normalise(requirement: str) -> str:
    name, _, rest = re.match(r"\s*([A-Za-z0-9_.\-]+)(.*)", requirement).group(1, 0, 2)
    return name.lower().replace("_", "-") + re.sub(r"\s+", "", rest).replace('"', "'")


def _pyproject_requirements() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + list(project["optional-dependencies"]["dev"])
    return {_normalise(r) for r in reqs}


def locked() -> dict[str, tuple[str, str]]:
    """``{name: (version, marker)}`` for every locked package whose marker holds on this machine."""
    pins = {}
    for line in LOCK.read_text().splitlines():
        m = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$", line)
        if m and (m.group(3) is None or markers.Marker(m.group(3)).evaluate()):
            pins[utils.canonicalize_name(m.group(1))] = (m.group(2), m.group(3) or "")
    return pins


def _environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def _pip_section(env: dict) -> list[str]:
    for item in env["dependencies"]:
        if isinstance(item, dict) and "pip" in item:
            return item["pip"]
    raise AssertionError("environment.yml has no pip: section")


def test_every_locked_package_has_an_exact_version_and_hashes():
    blocks = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text().split("\n", 2)[2])
    assert len(blocks) > 100, "requirements.lock looks truncated"
    for block in blocks:
        head = block.splitlines()[0]
        assert re.match(r"[A-Za-z0-9_.\-]+==\S+", head), f"not an exact pin: {head!r}"
        assert "--hash=sha256:" in block, f"no hash for {head!r}"


def test_torch_and_the_cuda_libraries_stay_out_of_the_lock_and_triton_is_torchs():
    names = re.findall(r"^([A-Za-z0-9_.\-]+)==", LOCK.read_text(), flags=re.M)
    wb = _workbench()
    assert not [n for n in names if wb.left_out_of_the_lock(n)]
    # torch 2.13.0's CUDA build requires triton==3.7.1 on Linux: the lock must not fight it
    assert re.search(r"^triton==3\.7\.1 ; sys_platform == 'linux'", LOCK.read_text(), flags=re.M)


def test_the_installed_packages_are_the_locked_ones():
    """Every locked package the lessons and the tests reach is installed at its locked version (a local label
    such as ``+cpu`` ignored), and every package the lessons import is locked (torch: at TORCH_PIN)."""
    pins = locked()
    wrong = []
    for name, (version, _) in pins.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            wrong.append(f"{name}: locked {version}, not installed")
            continue
        if installed.split("+")[0] != version:
            wrong.append(f"{name}: locked {version}, installed {installed}")
    assert not wrong, "the environment differs from requirements.lock (python3 workbench.py reinstalls it):\n" + \
        "\n".join(wrong)
    assert importlib.metadata.version("torch").split("+")[0] == _workbench().TORCH_PIN.split("==")[1]
    for name in lesson_imports():
        assert name in pins or name in ("torch", "seqlab"), f"the lessons import {name}, which is not locked"


def lesson_imports() -> set[str]:
    """The distributions whose modules the lessons import (``import x`` / ``from x import ...``)."""
    modules = set()
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                src = "".join(cell["source"])
                modules |= set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", src, flags=re.M))
    owners = importlib.metadata.packages_distributions()
    found = {utils.canonicalize_name(d) for m in modules for d in owners.get(m, [])}
    assert {"torch", "plotly", "numpy", "ipywidgets"} <= found, found
    return found


@pytest.mark.parametrize("platform", ["x86_64-unknown-linux-gnu", "aarch64-apple-darwin", "x86_64-pc-windows-msvc"])
def test_the_lock_resolves_with_hashes_on_every_platform(platform, tmp_path):
    """uv installs the lock, hashes required, for Python 3.11 on Linux, macOS arm64 and Windows (dry run: it
    resolves and finds a hashed file for every package, installs nothing). Needs the package index."""
    cmd = [sys.executable, "-m", "uv", "pip", "install", "--dry-run", "--require-hashes", "-r", str(LOCK),
           "--python-version", "3.11", "--python-platform", platform, "--target", str(tmp_path / "target")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"
    assert "Would install" in done.stderr + done.stdout


def test_environment_yml_installs_the_lock_alone_on_python_311():
    env = _environment()
    assert _pip_section(env) == ["-r requirements.lock"]
    assert "python=3.11" in env["dependencies"] and "pip" in env["dependencies"]


def test_the_readme_installs_seqlab_without_dependencies_after_the_lock():
    readme = (ROOT / "README.md").read_text()
    conda = next(line for line in readme.splitlines() if "conda env create -f environment.yml" in line)
    assert "pip install torch==2.13.0" in conda and "pip install --no-deps -e ." in conda
    assert conda.index("pip install torch==2.13.0") < conda.index("pip install --no-deps -e .")
    assert "python3 workbench.py lock" in readme


def test_torch_is_pinned_where_the_set_up_installs_it():
    """The set-up's pin; pyproject.toml gives a range (tests/cli/test_install_range.py)."""
    assert not any(r.startswith("torch==") for r in _pyproject_requirements())
    workbench = (ROOT / "workbench.py").read_text()
    assert 'TORCH_PIN = "torch==2.13.0"' in workbench


def test_triton_carries_a_linux_marker():
    triton = [r for r in _pyproject_requirements() if r.startswith("triton")]
    assert triton and all("sys_platform=='linux'" in r for r in triton)


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    last_line = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1].strip()
    assert f"\n{last_line}\n" in readme, f"README does not show CI's command {last_line!r}"
