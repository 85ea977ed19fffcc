"""workbench.py's lesson working copy: ``lab`` opens ``my_notebooks/``, never the tracked lessons."""
import importlib.util
import json
from pathlib import Path

import pytest
from helpers import REPO

ROOT = REPO


@pytest.fixture
def wb(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("workbench_under_test", ROOT / "workbench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "notebooks").mkdir()
    for name in ("00_welcome.ipynb", "02_linear_recurrence.ipynb"):
        (tmp_path / "notebooks" / name).write_text(json.dumps({"cells": [], "v": 1}))
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "WORKING", tmp_path / "my_notebooks")
    monkeypatch.setattr(module, "SYNC", tmp_path / "my_notebooks" / ".seqlab-sync.json")
    return module


def test_first_launch_copies_every_lesson(wb, tmp_path):
    written = []
    assert wb.sync_working_copy(written=written) == []
    assert sorted(p.name for p in written) == ["00_welcome.ipynb", "02_linear_recurrence.ipynb"]  # to be trusted
    again = []
    assert wb.sync_working_copy(written=again) == [] and again == []
    assert sorted(p.name for p in (tmp_path / "my_notebooks").glob("*.ipynb")) == \
        ["00_welcome.ipynb", "02_linear_recurrence.ipynb"]


def test_untouched_lessons_follow_the_tracked_ones_edited_ones_are_kept(wb, tmp_path):
    wb.sync_working_copy()
    mine = tmp_path / "my_notebooks"
    (mine / "02_linear_recurrence.ipynb").write_text("my edits")
    for name in ("00_welcome.ipynb", "02_linear_recurrence.ipynb"):
        (tmp_path / "notebooks" / name).write_text(json.dumps({"cells": [], "v": 2}))
    notes = wb.sync_working_copy()
    assert json.loads((mine / "00_welcome.ipynb").read_text())["v"] == 2
    assert (mine / "02_linear_recurrence.ipynb").read_text() == "my edits"
    assert any("02_linear_recurrence.ipynb" in n and "--reset 02" in n for n in notes)
    assert wb.sync_working_copy(reset=["02"]) == ["02_linear_recurrence.ipynb: restored from notebooks/"]
    assert json.loads((mine / "02_linear_recurrence.ipynb").read_text())["v"] == 2
    assert wb.sync_working_copy() == []          # and from now on it follows the tracked lesson again


def test_reset_of_an_unknown_lesson_says_so(wb):
    with pytest.raises(SystemExit, match="no lesson named"):
        wb.sync_working_copy(reset=["09"])
    with pytest.raises(SystemExit, match="--reset needs a lesson"):
        wb._split_reset(["--reset"])
    assert wb._split_reset(["--port", "8899", "--reset", "02"]) == (["02"], ["--port", "8899"])
    assert wb._split_reset(["--reset", "02", "05_gateloop.ipynb", "--no-browser", "--reset", "07"]) == \
        (["02", "05_gateloop.ipynb", "07"], ["--no-browser"])


def _old_lessons_then_the_renumbering(wb, tmp_path, mine: dict[str, str] | None = None):
    """A learner's copy made while the inference and arena lessons were 06 and 07, with the files ``mine`` (name:
    text) written into it, then the pull that renumbers them 07 and 08 (their text changes with them: the exercise
    ids): returns what ``lab`` says."""
    tracked = tmp_path / "notebooks"
    for name in ("06_inference.ipynb", "07_arena.ipynb"):
        (tracked / name).write_text(json.dumps({"cells": [], "v": 1, "lesson": name}))
    wb.sync_working_copy()
    for name, text in (mine or {}).items():
        (tmp_path / "my_notebooks" / name).write_text(text)
    for old, new in (("06_inference.ipynb", "07_inference.ipynb"), ("07_arena.ipynb", "08_arena.ipynb")):
        (tracked / old).unlink()
        (tracked / new).write_text(json.dumps({"cells": [], "v": 2, "lesson": new}))
    return wb.sync_working_copy()


def test_an_untouched_copy_of_a_renumbered_lesson_is_replaced_by_the_lesson_under_its_new_name(wb, tmp_path):
    notes = _old_lessons_then_the_renumbering(wb, tmp_path)
    assert notes == ["07_arena.ipynb is now 08_arena.ipynb (your copy of 07_arena.ipynb had no edits and was removed)",
                     "06_inference.ipynb is now 07_inference.ipynb (your copy of 06_inference.ipynb had no edits and "
                     "was removed)"]
    mine = tmp_path / "my_notebooks"
    assert sorted(p.name for p in mine.glob("*.ipynb")) == ["00_welcome.ipynb", "02_linear_recurrence.ipynb",
                                                            "07_inference.ipynb", "08_arena.ipynb"]
    for name in ("07_inference.ipynb", "08_arena.ipynb"):
        assert (mine / name).read_bytes() == (tmp_path / "notebooks" / name).read_bytes()
    synced = json.loads((mine / ".seqlab-sync.json").read_text())
    assert sorted(synced) == ["00_welcome.ipynb", "02_linear_recurrence.ipynb", "07_inference.ipynb", "08_arena.ipynb"]
    assert wb.sync_working_copy() == []          # said once; from now on the new names follow notebooks/


def test_an_edited_copy_of_a_renumbered_lesson_moves_to_the_new_name_with_its_edits(wb, tmp_path):
    notes = _old_lessons_then_the_renumbering(wb, tmp_path, {"06_inference.ipynb": "my inference edits",
                                                             "07_arena.ipynb": "my arena edits"})
    mine = tmp_path / "my_notebooks"
    assert (mine / "07_inference.ipynb").read_text() == "my inference edits"   # 07 -> 08 first: nothing overwritten
    assert (mine / "08_arena.ipynb").read_text() == "my arena edits"
    assert not (mine / "06_inference.ipynb").exists() and not (mine / "07_arena.ipynb").exists()
    assert notes[:2] == [
        '07_arena.ipynb is now 08_arena.ipynb; your edited copy moved with it, to my_notebooks/08_arena.ipynb '
        '(exercises.check("07.N", ...) there is now exercises.check("08.N", ...))',
        '06_inference.ipynb is now 07_inference.ipynb; your edited copy moved with it, to '
        'my_notebooks/07_inference.ipynb (exercises.check("06.N", ...) there is now exercises.check("07.N", ...))']
    kept = ["07_inference.ipynb: notebooks/ has a new version; your edited copy is kept (python3 workbench.py lab "
            "--reset 07 takes the new one)",
            "08_arena.ipynb: notebooks/ has a new version; your edited copy is kept (python3 workbench.py lab --reset "
            "08 takes the new one)"]
    assert notes[2:] == kept
    synced = json.loads((mine / ".seqlab-sync.json").read_text())
    assert "06_inference.ipynb" not in synced and "07_arena.ipynb" not in synced
    assert wb.sync_working_copy() == kept and (mine / "07_inference.ipynb").read_text() == "my inference edits"


def test_an_edited_copy_of_a_renumbered_lesson_stays_beside_a_file_under_the_new_name(wb, tmp_path):
    notes = _old_lessons_then_the_renumbering(wb, tmp_path, {"06_inference.ipynb": "my inference edits",
                                                             "07_inference.ipynb": "another notebook of mine"})
    mine = tmp_path / "my_notebooks"
    assert (mine / "06_inference.ipynb").read_text() == "my inference edits"
    assert (mine / "07_inference.ipynb").read_text() == "another notebook of mine"
    said = ("06_inference.ipynb is now 07_inference.ipynb; my_notebooks/ already has a 07_inference.ipynb, so your "
            "edits stay in my_notebooks/06_inference.ipynb, kept beside it "
            '(exercises.check("06.N", ...) there is now exercises.check("07.N", ...))')
    assert said in notes
    assert said in wb.sync_working_copy()        # said again at every launch while both are there
    assert (mine / "06_inference.ipynb").read_text() == "my inference edits"


def test_torch_comes_from_the_cpu_index_on_linux_without_a_driver_and_falls_back_to_the_pin(wb, tmp_path,
                                                                                             monkeypatch):
    import platform

    calls = []
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    monkeypatch.setattr(wb, "has_nvidia_driver", lambda: False)
    # the CPU index cannot be reached here; the plain pin installs
    monkeypatch.setattr(wb, "pip_install", lambda py, args, log, what: calls.append(args) or wb.CPU_INDEX not in args)
    wb.install_torch(Path("python"), tmp_path / "install.log")
    assert calls[0][:3] == [wb.TORCH_PIN, "--index-url", wb.CPU_INDEX]     # tried first, failed here
    assert calls[1] == [wb.TORCH_PIN]                                    # then the plain pin
    calls.clear()
    monkeypatch.setattr(wb, "has_nvidia_driver", lambda: True)
    wb.install_torch(Path("python"), tmp_path / "install.log")
    assert calls == [[wb.TORCH_PIN]]                                     # a driver: the usual (CUDA) build


def test_an_intel_mac_is_told_why_not(wb, monkeypatch):
    import platform

    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    with pytest.raises(SystemExit, match="no build for Intel Macs"):
        wb.check_platform()


@pytest.fixture(scope="module")
def probed():
    """What this interpreter holds, as gpu-check's probe (a subprocess that imports torch) finds it: once."""
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: gpu-check would run the CUDA tests")
    spec = importlib.util.spec_from_file_location("workbench_probe", ROOT / "workbench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.probe_environment(Path(sys.executable))


def test_gpu_check_without_cuda_says_so_and_exits_0(wb, probed, monkeypatch, capsys):
    import sys

    monkeypatch.setattr(wb, "ensure_environment", lambda dev=True: Path(sys.executable))
    monkeypatch.setattr(wb, "probe_environment", lambda py: probed)
    assert wb.gpu_check([]) == 0
    said = capsys.readouterr().out
    assert "no CUDA GPU here" in said and f"gpu-check: {sys.executable} (.venv)" in said and "--here" not in said


def test_gpu_check_here_reports_this_interpreter_as_it_is_and_what_it_skips(wb, probed, monkeypatch, capsys):
    """``gpu-check --here`` (an offline GPU node): no .venv is built; it says first what it found (Python, torch,
    CUDA, Triton, the GPU, missing peers) and what --here skips; without CUDA it says so and exits 0."""
    import platform
    import sys
    from importlib import metadata

    import torch

    monkeypatch.setattr(wb, "ensure_environment", lambda *_, **__: pytest.fail("--here must not build .venv"))
    monkeypatch.setattr(wb, "LOCK", ROOT / "requirements.lock")
    monkeypatch.setattr(wb, "PEERS", {**wb.PEERS, "seqlab_no_such_peer": ("no-such-peer", "nothing")})
    found = dict(probed, peers_missing=[*probed["peers_missing"], "seqlab_no_such_peer"])   # as the probe would say
    monkeypatch.setattr(wb, "probe_environment", lambda py: found if py == Path(sys.executable) else pytest.fail(py))
    assert wb.gpu_check(["--here"]) == 0
    said = capsys.readouterr().out
    first = said.splitlines()
    assert first[0] == f"gpu-check --here: {sys.executable} (this interpreter, as it is)"
    assert f"python {platform.python_version()}" in first[1]
    assert f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU build'})" in said
    assert f"Triton {metadata.version('triton')}; requirements.lock: {wb.locked_version('triton')}" in said
    assert "GPU: none" in said and "dependencies and test tools: all found" in said
    assert "peer no-such-peer (seqlab_no_such_peer): missing, so no rows of nothing" in said
    assert f"--here skips: building .venv, installing requirements.lock and the {wb.TORCH_PIN} pin" in said
    assert said.index("--here skips") < said.index("no CUDA GPU here")      # said up front


def test_gpu_check_here_names_the_wheels_the_interpreter_lacks(wb, monkeypatch, capsys):
    """A node's Python without nbval and torch (what the probe above reports, here given): gpu-check stops
    before running anything, naming the wheels to bring and how."""
    found = {"python": "3.12.3", "executable": "/usr/bin/python3", "torch": None, "cuda": None, "triton": "3.6.0",
             "gpu": None, "capability": None, "missing": ["torch", "nbval"], "peers_missing": ["fla"]}
    monkeypatch.setattr(wb, "probe_environment", lambda py: found)
    monkeypatch.setattr(wb, "ensure_environment", lambda *_, **__: pytest.fail("--here must not build .venv"))
    monkeypatch.setattr(wb, "LOCK", ROOT / "requirements.lock")
    assert wb.gpu_check(["--here"]) == 2
    said = capsys.readouterr().out
    assert "torch: not importable" in said and "GPU: unknown (no torch)" in said
    assert f"dependencies and test tools: missing {wb.HERE_NEEDS['torch']}, nbval" in said
    assert "peer fla-core / flash-linear-attention (fla): missing" in said
    assert "peer accelerated-scan (accelerated_scan): found" in said
    assert f"lacks {wb.HERE_NEEDS['torch']}, nbval." in said and "--no-index --find-links" in said
    assert "no CUDA GPU here" not in said


def test_the_install_is_redone_when_the_lock_changes(wb, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    monkeypatch_lock = tmp_path / "requirements.lock"
    monkeypatch_lock.write_text("plotly==7.1.0\n")
    wb.LOCK = monkeypatch_lock
    before = wb.wanted_stamp()
    monkeypatch_lock.write_text("plotly==7.2.0\n")
    assert wb.wanted_stamp() != before


def test_the_first_pass_runs_the_lessons_on_the_interpreter_path_the_second_with_triton_off(wb, monkeypatch):
    """CI's lessons run twice: pass 1 as a Linux student's kernel runs them (Triton's interpreter), pass 2 with
    Triton switched off; notebooks/conftest.py turns the variable into the kernel's environment."""
    monkeypatch.setattr(wb, "cpu_capability", lambda py, env: "AVX2")
    (first, env1, args1), (second, env2, args2) = wb.full_run_passes(Path("py"), {"SEQLAB_NO_TRITON": "1"})
    assert env1["SEQLAB_LESSONS_TRITON"] == "interpreter" and env2["SEQLAB_LESSONS_TRITON"] == "off"
    assert "notebooks" in args1 and "notebooks" in args2
    spec = importlib.util.spec_from_file_location("lessons_conftest", REPO / "notebooks" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert conftest.kernel_switches("interpreter") == {"SEQLAB_NO_TRITON": None, "TRITON_INTERPRET": None}
    assert conftest.kernel_switches("off") == {"SEQLAB_NO_TRITON": "1"}
    monkeypatch.delenv("SEQLAB_LESSONS_TRITON", raising=False)
    assert conftest.lesson_path() == "interpreter"
    monkeypatch.setenv("SEQLAB_LESSONS_TRITON", "cuda")
    with pytest.raises(ValueError, match="SEQLAB_LESSONS_TRITON"):
        conftest.lesson_path()


def test_the_second_pass_holds_another_floating_point_path(wb):
    """AVX512 machines rerun the lessons on AVX2, AVX2 machines on the scalar kernels; Numba generic in both;
    and torch, asked under that environment, really reports a capability other than this machine's own."""
    import os
    import sys

    native = {k: v for k, v in os.environ.items() if k not in wb.FP_PATH_VARIABLES}
    assert wb.other_fp_path_environment(native, "AVX512")["ATEN_CPU_CAPABILITY"] == "avx2"
    scalar = wb.other_fp_path_environment(dict(native, ATEN_CPU_CAPABILITY="avx2"), "AVX2")
    assert (scalar["ATEN_CPU_CAPABILITY"], scalar["ONEDNN_MAX_CPU_ISA"], scalar["MKL_ENABLE_INSTRUCTIONS"]) == \
        ("default", "SSE41", "SSE4_2")
    assert scalar["NUMBA_CPU_NAME"] == "generic"
    first = wb.cpu_capability(Path(sys.executable), native)
    if first == "DEFAULT":
        pytest.skip("torch runs its scalar kernels here already: there is no other path to hold it to")
    second = wb.cpu_capability(Path(sys.executable), wb.other_fp_path_environment(native, first))
    assert first and second and second != first, (first, second)


def test_a_caller_held_to_avx2_gets_an_avx2_machines_two_passes(wb):
    """ATEN_CPU_CAPABILITY=avx2 (with oneDNN, MKL and Numba held alike) times an AVX2 machine's CI on an AVX512
    one: pass 1 keeps what the caller set, and pass 2 then takes the scalar kernels, as on an AVX2 machine."""
    import os
    import sys

    held = dict({k: v for k, v in os.environ.items() if k not in wb.FP_PATH_VARIABLES},
                ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2",
                NUMBA_CPU_NAME="haswell")
    if wb.cpu_capability(Path(sys.executable), held) != "AVX2":
        pytest.skip("torch cannot run its AVX2 kernels here")
    (_, env1, _), (_, env2, _) = wb.full_run_passes(Path(sys.executable), held)
    assert {k: env1[k] for k in wb.FP_PATH_VARIABLES} == {k: held[k] for k in wb.FP_PATH_VARIABLES}
    assert wb.cpu_capability(Path(sys.executable), env2) == "DEFAULT"


def test_lab_runs_jupyterlab_with_the_save_hook_and_the_widget_restore_extension(wb):
    """workbench.py (standard library only) builds the same JupyterLab options as seqlab.viz.nbstate, and the
    extension folder they name holds a prebuilt extension JupyterLab can load."""
    from seqlab.viz.nbstate import LAB_ARGS, LAB_EXTENSIONS, LAB_SAVE_HOOK

    assert LAB_SAVE_HOOK in wb.LAB_ARGS and wb.LAB_ARGS == LAB_ARGS
    package = json.loads((LAB_EXTENSIONS / "seqlab-widget-restore" / "package.json").read_text())
    assert (LAB_EXTENSIONS / "seqlab-widget-restore" / package["jupyterlab"]["_build"]["load"]).is_file()


def test_lab_help_lists_its_own_options_first(wb, monkeypatch, capsys):
    """``lab --help``: workbench.py's ``--reset`` and that the other options pass to JupyterLab, then
    JupyterLab's own help where the environment is installed."""
    calls = []
    monkeypatch.setattr(wb, "ensure_environment", lambda *_, **__: pytest.fail("--help must install nothing"))
    monkeypatch.setattr(wb, "venv_python", lambda: Path(__file__))             # a file that exists
    monkeypatch.setattr(wb, "STAMP", wb.ROOT / "stamp")
    (wb.ROOT / "pyproject.toml").write_text("[project]\n")
    monkeypatch.setattr(wb, "LOCK", wb.ROOT / "requirements.lock")
    wb.LOCK.write_text("")
    wb.STAMP.write_text(wb.wanted_stamp())
    monkeypatch.setattr(wb.subprocess, "call", lambda cmd, **kw: calls.append(cmd) or 0)
    monkeypatch.setattr(wb, "sync_working_copy", lambda *a, **k: pytest.fail("--help must not copy lessons"))
    assert wb.lab(["--help"]) == 0
    said = capsys.readouterr().out
    assert said.index("--reset") < said.index("JupyterLab's own options")
    assert "--port" in said and "pass" in said and "Ctrl-C" in said
    assert calls == [[str(Path(__file__)), "-m", "jupyter", "lab", "--help"]]


def test_lab_help_answers_before_any_install(wb, monkeypatch, capsys):
    """On a fresh clone (no ``.venv``) ``lab --help`` prints workbench.py's options at once and says where
    JupyterLab's come from; it installs nothing and starts nothing."""
    monkeypatch.setattr(wb, "ensure_environment", lambda *_, **__: pytest.fail("--help must install nothing"))
    monkeypatch.setattr(wb, "venv_python", lambda: wb.ROOT / ".venv" / "bin" / "python")
    monkeypatch.setattr(wb.subprocess, "call", lambda *a, **k: pytest.fail("--help must start nothing here"))
    assert wb.lab(["--help"]) == 0
    said = capsys.readouterr().out
    assert "--reset" in said and "not installed yet" in said


def _run_lab(wb, monkeypatch, args):
    started = []
    monkeypatch.setattr(wb, "ensure_environment", lambda *_, **__: Path("python-of-the-venv"))
    monkeypatch.setattr(wb, "write_lab_overrides", lambda py: None)
    monkeypatch.setattr(wb.subprocess, "run", lambda cmd, **kw: None)      # jupyter trust
    monkeypatch.setattr(wb.subprocess, "call", lambda cmd, **kw: started.append((cmd, kw["env"])) or 0)
    assert wb.lab(args) == 0
    return started


def test_lab_says_what_it_copied_the_address_and_how_to_stop(wb, monkeypatch, capsys):
    """A first launch says it copied the lessons into my_notebooks/, the address (with the token the server gets)
    and how to stop, in a few lines and no command line; a second launch says it kept them."""
    started = _run_lab(wb, monkeypatch, ["--no-browser", "--port", "8899"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) <= 4, lines
    text = "\n".join(lines)
    assert "copied the 2 lessons into my_notebooks/" in text
    (cmd, env), = started
    assert f"http://localhost:8899/lab?token={env['JUPYTER_TOKEN']}" in text
    assert "Ctrl-C" in text and "jupyter" not in text.lower().replace("jupyterlab", "")
    assert "--port" in cmd and "8899" in cmd and "--ServerApp.port_retries=0" in cmd
    assert all(a in cmd for a in wb.LAB_ARGS + wb.LAB_QUIET_ARGS)
    assert not any(a.startswith("--IdentityProvider.token") for a in cmd)      # the token is not on the command line

    started = _run_lab(wb, monkeypatch, ["--no-browser"])
    text = capsys.readouterr().out
    assert "kept your 2 lessons in my_notebooks/" in text and "copied" not in text
    (cmd, env), = started
    port = next(a.split("=", 1)[1] for a in cmd if a.startswith("--port="))
    assert f"http://localhost:{port}/lab?token=" in text


@pytest.mark.parametrize("found", [True, False])
def test_lab_opens_no_browser_where_there_is_none_and_says_so(wb, monkeypatch, capsys, found):
    """On a machine with no browser (a server, a container) JupyterLab is told not to open one (else it warns "No
    web browser found"), and lab says to open the address in the student's own browser."""
    monkeypatch.setattr(wb, "_browser_found", lambda: found)
    (cmd, env), = _run_lab(wb, monkeypatch, [])
    text = capsys.readouterr().out
    assert ("--no-browser" in cmd) is not found
    assert ("a browser tab opens on it" in text) is found and ("open it in yours" in text) is not found
    (cmd, env), = _run_lab(wb, monkeypatch, ["--browser", "firefox"])       # a browser named: JupyterLab's choice
    assert "--no-browser" not in cmd


def test_lab_passes_jupyterlab_settings_that_leave_no_warning_a_student_cannot_act_on(wb):
    """JupyterLab logs warnings and errors only; the kernel websocket's keep-alive is off (jupyter_server hands
    tornado a ping timeout three times the interval, and tornado warns); the kernel's messages are encrypted
    (else ipykernel warns it runs over TCP without encryption)."""
    quiet = wb.LAB_QUIET_ARGS
    assert "--ServerApp.log_level=WARN" in quiet and "--LabApp.log_level=WARN" in quiet
    settings = next(a for a in quiet if a.startswith("--ServerApp.tornado_settings="))
    assert json.loads(settings.split("=", 1)[1]) == {"ws_ping_interval": 0}
    assert "--KernelManager.transport_encryption=auto" in quiet
