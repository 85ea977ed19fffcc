"""`python -m seqlab`: list, train (in a subprocess, a few steps, then resumed), argument errors."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from helpers import ctrl_c_at_step
from seqlab.__main__ import main, parse_pairs



TINY = ["--config", "d_model=16", "n_layers=1", "n_heads=2",
        "--task-config", "min_len=2", "max_len=4", "train_size=64", "test_size=16", "autoregressive_n=4"]


def run_cli(*args, cwd=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "seqlab", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


@pytest.mark.slow  # training in a subprocess
def test_cli_trains_and_resumes_in_a_subprocess(tmp_path, capsys):
    ckpt = str(tmp_path / "run.pt")
    out = run_cli("train", "--model", "transformer", "--task", "copying", "--steps", "4", "--batch-size", "8",
                  "--lr", "1e-2", "--no-progress", "--json", "--checkpoint", ckpt, *TINY)
    assert out.returncode == 0, out.stderr
    assert "step      4 | test:" in out.stdout and "final loss=" in out.stdout
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["steps"] == 4 and 0 <= result["final"]["accuracy"] <= 1
    assert os.path.exists(ckpt)
    # in-process this time (one subprocess is enough to prove the entry point): the finished run is
    # restored from the checkpoint, not retrained, and gives the same final metrics
    assert main(["train", "--model", "transformer", "--task", "copying", "--steps", "4", "--batch-size", "8",
                 "--lr", "1e-2", "--no-progress", "--json", "--checkpoint", ckpt, "--resume", *TINY]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result


@pytest.mark.slow  # training in a subprocess
def test_piped_to_a_file_train_prints_plain_lines_and_a_clean_header():
    """Not a terminal: no progress-bar fragments (carriage returns, ``it/s``), the step lines alone; a language-model
    task's header says so instead of ``classes None``."""
    out = run_cli("train", "--model", "transformer", "--task", "copying", "--steps", "4", "--batch-size", "8",
                  "--lr", "1e-2", "--print-every", "2", *TINY)
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stdout + out.stderr and "it/s" not in out.stderr, out.stderr
    assert "classes None" not in out.stdout and "a language model" in out.stdout.splitlines()[0]
    assert [line.split("|")[0].strip() for line in out.stdout.splitlines() if line.startswith("step")] == \
        ["step      2", "step      4", "step      4"]


def test_same_seed_same_run_bit_for_bit(capsys):
    """--seed fixes the initial weights as well as the batches: two runs print the same losses."""
    args = ["train", "--model", "lightnet", "--task", "copying", "--steps", "6", "--batch-size", "8", "--lr", "1e-2",
            "--no-progress", "--json", "--print-every", "1", "--seed", "3", "--threads", "1", *TINY]
    runs = []
    for _ in range(2):
        torch.manual_seed(123 + len(runs))         # whatever the global state, the run depends on --seed alone
        assert main(args) == 0
        runs.append(re.findall(r"loss[ =]([0-9.]+)", capsys.readouterr().out))   # every printed loss, no timings
    assert runs[0] == runs[1] and len(runs[0]) >= 6
    assert main(args[:-len(TINY) - 4] + ["--seed", "4", "--threads", "1", *TINY]) == 0
    assert re.findall(r"loss[ =]([0-9.]+)", capsys.readouterr().out) != runs[0]


def test_cli_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "transformer" in out and "linear-transformer" in out and "copying" in out and "digits" in out


def test_cli_reports_errors(capsys):
    assert main(["train", "--model", "nope", "--task", "copying", "--steps", "1"]) == 2
    assert "unknown model 'nope'" in capsys.readouterr().err
    assert main(["train", "--model", "transformer", "--task", "copying", "--config", "vocab_size=3"]) == 2
    assert "--config: vocab_size come from the task" in capsys.readouterr().err


def test_parse_pairs_reads_literals():
    assert parse_pairs(["a=3", "b=1e-3", "c=True", "d=mean", "e=(4, 4)", "f-g=x"], "t") == \
        {"a": 3, "b": 1e-3, "c": True, "d": "mean", "e": (4, 4), "f_g": "x"}
    with pytest.raises(SystemExit, match="expected key=value"):
        parse_pairs(["oops"], "t")


def test_cli_experiment_dispatches_to_the_registry(monkeypatch, capsys):
    from seqlab import experiments

    calls = []

    def echo(scale=1.0, label="x"):
        calls.append((scale, label))
        return {"scale": scale, "label": label, "table": [{"a": 1}]}

    monkeypatch.setattr(experiments, "_load_all", lambda: None)            # only the experiment registered here
    monkeypatch.setitem(experiments.EXPERIMENTS._entries, "cli-echo", echo)
    assert main(["experiment", "cli-echo", "scale=0.5", "label=demo"]) == 0
    assert calls == [(0.5, "demo")]
    assert json.loads(capsys.readouterr().out) == {"scale": 0.5, "label": "demo", "table": [{"a": 1}]}
    assert main(["experiment", "no-such-experiment"]) == 2
    assert "unknown experiment 'no-such-experiment'" in capsys.readouterr().err


def _train(ckpt, *extra, steps=6, model="transformer"):
    return ["train", "--model", model, "--task", "copying", "--steps", str(steps), "--batch-size", "8", "--lr", "1e-2",
            "--no-progress", "--threads", "1", "--checkpoint", str(ckpt), *extra, *TINY]


def test_ctrl_c_saves_the_run_and_resume_continues_it(tmp_path, capsys, monkeypatch):
    whole, cut = tmp_path / "whole.json", tmp_path / "cut.json"
    assert main(_train(tmp_path / "a.pt", "--history", str(whole))) == 0
    ctrl_c_at_step(monkeypatch, 3)
    capsys.readouterr()
    assert main(_train(tmp_path / "b.pt")) == 130
    err = capsys.readouterr().err
    assert f"stopped by SIGINT at step 3, saved to {tmp_path / 'b.pt'}; resume with: python -m seqlab train" in err
    assert err.rstrip().endswith("--resume")
    monkeypatch.undo()
    assert main(_train(tmp_path / "b.pt", "--resume", "--history", str(cut))) == 0
    assert f"resuming from step 3 of {tmp_path / 'b.pt'} (to step 6)" in capsys.readouterr().out
    assert json.loads(cut.read_text())["train"] == json.loads(whole.read_text())["train"]   # the same run
    assert len(json.loads(whole.read_text())["train"]) == 6 and json.loads(whole.read_text())["eval"]


def test_resume_says_when_it_starts_fresh_and_refuses_another_config(tmp_path, capsys):
    assert main(_train(tmp_path / "c.pt", "--resume", steps=2)) == 0
    assert f"no checkpoint at {tmp_path / 'c.pt'}: starting fresh" in capsys.readouterr().out
    other = [a.replace("d_model=16", "d_model=32") for a in _train(tmp_path / "c.pt", "--resume", steps=2)]
    assert main(other) == 2
    err = capsys.readouterr().err
    assert "holds another transformer config" in err and "d_model: checkpoint 16, now 32" in err


def test_more_steps_extend_a_finished_run_fewer_are_refused(tmp_path, capsys):
    ckpt, hist = tmp_path / "d.pt", tmp_path / "d.json"
    assert main(_train(ckpt, steps=4)) == 0
    assert main(_train(ckpt, "--resume", "--history", str(hist), steps=7)) == 0
    assert "resuming from step 4" in capsys.readouterr().out
    assert [r["step"] for r in json.loads(hist.read_text())["train"]] == list(range(1, 8))
    assert main(_train(ckpt, "--resume", steps=5)) == 2
    assert "steps may only grow" in capsys.readouterr().err


def test_describe_lists_parameters_and_suggests_names(capsys):
    assert main(["describe", "copying"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("task copying:") and re.search(r"max_len\s+default 8", out)
    assert main(["describe", "gateloop"]) == 0
    assert re.search(r"d_model\s+default", capsys.readouterr().out)
    assert main(["describe", "copyng"]) == 2
    assert "did you mean 'copying'" in capsys.readouterr().err


def test_a_checkpoint_rebuilds_its_model_and_evaluates(tmp_path, capsys):
    import seqlab

    ckpt = tmp_path / "e.pt"
    assert main(_train(ckpt, "--json", steps=3)) == 0
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["final"]
    model = seqlab.load(ckpt)
    assert model.model_name == "transformer" and not model.training
    assert model.model_config["d_model"] == 16 and model.run["task_config"]["max_len"] == 4
    assert main(["evaluate", str(ckpt), "--json", "--device", "cpu"]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert metrics["loss"] == pytest.approx(final["loss"], rel=1e-6)      # the same model on the same task


def test_generate_continues_a_prompt_with_a_checkpoints_model(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    ckpt = tmp_path / "text.pt"
    args = ["train", "--model", "transformer", "--task", "text", "--steps", "2", "--batch-size", "4", "--lr", "1e-2",
            "--no-progress", "--threads", "1", "--checkpoint", str(ckpt), "--config", "d_model=16", "n_layers=1",
            "n_heads=2", "--task-config", f"files={str(corpus)!r}", "seq_len=16"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(["generate", str(ckpt), "--prompt", "the ", "--max-new-tokens", "5", "--temperature", "0",
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out.rstrip("\n")
    assert out.startswith("the ") and len(out) == len("the ") + 5
    assert main(["generate", str(ckpt), "--ids", "116", "104", "--max-new-tokens", "3", "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.split()) == 5
    copy_ckpt = tmp_path / "copy.pt"
    assert main(_train(copy_ckpt, steps=1)) == 0
    assert main(["generate", str(copy_ckpt), "--prompt", "abc", "--device", "cpu"]) == 2
    assert "give token ids with --ids" in capsys.readouterr().err


def test_a_stopped_experiment_with_a_checkpoint_folder_given_as_a_pair_says_it_resumes():
    from seqlab.__main__ import parse_args, resume_hint

    given = parse_args(["experiment", "arena", "profile=quick", "checkpoint_dir=runs/arena"])
    assert resume_hint(given, KeyboardInterrupt()) == "; run the same command again to resume"
    assert "add --checkpoint-dir" in resume_hint(parse_args(["experiment", "arena"]), KeyboardInterrupt())
