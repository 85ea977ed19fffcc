"""Data-parallel training under torchrun (``seqlab.distributed``): two gloo processes on 127.0.0.1 train the
same run as one process with the same global batch, to float rounding, on a task whose label masks differ
between the ranks; and a run checkpointed under torchrun resumes under torchrun."""
import json
import os
import subprocess
import sys


# test_size 600: three evaluation batches of 256, so that the evaluation is sharded over the two ranks
TASK = ["--task-config", "min_len=2", "max_len=4", "train_size=64", "test_size=600", "autoregressive_n=4"]
ARGS = ["train", "--model", "transformer", "--task", "copying", "--batch-size", "8", "--lr", "1e-2",
        "--no-progress", "--threads", "1", "--config", "d_model=16", "n_layers=1", "n_heads=2", *TASK]


def _run(procs: int, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}"] \
        if procs > 1 else [sys.executable]
    out = subprocess.run([*launcher, "-m", "seqlab", *ARGS, *args], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def _losses(path):
    return [r["loss"] for r in json.loads(path.read_text())["train"]]


def test_the_ranks_split_an_uneven_batch():
    from seqlab import distributed, tasks
    from seqlab.train import batch_indices

    task = tasks.copying(min_len=2, max_len=4, train_size=64, test_size=600, autoregressive_n=4)
    uneven = 0
    for step in range(5):                                # the steps the run below trains
        index = batch_indices(task.size("train"), 8, 0, step)
        parts = [distributed.shard(index, r, 2) for r in range(2)]
        assert sorted(parts[0].tolist() + parts[1].tolist()) == sorted(index.tolist())
        uneven += len({task.scored(task.batch_at("train", p)) for p in parts}) == 2
    assert uneven >= 2, "the run below needs steps where the ranks score different numbers of tokens"


def test_torchrun_two_processes_train_the_same_run_as_one_and_resume(tmp_path):
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    _run(1, "--steps", "5", "--history", str(one))
    out = _run(2, "--steps", "5", "--history", str(two))
    assert out.stdout.count("final loss=") == 1, "rank 0 alone prints"
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 5
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5, (a, b)
    # the evaluation is sharded over the ranks and reduced: the same numbers
    (ev1,), (ev2,) = (json.loads(p.read_text())["eval"] for p in (one, two))
    assert ev1.keys() == ev2.keys() and all(abs(ev1[k] - ev2[k]) <= 1e-6 * max(1.0, abs(ev1[k]))
                                            for k in ev1 if isinstance(ev1[k], float)), (ev1, ev2)
    # checkpointed under torchrun, extended under torchrun: the same as one process doing the same
    _run(1, "--steps", "3", "--checkpoint", str(tmp_path / "one.pt"))
    _run(1, "--steps", "5", "--checkpoint", str(tmp_path / "one.pt"), "--resume", "--history", str(one))
    _run(2, "--steps", "3", "--checkpoint", str(tmp_path / "two.pt"))
    out = _run(2, "--steps", "5", "--checkpoint", str(tmp_path / "two.pt"), "--resume", "--history", str(two))
    assert "resuming from step 3" in out.stdout
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 5
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5, (a, b)
