"""Another Triton for the ahead-of-time compiles (``seqlab.kernels.aot``): ``triton_install`` makes its folder
once from the hashed pin and reuses it; ``triton_path=`` refuses a folder without Triton. pip is not run here:
``tests/ops/test_triton_spills.py`` compiles every kernel with the installed Triton 3.6."""
import hashlib
import subprocess
from pathlib import Path

import pytest

from seqlab.kernels import aot


def test_the_pin_is_hashed_for_the_pythons_seqlab_runs_on():
    text = aot.TRITON_PINS["3.6.0"].read_text()
    assert "triton==3.6.0" in text and text.count("--hash=sha256:") >= 2


def test_triton_install_runs_pip_once_on_the_hashed_pin_and_then_reuses_the_folder(tmp_path, monkeypatch):
    calls = []

    def pip(cmd, **kwargs):
        calls.append(cmd)
        package = Path(cmd[cmd.index("--target") + 1]) / "triton"
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("__version__ = '3.6.0'\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(aot.subprocess, "run", pip)
    folder = aot.triton_install("3.6.0", cache=tmp_path)
    assert folder.parent == tmp_path and folder.name.startswith("triton-3.6.0-cp")
    (cmd,) = calls
    assert {"--no-deps", "--require-hashes", "--target"} <= set(cmd) and cmd[cmd.index("-r") + 1] == \
        str(aot.TRITON_PINS["3.6.0"])
    assert (folder / ".seqlab-pin").read_text() == hashlib.sha256(aot.TRITON_PINS["3.6.0"].read_bytes()).hexdigest()
    assert aot.triton_install("3.6.0", cache=tmp_path) == folder and len(calls) == 1      # reused, pip not run
    (folder / ".seqlab-pin").write_text("an older pin")
    aot.triton_install("3.6.0", cache=tmp_path)
    assert len(calls) == 2                                                                # a changed pin reinstalls


def test_a_failed_install_and_a_wrong_folder_say_what_went_wrong(tmp_path, monkeypatch):
    monkeypatch.setattr(aot.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution"))
    with pytest.raises(RuntimeError, match="(?s)installing Triton 3.6.0 .* failed.*No matching distribution"):
        aot.triton_install("3.6.0", cache=tmp_path)
    assert not list(tmp_path.rglob(".seqlab-pin"))                          # nothing taken for installed
    with pytest.raises(ValueError, match="version: expected one of"):
        aot.triton_install("2.0.0", cache=tmp_path)
    with pytest.raises(FileNotFoundError, match="triton_path: expected a folder holding a triton package"):
        aot.ptxas_usage([], triton_path=tmp_path)
    with pytest.raises(FileNotFoundError, match="triton_path"):
        aot.compile_for("seqlab.ops.scan.triton", "k", {}, {}, triton_path=tmp_path / "nowhere")
