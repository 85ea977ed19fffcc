#!/usr/bin/env python3
"""Set up seqlab's environment when something is missing, then open the lessons or run the tests.

    python workbench.py lab     # JupyterLab on notebooks/  (the main job)
    python workbench.py test    # every test, the lessons included (what CI runs)
    python workbench.py execute notebooks/02_linear_recurrence.ipynb   # re-run a lesson, save its outputs

Both create or reuse one local virtual environment, ``.venv`` beside this file, and install into it
``torch==2.13.0`` (the pin: a CPU wheel on a machine without CUDA, the usual CUDA build on a CUDA
machine) and then this package, editable, with its ``dev`` extra. The install is redone only when
``pyproject.toml`` changes. Works with the standard library alone, on Linux, macOS and Windows.
Extra arguments are passed on: ``python workbench.py test tests/test_scan.py -x``,
``python workbench.py lab --port 8899``.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".seqlab-installed"
TORCH_PIN = "torch==2.13.0"

# The command `test` runs, inside the environment. Notebooks run in the quick profile; nbval
# compares their committed outputs; --dist loadscope keeps each notebook on one worker.
PYTEST_ARGS = [
    "-n", "2", "--dist", "loadscope",
    "--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg",
    "--nbval-cell-timeout", "900",
    "-p", "no:cacheprovider", "-ra",
    "tests", "notebooks",
]

# JupyterLab settings for this environment: no news/update toast (it hides cells and asks the network).
LAB_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"checkForUpdates": False, "fetchNews": "false"},
}


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def wanted_stamp() -> str:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return f"{digest} {TORCH_PIN} python{sys.version_info.major}.{sys.version_info.minor}"


def run(cmd: list, **kwargs) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def ensure_environment() -> Path:
    """Create ``.venv`` if missing and (re)install when pyproject.toml changed since the last install."""
    if sys.version_info < (3, 10):
        sys.exit(f"seqlab needs Python >= 3.10; this is {sys.version.split()[0]}")
    py = venv_python()
    if not py.exists():
        print(f"Creating the virtual environment {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    if STAMP.exists() and STAMP.read_text() == wanted_stamp():
        return py
    print("Installing seqlab and its dependencies into .venv (once; redone when pyproject.toml changes) ...", flush=True)
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check"]
    run(pip + [TORCH_PIN])            # first and alone, so nothing else can pick another torch build
    run(pip + ["-e", f"{ROOT}[dev]"])
    write_lab_overrides(py)
    STAMP.write_text(wanted_stamp())
    return py


def write_lab_overrides(py: Path) -> None:
    prefix = subprocess.run([str(py), "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                            check=True).stdout.strip()
    settings = Path(prefix) / "share" / "jupyter" / "lab" / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    path = settings / "overrides.json"
    current = json.loads(path.read_text()) if path.exists() else {}
    for plugin, values in LAB_OVERRIDES.items():  # merge: keep whatever else is set there
        current.setdefault(plugin, {}).update(values)
    path.write_text(json.dumps(current, indent=2))


def lab(args: list[str]) -> int:
    py = ensure_environment()
    write_lab_overrides(py)
    cmd = [py, "-m", "jupyter", "lab", f"--notebook-dir={ROOT / 'notebooks'}", *args]
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in args:
        cmd.append("--allow-root")  # containers often run as root; JupyterLab refuses without it
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.call([str(c) for c in cmd], cwd=ROOT)


def test_environment() -> dict:
    """What tests and committed lesson outputs run under: the quick profile and one math thread per
    process (two pytest workers share two cores; more threads oversubscribe them and make torch many
    times slower). Notebooks under nbval inherit this environment."""
    return dict(os.environ, SEQLAB_PROFILE="quick", TRITON_DEFAULT_FP_FUSION="1", PYTHONHASHSEED="0",
                OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def test(args: list[str]) -> int:
    py = ensure_environment()
    env = test_environment()
    cmd = [py, "-m", "pytest", *(args or PYTEST_ARGS)]
    if args:  # a narrower run still validates notebooks the same way
        cmd = [py, "-m", "pytest", "--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg",
               "-p", "no:cacheprovider", *args]
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.call([str(c) for c in cmd], cwd=ROOT, env=env)


def execute(args: list[str]) -> int:
    """Re-execute lessons in place under the test environment (so nbval sees the same numbers), then
    drop the bulky widget state that plotly's FigureWidget leaves in the file."""
    if not args:
        print("usage: python workbench.py execute notebooks/NN_name.ipynb [...]")
        return 2
    py = ensure_environment()
    env = test_environment()
    for nb in args:
        run([py, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
             "--ExecutePreprocessor.timeout=900", nb], cwd=ROOT, env=env)
        run([py, "-m", "seqlab.viz.nbstate", nb], cwd=ROOT, env=env)
    return 0


def main(argv: list[str]) -> int:
    commands = {"lab": lab, "test": test, "execute": execute}
    if not argv or argv[0] not in commands:
        print(__doc__)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
