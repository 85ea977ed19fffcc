"""Faults a long run meets on a cluster, done to real child processes: SIGINT, SIGTERM and ``kill -9`` at a random
step followed by ``--resume`` (the uninterrupted run's losses, bit for bit on CPU), SIGTERM under torchrun, a full
disk during a save, a ``workers=2`` arena sitting stopped by SIGTERM, four arena sittings on one results file, and a
corrupted claim file. Tiny models: seconds each."""
import collections
import errno
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import TESTS

from seqlab import claims, results, train
from seqlab.train import interrupt
from seqlab.__main__ import main

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
ENV.pop("WORLD_SIZE", None)
TASK = ["--task-config", "min_len=2", "max_len=4", "train_size=64", "test_size=16", "autoregressive_n=4"]
MODEL = ["--model", "gateloop", "--config", "d_model=16", "n_layers=1"]


def _train_args(steps: int, *extra) -> list[str]:
    return ["train", *MODEL, "--task", "copying", *TASK, "--steps", str(steps), "--batch-size", "8", "--lr", "1e-2",
            "--threads", "1", "--no-progress", "--print-every", "1", *extra]


def _losses(path) -> list[float]:
    return [r["loss"] for r in json.loads(open(path).read())["train"]]


def _start(args, launcher=(sys.executable,)) -> subprocess.Popen:
    return subprocess.Popen([*launcher, "-m", "seqlab", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV, start_new_session=True)


def _wait_for_step(proc: subprocess.Popen, step: int) -> int:
    """Read the child's printed steps until ``step``; the last step it printed."""
    seen = 0
    for line in proc.stdout:
        if line.startswith("step") and "| train" in line:
            seen = int(line.split()[1])
            if seen >= step:
                return seen
    raise AssertionError(f"the run ended before step {step}: {proc.stderr.read()[-2000:]}")


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The whole run, never stopped: its losses, step by step."""
    folder = tmp_path_factory.mktemp("whole")
    out = subprocess.run([sys.executable, "-m", "seqlab", *_train_args(300, "--history", str(folder / "h.json"))],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return _losses(folder / "h.json")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_after_the_step_and_resume_ends_as_the_uninterrupted_run(tmp_path, uninterrupted, sig, code):
    ckpt, hist = tmp_path / "run.pt", tmp_path / "h.json"
    proc = _start(_train_args(300, "--checkpoint", str(ckpt)))
    at = _wait_for_step(proc, random.Random(sig).randint(20, 100))
    os.kill(proc.pid, sig)
    returncode, err = _finish(proc)
    assert returncode == code, err[-2000:]
    saved = train.load_checkpoint(ckpt)["step"]
    assert at <= saved < 300
    assert f"stopped by {signal.Signals(sig).name} at step {saved}, saved to {ckpt}; resume with:" in err
    assert err.rstrip().endswith("--resume")
    out = subprocess.run([sys.executable, "-m", "seqlab", *_train_args(300, "--checkpoint", str(ckpt), "--resume",
                                                                       "--history", str(hist))],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert out.returncode == 0 and f"resuming from step {saved}" in out.stdout, out.stderr[-2000:]
    assert _losses(hist) == uninterrupted                                   # bit for bit
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_kill_9_loses_at_most_one_period_of_the_default_saves(tmp_path):
    """``kill -9`` cannot be caught: the default periodic saves (every CHECKPOINT_EVERY steps) bound the loss,
    and the temporary file a kill inside a save leaves is removed by the resume."""
    every = interrupt.CHECKPOINT_EVERY
    steps = every + 150
    ckpt, hist, whole = tmp_path / "run.pt", tmp_path / "h.json", tmp_path / "whole.json"
    full = subprocess.run([sys.executable, "-m", "seqlab", *_train_args(steps, "--print-every", "10",
                                                                        "--history", str(whole))],
                          capture_output=True, text=True, env=ENV, timeout=600)
    assert full.returncode == 0, full.stderr[-2000:]
    proc = _start(_train_args(steps, "--checkpoint", str(ckpt), "--print-every", "10"))
    at = _wait_for_step(proc, every + random.Random(9).randint(10, 100))
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    saved = train.load_checkpoint(ckpt)["step"]
    assert saved == every and at - saved <= every                          # at most one period lost
    stale = tmp_path / ".run.pt.tmp-killed.pt"                              # what a kill inside a save leaves
    stale.write_bytes(b"half a checkpoint")
    out = subprocess.run([sys.executable, "-m", "seqlab", *_train_args(steps, "--checkpoint", str(ckpt), "--resume",
                                                                       "--print-every", "10", "--history", str(hist))],
                         capture_output=True, text=True, env=ENV, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert _losses(hist) == _losses(whole)
    assert not stale.exists() and not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_sigterm_to_torchrun_stops_every_rank_at_one_step_and_resume_matches_the_uninterrupted_run(tmp_path):
    launcher = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
    whole, cut, ckpt = tmp_path / "whole.json", tmp_path / "cut.json", tmp_path / "run.pt"
    done = subprocess.run([*launcher, "-m", "seqlab", *_train_args(300, "--history", str(whole))],
                          capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = _start(_train_args(300, "--checkpoint", str(ckpt)), launcher=launcher)
    _wait_for_step(proc, 15)
    os.kill(proc.pid, signal.SIGTERM)                   # torchrun forwards it to both workers
    _finish(proc)
    saved = train.load_checkpoint(ckpt)["step"]
    assert 15 <= saved < 300
    out = subprocess.run([*launcher, "-m", "seqlab", *_train_args(300, "--checkpoint", str(ckpt), "--resume",
                                                                   "--history", str(cut))],
                         capture_output=True, text=True, env=ENV, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    a, b = _losses(whole), _losses(cut)
    assert len(a) == len(b) == 300 and max(abs(x - y) for x, y in zip(a, b)) <= 1e-6, (a, b)


# ----------------------------------------------------------------------------------------------- a full disk


def _tiny():
    from seqlab import models, tasks

    task = tasks.copying(min_len=2, max_len=4, train_size=32, test_size=8, autoregressive_n=0)
    torch.manual_seed(0)
    return models.build("gateloop", vocab_size=task.vocab_size, d_model=8, n_layers=1), task


@pytest.mark.parametrize("failure", ["enospc", "torch-no-errno", "read-only"])
def test_a_full_disk_names_the_file_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, failure):
    model, task = _tiny()
    ckpt = tmp_path / "run.pt"
    kw = dict(steps=8, batch_size=8, lr=1e-2, progress=False, checkpoint=ckpt, checkpoint_every=4)
    real_save, calls = torch.save, []

    def failing_save(obj, fh):
        calls.append(1)
        if len(calls) == 1:
            return real_save(obj, fh)                     # step 4 is saved; step 8 meets the full disk
        fh.write(b"partial")
        if failure == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device")
        if failure == "read-only":
            raise OSError(errno.EROFS, "Read-only file system")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 132288 vs 132176")

    monkeypatch.setattr(torch, "save", failing_save)
    if failure == "torch-no-errno":                       # torch's error carries no errno: the free space tells
        monkeypatch.setattr("shutil.disk_usage", lambda path: collections.namedtuple("usage", "total used free")(
            1 << 30, 1 << 30, 0))
    with pytest.raises(train.CheckpointError) as err:
        train.fit(model, task, **kw)
    message = str(err.value)
    cause = "cannot be written (read-only" if failure == "read-only" else "no space left on device while writing"
    assert cause in message and str(ckpt) in message
    assert "the previous checkpoint at step 4 is intact" in message
    monkeypatch.undo()
    assert train.load_checkpoint(ckpt)["step"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]      # no temporary file left


def test_a_full_disk_from_the_command_line_exits_non_zero_naming_the_file(tmp_path, monkeypatch, capsys):
    def no_space(obj, fh):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", no_space)
    ckpt = tmp_path / "gl.pt"
    assert main(_train_args(4, "--checkpoint", str(ckpt))) == 2
    err = capsys.readouterr().err
    assert f"no space left on device while writing {ckpt}" in err and "no earlier checkpoint" in err


def test_a_results_file_that_cannot_be_written_is_named_and_kept(tmp_path, monkeypatch):
    path = tmp_path / "grid.json"
    results.merge(path, key=lambda r: (r["id"],), runs=[{"id": "a"}])
    before = path.read_bytes()

    def full(self, text, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("pathlib.Path.write_text", full)
    with pytest.raises(results.ResultsError, match=r"no space left on device while writing .*grid\.json"):
        results.merge(path, key=lambda r: (r["id"],), runs=[{"id": "b"}])
    monkeypatch.undo()
    assert path.read_bytes() == before and not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# ----------------------------------------------------------------------------------------------- the arena


ARENA = ["experiment", "arena", "profile=quick", "tasks=mqar", "widths=[16]", "mqar_lengths=[32]", "progress=False",
         "verbose=False"]


def test_a_workers_2_sitting_stopped_by_sigterm_resumes_each_workers_run(tmp_path):
    out, runs = tmp_path / "arena.json", tmp_path / "runs"
    args = [*ARENA, "families=gateloop,lrnn,lightnet", "steps=150", "workers=2", f"out={out}", "--checkpoint-dir",
            str(runs)]                                  # three runs, two workers: one is handed over ahead
    proc = _start(args)
    deadline = time.time() + 300
    while len(list(runs.glob("*.pt"))) < 2:              # both workers have saved once (every tenth of the steps)
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    returncode, err = _finish(proc)
    assert returncode == 143, err[-2000:]
    assert "the arena stopped by SIGTERM" in err and str(runs) in err
    stopped = {p.name: train.load_checkpoint(p)["step"] for p in runs.glob("*.pt")}
    assert len(stopped) == 2 and all(0 < s < 150 for s in stopped.values()), stopped   # the third never started
    assert not any(name.startswith("lightnet") for name in stopped)
    assert results.read(out)["runs"] == []
    again = subprocess.run([sys.executable, "-m", "seqlab", *args], capture_output=True, text=True, env=ENV,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    whole = subprocess.run([sys.executable, "-m", "seqlab", *ARENA, "families=gateloop,lrnn", "steps=150",
                            "workers=2", f"out={tmp_path / 'whole.json'}"],
                           capture_output=True, text=True, env=ENV, timeout=600)
    assert whole.returncode == 0, whole.stderr[-2000:]
    resumed = {r["family"]: r for r in results.read(out)["runs"]}
    straight = {r["family"]: r for r in results.read(tmp_path / "whole.json")["runs"]}
    assert set(resumed) == {"gateloop", "lrnn", "lightnet"}
    for family, run in straight.items():              # the resumed runs are the runs never stopped
        assert (resumed[family]["accuracy"], resumed[family]["curve"]) == (run["accuracy"], run["curve"])
    assert all(train.load_checkpoint(p)["step"] == 150 for p in runs.glob("*.pt"))


def test_four_arena_sittings_on_one_file_keep_every_run_and_every_key(tmp_path):
    from seqlab.experiments import arena

    out = tmp_path / "arena.json"
    control = {"family": "transformer", "task": "mqar", "seed": 0, "width": 16, "seq_len": 32, "lr": 3e-3,
               "steps": 2, "filler": "random", "accuracy": 1.0, "control": True, "threshold": 0.99}
    results.merge(out, key=arena.run_key, controls=[control], fields={"note": "kept"})
    sittings = [_start([*ARENA, f"families={family}", "steps=2", f"out={out}"])
                for family in ("gateloop", "lrnn", "lightnet", "linear-causalrn")]
    for proc in sittings:
        returncode, err = _finish(proc)
        assert returncode == 0, err[-2000:]
    data = json.loads(out.read_text())
    assert sorted(r["family"] for r in data["runs"]) == ["gateloop", "lightnet", "linear-causalrn", "lrnn"]
    assert data["controls"][:1] == [control] and data["note"] == "kept"


# ----------------------------------------------------------------------------------------------- claims


def test_a_corrupted_claim_file_is_named_and_never_overwritten(tmp_path, capsys):
    from pathlib import Path

    tiny = str(TESTS / "tiny_profile")
    record = tmp_path / "fst-alpha-depth.json"
    record.write_text('{"id": "fst-alpha-depth", "arms": ')
    before = record.read_bytes()
    assert main(["reproduce", "fst-alpha-depth", "--profile", tiny, "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{record}: not valid JSON" in err and "left as it is" in err
    assert record.read_bytes() == before
    with pytest.raises(results.ResultsError, match="fst-alpha-depth.json"):
        claims.gather(tmp_path)
