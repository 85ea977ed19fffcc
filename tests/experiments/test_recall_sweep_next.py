"""The recall sweep's next sitting (``seqlab.experiments.recall_sweep_next``, ``tools/recall_sweep.py plan``): brackets
refined to steps of at most 1.5 in state, the undecided cells trained again, DeltaNet and Gated DeltaNet over 8x of
state at every number of pairs, each addition against a base of equal state, the LRNN's state moved alone, 16 pairs
at 128 tokens, an estimate from recorded wall_s, a budget spent by whole units, and profiles the sweep reads."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from seqlab import experiments
from seqlab.claims import recall_report
from seqlab.experiments import recall_sweep as R
from seqlab.experiments import recall_sweep_next as N
from seqlab.experiments import recall_sweep_plan as P
from seqlab.experiments._common import profile_sizes

REPO = Path(__file__).resolve().parents[2]
MEDIUM = profile_sizes(P.SIZES, "medium", {})


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path / "data"))


@pytest.fixture(scope="module")
def medium():
    """The finished medium record and its cells."""
    return recall_report.sweep_rows(R.RESULTS_DIR.parent)


def _row(family, knobs, state, accs, pairs=8, group="state", **extra):
    return {"family": family, "knobs": knobs, "cell": P.cell_label({"family": family, "knobs": knobs}),
            "group": group, "pairs": pairs, "state_size": state, "status": "done", "accuracy": accs,
            "min": min(accs), "mean": sum(accs) / len(accs), **extra}


def test_a_bracket_is_refined_to_steps_of_at_most_1_5_or_the_gap_left_is_said():
    lo, hi = _row("lightnet", {"n_heads": 13}, 1248, [0.7, 0.7, 0.7]), _row("lightnet", {"n_heads": 4}, 3120, [1.0] * 3)
    assert N.brackets([lo, hi, _row("lightnet", {"n_heads": 1}, 11232, [1.0] * 3)]) == [(lo, hi)]
    assert N.brackets([{**lo, "still_learning": [0]}, hi]) == []               # an undecided end is no bracket
    cells, note = N.refine(lo, hi, MEDIUM)
    assert [(c["knobs"], c["state"]) for c in cells] == [({"n_heads": 8}, 1536), ({"n_heads": 6}, 1920)]
    assert all(abs(c["budget"] - 1) <= 0.1 for c in cells)
    assert note == "a step of 1.62 left: no n_heads between holds the budget within 10 %"   # n_heads 5: none holds it
    lo, hi = _row("linear-transformer", {"n_heads": 12}, 480, [0.2] * 3), _row("linear-transformer", {"n_heads": 1},
                                                                                4704, [1.0] * 3)
    cells, note = N.refine(lo, hi, MEDIUM)
    states = [480, *(c["state"] for c in cells), 4704]
    assert states == sorted(states) and states[-2] == 2400                     # n_heads 2: none between 2 and 1
    assert note == "a step of 1.96 left: no n_heads between holds the budget within 10 %"
    assert max(b / a for a, b in zip(states[:-1], states[1:-1])) <= N.RATIO


def test_the_plan_from_the_medium_record_holds_what_the_issue_asks(medium):
    data, rows = medium
    entries, notes = N.propose(rows, data["config"])
    by_tier = {t: [e for e in entries if e["tier"] == t] for t in N.TIERS}
    assert [e["pairs"] for e in by_tier["control"]] == [4, 8, 16]
    refine = {(P.cell_label(e), e["pairs"]) for e in by_tier["refine"]}
    assert refine == {(f"lightnet n_heads={h}", p) for h in (13, 8, 6, 4) for p in (8, 16)}
    assert ("gateloop n_heads=4", 4) in {(P.cell_label(e), e["pairs"]) for e in by_tier["undecided"]}
    assert any("lrnn d_state=128 at 4 pairs (rose at the end): superseded" in n for n in notes)
    sized = {id(e): N.estimate(e, rows, data["runs"], data["config"]) for e in entries}
    for family in ("deltanet", "gated-deltanet"):                              # (e): over 8x at every number of pairs
        for p in (4, 8, 16):
            states = [sized[id(e)]["state"] for e in by_tier["delta"] if e["family"] == family and e["pairs"] == p]
            assert len(states) >= 3 and max(states) / min(states) >= 8, (family, p, states)
    for unit in {e["unit"] for e in by_tier["addition"]}:                      # (b): an addition and a base, 10 %
        pair = [e for e in by_tier["addition"] if e["unit"] == unit]
        if len(pair) == 2:
            a, b = (sized[id(e)]["state"] for e in pair)
            assert abs(a / b - 1) <= 0.1, unit
    names = {e["why"].split(":")[0] for e in by_tier["addition"]}
    assert len(names) == 5
    for name in names:                                                         # each at two sizes or more
        assert len({e["why"] for e in by_tier["addition"] if e["why"].startswith(name)}) >= 2, name
    lrnn = [sized[id(e)] for e in by_tier["state-alone"] if e["family"] == "lrnn" and e["pairs"] == 4]
    assert {s["d_model"] for s in lrnn} == {48} and all(abs(s["budget"] - 1) <= 0.1 for s in lrnn)   # (c)
    assert max(s["state"] for s in lrnn) / min(s["state"] for s in lrnn) >= 8
    long = [e for e in entries if e["profile"] == "frontier-128"]              # (d): 16 pairs, 128 tokens
    assert {e["pairs"] for e in long} == {16} and {e["family"] for e in long} >= {"transformer", "lightnet"}
    assert sized[id(next(e for e in long if e["family"] == "transformer"))]["state"] == 2 * 2 * 48 * 128


def test_the_estimate_counts_each_similar_run_to_its_convergence_at_its_seconds_a_step():
    cfg = {**MEDIUM, "pairs": [4]}
    rows = [_row("gateloop", {"n_heads": 4}, 2704, [0.9] * 3, pairs=4)]
    runs = [{"cell": "gateloop n_heads=4", "pairs": 4, "wall_s": 600.0, "steps": 6000, "steps_to_0.99": s,
             "family": "gateloop"} for s in (3000, None, None, 1500, None)]
    entry = {"family": "gateloop", "group": "state", "knobs": {"n_heads": 3}, "pairs": 4, "profile": "frontier"}
    got = N.estimate(entry, rows, runs, cfg)
    steps = (3000 + 12000 * 3 + 1500) / 5
    assert got["runs"] == 5 and got["steps"] == round(steps) and got["s_per_step"] == 0.1
    assert got["cpu_h"] == pytest.approx(5 * steps * 0.1 / 3600) and got["state"] == 3888
    longer = N.estimate({**entry, "profile": "frontier-128"}, rows, runs, cfg)
    assert longer["s_per_step"] == 0.2                                         # twice the tokens
    reference = [{"cell": "transformer", "family": "transformer", "pairs": 4, "wall_s": 300.0, "steps": 6000}] * 5
    arena = {"width": 48, "runs": [{"family": "deltanet", "state_size": 2000, "d_model": 48, "seq_len": 32,
                                    "wall_s": 90.0, "steps": 3000}],
             "reference_runs": [{"family": "transformer", "d_model": 48, "seq_len": 32, "wall_s": 60.0, "steps": 3000}]}
    delta = N.estimate({**entry, "family": "deltanet", "knobs": {"n_heads": 4}}, rows, runs + reference, cfg, arena)
    assert delta["s_per_step"] == pytest.approx(0.05 * 1.5) and delta["steps"] == 12000      # at the cap
    assert delta["runs"] == 5.0 and "arena deltanet" in delta["similar"]
    timed = N.estimate({**entry, "family": "deltanet", "knobs": {"n_heads": 4}}, rows, runs + reference, cfg, arena,
                       ratios={"deltanet n_heads=4": 3.0})                     # its step timed at 3x the reference's
    assert timed["s_per_step"] == pytest.approx(0.15) and "x 3.00 (their steps timed here)" in timed["similar"]


def test_a_budget_takes_whole_units_in_order_and_always_the_controls():
    cfg = {"pairs": [4, 8]}

    def e(tier, unit, cost, pairs=4, profile="frontier", group="state"):
        return {"tier": tier, "unit": unit, "cpu_h": cost, "pairs": pairs, "profile": profile, "group": group}

    entries = [e("addition", "conv 4", 3, 4), e("addition", "conv 4", 3, 4),
               e("control", "c4", 1, 4, group="reference"),
               e("delta", "d", 5), e("state-alone", "lrnn 4", 1, 4), e("addition", "conv 8", 1, 8),
               e("refine", "r", 2), e("control", "c8", 5, 8, group="reference")]
    chosen, deferred = N.select(entries, 12, cfg)
    assert [x["unit"] for x in chosen] == ["c4", "c8", "r", "lrnn 4", "conv 8"]   # a cheaper unit after one deferred
    assert [x["unit"] for x in deferred] == ["d", "conv 4", "conv 4"]              # the addition with its base, whole
    assert [x["unit"] for x in N.select(entries, 70, cfg)[0]][-5:] == ["d", "conv 4", "conv 4", "lrnn 4", "conv 8"]
    assert [x["unit"] for x in N.select(entries, 1, cfg)[0]] == ["c4", "c8"]       # the controls beyond the budget


def _tool():
    spec = importlib.util.spec_from_file_location("recall_sweep_tool", REPO / "tools" / "recall_sweep.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_tool_prints_the_plan_and_writes_a_profile_the_sweep_plans(tmp_path, capsys):
    tool = _tool()
    out = tool.plan_next(budget=12, write=True, folder=tmp_path, timing=False)
    said = capsys.readouterr().out
    assert "chosen (*): " in said and "CPU-hours (budget 12)" in said and "provenance: 43 of 365 runs" in said
    assert sum(e["cpu_h"] for e in out["chosen"] if e["tier"] != "control") <= 12
    assert out["written"] == [tmp_path / "frontier" / "recall-sweep.toml"]
    plan = experiments.run(R.NAME, profile=str(tmp_path / "frontier"), out=None, dry_run=True)
    cfg = plan["config"]
    assert (cfg["steps"], cfg["stop_at"], cfg["fresh"]) == (12000, 0.99, True)
    assert {(c["cell"], c["pairs"]) for c in plan["plan"]} == {(P.cell_label(e), e["pairs"]) for e in out["chosen"]}
    assert "start: nohup nice -n 5 .venv/bin/python -m seqlab experiment recall-sweep profile=" in said


def test_the_committed_frontier_profile_is_the_plans_and_runs_to_convergence():
    path = REPO / "configs" / "medium" / "frontier"
    plan = experiments.run(R.NAME, profile=str(path), out=None, dry_run=True)
    cfg, cells = plan["config"], plan["plan"]
    assert cfg["steps"] >= 2 * 6000 and cfg["stop_at"] == 0.99 and cfg["fresh"] is True
    assert {c["pairs"] for c in cells if c["group"] == "reference"} == set(cfg["pairs"]) == {4, 8, 16}
    for cell in cells:                                # at the budget within 10 %, or d_model held and said
        assert cell["matched"] == ("d_model" not in cell["knobs"]) and abs(cell["budget"] - 1) <= 0.1, cell
        assert cell["state_per_layer"] * cfg["n_layers"] == cell["state_size"]
    for family in ("deltanet", "gated-deltanet"):             # whole: three sizes over 8x wherever it runs
        at = {c["pairs"] for c in cells if c["family"] == family}
        assert 4 in at
        for p in at:
            states = [c["state_size"] for c in cells if c["family"] == family and c["pairs"] == p]
            assert len(states) >= 3 and max(states) / min(states) >= 8
    for p in (8, 16):                                 # LightNet's bracket refined at 8 and 16 pairs
        states = sorted(c["state_size"] for c in cells if c["family"] == "lightnet" and c["pairs"] == p)
        assert states[0] == 1248 and states[-1] == 3120 and len(states) == 4
        assert math.isclose(max(b / a for a, b in zip(states, states[1:])), 3120 / 1920)


def test_the_steps_of_a_family_the_record_lacks_are_timed_against_the_reference():
    tool = _tool()
    cfg = P.SIZES["quick"]
    entry = {"family": "deltanet", "knobs": {"n_heads": 2}, "pairs": 2, "profile": "frontier"}
    ratios = tool.step_ratios([entry, {**entry, "family": "gateloop"}], [{"family": "gateloop"}], cfg, repeats=1)
    assert list(ratios) == ["deltanet n_heads=2"] and ratios["deltanet n_heads=2"] > 0   # gateloop: on record
