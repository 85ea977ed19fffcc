#!/usr/bin/env python3
"""Set up seqlab's environment when something is missing, then open the lessons or run the tests.

    python workbench.py lab     # JupyterLab on my_notebooks/, your copy of notebooks/  (the main job)
    python workbench.py lab --reset 02   # put lesson 02 back as committed
    python workbench.py lab --help       # lab's own options, then JupyterLab's (the others pass to it)
    python workbench.py test    # every test, the lessons included (what CI runs)
    python workbench.py test --quick   # the fast tier: minutes, not the slow tests or the lessons under nbval
    python workbench.py execute notebooks/02_linear_recurrence.ipynb   # re-run a lesson, save its outputs
    python workbench.py book    # the lessons as a book in build/book/ (open build/book/index.html)
    python workbench.py gpu-check   # on a CUDA machine: kernels, lessons, GPU benchmarks, configs/ timed
    python workbench.py gpu-check --here   # the same with this interpreter as it is (an offline GPU node)
    python workbench.py lock    # refresh requirements.lock from pyproject.toml (then re-execute the lessons)

Each creates or reuses one local virtual environment, ``.venv`` beside this file, and installs into it
``torch==2.13.0`` (the pin: a CPU wheel on a machine without CUDA, the usual CUDA build on a CUDA
machine), then ``requirements.lock`` (every other package, exact versions and hashes) and then this
package, editable, without dependencies. The install is redone when ``pyproject.toml`` or the lock
changes. Works with the standard library alone, on Linux, macOS and Windows.
Extra arguments are passed on: ``python workbench.py test tests/ops/test_scan.py -x``,
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
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LOCK = ROOT / "requirements.lock"


def left_out_of_the_lock(name: str) -> bool:
    """torch (installed first, from TORCH_PIN: a CPU or a CUDA build by machine) and what only its CUDA build
    pulls in. Its other dependencies (sympy, networkx, ...) and Triton are locked."""
    return name == "torch" or name.startswith(("nvidia-", "cuda-"))


# How nbval validates the lessons, in every run that collects them (the full run and a narrow one).
NBVAL_ARGS = ["--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg",
              "--nbval-cell-timeout", "900"]
# The command `test` runs, inside the environment. Notebooks run in the quick profile; nbval
# compares their committed outputs; --dist loadscope keeps each notebook on one worker; the 30 slowest tests are
# listed at the end (CI's 30-minute budget is spent there).
PYTEST_ARGS = ["-n", "2", "--dist", "loadscope", "--nbval", *NBVAL_ARGS, "-p", "no:cacheprovider", "-ra",
               "--durations=30", "tests", "notebooks"]
# `test --quick`: the fast tier, a few minutes on two cores. Every test under tests/ not marked slow (tests/conftest.py
# marks the slow ones: Triton's ahead-of-time compiles, real processes, torchrun, the browser, the book, lengths of
# 4096 and more); no lesson under nbval and no second pass. Extra arguments follow it (a path given replaces tests/).
QUICK_ARGS = ["-n", "2", "--dist", "loadscope", "-m", "not slow", "-ra", "--durations=15"]
# Its second pass: the lessons alone, on another floating-point path (other_fp_path_environment).
SECOND_PASS_ARGS = ["-n", "2", "--dist", "loadscope", "--nbval", *NBVAL_ARGS, "-p", "no:cacheprovider", "-ra",
                    "notebooks"]

# JupyterLab settings for this environment: no news/update toast (it hides cells and asks the network).
LAB_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"checkForUpdates": False, "fetchNews": "false"},
    # saved widget state is shown when a lesson opens, and kept when it is saved
    "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
}


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def wanted_stamp() -> str:
    """What the installed environment was made from: a change to either file reinstalls."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + LOCK.read_bytes()).hexdigest()
    return f"{digest} {TORCH_PIN} python{sys.version_info.major}.{sys.version_info.minor}"


def run(cmd: list, **kwargs) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def has_nvidia_driver() -> bool:
    """An NVIDIA driver is loaded (Linux): the CUDA build of torch would have a GPU to use."""
    import shutil

    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def check_platform() -> None:
    """Stop with a clear message where torch 2.13 has no wheel."""
    import platform

    if sys.version_info < (3, 11):
        sys.exit(f"seqlab needs Python >= 3.11; this is {sys.version.split()[0]}")
    if platform.system() == "Darwin" and platform.machine() == "x86_64":
        sys.exit("seqlab needs torch 2.13, which has no build for Intel Macs (x86_64). On a Mac, use an Apple "
                 "Silicon one (arm64); or Linux or Windows; or read the lessons without running them: "
                 "python3 workbench.py book on another machine, or the notebooks on GitHub.")


def pip_install(py: Path, args: list[str], log: Path, what: str) -> bool:
    """``pip install args`` with its output in ``log``; one line here. Returns whether it succeeded. pip
    byte-compiles what it installs, and that must stay: where ``PYTHONDONTWRITEBYTECODE`` is set (it was on the
    2-core machine the README's CI table was measured on), no process writes ``.pyc`` files later, so with ``--no-compile`` each
    of the tests' hundreds of processes compiled torch's modules anew (tried: the tests' first pass, 21 minutes,
    was at 97 % after 29 when stopped)."""
    cmd = [str(py), "-m", "pip", "install", "--disable-pip-version-check", *args]
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT)
    print(f"  {what}: {'done' if code == 0 else 'FAILED'}  (pip's output: {log})", flush=True)
    return code == 0


def install_torch(py: Path, log: Path) -> None:
    """``torch==2.13.0``, first and alone, so nothing else can pick another torch build. On Linux without an
    NVIDIA driver the CPU build comes from PyTorch's CPU index (the plain pin would fetch the CUDA build
    and ~1 GB of NVIDIA libraries); if that index cannot be reached, the plain pin."""
    import platform

    if platform.system() == "Linux" and not has_nvidia_driver():
        if pip_install(py, [TORCH_PIN, "--index-url", CPU_INDEX, "--retries", "1", "--timeout", "15"], log,
                       "torch (CPU build, PyTorch's CPU index)"):
            return
    if not pip_install(py, [TORCH_PIN], log, "torch"):
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        sys.exit(f"installing {TORCH_PIN} failed; the end of pip's output ({log}):\n{tail}")


def ensure_environment() -> Path:
    """Create ``.venv`` if missing and (re)install when pyproject.toml or the lock changed since the last
    install: torch, then the lock (exact versions, hashes checked; a new lock moves every package to its
    version), then seqlab itself without dependencies (a hashed install cannot take ``-e .`` in the same
    call)."""
    check_platform()
    py = venv_python()
    if not py.exists():
        print(f"Creating the virtual environment {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    done = STAMP.read_text() if STAMP.exists() else ""
    if done == wanted_stamp():
        return py
    print("Installing seqlab and its locked dependencies into .venv (once; redone when pyproject.toml or "
          "requirements.lock changes; a few hundred MB to download with the CPU build of torch, about 3 GB on "
          "disk) ...", flush=True)
    log = VENV / "install.log"
    install_torch(py, log)
    for args, what in ((["--require-hashes", "-r", str(LOCK)], "the locked packages (requirements.lock)"),
                       (["--no-deps", "-e", str(ROOT)], "seqlab itself")):
        if not pip_install(py, args, log, what):
            tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
            sys.exit(f"installing {what} failed; the end of pip's output ({log}):\n{tail}")
    write_lab_overrides(py)
    STAMP.write_text(wanted_stamp())
    return py


def lock(args: list[str]) -> int:
    """Refresh ``requirements.lock`` from pyproject.toml (its dependencies and every extra: ``lab``, ``dev``) with
    uv's universal resolver, torch held at TORCH_PIN by a constraint (pyproject.toml only gives its range): one file
    for Linux, macOS and Windows, each platform's packages under their markers, exact versions and hashes, for
    Python 3.11. torch and its CUDA libraries stay out (left_out_of_the_lock); Triton lands at the version the
    pinned torch's CUDA build requires. Re-execute the lessons after a refresh. Extra arguments go to
    ``uv pip compile`` (``--upgrade-package plotly``)."""
    py = ensure_environment()
    constraint = VENV / "torch-pin.txt"
    constraint.write_text(TORCH_PIN + "\n")
    compile_ = [str(py), "-m", "uv", "pip", "compile", "pyproject.toml", "--all-extras", "--constraint",
                str(constraint), "--universal", "--python-version", "3.11", "--quiet", *args]
    resolved = subprocess.run([*compile_, "--no-header", "--no-annotate"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
    names = {line.split("==")[0] for line in resolved.splitlines() if "==" in line and not line.startswith(" ")}
    dropped = sorted(filter(left_out_of_the_lock, names))
    run([*compile_, "--generate-hashes", *(f"--no-emit-package={n}" for n in dropped),
         "--custom-compile-command", "python3 workbench.py lock", "-o", LOCK.name], cwd=ROOT)
    print(f"{LOCK.name} written ({len(names) - len(dropped)} packages; left out: {', '.join(dropped)}). "
          "Re-execute the lessons: python3 workbench.py execute notebooks/*.ipynb")
    return 0


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


# JupyterLab's options (seqlab.viz.nbstate.LAB_ARGS): a save that changes nothing but the widget state leaves a
# lesson as it is, byte for byte, and no save drops a saved widget that an output shows (keep_saved_widgets);
# seqlab's JupyterLab extension runs a notebook's widget restores one at a time, so that no saved widget shows
# "model not found" on a fresh open (seqlab/viz/labextension/)
LAB_ARGS = ["--ContentsManager.pre_save_hook=seqlab.viz.nbstate.keep_saved_widgets",
            f"--LabApp.extra_labextensions_path={ROOT / 'seqlab' / 'viz' / 'labextension'}",
            "--ServerApp.kernel_manager_class=seqlab.viz.labkernels.ReadyRestartKernelManager"]

WORKING = ROOT / "my_notebooks"          # the learner's copy of the lessons (git-ignored)
SYNC = WORKING / ".seqlab-sync.json"     # lesson -> hash of the tracked version it was copied from
# Lessons renumbered (old file name -> new), in the order their copies are carried over: a name is moved away
# before another lesson's copy is moved onto it.
RENAMED = [("07_arena.ipynb", "08_arena.ipynb"), ("06_inference.ipynb", "07_inference.ipynb")]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _follow_renames(synced: dict) -> list[str]:
    """Carry the learner's copies of renumbered lessons (``RENAMED``) over to their new names and return what
    the learner should be told; ``synced`` follows. A copy the learner never edited is removed (the lesson
    comes back under its new name, as committed); an edited one moves to the new name, or stays where it is,
    beside it, when the new name is taken. Its edits are never lost."""
    notes = []
    for old, new in RENAMED:
        mine, moved = WORKING / old, WORKING / new
        if (ROOT / "notebooks" / old).exists():          # still a lesson under that name: nothing to carry over
            continue
        copied_from = synced.pop(old, None)              # no record: treated as edited
        if not mine.exists():
            continue
        if copied_from is not None and _digest(mine) == copied_from:
            mine.unlink()
            notes.append(f"{old} is now {new} (your copy of {old} had no edits and was removed)")
            continue
        ids = f'exercises.check("{old[:2]}.N", ...) there is now exercises.check("{new[:2]}.N", ...)'
        if moved.exists():
            notes.append(f"{old} is now {new}; my_notebooks/ already has a {new}, so your edits stay in "
                         f"my_notebooks/{old}, kept beside it ({ids})")
            continue
        mine.rename(moved)
        if copied_from is not None:
            synced[new] = copied_from
        notes.append(f"{old} is now {new}; your edited copy moved with it, to my_notebooks/{new} ({ids})")
    return notes


def sync_working_copy(reset: list[str] = (), written: list[Path] | None = None) -> list[str]:
    """Bring ``my_notebooks/`` up to date with ``notebooks/`` and return what the learner should be told
    (the lessons copied are appended to ``written``).

    A lesson missing from the copy is copied; one the learner has not changed since it was copied is
    refreshed when the tracked lesson changes; one the learner changed is kept. A renumbered lesson's copy
    follows it to its new name first (``_follow_renames``). ``reset`` names lessons (``"02"`` or a file name)
    to restore from the tracked version whatever their state.
    """
    WORKING.mkdir(exist_ok=True)
    synced = json.loads(SYNC.read_text()) if SYNC.exists() else {}
    notes = _follow_renames(synced)
    for tracked in sorted((ROOT / "notebooks").glob("*.ipynb")):
        mine, name = WORKING / tracked.name, tracked.name
        wanted = _digest(tracked)
        forced = any(name == r or name.startswith(f"{r}_") for r in reset)
        if forced or not mine.exists():
            mine.write_bytes(tracked.read_bytes())
            if written is not None:
                written.append(mine)
            if forced:
                notes.append(f"{name}: restored from notebooks/")
        elif synced.get(name) != wanted:
            if _digest(mine) == synced.get(name):          # untouched by the learner: take the new lesson
                mine.write_bytes(tracked.read_bytes())
                if written is not None:
                    written.append(mine)
                notes.append(f"{name}: updated to the new version in notebooks/")
            else:
                notes.append(f"{name}: notebooks/ has a new version; your edited copy is kept "
                             f"(python3 workbench.py lab --reset {name[:2]} takes the new one)")
                continue
        synced[name] = wanted
    SYNC.write_text(json.dumps(synced, indent=1))
    unknown = [r for r in reset if not any(p.name == r or p.name.startswith(f"{r}_")
                                           for p in (ROOT / "notebooks").glob("*.ipynb"))]
    if unknown:
        raise SystemExit(f"--reset: no lesson named {unknown}; give a number like 02 or a file name")
    return notes


def _split_reset(args: list[str]) -> tuple[list[str], list[str]]:
    """``--reset NN [NN ...]`` (repeatable) out of the arguments for JupyterLab."""
    reset, rest, i = [], [], 0
    while i < len(args):
        if args[i] == "--reset":
            values = []
            while i + 1 < len(args) and not args[i + 1].startswith("-"):
                values.append(args[i + 1])
                i += 1
            if not values:
                raise SystemExit("--reset needs a lesson: python3 workbench.py lab --reset 02")
            reset += values
        else:
            rest.append(args[i])
        i += 1
    return reset, rest


LAB_HELP = """usage: python3 workbench.py lab [--reset NN [NN ...]] [JupyterLab's options]

JupyterLab on my_notebooks/, your copy of the lessons in notebooks/ (edits, outputs and autosaves land in the
copy; notebooks/ stays as committed). The first launch copies every lesson; later launches keep your copies
and bring in lessons you never edited when they change.

workbench.py's own option:
  --reset NN [NN ...]   put lessons back as committed (a number such as 02, or a file name), then exit

Every other option passes to JupyterLab, e.g.
  --port 8899           serve on this port (default: 8888, or the next free one)
  --no-browser          open no browser (open the address lab prints yourself)
  --ip 0.0.0.0          listen on every network interface (a remote machine)

Stop JupyterLab with Ctrl-C in this terminal.
"""
# JupyterLab's logs at warnings and above (no start-up chatter: lab() says what to open); the kernel websocket's
# keep-alive ping off: jupyter_server gives tornado its ping timeout in milliseconds (90000, 3x the interval) where
# tornado wants it no longer than the interval and warns on every start; a server on this machine needs no
# keep-alive (a remote one behind a proxy can pass --ServerApp.tornado_settings itself); the kernel's messages
# encrypted (CurveZMQ keys from the server, where the kernel spec says it takes them), which also spares the
# kernel's warning that it runs over TCP without encryption
LAB_QUIET_ARGS = ["--ServerApp.log_level=WARN", "--LabApp.log_level=WARN",
                  '--ServerApp.tornado_settings={"ws_ping_interval": 0}', "--KernelManager.transport_encryption=auto"]


def _lab_option(args: list[str], names: tuple[str, ...]) -> str | None:
    """The value of ``--name=value`` or ``--name value`` among ``args`` (the last one given), else None."""
    found, it = None, iter(args)
    for a in it:
        key, eq, value = a.partition("=")
        if key in names:
            found = value if eq else next(it, None)
    return found


def _free_port(start: int = 8888, tries: int = 50) -> int:
    import socket

    for port in range(start, start + tries):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return start


def _lessons_said(written: list[Path], notes: list[str]) -> list[str]:
    """What ``lab`` tells the learner about ``my_notebooks/``: copied or kept, then any note of the sync."""
    total = len(list((ROOT / "notebooks").glob("*.ipynb")))
    copied, kept = len(written), total - len(written)
    where = WORKING.name + "/"
    if copied and not kept:
        lines = [f"lessons: copied the {total} lessons into {where}, your copy to edit and run "
                 "(notebooks/ stays as committed)"]
    elif copied:
        lines = [f"lessons: kept your {kept} lessons in {where}; copied {copied} "
                 f"({', '.join(p.name for p in written)})"]
    else:
        lines = [f"lessons: kept your {total} lessons in {where} as you left them"]
    return lines + [f"lessons: {n}" for n in notes]


def lab_help() -> int:
    """``lab --help``: workbench.py's own options at once; JupyterLab's after them only where the environment is
    already installed (the help installs nothing)."""
    print(LAB_HELP, flush=True)
    py = venv_python()
    if not (py.exists() and STAMP.exists() and STAMP.read_text() == wanted_stamp()):
        print("JupyterLab's own options: the environment is not installed yet (the first python3 workbench.py lab "
              "installs it); then python3 workbench.py lab --help lists them too.", flush=True)
        return 0
    print("JupyterLab's own options follow (python3 workbench.py lab passes them on):\n", flush=True)
    return subprocess.call([str(py), "-m", "jupyter", "lab", "--help"], cwd=ROOT)


def lab(args: list[str]) -> int:
    """JupyterLab on ``my_notebooks/``, the learner's git-ignored copy of the lessons (``notebooks/`` stays
    as committed: autosave, outputs and edits land in the copy). ``--reset NN`` restores lessons; ``--help``
    prints ``LAB_HELP`` and then JupyterLab's own options. It says in a few lines what it copied or kept, the
    address to open and how to stop; JupyterLab itself logs warnings and errors only."""
    if any(a in ("-h", "--help", "--help-all") for a in args):
        return lab_help()
    reset, args = _split_reset(args)
    py = ensure_environment()
    write_lab_overrides(py)
    written: list[Path] = []
    notes = sync_working_copy(reset, written)
    if written:   # the project's own lessons: trusted, so JupyterLab renders their saved widgets and outputs
        subprocess.run([str(py), "-m", "jupyter", "trust", *map(str, written)], cwd=ROOT, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if reset:
        for note in notes:
            print(f"lessons: {note}", flush=True)
        return 0
    for line in _lessons_said(written, notes):
        print(line, flush=True)
    port = _lab_option(args, ("--port", "--ServerApp.port"))
    extra = []
    if port is None:
        port = str(_free_port())
        extra.append(f"--port={port}")
    extra.append("--ServerApp.port_retries=0")   # the address printed below is the one it serves, or it says why
    env = dict(os.environ)
    token = _lab_option(args, ("--IdentityProvider.token", "--ServerApp.token", "--token"))
    if token is None:
        import secrets

        token = env.get("JUPYTER_TOKEN") or secrets.token_hex(24)
        env["JUPYTER_TOKEN"] = token     # in the environment, not on the command line
    host = _lab_option(args, ("--ip", "--ServerApp.ip"))
    host = "localhost" if host in (None, "", "0.0.0.0", "*", "::") else host
    # -y: one Ctrl-C shuts JupyterLab down (no "Shutdown this Jupyter server (y/[n])?" prompt)
    cmd = [py, "-m", "jupyter", "lab", "-y", f"--notebook-dir={WORKING}", *LAB_ARGS, *LAB_QUIET_ARGS, *extra,
           *args]
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in args:
        cmd.append("--allow-root")  # containers often run as root; JupyterLab refuses without it
    url = f"http://{host}:{port}/lab" + (f"?token={token}" if token else "")
    chosen = _lab_option(args, ("--browser", "--ServerApp.browser"))
    if "--no-browser" not in args and chosen is None and not _browser_found():
        cmd.append("--no-browser")      # JupyterLab would warn "No web browser found" (a headless machine)
        opens = " (no web browser found here: open it in yours)"
    else:
        opens = "" if "--no-browser" in args else " (a browser tab opens on it)"
    print(f"JupyterLab on {WORKING.name}/: open {url}{opens}\n"
          "Stop it with Ctrl-C here (save your notebooks first: Ctrl-S in JupyterLab). "
          "Options: python3 workbench.py lab --help", flush=True)
    try:
        return subprocess.call([str(c) for c in cmd], cwd=ROOT, env=env)
    except KeyboardInterrupt:      # Ctrl-C: JupyterLab got it too and shuts down; no traceback here
        return 130


def _browser_found() -> bool:
    """Whether Python's webbrowser module, which JupyterLab asks, finds a browser to open (none on a server)."""
    import webbrowser

    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def test_environment() -> dict:
    """What tests and committed lesson outputs run under: the quick profile and one math thread per
    process (two pytest workers share two cores; more threads oversubscribe them and make torch many
    times slower). Notebooks under nbval inherit this environment."""
    return dict(os.environ, SEQLAB_PROFILE="quick", TRITON_DEFAULT_FP_FUSION="1", PYTHONHASHSEED="0",
                OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


# Another machine's floating-point path, by what torch runs here: AVX512 -> AVX2, AVX2 -> scalar kernels.
# Each holds torch's own kernels (ATen), oneDNN and MKL to it; Numba compiles for a generic CPU in both.
OTHER_FP_PATH = {
    "AVX512": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "AVX2": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}
FP_PATH_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "NUMBA_CPU_NAME")


def cpu_capability(py: Path, env: dict) -> str:
    """The vector path torch's CPU kernels take under ``env`` (``torch.backends.cpu.get_cpu_capability``)."""
    probe = [str(py), "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"]
    return subprocess.run(probe, capture_output=True, text=True, check=True, env=env).stdout.strip()


def other_fp_path_environment(env: dict, capability: str) -> dict:
    """``env`` with torch, oneDNN, MKL and Numba held to a floating-point path other than ``capability``'s
    (the machine's own): where torch runs AVX512 kernels, AVX2; elsewhere the scalar ones."""
    native = {k: v for k, v in env.items() if k not in FP_PATH_VARIABLES}
    return dict(native, **OTHER_FP_PATH.get(capability, OTHER_FP_PATH["AVX2"]), NUMBA_CPU_NAME="generic")


def quick_args(args: list[str]) -> list[str]:
    """The pytest arguments of ``test --quick ARGS``: QUICK_ARGS, then ARGS, then ``tests`` unless ARGS name a
    path (``test --quick tests/ops -x`` runs the fast tier of tests/ops)."""
    rest = [a for a in args if a != "--quick"]
    named = any(not a.startswith("-") and (ROOT / a.split("::", 1)[0]).exists() for a in rest)
    return [*QUICK_ARGS, *rest, *([] if named else ["tests"])]


# The Triton path each pass's lessons take (notebooks/conftest.py reads SEQLAB_LESSONS_TRITON when it starts a kernel)
LESSON_PATHS = {"interpreter": "in the CPU interpreter, as lab starts it on Linux",
                "off": "switched off, as on macOS or Windows"}


def full_run_passes(py: Path, env: dict) -> list[tuple[str, dict, list[str]]]:
    """The full run's two passes as (title, environment, pytest arguments): every test and every lesson on this
    machine's floating-point path with the lessons on Triton's interpreter, as a Linux student's kernel runs them;
    then the lessons again on another floating-point path with Triton switched off. Pass 1 keeps the FP_PATH_VARIABLES
    the caller set: ``ATEN_CPU_CAPABILITY=avx2 ... workbench.py test`` runs an AVX2 machine's two passes on an AVX512
    one (its pass 2 then takes the scalar kernels)."""
    other = other_fp_path_environment(env, cpu_capability(py, env))
    return [("pass 1: every test and lesson", dict(env, SEQLAB_LESSONS_TRITON="interpreter"), PYTEST_ARGS),
            ("pass 2: the lessons again", dict(other, SEQLAB_LESSONS_TRITON="off"), SECOND_PASS_ARGS)]


def test(args: list[str]) -> int:
    """Every test and every lesson; then the lessons again as another machine runs them, on a floating-point
    path other than this machine's and with Triton switched off, so that no compared output depends on either
    (:func:`full_run_passes`). Pytest arguments
    run that part alone, once. ``--quick``: the fast tier (QUICK_ARGS: ``-m "not slow"``, no lesson under
    nbval, one pass), for a change to one op or layer; the full run stays what CI runs."""
    py = ensure_environment()
    env = test_environment()
    if "--quick" in args:
        args = quick_args(args)
    if args:  # a narrower run still validates notebooks the same way (a lesson named is collected by nbval)
        collect = [] if {"--nbval", "--nbval-lax"} & set(args) or not any(
            a.rstrip("/").endswith((".ipynb", "notebooks")) for a in args) else ["--nbval"]
        cmd = [py, "-m", "pytest", *collect, *NBVAL_ARGS, "-p", "no:cacheprovider", *args]
        print("+", " ".join(map(str, cmd)), flush=True)
        return subprocess.call([str(c) for c in cmd], cwd=ROOT, env=env)
    codes = []
    for title, pass_env, pass_args in full_run_passes(py, env):
        held = {k: pass_env[k] for k in FP_PATH_VARIABLES if k in pass_env} or "the machine's own"
        print(f"\n== {title}, torch CPU capability {cpu_capability(py, pass_env)} ({held}), "
              f"lessons with Triton {LESSON_PATHS[pass_env['SEQLAB_LESSONS_TRITON']]}", flush=True)
        cmd = [py, "-m", "pytest", *pass_args]
        print("+", " ".join(map(str, cmd)), flush=True)
        codes.append(subprocess.call([str(c) for c in cmd], cwd=ROOT, env=pass_env))
    print(f"\n== {'both passes passed' if not any(codes) else 'FAILED: pytest exit codes ' + str(codes)}")
    return max(codes)


def execute(args: list[str]) -> int:
    """Re-execute lessons in place under the test environment (so nbval sees the same numbers; as
    ``jupyter nbconvert --execute --inplace`` does, with ``seqlab.viz.nbrun``), then
    drop the bulky widget state that plotly's FigureWidget leaves in the file and add a static PNG to
    every figure (``seqlab.viz.nbstate``: kaleido with the system's Chromium)."""
    if not args:
        print("usage: python workbench.py execute notebooks/NN_name.ipynb [...]")
        return 2
    py = ensure_environment()
    # as lab starts a kernel on Linux and CI's first pass runs the lessons: Triton in its CPU interpreter where it is
    # installed (cells whose output names the path are tagged nbval-ignore-output; lesson 10 needs the interpreter)
    env = {k: v for k, v in test_environment().items() if k not in ("TRITON_INTERPRET", "SEQLAB_NO_TRITON")}
    for nb in args:
        # nbconvert --execute --inplace, without nbclient's Output-widget stall (seqlab.viz.nbrun says why)
        run([py, "-m", "seqlab.viz.nbrun", "--timeout", "300", nb], cwd=ROOT, env=env)
        run([py, "-m", "seqlab.viz.nbstate", "--png", nb], cwd=ROOT, env=env)
        set_kernel_name(ROOT / nb)
    return 0


KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def set_kernel_name(path: Path) -> None:
    """The kernel name JupyterLab writes: a lesson saved with another one opens marked modified."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    if nb.get("metadata", {}).get("kernelspec") != KERNELSPEC:
        nb.setdefault("metadata", {})["kernelspec"] = KERNELSPEC
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def book(args: list[str]) -> int:
    """The lessons as a book in ``build/book/`` (``tools/book.py``: Sphinx, MyST-NB, sphinx-book-theme): read them
    without installing."""
    py = ensure_environment()     # Sphinx and MathJax 3 come with the dev extra, in the lock
    return subprocess.call([str(py), str(ROOT / "tools" / "book.py"), *args], cwd=ROOT)


# What gpu-check --here needs in the interpreter it is started with (no .venv, no lock, no torch pin): the module
# and the wheel that brings it.
HERE_NEEDS = {"torch": "torch (the node's own CUDA build)", "triton": "triton (the one that build of torch wants)",
              "pytest": "pytest", "numpy": "numpy", "numba": "numba", "plotly": "plotly", "tqdm": "tqdm",
              "datasets": "datasets", "sklearn": "scikit-learn", "filelock": "filelock", "nbformat": "nbformat",
              "nbval": "nbval", "ipywidgets": "ipywidgets", "ipykernel": "ipykernel", "nbclient": "nbclient"}
# The GPU benchmarks' peers: optional; without one its rows are left out and the record says so.
PEERS = {"fla": ("fla-core / flash-linear-attention", "GateLoop against fla's chunk_gla"),
         "accelerated_scan": ("accelerated-scan", "the scan against accelerated-scan")}

# Run by the interpreter gpu-check will use: what it holds, as JSON (standard library and torch only).
_PROBE = r"""
import importlib.util, json, platform, sys
from importlib import metadata
needs, peers = json.loads(sys.argv[1])
def version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
found = {"python": platform.python_version(), "executable": sys.executable, "platform": platform.platform(),
         "torch": None, "cuda": None, "triton": version("triton"), "gpu": None, "capability": None,
         "missing": [m for m in needs if importlib.util.find_spec(m) is None],
         "peers_missing": [m for m in peers if importlib.util.find_spec(m) is None]}
try:
    import torch
    found["torch"], found["cuda"] = torch.__version__, torch.version.cuda
    if torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name()
        found["capability"] = "%d.%d" % torch.cuda.get_device_capability()
except Exception as err:
    found["torch_error"] = "%s: %s" % (type(err).__name__, err)
print(json.dumps(found))
"""


def probe_environment(py: Path) -> dict:
    """What ``py`` holds: Python, torch and its CUDA, Triton, the GPU (``gpu``: its name, or None without CUDA),
    the modules of :data:`HERE_NEEDS` and :data:`PEERS` it lacks (``missing``, ``peers_missing``)."""
    done = subprocess.run([str(py), "-c", _PROBE, json.dumps([list(HERE_NEEDS), list(PEERS)])], capture_output=True,
                          text=True, cwd=ROOT)
    if done.returncode != 0:
        return {"python": None, "executable": str(py), "torch": None, "cuda": None, "triton": None, "gpu": None,
                "missing": list(HERE_NEEDS), "peers_missing": list(PEERS),
                "probe_error": done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def locked_version(name: str) -> str | None:
    """``name``'s version in requirements.lock, or None."""
    for line in LOCK.read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==")[1].split()[0]
    return None


def describe_environment(found: dict, here: bool) -> list[str]:
    """The lines gpu-check says before it runs anything: what it found, and with ``--here`` what it skips."""
    lines = [f"gpu-check{' --here' if here else ''}: {found['executable']}"
             + (" (this interpreter, as it is)" if here else " (.venv)"),
             f"  python {found['python']}" + (f" on {found['platform']}" if found.get("platform") else "")]
    if found.get("probe_error"):
        lines.append(f"  the interpreter did not run the probe: {found['probe_error'][0]}")
    torch_line = (f"  torch {found['torch']} (CUDA {found['cuda'] or 'none: a CPU build'})" if found["torch"]
                  else "  torch: not importable" + (f" ({found['torch_error']})" if found.get("torch_error") else ""))
    lines.append(torch_line + f"; the pin: {TORCH_PIN}")
    lines.append(f"  Triton {found['triton'] or 'not installed'}; requirements.lock: {locked_version('triton')}")
    if found["gpu"]:
        lines.append(f"  GPU: {found['gpu']} (sm_{found['capability'].replace('.', '')})")
    else:
        lines.append("  GPU: none (torch.cuda.is_available() is False)" if found["torch"]
                     else "  GPU: unknown (no torch)")
    missing = [HERE_NEEDS[m] for m in found["missing"]]
    lines.append("  seqlab's dependencies and test tools: " + (f"missing {', '.join(missing)}" if missing
                                                               else "all found"))
    for module, (wheel, rows) in PEERS.items():
        there = module not in found["peers_missing"]
        lines.append(f"  peer {wheel} ({module}): " + (f"found ({rows} is timed)" if there else
                                                        f"missing, so no rows of {rows}"))
    if here:
        lines.append(f"  --here skips: building .venv, installing {LOCK.name} and the {TORCH_PIN} pin; seqlab is "
                     f"read from {ROOT} (PYTHONPATH); the versions above are this node's, not the lock's")
    return lines


def gpu_check(args: list[str]) -> int:
    """On a CUDA machine, one report (printed, and written to ``build/gpu-check.txt``) of: what the environment
    holds (Python, torch, CUDA, Triton, the GPU, missing packages and peers), the CUDA-marked tests (every
    Triton kernel forward and backward against the float64 references at paper sizes, bfloat16 included; every
    lesson run to its end on the GPU), ``benchmarks/gpu.py`` (every kernel timed alone and every op with its
    checks, against the GPU's peaks, fla's ``chunk_gla`` and accelerated-scan; its record written to
    ``benchmarks/results/``) and ``benchmarks/full_profile.py`` (20 and 40 steps of every ``configs/``
    experiment, projected to the whole run). Elsewhere it says so and exits 0.

    ``--here``: run with the interpreter this script was started with, as it is (an offline GPU node's system
    Python and its own CUDA build of torch): no ``.venv``, no lock, no torch pin; seqlab is read from this
    folder (``PYTHONPATH``). It stops (exit code 2) where that interpreter lacks one of :data:`HERE_NEEDS`,
    naming the wheels to bring; a missing peer (:data:`PEERS`) only leaves its rows out."""
    here = "--here" in args
    args = [a for a in args if a != "--here"]
    py = Path(sys.executable) if here else ensure_environment()
    found = probe_environment(py)
    lines = describe_environment(found, here)
    print("\n".join(lines), flush=True)
    if here and found["missing"]:
        print(f"gpu-check --here: {py} lacks {', '.join(HERE_NEEDS[m] for m in found['missing'])}. Bring their "
              "wheels (pip download on a machine with a network, for this Python and platform) and install them "
              "with `pip install --no-deps --no-index --find-links WHEELS ...`; see the README's GPU section.")
        return 2
    name = found["gpu"]
    if not name:
        print("gpu-check: no CUDA GPU here (torch.cuda.is_available() is False). On an NVIDIA GPU it runs the "
              "CUDA tests (Triton kernels, lessons), the GPU benchmarks and 20 steps of every configs/ "
              "experiment; nothing to check on this machine.")
        return 0
    env = {k: v for k, v in test_environment().items() if k not in ("TRITON_INTERPRET", "SEQLAB_NO_TRITON")}
    if here:     # seqlab from this folder, ahead of anything the node has
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    steps = [("CUDA tests", [str(py), "-m", "pytest", "-m", "cuda", "-p", "no:cacheprovider", "-q", "-rfEs", "tests",
                             *args]),
             ("GPU benchmarks", [str(py), "benchmarks/gpu.py"]),
             ("full-profile configs", [str(py), "benchmarks/full_profile.py", "--steps", "20"])]
    report = [f"gpu-check on {name}", *lines]
    codes = []
    for title, command in steps:
        print(f"\n== {title}: {' '.join(command[1:])}", flush=True)
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        print(done.stdout, end="", flush=True)
        codes.append(done.returncode)
        report += [f"\n== {title} ({'passed' if done.returncode == 0 else 'FAILED'})", done.stdout.rstrip()]
    report.append("\n== summary: " + ", ".join(f"{t} {'passed' if c == 0 else 'FAILED'}"
                                              for (t, _), c in zip(steps, codes)))
    out = ROOT / "build" / "gpu-check.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(report) + "\n", encoding="utf-8")
    print(report[-1].strip() + f"\nThe report is in {out.relative_to(ROOT)}")
    return 0 if not any(codes) else 1


def main(argv: list[str]) -> int:
    commands = {"lab": lab, "test": test, "execute": execute, "book": book, "gpu-check": gpu_check, "lock": lock}
    if not argv or argv[0] not in commands:
        print(__doc__)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
