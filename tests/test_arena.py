"""The arena (issue #19): matched sizes, the rate chosen on validation, the resumable grid, the recorded medium run."""
from __future__ import annotations

import json

import pytest

from seqlab import experiments
from seqlab.experiments import arena as A


@pytest.mark.parametrize("width", [16, 32, 64])
def test_every_family_is_matched_within_ten_percent_by_d_model(width):
    target = A.target_parameters("transformer", width, 2)
    for family in A.FAMILIES:
        d_model, params = A.matched_width(family, target, 2)
        assert abs(params - target) <= 0.10 * target, (family, d_model, params, target)
        step = A.WIDTH_STEP.get(family, 2)
        assert d_model % step == 0
        # no other allowed width is nearer
        for other in (d_model - step, d_model + step):
            if other > 0:
                assert abs(A._core_count(family, other, 2) - target) >= abs(params - target)


def test_core_parameters_leave_out_embedding_positions_and_head():
    from seqlab import models

    small = models.build("transformer", vocab_size=10, d_model=16, n_layers=1)
    large = models.build("transformer", vocab_size=1000, d_model=16, n_layers=1, max_len=2048)
    assert A.core_parameters(small) == A.core_parameters(large)
    assert A.core_parameters(small) < sum(p.numel() for p in small.parameters())


def _run(family, task, seed, lr, val, acc, width=16, seq_len=32):
    return {"family": family, "task": task, "seed": seed, "lr": lr, "width": width, "seq_len": seq_len,
            "validation_accuracy": val, "accuracy": acc, "d_model": 16, "params": 1, "state_size": 1, "wall_s": 1.0}


def _cfg(**kw):
    cfg = dict(A.SIZES["quick"])
    cfg.update(families=["gateloop", "lrnn"], tasks={"mqar": cfg["tasks"]["mqar"]}, lrs=[1e-3, 3e-3], seeds=3)
    cfg.update(kw)
    return cfg


def test_the_rate_is_chosen_on_validation_not_on_test():
    cfg = _cfg()
    runs = [_run("gateloop", "mqar", 0, 1e-3, val=0.9, acc=0.1), _run("gateloop", "mqar", 0, 3e-3, val=0.2, acc=0.99)]
    assert A.chosen_lrs(runs, cfg) == {("gateloop", "mqar"): 1e-3}
    # a cell whose search is not finished has no choice yet
    assert ("lrnn", "mqar") not in A.chosen_lrs(runs + [_run("lrnn", "mqar", 0, 1e-3, 0.5, 0.5)], cfg)


def test_plan_searches_first_then_runs_the_seeds_and_sweeps_at_the_chosen_rate():
    cfg = _cfg()
    first, then = A.plan(cfg, [])
    assert len(first) == 2 * 2 and not then                     # 2 families x 2 rates, seed 0
    assert all(s["seed"] == 0 and s["width"] == cfg["base_width"] for s in first)
    done = [_run(s["family"], "mqar", 0, s["lr"], val=0.5 + s["lr"], acc=0.5) for s in first]
    first2, then2 = A.plan(cfg, done)
    assert not first2
    assert {s["lr"] for s in then2} == {3e-3}                    # the better validation rate
    base = [s for s in then2 if s["width"] == cfg["base_width"] and s["seq_len"] == 32]
    assert sorted(s["seed"] for s in base if s["family"] == "gateloop") == [1, 2]
    wider = [s for s in then2 if s["width"] != cfg["base_width"]]
    assert {s["width"] for s in wider} == set(cfg["widths"]) - {cfg["base_width"]}
    assert sorted(s["seed"] for s in wider if s["family"] == "lrnn") == [0, 1, 2]
    longer = [s for s in then2 if s["seq_len"] not in (None, 32)]
    assert {s["seq_len"] for s in longer} == set(cfg["mqar_lengths"]) - {32}


def test_the_quick_grid_writes_each_run_and_a_second_call_skips_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path / "data"))
    out = tmp_path / "arena.json"
    kw = dict(profile="quick", families="gateloop,transformer", tasks=["mqar", "memorization"], out=str(out),
              steps=2, widths=[16], mqar_lengths=[32], progress=False)
    result = experiments.run("arena", **kw)
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 4 and len(result["summary"]) == 4
    for run in data["runs"]:
        for key in ("family", "task", "seed", "d_model", "params", "state_size", "seq_len", "accuracy", "wall_s"):
            assert key in run
        assert 0.0 <= run["accuracy"] <= 1.0 and run["state_size"] > 0
    assert {"command", "versions", "wall_s", "runs"} <= set(data)
    printed = capsys.readouterr().out
    assert "d_model=" in printed and "% of" in printed            # the matched size is printed per run
    again = experiments.run("arena", **kw)
    assert len(again["runs"]) == 4                                # nothing trained twice
    assert json.loads(out.read_text())["runs"] == data["runs"]


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="families"):
        experiments.run("arena", profile="quick", families="gpt", out=None)
    with pytest.raises(ValueError, match="tasks"):
        experiments.run("arena", profile="quick", tasks="parity", out=None)
    with pytest.raises(ValueError, match="workers"):
        experiments.run("arena", profile="quick", workers=0, out=None)


def test_the_recorded_medium_gateloop_mqar_run_reproduces():
    """GateLoop's MQAR run at the smallest width, seed 0, trained again from its recorded config, finds the
    recorded test accuracy within 0.01."""
    path = A.RESULTS_DIR / "medium.json"
    data = json.loads(path.read_text())
    cfg = data["config"]
    smallest = min(cfg["widths"])
    base_len = cfg["tasks"]["mqar"]["seq_len"]
    runs = [r for r in data["runs"] if r["family"] == "gateloop" and r["task"] == "mqar" and r["seed"] == 0
            and r["width"] == smallest and r["seq_len"] == base_len]
    assert runs, "results/arena/medium.json has no GateLoop MQAR run at the smallest width, seed 0"
    recorded = runs[0]
    spec = {k: recorded[k] for k in ("family", "task", "seed", "width", "seq_len", "lr")}
    again = A.run_one(spec, cfg)
    assert again["d_model"] == recorded["d_model"] and again["params"] == recorded["params"]
    assert abs(again["accuracy"] - recorded["accuracy"]) <= 0.01, (again["accuracy"], recorded["accuracy"])
