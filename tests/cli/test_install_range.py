"""Installing seqlab keeps the torch an environment already has: pyproject.toml declares ranges (torch among
them), JupyterLab and the widgets sit in the ``lab`` extra, and the exact versions live in requirements.lock and
workbench.py's TORCH_PIN. ``pip install -e .`` in Colab, Kaggle or a cluster's environment with torch 2.11 must
resolve to that torch, not download another."""
import importlib.util
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from helpers import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")
requirements = pytest.importorskip("packaging.requirements")
utils = pytest.importorskip("packaging.utils")

PYPROJECT = REPO / "pyproject.toml"
LOCK = REPO / "requirements.lock"
# uv's words when the package index cannot be reached (no network, a proxy refusing, DNS)
UNREACHABLE = re.compile(r"Failed to fetch|error sending request|dns error|Connection refused|connect(ion)? timed out|"
                         r"operation timed out|Network is unreachable|offline mode|Could not connect|tcp connect error",
                         re.I)


def _project() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["project"]


def _workbench():
    spec = importlib.util.spec_from_file_location("workbench_for_install_range", REPO / "workbench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(tmp_path, constraint: str, extras: list[str]) -> str:
    """``uv pip compile pyproject.toml`` for Python 3.11 on x86_64 Linux (Colab, Kaggle, most clusters) with
    ``constraint`` as what the environment already has; its resolution, or a skip where the index is out of
    reach."""
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(constraint + "\n")
    cmd = [sys.executable, "-m", "uv", "pip", "compile", str(PYPROJECT), "--constraint", str(constraints),
           "--python-version", "3.11", "--python-platform", "x86_64-unknown-linux-gnu", "--no-header",
           "--no-annotate", "--quiet", *(f"--extra={e}" for e in extras)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.skip("uv pip compile did not finish in 300 s: the package index is out of reach")
    if done.returncode != 0 and UNREACHABLE.search(done.stderr):
        pytest.skip(f"the package index cannot be reached, so nothing can be resolved: "
                    f"{done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize(("torch", "extras"), [("2.11.0", []), ("2.11.0", ["lab"]), ("2.6.0", [])],
                         ids=["2.11-core", "2.11-lab", "2.6-core"])
def test_an_environment_with_an_older_torch_keeps_it(torch, extras, tmp_path):
    """seqlab resolves around torch 2.11 (a cluster's, Colab's) and 2.6 (the oldest the range admits), with and
    without the lab extra: the resolution holds that torch, so pip has nothing to replace. Needs the index."""
    resolved = _compile(tmp_path, f"torch=={torch}", extras)
    pins = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", resolved, flags=re.M))
    assert pins.get("torch") == torch, resolved
    if extras:
        assert "jupyterlab" in pins and "ipywidgets" in pins, resolved


def test_pyproject_declares_ranges_and_keeps_the_pin_for_the_lock():
    """torch is a range in the dependencies and pinned nowhere in pyproject.toml (the exact pin is workbench.py's
    TORCH_PIN, which the lock command passes to uv as a constraint); JupyterLab and the widgets are the lab
    extra's, not every install's."""
    project = _project()
    core = {utils.canonicalize_name(requirements.Requirement(r).name): requirements.Requirement(r)
            for r in project["dependencies"]}
    torch = core["torch"]
    assert ">=" in str(torch.specifier) and "==" not in str(torch.specifier), torch
    assert torch.specifier.contains("2.11.0") and torch.specifier.contains(_workbench().TORCH_PIN.split("==")[1])
    assert not {"jupyterlab", "ipywidgets", "anywidget"} & set(core)
    lab = {utils.canonicalize_name(requirements.Requirement(r).name) for r in project["optional-dependencies"]["lab"]}
    assert {"jupyterlab", "ipywidgets", "anywidget"} <= lab
    every = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    pinned = [r for r in every if utils.canonicalize_name(requirements.Requirement(r).name) == "torch"
              and "==" in str(requirements.Requirement(r).specifier)]
    assert pinned == [], pinned


def test_the_lock_satisfies_every_range_in_pyproject():
    """The lock was resolved from these ranges: every requirement of the dependencies and of every extra (torch
    aside: installed from TORCH_PIN, left out of the lock) is locked at a version its range admits."""
    locked = {utils.canonicalize_name(n): v
              for n, v in re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", LOCK.read_text(), flags=re.M)}
    project = _project()
    wanted = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    wrong = []
    for line in wanted:
        req = requirements.Requirement(line)
        name = utils.canonicalize_name(req.name)
        if name == "torch":
            continue
        if name not in locked:
            wrong.append(f"{line}: not in {LOCK.name}")
        elif not req.specifier.contains(locked[name], prereleases=True):
            wrong.append(f"{line}: locked at {locked[name]}")
    assert not wrong, "requirements.lock does not satisfy pyproject.toml (python3 workbench.py lock):\n" + \
        "\n".join(wrong)


def test_the_lock_command_resolves_every_extra(monkeypatch, tmp_path):
    """``workbench.py lock`` hands uv every extra of pyproject.toml (the lab extra's JupyterLab is locked like the
    rest). Nothing is resolved: uv's calls are recorded."""
    wb = _workbench()
    calls = []

    def fake_run(cmd, *args, **kwargs):
        calls.append(cmd)
        return SimpleNamespace(stdout="numpy==2.0.0\ntorch==2.13.0\n", returncode=0)

    monkeypatch.setattr(wb, "ensure_environment", lambda: tmp_path / "python")
    monkeypatch.setattr(wb.subprocess, "run", fake_run)
    monkeypatch.setattr(wb, "run", lambda cmd, **kwargs: calls.append(cmd))
    assert wb.lock([]) == 0
    assert len(calls) == 2
    extras = set(_project()["optional-dependencies"])
    for cmd in calls:
        assert "--all-extras" in cmd or extras <= {cmd[i + 1] for i, a in enumerate(cmd) if a == "--extra"}, cmd
    assert "--no-emit-package=torch" in calls[-1]
    for cmd in calls:                      # torch resolved at the pin the set-up installs
        held = cmd[cmd.index("--constraint") + 1]
        assert open(held).read().split() == [wb.TORCH_PIN], cmd
