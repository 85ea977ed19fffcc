"""The recall sweep: every profile's plan spans at least 8x of state per linear family at one budget (or says where
the budget moves), the tiny plan trains and records what a run and a cell must say, a second sitting trains nothing, a
stopped sitting leaves a valid record that the next one completes, a run resumed from its checkpoint counts the
seconds of every sitting, and each cell's rate search is the arena's; and its tooling, ``tools/recall_sweep.py``
(sittings on a lent machine, the step-budget probe, answers from kept weights, a snapshot staged for a commit)."""
from __future__ import annotations

import json

import pytest

from seqlab import experiments
from seqlab.experiments import recall_sweep as R
from seqlab.experiments import recall_sweep_plan as P
from seqlab.experiments.arena_families import TOLERANCE

RUN_KEYS = ("family", "cell", "group", "knobs", "pairs", "seed", "lr", "d_model", "params", "target_params", "budget",
            "state_size", "seq_len", "vocab_size", "filler", "train_size", "steps", "accuracy", "validation_accuracy",
            "initial_loss", "num_targets", "curve", "steps_to_0.9", "steps_to_0.99", "init", "device", "wall_s",
            "answers")
CELL_KEYS = ("family", "cell", "group", "knobs", "pairs", "d_model", "params", "budget", "state_size", "lr_grid",
             "searched", "chosen_lr", "lr_at_edge", "status", "accuracy", "mean", "spread", "min")


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path / "data"))


def _sweep_tool():
    """``tools/recall_sweep.py``, the sweep's tooling, imported as a module."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "tools" / "recall_sweep.py"
    spec = importlib.util.spec_from_file_location("recall_sweep_tool", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


@pytest.mark.parametrize("profile", ["quick", "medium", "full"])
def test_each_linear_family_spans_eight_times_its_state_at_one_budget(profile):
    out = experiments.run(R.NAME, profile=profile, out=None, dry_run=True)
    cfg, plan = out["config"], out["plan"]
    assert set(out["spans"]) == set(P.LINEAR) and all(out["spans"][f] >= 8 for f in P.LINEAR), out["spans"]
    for family in P.LINEAR:                  # at least three state sizes at every number of pairs
        for pairs in cfg["pairs"]:
            sizes = {c["state_size"] for c in plan if c["family"] == family and c["group"] == "state"
                     and c["pairs"] == pairs}
            assert len(sizes) >= 3, (family, pairs, sizes)
    for cell in plan:                        # matched within the arena's 10 %, or d_model held and the budget said
        assert cell["matched"] == ("d_model" not in cell["knobs"])
        assert not cell["matched"] or abs(cell["budget"] - 1) <= TOLERANCE, cell
        assert cell["budget"] == round(cell["params"] / cell["target_params"], 4)
        assert 4 * cell["pairs"] <= cfg["mqar"]["seq_len"]
    assert {c["pairs"] for c in plan if c["group"] == "reference"} == set(cfg["pairs"])
    assert [c["group"] for c in plan][:len(cfg["pairs"])] == ["reference"] * len(cfg["pairs"])   # controls first
    rest = plan[len(cfg["pairs"]):]
    fewest = min(cfg["pairs"])
    order = [(c["pairs"] != fewest and c["group"] != "state", c["pairs"]) for c in rest]
    assert order == sorted(order)                # every cell at the fewest pairs, the state cells, then the additions
    assert rest[0]["pairs"] == fewest and (profile == "quick" or rest[-1]["group"] != "state")
    groups = {c["group"] for c in plan}
    if profile != "quick":
        assert len(cfg["pairs"]) >= 3 and {"short-conv", "feature-map"} <= groups
        assert cfg["mqar"]["vocab_size"] // 2 - 1 >= 256                    # key tokens beyond any key channels
        assert cfg["train_size"] >= 25 * 4000
        assert cfg["mqar"]["filler"] == "zoology" and cfg["seeds"] == 3 and len(cfg["lrs"]) >= 3


TINY = dict(profile="quick", steps=2, families="transformer,gateloop", only_pairs="2", progress=False,
            verbose=False)


def test_the_tiny_sweep_records_each_run_and_cell_and_a_second_sitting_trains_nothing(tmp_path, monkeypatch):
    out = tmp_path / "sweep.json"
    result = experiments.run(R.NAME, out=str(out), **TINY)
    data = json.loads(out.read_text())
    planned = [c for c in result["plan"] if c["family"] in ("transformer", "gateloop") and c["pairs"] == 2]
    assert len(data["runs"]) == len(planned) == 5                      # one seed, one rate in the quick sizes
    for run in data["runs"]:
        assert set(RUN_KEYS) <= set(run), set(RUN_KEYS) - set(run)
        assert run["state_size"] > 0 and [s for s, _ in run["curve"]] == [0, 2]
        assert run["num_targets"] == run["vocab_size"] == 64 and run["initial_loss"] > 0
        answers = run["answers"]                                        # the test split's queries, pair by pair
        assert len(answers["by_pair"]) == run["pairs"] and 0 <= answers["another_value"] <= answers["wrong"]
        correct, asked = (sum(x) for x in zip(*answers["by_pair"]))
        assert round(correct / asked, 6) == run["accuracy"] and asked - correct == answers["wrong"]
        assert {k: run[k] for k in ("commit", "dirty") if k in run} == R.code_version()   # the code it ran
    if R.code_version():                                                # a git checkout (CI's is one)
        assert len(R.code_version()["commit"]) == 40 and isinstance(R.code_version()["dirty"], bool)
    assert {r["state_size"] for r in data["runs"]} == {c["state_size"] for c in planned}
    cells = {(c["cell"], c["pairs"]): c for c in data["cells"]}
    assert len(cells) == len(result["plan"])                            # every cell of the plan, trained or not
    for cell in planned:
        row = cells[(cell["cell"], 2)]
        assert set(CELL_KEYS) <= set(row) and row["status"] == "done" and row["chosen_lr"] == 3e-3
        run = next(r for r in data["runs"] if r["cell"] == cell["cell"])
        assert row["lr_grid"] == [3e-3] and row["searched"] == {"0.003": run["validation_accuracy"]}
        assert row["accuracy"] == [run["accuracy"]] and row["state_size"] == run["state_size"]
    assert cells[("lrnn d_state=8", 2)]["status"] == "not started"      # not in this sitting's families
    assert data["verdicts"]["2"]["verdict"] == "inconclusive: the control did not learn"   # 2 steps learn nothing
    assert data["verdicts"]["4"]["verdict"] == "control not run yet"
    assert data["config"]["pairs"] == [2, 4]                           # the subset is not the record's config

    def no_training(*args, **kwargs):
        raise AssertionError("a recorded run was trained again")

    monkeypatch.setattr(R, "run_one", no_training)
    again = experiments.run(R.NAME, out=str(out), **TINY)
    assert again["runs"] == data["runs"]


def test_a_stopped_sitting_leaves_a_valid_record_that_the_next_completes(tmp_path, monkeypatch):
    out = tmp_path / "sweep.json"
    real, calls = R.run_one, []

    def stopped_at_the_third(spec, cfg, **kw):
        calls.append(spec["cell"])
        if len(calls) == 3:
            raise KeyboardInterrupt("SIGTERM")
        return real(spec, cfg, **kw)

    monkeypatch.setattr(R, "run_one", stopped_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        experiments.run(R.NAME, out=str(out), **TINY)
    first = json.loads(out.read_text())                                 # valid JSON, the two finished runs
    assert len(first["runs"]) == 2 and {r["cell"] for r in first["runs"]} == set(calls[:2])
    monkeypatch.setattr(R, "run_one", real)
    done = experiments.run(R.NAME, out=str(out), **TINY)
    assert len(done["runs"]) == 5 and done["runs"][:2] == first["runs"]


def _run(cell, seed, lr, val, cfg):
    task = cfg["mqar"]
    return {**cell, "seed": seed, "lr": lr, "validation_accuracy": val, "accuracy": val, "seq_len": task["seq_len"],
            "vocab_size": task["vocab_size"], "filler": task["filler"], "train_size": cfg["train_size"],
            "width": cfg["width"], "steps": cfg["steps"]}


def test_a_run_resumed_from_its_checkpoint_counts_the_seconds_of_every_sitting(tmp_path, monkeypatch):
    import torch

    from seqlab import train

    cfg = {**P.SIZES["quick"], "steps": 6}
    spec = {**P.plan_cells(cfg, ["gateloop"], [2])[0], "seed": 0, "lr": 1e-3}
    real_fit, folder = train.fit, tmp_path / "runs"

    def stopped_at_step_4(model, task, run, callbacks=()):
        def stop(history, record):
            if record["split"] == "train" and record["step"] == 4:
                raise KeyboardInterrupt
        return real_fit(model, task, run, callbacks=[*callbacks, stop])

    monkeypatch.setattr(train, "fit", stopped_at_step_4)
    with pytest.raises(train.TrainingInterrupted):
        R.run_one(spec, cfg, checkpoint_dir=folder)
    (path,) = folder.glob("*.pt")
    saved = torch.load(path, weights_only=False)
    for record in saved["records"]:                                     # as if the first sitting had taken an hour
        if "time" in record:
            record["time"] += 3600.0
    torch.save(saved, path)
    monkeypatch.setattr(train, "fit", real_fit)
    run = R.run_one(spec, cfg, checkpoint_dir=folder)
    history = train.History(torch.load(path, weights_only=False)["records"])
    times = [r["time"] for r in history.split("train")]
    assert times[3] > 3600 > times[4]                                   # the second sitting's clock starts again
    assert history.seconds(through_step=4) == times[3] and history.seconds() == times[3] + times[-1]
    assert run["wall_s"] >= round(history.seconds(), 2)                 # both sittings, not the last alone


def test_a_cell_searches_its_rate_as_the_arena_then_runs_the_seeds_at_it():
    cfg = {**P.SIZES["quick"], "lrs": [1e-3, 3e-3, 1e-2], "seeds": 3}
    cell = P.plan_cells(cfg, ["gateloop"], [2])[0]
    assert [(s["seed"], s["lr"]) for s in P.next_specs([], cell, cfg)] == [(0, 1e-3), (0, 3e-3), (0, 1e-2)]
    runs = [_run(cell, 0, lr, v, cfg) for lr, v in ((1e-3, 0.2), (3e-3, 0.5), (1e-2, 0.7))]
    assert [(s["seed"], s["lr"]) for s in P.next_specs(runs, cell, cfg)] == [(0, 0.03)]    # best at an edge
    runs.append(_run(cell, 0, 0.03, 0.6, cfg))
    assert [(s["seed"], s["lr"]) for s in P.next_specs(runs, cell, cfg)] == [(1, 1e-2), (2, 1e-2)]
    other = P.plan_cells(cfg, ["gateloop"], [4])[0]                    # another number of pairs: its own search
    assert len(P.next_specs(runs, other, cfg)) == 3
    longer = {**cfg, "steps": cfg["steps"] * 2}                        # another budget: nothing counts
    assert len(P.next_specs(runs, cell, longer)) == 3
    runs += [_run(cell, s, 1e-2, 0.9, cfg) for s in (1, 2)]
    assert P.next_specs(runs, cell, cfg) == []
    row = P.cell_rows(runs, [cell], cfg)[0]
    assert row["chosen_lr"] == 1e-2 and not row["lr_at_edge"] and row["lr_extended"] and row["status"] == "done"
    assert row["accuracy"] == [0.7, 0.9, 0.9] and row["min"] == 0.7


def test_seeds_that_miss_at_seed_0s_best_rate_run_again_at_its_next_best_that_learned():
    cfg = {**P.SIZES["quick"], "lrs": [1e-3, 3e-3, 1e-2], "seeds": 3, "learned_at": 0.9}
    cell = P.plan_cells(cfg, ["transformer"], [2])[0]
    runs = [_run(cell, 0, lr, v, cfg) for lr, v in ((1e-3, 0.97), (3e-3, 1.0), (1e-2, 0.1))]
    assert [(s["seed"], s["lr"]) for s in P.next_specs(runs, cell, cfg)] == [(1, 3e-3), (2, 3e-3)]
    runs += [_run(cell, 1, 3e-3, 0.99, cfg), _run(cell, 2, 3e-3, 0.09, cfg)]       # seed 2 stays on a plateau
    assert [(s["seed"], s["lr"]) for s in P.next_specs(runs, cell, cfg)] == [(1, 1e-3), (2, 1e-3)]
    row = P.cell_rows(runs, [cell], cfg)[0]
    assert row["status"] == "seeds pending" and row["seeds_tried_at"] == [3e-3, 1e-3]
    done = runs + [_run(cell, 1, 1e-3, 0.98, cfg), _run(cell, 2, 1e-3, 0.95, cfg)]
    assert P.next_specs(done, cell, cfg) == []
    row = P.cell_rows(done, [cell], cfg)[0]
    assert row["chosen_lr"] == 1e-3 and row["seed0_best_lr"] == 3e-3 and row["lr_at_edge"]
    assert row["status"] == "done" and row["accuracy"] == [0.97, 0.98, 0.95]
    worse = runs + [_run(cell, 1, 1e-3, 0.5, cfg), _run(cell, 2, 1e-3, 0.95, cfg)]   # no better: the first rate stays
    assert P.cell_rows(worse, [cell], cfg)[0]["chosen_lr"] == 3e-3
    stuck = [_run(cell, 0, lr, v, cfg) for lr, v in ((1e-3, 0.5), (3e-3, 0.95), (1e-2, 0.1))] + \
        [_run(cell, 1, 3e-3, 0.2, cfg), _run(cell, 2, 3e-3, 0.2, cfg)]   # no other rate learned: nothing to retry
    assert P.next_specs(stuck, cell, cfg) == [] and P.cell_rows(stuck, [cell], cfg)[0]["chosen_lr"] == 3e-3
    failing = [_run(cell, 0, lr, v, cfg) for lr, v in ((1e-3, 0.3), (3e-3, 0.4), (1e-2, 0.1))] + \
        [_run(cell, 1, 3e-3, 0.2, cfg), _run(cell, 2, 3e-3, 0.2, cfg)]   # seed 0 did not learn: nothing to retry
    assert P.next_specs(failing, cell, cfg) == []


def test_a_cell_that_cannot_hold_the_budget_says_so():
    cfg = {**P.SIZES["quick"], "cells": [{"family": "lrnn", "group": "state", "knobs": {"d_state": 512}}]}
    with pytest.raises(ValueError, match="lrnn d_state=512: no d_model .* name d_model in its knobs"):
        P.plan_cells(cfg)
    with pytest.raises(ValueError, match="families"):
        experiments.run(R.NAME, profile="quick", out=None, dry_run=True, families="gpt")


def test_a_cell_that_names_its_pairs_runs_only_at_those():
    conv = {"family": "gateloop", "group": "short-conv", "knobs": {"n_heads": 2, "short_conv": 4}}
    cfg = {**P.SIZES["quick"], "pairs": [2, 4], "cells": [{**conv, "pairs": [2]},
                                                           {"family": "gateloop", "group": "state", "knobs": {}}]}
    plan = P.plan_cells(cfg)
    assert sorted((c["cell"], c["pairs"]) for c in plan) == [("gateloop", 2), ("gateloop", 4),
                                                             ("gateloop n_heads=2 short_conv=4", 2)]
    more = P.plan_cells({**cfg, "cells": [{**conv, "pairs": [4]}]})    # a bracket refined where it is: at 4 alone
    assert [(c["cell"], c["pairs"]) for c in more] == [("gateloop n_heads=2 short_conv=4", 4)]
    for bad in ([2, 8], [], 2):                         # a number the sweep lacks, none, no list
        with pytest.raises(ValueError, match=r"cells: pairs of gateloop n_heads=2 short_conv=4 must be a non-empty"):
            P.plan_cells({**cfg, "cells": [{**conv, "pairs": bad}]})


def test_answers_added_from_the_kept_weights_are_the_ones_the_run_measured(tmp_path):
    """``tools/recall_sweep.py answers`` gives runs recorded before the sweep measured its answers the same answers,
    read from the final weights a sitting keeps; a run without its weights is listed, not guessed."""
    tool = _sweep_tool()
    out, folder = tmp_path / "sweep.json", tmp_path / "runs"
    experiments.run(R.NAME, out=str(out), checkpoint_dir=str(folder), **TINY)
    data = json.loads(out.read_text())
    measured = {P.run_key(r): r.pop("answers") for r in data["runs"]}
    out.write_text(json.dumps(data))                                    # as a record from before the answers
    gone = sorted(folder.glob("*.pt"))[0]
    gone.unlink()
    assert tool.main(["answers", str(out), str(folder)]) == 0
    after = json.loads(out.read_text())["runs"]
    kept = [r for r in after if "answers" in r]
    assert len(kept) == len(after) - 1 and all(r["answers"] == measured[P.run_key(r)] for r in kept)
    assert tool.answers_from_checkpoints(out, folder) == ({}, [f"{gone.stem}: no checkpoint"])


def test_a_lent_machine_runs_sittings_on_a_copy_of_the_record_and_its_runs_merge_back(tmp_path, capsys):
    """``tools/recall_sweep.py device-run``: sittings side by side, each on its own family and number of pairs, on a
    copy of the record; ``device-merge``: the copy's new runs merge into the record once, by key; ``device-command``
    says the first on the command line."""
    tool = _sweep_tool()
    source, out = tmp_path / "recall-sweep-quick.json", tmp_path / "lent"
    source.write_text(json.dumps({"runs": []}))
    assert tool.parts(source, "quick")[:3] == [("transformer", 2), ("transformer", 4), ("gateloop", 2)]
    assert tool.run_on_device(600, 2, out, profile="quick", source=source) == 0   # the two controls: one run each
    theirs = json.loads((out / source.name).read_text())["runs"]
    assert sorted((r["family"], r["pairs"]) for r in theirs) == [("transformer", 2), ("transformer", 4)]
    assert json.loads(source.read_text())["runs"] == [] and not (out / "weights").exists()
    assert {p.name for p in out.glob("sitting-*.log")} == {"sitting-0.log", "sitting-1.log"}
    tool.merge_runs(out / source.name, source)
    tool.merge_runs(out / source.name, source)                          # again: nothing twice
    assert [P.run_key(r) for r in json.loads(source.read_text())["runs"]] == [P.run_key(r) for r in theirs]
    capsys.readouterr()
    assert tool.main(["device-command", "--seconds", "60", "--sittings", "3"]) == 0
    said = capsys.readouterr().out.strip()
    assert said.startswith("SEQLAB_CODE_VERSION='{") and said.endswith(
        "python3 tools/recall_sweep.py device-run --seconds 60 --sittings 3 --out \"$OUT\"")


def test_outside_a_git_checkout_the_code_version_is_what_the_copy_was_told(monkeypatch, request):
    def no_git(*args, **kwargs):
        raise OSError("no git here")

    request.addfinalizer(R.code_version.cache_clear)     # read once a sitting: read again after this test
    from seqlab.experiments import _common

    monkeypatch.setattr(_common.subprocess, "run", no_git)
    monkeypatch.delenv("SEQLAB_CODE_VERSION", raising=False)
    R.code_version.cache_clear()
    assert R.code_version() == {}
    monkeypatch.setenv("SEQLAB_CODE_VERSION", '{"commit": "abc", "dirty": false}')
    R.code_version.cache_clear()
    assert R.code_version() == {"commit": "abc", "dirty": False}


def test_the_step_budget_probe_trains_the_best_validated_cell_again_at_more_steps(tmp_path):
    """``tools/recall_sweep.py steps-probe``: the family's finished cell with the highest mean validation accuracy at
    its chosen rate, trained again at that rate, every seed, at twice the steps, into its own record; again:
    nothing."""
    tool = _sweep_tool()
    record, out = tmp_path / "sweep.json", tmp_path / "steps.json"
    experiments.run(R.NAME, out=str(record), **TINY)                    # gateloop's three sizes, 2 steps each
    runs = json.loads(record.read_text())["runs"]
    gateloop = [r for r in runs if r["family"] == "gateloop" and r["group"] == "state"]
    best = max(r["validation_accuracy"] for r in gateloop)
    with pytest.raises(SystemExit, match="family: 'lrnn' has no finished cell at 2 pairs"):
        tool.choose(record, "lrnn", 2)
    assert tool.main(["steps-probe", "gateloop", "--pairs", "2", "--record", str(record), "--out", str(out),
                      "--dry-run"]) == 0
    assert not out.exists()
    data = tool.probe("gateloop", pairs=2, record=record, out=out)
    chosen = next(r for r in gateloop if r["cell"] == data["probe"]["cell"])
    assert chosen["validation_accuracy"] == data["probe"]["validation"] == best and data["probe"]["lr"] == chosen["lr"]
    assert data["probe"]["steps"] == 2 * chosen["steps"] == 4
    assert [(r["cell"], r["seed"], r["lr"], r["steps"]) for r in data["runs"]] == \
        [(chosen["cell"], s, chosen["lr"], 4) for s in range(data["config"]["seeds"])]
    assert all(set(RUN_KEYS) <= set(r) for r in data["runs"])
    with pytest.raises(SystemExit, match="--factor: expected an integer of 2 or more, got 1"):
        tool.main(["steps-probe", "gateloop", "--factor", "1"])
    assert tool.probe("gateloop", pairs=2, record=record, out=out)["runs"] == data["runs"]


def test_a_snapshot_with_the_lesson_executes_it_under_the_records_lock_and_stages_it(tmp_path, monkeypatch, capsys):
    """``tools/recall_sweep.py snapshot --lesson``: lesson 08 reads the record, so it is executed while no sitting can
    add a run (the record's lock held) and staged with the record and its page."""
    import sys

    from filelock import FileLock, Timeout

    tool = _sweep_tool()
    (tmp_path / "results" / "arena").mkdir(parents=True)
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    monkeypatch.setattr("seqlab.claims.run.write_summary", lambda results: None)
    record = tmp_path / "results" / "arena" / "recall-sweep-medium.json"
    calls = []

    def run(cmd, **kwargs):
        probe = FileLock(str(record) + ".lock", timeout=0)
        try:
            probe.acquire()
            probe.release()
            locked = False
        except Timeout:
            locked = True
        calls.append((cmd[1:3] if cmd[0] == sys.executable else cmd[:2], locked, cmd))

    monkeypatch.setattr(tool.subprocess, "run", run)
    assert tool.main(["snapshot", "--lesson"]) == 0
    (execute, held, _), (add, held_too, cmd) = calls
    assert execute == [str(tmp_path / "workbench.py"), "execute"] and held and add == ["git", "add"] and held_too
    assert cmd[-1] == str(tmp_path / "notebooks" / "08_arena.ipynb") and str(record) in cmd
    calls.clear()
    assert tool.main(["snapshot"]) == 0 and [c[0] for c in calls] == [["git", "add"]]
    with pytest.raises(SystemExit):
        tool.main(["snapshot", "--lessons"])
    assert "tools/recall_sweep.py: error: unrecognized arguments: --lessons" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- runs to convergence


def test_a_curve_still_rising_at_the_end_is_still_learning_and_a_run_says_how_it_ended():
    flat_end = [[s, min(0.5, s / 1000)] for s in range(0, 1001, 100)]            # 0.5 from step 500 on
    late = [[s, 0.4 + (0.03 if s == 1000 else 0.0)] for s in range(0, 1001, 100)]
    creeping = [[s, 0.4 + (0.01 if s == 1000 else 0.0)] for s in range(0, 1001, 100)]
    assert P.rose_at_the_end(late) and not P.rose_at_the_end(creeping) and not P.rose_at_the_end(flat_end)
    assert P.rose_at_the_end([[0, 0.1]]) is None and P.rose_at_the_end(None) is None
    assert P.rose_at_the_end([[0, 0.1], [10, 0.2], [20, 0.2], [30, 0.2], [40, 0.2], [50, 0.25]])  # 50 -> from 40
    assert R.stopping(late, 1000, 0.99) == {"stopped": "cap", "stop_step": 1000, "still_learning": True}
    assert R.stopping([[0, 0.0], [300, 0.995]], 1000, 0.99) == {"stopped": "converged", "stop_step": 300,
                                                                "still_learning": False}
    assert R.stopping(late, 1000, None)["stopped"] == "cap"                    # no stop_at: every run at the cap


def test_a_run_to_convergence_stops_at_its_first_evaluation_reaching_stop_at_on_fresh_data():
    cfg = {**P.SIZES["quick"], "steps": 12, "eval_every": 4}
    spec = {**P.plan_cells(cfg, ["gateloop"], [2])[0], "seed": 0, "lr": 3e-3}
    capped = R.run_one(spec, cfg)
    assert (capped["stopped"], capped["stop_step"], capped["curve"][-1][0]) == ("cap", 12, 12)
    assert "stop_at" not in capped and "data" not in capped and P.run_key(capped) == P.spec_key(spec, cfg)
    assert capped["state_per_layer"] * cfg["n_layers"] == capped["state_size"]
    converging = {**cfg, "stop_at": 0.0, "fresh": True}                        # every evaluation reaches 0.0
    run = R.run_one(spec, converging)
    assert (run["stopped"], run["stop_step"], run["still_learning"]) == ("converged", 4, False)
    assert [s for s, _ in run["curve"]] == [0, 4] and run["validation_accuracy"] == run["curve"][-1][1]
    assert run["stop_at"] == 0.0 and run["data"] == "fresh" and run["steps"] == 12
    assert P.run_key(run) == P.spec_key(spec, converging) != P.spec_key(spec, cfg)   # another protocol, another run
    assert R.run_name(spec, converging) == R.run_name(spec, cfg) + "-stop0-fresh"
    assert P.protocol(run) == "to convergence, fresh data" and P.protocol(capped) == "fixed steps"
    assert P.protocol({k: v for k, v in capped.items() if k not in ("stopped", "stop_step", "still_learning")}) == "old"


def test_a_sweep_to_convergence_and_an_old_record_share_a_file_each_run_once(tmp_path, monkeypatch):
    out = tmp_path / "sweep.json"
    old = experiments.run(R.NAME, out=str(out), **TINY)
    for run in old["runs"]:                                # as the first medium record: no protocol fields
        for key in ("stopped", "stop_step", "still_learning", "state_per_layer"):
            run.pop(key)
    out.write_text(json.dumps({**json.loads(out.read_text()), "runs": old["runs"]}))
    new = experiments.run(R.NAME, out=str(out), stop_at=0.0, fresh=True, eval_every=1, **TINY)
    assert len(new["runs"]) == 10 and new["runs"][:5] == old["runs"]           # the old kept, five new runs
    assert all(r["stopped"] == "converged" and r["stop_step"] == 1 for r in new["runs"][5:])
    rows = {(r["cell"], r["pairs"]): r for r in new["cells"]}
    assert rows[("transformer", 2)]["protocol"] == "to convergence, fresh data"
    assert rows[("transformer", 2)]["converged"] == [0] and rows[("transformer", 2)]["still_learning"] == []
    assert rows[("transformer", 2)]["rose"] == []                             # converged: not "rose at the end"
    assert rows[("transformer", 2)]["status"] == "done" and rows[("transformer", 2)]["state_per_layer"] > 0

    def no_training(*args, **kwargs):
        raise AssertionError("a recorded run was trained again")

    monkeypatch.setattr(R, "run_one", no_training)
    assert len(experiments.run(R.NAME, out=str(out), stop_at=0.0, fresh=True, eval_every=1, **TINY)["runs"]) == 10


def test_the_finished_medium_record_reads_as_it_did_its_provenance_and_rising_curves_marked():
    """The first medium record (the old protocol: 6000 steps, a fixed train split) is read as before: every
    verdict stands (no run of it recorded ``still_learning``), and its cells say which seeds' curves still rose and
    which runs recorded no commit or ran changed code."""
    from seqlab.claims import recall_report
    from seqlab.experiments import recall_sweep_results as RR

    data, rows = recall_report.sweep_rows(R.RESULTS_DIR.parent)
    assert len(data["runs"]) == 365 and all(r["status"] == "done" for r in rows)
    assert {r["protocol"] for r in rows} == {"old"} and not any(r["still_learning"] for r in rows)
    assert all(v["verdict"] == "learned" for v in P.control_verdicts(rows, data["config"]).values())
    found = RR.thresholds(rows)
    assert not any(e["undecided"] for by_family in found.values() for e in by_family.values())
    assert found[8]["lightnet"]["state"] == 3120 and found[4]["gateloop"]["state"] is None
    cell = {(r["cell"], r["pairs"]): r for r in rows}
    assert cell[("gateloop n_heads=4", 4)]["rose"] == [1, 2]                   # rose by more than 0.02 at the end
    assert cell[("transformer", 4)]["no_commit"] and not cell[("transformer", 4)]["dirty"]
    assert sum(bool(r["dirty"]) for r in rows) == 10 and sum(bool(r["no_commit"]) for r in rows) == 8
    assert recall_report.cell_notes(cell[("transformer", 4)]).startswith("no commit: seed 0")
