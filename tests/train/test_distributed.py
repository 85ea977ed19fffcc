"""Data-parallel training under torchrun (``seqlab.train.distributed``): two gloo processes on 127.0.0.1 train the
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
    from seqlab import tasks
    from seqlab.train import distributed
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


def test_an_experiment_on_two_nodes_through_torchrun_rendezvous(tmp_path):
    """Two torchrun launchers, one process each, meeting at a c10d rendezvous on 127.0.0.1 as two machines
    would (README "Running at paper size"), run an experiment from a config file: the same results as one
    process, rank 0 alone printing; the checkpoint folder then resumes it in one process without training."""
    import socket

    config = tmp_path / "tiny.toml"
    config.write_text('experiment = "lightnet-copying"\n[sizes]\nd_model = 16\nn_layers = 1\nn_heads = 2\n'
                      'steps = 4\nbatch_size = 8\nlr = 1e-2\nthreads = 1\ntask_config = { min_len = 2, max_len = 4, '
                      'train_size = 64, test_size = 600, autoregressive_n = 4 }\n')
    args = ["-m", "seqlab", "experiment", "lightnet-copying", "progress=False", "--config-file", str(config)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    one = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
                               f"--node_rank={rank}", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                               "--rdzv_id=seqlab-test", *args, "--checkpoint-dir", str(tmp_path / "runs")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for rank in range(2)]
    outs = [node.communicate(timeout=600) for node in nodes]
    assert all(node.returncode == 0 for node in nodes), [err[-3000:] for _, err in outs]
    printed = [out for out, _ in outs if out.strip()]
    assert len(printed) == 1, "rank 0 alone prints"
    want, got = json.loads(one.stdout)["final"], json.loads(printed[0])["final"]
    assert want.keys() == got.keys()
    assert all(abs(want[k] - got[k]) <= 1e-5 * max(1.0, abs(want[k])) for k in want), (want, got)
    again = subprocess.run([sys.executable, *args, "--checkpoint-dir", str(tmp_path / "runs")], capture_output=True,
                           text=True, env=env, timeout=600)
    assert again.returncode == 0 and json.loads(again.stdout)["final"] == got
