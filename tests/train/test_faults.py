"""Faults a long run meets on a cluster, done to real child processes: SIGINT, SIGTERM and ``kill -9`` at a chosen
step followed by ``--resume`` (the uninterrupted run's losses, bit for bit on CPU), SIGTERM under torchrun, a full
disk during a save, a ``workers=2`` arena sitting stopped by SIGTERM, four arena sittings on one results file, and a
corrupted claim file. Tiny models: seconds each.

No signal races the run's progress: a signalled run is started with ``SEQLAB_HOLD_AT`` (``interrupt.hold_for_signal``),
so each of its training loops holds after the chosen step until the signal has reached it, and the test sends the
signal only once every loop is held. The step a run stops at is the one the test chose, however busy the machine."""
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
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
STEPS = 40                # a training command's steps: room to stop in the middle, cheap to run three times
EVERY = 10                # periodic saves of the kill -9 test, by steps only (no clock decides where they fall)
GUARD_S = 600             # failure guards only: no outcome depends on them


def _train_args(steps: int, *extra) -> list[str]:
    return ["train", *MODEL, "--task", "copying", *TASK, "--steps", str(steps), "--batch-size", "8", "--lr", "1e-2",
            "--threads", "1", "--no-progress", "--print-every", "1", *extra]


def _losses(path) -> list[float]:
    return [r["loss"] for r in json.loads(open(path).read())["train"]]


def _start(args, launcher=(sys.executable,), env=ENV) -> subprocess.Popen:
    return subprocess.Popen([*launcher, "-m", "seqlab", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=GUARD_S)
    return proc.returncode, err


def _run_ok(args, launcher=(sys.executable,)) -> str:
    """Run ``python -m seqlab ARGS`` to its end, which must be a success: its standard output."""
    out = subprocess.run([*launcher, "-m", "seqlab", *args], capture_output=True, text=True, env=ENV, timeout=GUARD_S)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


class HeldRun:
    """``python -m seqlab ARGS`` whose training loops each hold after step ``step`` until a signal reaches them
    (``interrupt.hold_for_signal``); each held loop writes ``<pid>.held`` in ``folder``."""

    def __init__(self, args, step: int, folder, launcher=(sys.executable,)):
        self.folder = folder
        self.proc = _start(args, launcher, env={**ENV, interrupt.HOLD_AT: f"{step}:{folder}"})

    def wait_held(self, loops: int = 1) -> None:
        """Wait until ``loops`` training loops (one per process that trains) hold at the step."""
        deadline = time.monotonic() + GUARD_S
        while len(list(self.folder.glob("*.held"))) < loops:
            assert self.proc.poll() is None, f"the run ended before it held: {self.proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, f"no {loops} training loops held within {GUARD_S} s"
            time.sleep(0.05)

    def stop(self, sig: int) -> tuple[int, str]:
        """Send ``sig`` to the command (not to its process group) and wait for its end: its code and stderr."""
        os.kill(self.proc.pid, sig)
        return _finish(self.proc)


@pytest.fixture
def held(tmp_path):
    """``held(args, step, launcher=...)`` starts a :class:`HeldRun`; whatever of it is left is killed at the end."""
    folder, runs = tmp_path / "held", []
    folder.mkdir()

    def start(args, step: int, launcher=(sys.executable,)) -> HeldRun:
        runs.append(HeldRun(args, step, folder, launcher))
        return runs[-1]

    yield start
    for run in runs:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.communicate()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The whole run, never stopped: its losses, step by step."""
    history = tmp_path_factory.mktemp("whole") / "h.json"
    _run_ok(_train_args(STEPS, "--history", str(history)))
    return _losses(history)


def _no_temporaries(folder) -> bool:
    return not [p for p in folder.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_after_the_step_and_resume_ends_as_the_uninterrupted_run(tmp_path, held, uninterrupted, sig,
                                                                                code):
    ckpt, hist = tmp_path / "run.pt", tmp_path / "h.json"
    at = random.Random(sig).randint(2, STEPS - 2)
    run = held(_train_args(STEPS, "--checkpoint", str(ckpt)), at)
    run.wait_held()
    returncode, err = run.stop(sig)
    assert returncode == code, err[-2000:]
    assert train.load_checkpoint(ckpt)["step"] == at
    assert f"stopped by {signal.Signals(sig).name} at step {at}, saved to {ckpt}; resume with:" in err
    assert err.rstrip().endswith("--resume")
    out = _run_ok(_train_args(STEPS, "--checkpoint", str(ckpt), "--resume", "--history", str(hist)))
    assert f"resuming from step {at}" in out
    assert _losses(hist) == uninterrupted                                   # bit for bit
    assert _no_temporaries(tmp_path)


def test_kill_9_loses_at_most_one_period_of_the_periodic_saves(tmp_path, held, uninterrupted):
    """``kill -9`` cannot be caught: the periodic saves bound the loss, and the temporary file a kill inside a save
    leaves is removed by the resume."""
    ckpt, hist = tmp_path / "run.pt", tmp_path / "h.json"
    periodic = ("--checkpoint", str(ckpt), "--checkpoint-every", str(EVERY), "--checkpoint-seconds", "inf")
    at = 2 * EVERY + random.Random(9).randint(1, EVERY)                    # after the save at 2 * EVERY
    run = held(_train_args(STEPS, *periodic), at)
    run.wait_held()
    returncode, _ = run.stop(signal.SIGKILL)
    assert returncode == -signal.SIGKILL
    saved = train.load_checkpoint(ckpt)["step"]
    assert saved == 2 * EVERY and at - saved <= EVERY                       # at most one period lost
    stale = tmp_path / ".run.pt.tmp-killed.pt"                              # what a kill inside a save leaves
    stale.write_bytes(b"half a checkpoint")
    _run_ok(_train_args(STEPS, *periodic, "--resume", "--history", str(hist)))
    assert _losses(hist) == uninterrupted
    assert not stale.exists() and _no_temporaries(tmp_path)


def test_a_run_with_a_checkpoint_saves_periodically_by_default(tmp_path, monkeypatch):
    """What bounds a ``kill -9``'s loss when no period is asked for: every CHECKPOINT_EVERY steps or
    CHECKPOINT_SECONDS seconds."""
    from seqlab.train import loop

    periods = []

    class Saver(loop.PeriodicSaver):
        def __init__(self, path, state, **kw):
            periods.append((kw["every"], kw["seconds"]))
            super().__init__(path, state, **kw)

    monkeypatch.setattr(loop, "PeriodicSaver", Saver)
    model, task = _tiny()
    train.fit(model, task, steps=1, batch_size=8, progress=False, checkpoint=tmp_path / "run.pt")
    assert periods == [(interrupt.CHECKPOINT_EVERY, interrupt.CHECKPOINT_SECONDS)]


def test_sigterm_to_torchrun_stops_every_rank_at_one_step_and_resume_matches_the_uninterrupted_run(tmp_path, held):
    whole, cut, ckpt = tmp_path / "whole.json", tmp_path / "cut.json", tmp_path / "run.pt"
    _run_ok(_train_args(STEPS, "--history", str(whole)), launcher=TORCHRUN)
    at = STEPS // 2
    run = held(_train_args(STEPS, "--checkpoint", str(ckpt)), at, launcher=TORCHRUN)
    run.wait_held(loops=2)                              # both ranks
    run.stop(signal.SIGTERM)                            # torchrun forwards it to both workers
    assert train.load_checkpoint(ckpt)["step"] == at
    _run_ok(_train_args(STEPS, "--checkpoint", str(ckpt), "--resume", "--history", str(cut)), launcher=TORCHRUN)
    a, b = _losses(whole), _losses(cut)
    assert len(a) == len(b) == STEPS and max(abs(x - y) for x, y in zip(a, b)) <= 1e-6, (a, b)


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


def test_a_workers_2_sitting_stopped_by_sigterm_resumes_each_workers_run(tmp_path, held):
    out, runs, steps, at = tmp_path / "arena.json", tmp_path / "runs", 20, 5      # saves every 2 steps
    args = [*ARENA, "families=gateloop,lrnn,lightnet", f"steps={steps}", "workers=2", f"out={out}",
            "--checkpoint-dir", str(runs)]              # three runs, two workers: one is handed over ahead
    sitting = held(args, at)
    sitting.wait_held(loops=2)                          # each worker holds its run at step `at`
    returncode, err = sitting.stop(signal.SIGTERM)
    assert returncode == 143, err[-2000:]
    assert "the arena stopped by SIGTERM" in err and str(runs) in err
    stopped = {p.name: train.load_checkpoint(p)["step"] for p in runs.glob("*.pt")}
    assert sorted(stopped.values()) == [at, at], stopped                   # the third never started
    assert not any(name.startswith("lightnet") for name in stopped)
    assert results.read(out)["runs"] == []
    _run_ok(args)
    _run_ok([*ARENA, "families=gateloop,lrnn", f"steps={steps}", f"out={tmp_path / 'whole.json'}"])  # in one process
    resumed = {r["family"]: r for r in results.read(out)["runs"]}
    straight = {r["family"]: r for r in results.read(tmp_path / "whole.json")["runs"]}
    assert set(resumed) == {"gateloop", "lrnn", "lightnet"}
    for family, run in straight.items():              # the resumed runs are the runs never stopped
        assert (resumed[family]["accuracy"], resumed[family]["curve"]) == (run["accuracy"], run["curve"])
    assert all(train.load_checkpoint(p)["step"] == steps for p in runs.glob("*.pt"))


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
