"""What the recall sweep's record says: each family's threshold (the smallest state at which every
seed recalls), the frontier, the effect of each addition against the same cell without it, the figure, and the
section of the results page, all read from run records."""
from __future__ import annotations

import json

import pytest

from seqlab import claims
from seqlab.claims import recall_report
from seqlab.experiments import recall_sweep_plan as P
from seqlab.experiments import recall_sweep_results as RR
from seqlab.viz.recall import recall_vs_state


def _row(family, state, accs, *, group="state", pairs=4, knobs=None, status="done"):
    mean = sum(accs) / len(accs) if accs else None
    spread = (sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) ** 0.5 if len(accs) > 1 else None
    return {"family": family, "cell": f"{family} {state}", "group": group, "knobs": knobs or {"n": state},
            "pairs": pairs, "state_size": state, "d_model": 8, "params": 100, "budget": 1.0, "chosen_lr": 1e-3,
            "lr_at_edge": False, "status": status, "accuracy": list(accs), "mean": mean, "spread": spread,
            "min": min(accs) if accs else None}


def test_a_threshold_is_the_smallest_state_where_every_seed_recalls():
    rows = [_row("gateloop", 100, [0.5, 0.6, 0.4]), _row("gateloop", 400, [0.95, 0.85, 0.97]),
            _row("gateloop", 1600, [0.99, 0.98, 0.99]), _row("gateloop", 6400, [1.0, 1.0, 1.0]),
            _row("lrnn", 50, [0.1, 0.1, 0.1]), _row("lrnn", 200, [0.2], status="seeds pending"),
            _row("lightnet", 300, [], status="searching"),
            _row("gateloop", 50, [0.99, 0.99, 0.99], group="short-conv", knobs={"n": 50, "short_conv": 4})]
    found = RR.thresholds(rows)[4]
    assert found["gateloop"] == {"state": 1600, "sizes": [100, 400, 1600, 6400], "pending": [],   # 400: one seed 0.85
                                 "undecided": []}
    assert found["lrnn"] == {"state": None, "sizes": [50], "pending": [200], "undecided": []}
    assert found["lightnet"] == {"state": None, "sizes": [], "pending": [300], "undecided": []}
    assert RR.thresholds(rows, level=0.8)[4]["gateloop"]["state"] == 400
    assert recall_report.threshold_text(found["gateloop"]) == "1,600"
    assert recall_report.threshold_text(found["lrnn"]) == "none of 50 (1 size pending)"
    assert recall_report.threshold_text(found["lightnet"]) == "pending"


def test_the_frontier_keeps_the_cells_no_smaller_state_beats():
    rows = [_row("a", 100, [0.3] * 3), _row("b", 200, [0.2] * 3), _row("a", 400, [0.6] * 3),
            _row("b", 400, [0.7] * 3), _row("c", 800, [0.5] * 3), _row("t", 1000, [1.0] * 3, group="reference"),
            _row("d", 150, [0.9], status="seeds pending"), _row("a", 100, [0.9] * 3, pairs=8)]
    found = RR.frontier(rows)
    assert [(s, c) for s, _, c in found[4]] == [(100, "a 100"), (400, "b 400"), (1000, "t 1000")]
    assert [a for _, a, _ in found[4]] == pytest.approx([0.3, 0.7, 1.0])
    assert [(s, c) for s, _, c in found[8]] == [(100, "a 100")]


def test_each_addition_is_compared_with_the_same_cell_without_it():
    cfg = P.SIZES["medium"]
    rows = []
    for cell in P.plan_cells(cfg, pairs=[4]):
        acc = {"short-conv": [0.9, 0.92, 0.91], "feature-map": [0.5, 0.505, 0.51]}.get(cell["group"], [0.5, 0.5, 0.5])
        rows.append({**cell, "status": "done", "accuracy": acc, "mean": sum(acc) / 3, "min": min(acc),
                     "spread": 0.01})
    rows[-1] = {**rows[-1], "status": "seeds pending"}                          # the last cell: LightNet without TPE
    found = {(e["cell"], e["group"]): e for e in RR.effects(rows)}
    based = "linear-transformer feature_dim=8 feature_map=taylor n_heads=4 short_conv=4"
    assert found[(based, "feature-map")]["base"] == "linear-transformer n_heads=4 short_conv=4"   # its second addition
    assert found[(based, "feature-map")]["verdict"] == "tie"                                  # 0.91 against 0.91
    found = {c: e for (c, g), e in found.items() if (c, g) != (based, "feature-map")}
    assert {c: e["base"] for c, e in found.items()} == {
        "linear-transformer feature_dim=4 feature_map=taylor n_heads=4": "linear-transformer n_heads=4",
        "linear-transformer feature_dim=8 feature_map=taylor n_heads=4": "linear-transformer n_heads=4",
        "gateloop n_heads=4 short_conv=4": "gateloop n_heads=4",
        "linear-transformer n_heads=4 short_conv=4": "linear-transformer n_heads=4",
        "lrnn d_model=174 d_state=48 short_conv=4": "lrnn d_state=48",
        "linear-transformer feature_dim=8 feature_map=taylor n_heads=4 short_conv=4":
            "linear-transformer feature_dim=8 feature_map=taylor n_heads=4",
        "lightnet n_heads=4 tpe=False": "lightnet n_heads=4"}
    assert found["gateloop n_heads=4 short_conv=4"]["verdict"] == "higher"
    assert found["gateloop n_heads=4 short_conv=4"]["difference"] == pytest.approx(0.41)
    assert found["linear-transformer feature_dim=8 feature_map=taylor n_heads=4"]["verdict"] == "tie"   # 0.005 < 0.02
    assert found["lightnet n_heads=4 tpe=False"]["verdict"] == "pending"
    assert RR.compare({"mean": 0.5, "spread": 0.0}, {"mean": 0.52, "spread": 0.0}) == "lower"
    assert RR.compare({"mean": 0.5, "spread": 0.0}, {"mean": 0.505, "spread": 0.0}) == "tie"     # under 0.01


def test_the_figure_has_a_panel_per_number_of_pairs_and_marks_what_is_unfinished():
    rows = [_row("transformer", 5000, [1.0, 1.0, 1.0], group="reference", knobs={}),
            _row("gateloop", 100, [0.2, 0.3, 0.25]), _row("gateloop", 400, [0.5, 0.7, 0.6]),
            _row("gateloop", 1600, [0.9], status="seeds pending"),
            _row("gateloop", 400, [0.8, 0.85, 0.9], group="short-conv", knobs={"n": 400, "short_conv": 4}),
            _row("gateloop", 100, [0.1, 0.1, 0.1], pairs=16), _row("gateloop", 400, [], pairs=16, status="searching")]
    fig = recall_vs_state(rows, frontier=RR.frontier(rows))
    assert [a.text for a in fig.layout.annotations][:2] == ["4 key-value pairs", "16 key-value pairs"]
    line = next(t for t in fig.data if t.name == "gateloop" and t.xaxis == "x")
    assert list(line.x) == [100, 400, 1600] and line.y[1] == pytest.approx(0.6)
    assert list(line.marker.symbol) == ["circle", "circle", "circle-open"]
    conv = next(t for t in fig.data if t.name == "gateloop (short conv)")
    assert conv.marker.symbol == ("diamond",) and conv.error_y.array[0] == pytest.approx(0.05)
    frontier = [t for t in fig.data if t.name == "frontier"]
    assert [list(t.x) for t in frontier] == [[100, 400, 5000], [100]]
    assert sum(s.type == "line" for s in fig.layout.shapes) == 2                 # the 0.9 line in each panel


def _sweep_run(cell, seed, lr, acc, cfg):
    task = cfg["mqar"]
    return {**{k: cell[k] for k in ("family", "cell", "group", "knobs", "pairs", "d_model", "params", "target_params",
                                     "budget", "state_size")},
            "seed": seed, "lr": lr, "validation_accuracy": acc, "accuracy": acc, "seq_len": task["seq_len"],
            "vocab_size": task["vocab_size"], "filler": task["filler"], "train_size": cfg["train_size"],
            "width": cfg["width"], "steps": cfg["steps"]}


def test_the_results_page_shows_the_sweep_as_its_record_stands(tmp_path):
    cfg = {**P.SIZES["quick"], "seeds": 2, "lrs": [1e-3, 3e-3, 1e-2]}
    plan = P.plan_cells(cfg, ["transformer", "gateloop"], [2])
    ref, gl = plan[0], next(c for c in plan if c["knobs"] == {"n_heads": 2})
    runs = [_sweep_run(ref, 0, lr, a, cfg) for lr, a in ((1e-3, 0.95), (3e-3, 1.0), (1e-2, 0.2))]
    runs += [_sweep_run(ref, 1, 3e-3, 0.995, cfg)]
    runs += [_sweep_run(gl, 0, lr, a, cfg) for lr, a in ((1e-3, 0.4), (3e-3, 0.6), (1e-2, 0.3))]
    runs[1]["answers"] = {"by_pair": [[10, 10], [10, 10]], "wrong": 0, "another_value": 0}
    runs[3]["answers"] = {"by_pair": [[9, 10], [8, 10]], "wrong": 3, "another_value": 2}
    runs[5]["answers"] = {"by_pair": [[5, 10], [7, 10]], "wrong": 8, "another_value": 2}     # seeds pending: not shown
    (tmp_path / "arena").mkdir()
    record = recall_report.sweep_file(tmp_path)
    record.write_text(json.dumps({"config": cfg, "runs": runs}))
    page = claims.render_readme({"claims": []}, notes_dir=tmp_path / "notes")
    section = page[page.index("## The recall sweep"):]
    assert "**Not finished: 7 runs, 1 of " in section
    assert "| 2 | 1.000 / 0.995 (0.99) | learned |" in section
    assert f"| 2 | gateloop n_heads=2 | {gl['d_model']} |" in section
    assert "| 0.001: 0.400, 0.003: 0.600, 0.01: 0.300 | 0.003 | 0.600 | 0.600 | seeds pending |" in section
    assert "| gateloop | pending | pending |" in section
    assert "| 2 | transformer | " in section and " | 0.95 / 0.90 | 0.67 |" in section       # both seeds, summed
    assert section.count("another pair's value |") == 1 and " | 0.50 / 0.70 |" not in section
    assert "![" not in section
    record.with_suffix(".png").write_bytes(b"png")
    assert f"![{recall_report.FIGURE_TITLE}](arena/recall-sweep-medium.png)" in claims.render_readme(
        {"claims": []}, notes_dir=tmp_path / "notes")
    assert "## The recall sweep" not in claims.render_readme({"claims": []}, notes_dir=tmp_path / "elsewhere" / "x")
    small = {**cfg, "pairs": [2], "cells": [{"family": c["family"], "group": c["group"], "knobs": c["knobs"]}
                                            for c in (ref, gl)]}
    record.write_text(json.dumps({"config": small, "runs": runs + [_sweep_run(gl, 1, 3e-3, 0.62, cfg)]}))
    done = claims.render_readme({"claims": []}, notes_dir=tmp_path / "notes")
    assert "**Finished: 8 runs, all 2 cells.**" in done and "Not finished" not in done


def test_a_cells_answers_sum_its_seeds_at_the_chosen_rate_and_wait_for_every_seed():
    row = _row("gateloop", 100, [0.8, 0.6], pairs=2)
    runs = [{"cell": row["cell"], "pairs": 2, "lr": 1e-3, "seed": s, "answers": a} for s, a in
            ((0, {"by_pair": [[9, 10], [7, 10]], "wrong": 4, "another_value": 3}),
             (1, {"by_pair": [[6, 10], [6, 10]], "wrong": 8, "another_value": 3}))]
    runs.append({"cell": row["cell"], "pairs": 2, "lr": 3e-3, "seed": 0, "answers": {"by_pair": [[0, 10], [0, 10]],
                 "wrong": 20, "another_value": 0}})                                 # another rate: not counted
    assert RR.answers(row, runs) == {"by_pair": [0.75, 0.65], "wrong": 12, "another_value": 0.5}
    assert RR.answers(row, runs[:1]) is None                                          # a seed missing
    assert RR.answers(row, [runs[0], {**runs[1], "answers": None}]) is None           # a seed without answers
    assert RR.answers({**row, "status": "seeds pending"}, runs) is None


def test_the_step_benchmark_times_each_cell_and_counts_the_runs_its_record_lacks(capsys, tmp_path, monkeypatch):
    """benchmarks/recall_sweep.py on the quick plan (no time is asserted, only what the table says)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "recall_sweep.py"
    spec = importlib.util.spec_from_file_location("bench_recall_sweep", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    row = _row("gateloop", 100, [])
    assert module.runs_lacking({**row, "status": "searching", "searched": {}}) == 5
    assert module.runs_lacking({**row, "status": "seeds pending", "searched": {"0.001": 0.1, "0.003": 0.2,
                                                                             "0.01": 0.1, "0.03": 0.0}}) == 2
    assert module.runs_lacking({**row, "status": "done", "searched": {}}) == 0
    monkeypatch.setattr(module.R, "default_out", lambda profile: tmp_path / "no-record.json")   # nothing run yet
    assert module.main(["--profile", "quick", "--families", "transformer", "gateloop", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split("  ")[0].strip(): line.split() for line in lines[3:-1]}
    assert list(rows) == ["transformer", "gateloop n_heads=26", "gateloop n_heads=2", "gateloop n_heads=1",
                          "gateloop n_heads=2 short_conv=4"]
    assert rows["transformer"][-3:-1] == ["1.00", "10"]                  # 5 runs at each of the 2 numbers of pairs
    assert all(r[-2] == "10" for r in rows.values())
    assert lines[-1].startswith("lacking over every number of pairs: at least 50 runs")


# ----------------------------------------------------------------------------------------------- still learning


def test_no_does_not_recall_rests_on_a_seed_still_learning_at_the_cap():
    stuck = _row("gateloop", 100, [0.5, 0.6, 0.4])
    rising = {**_row("gateloop", 400, [0.95, 0.85, 0.97]), "still_learning": [1]}      # seed 1 missed, rising
    fine = {**_row("gateloop", 1600, [0.99, 0.5, 0.99]), "still_learning": [0]}        # the rising seed recalled
    top = _row("gateloop", 6400, [1.0, 1.0, 1.0])
    found = RR.thresholds([stuck, rising, fine, top])[4]["gateloop"]
    assert found == {"state": 6400, "sizes": [100, 1600, 6400], "pending": [], "undecided": [400]}
    assert recall_report.threshold_text(found) == "6,400 (undecided: 400, still learning)"
    assert recall_report.threshold_text({"state": None, "sizes": [], "pending": [], "undecided": [400]}) == \
        "(undecided: 400, still learning)"
    conv = {**_row("gateloop", 420, [0.99, 0.99, 0.99], group="short-conv", knobs={"n": 400, "short_conv": 4})}
    base = {**rising, "knobs": {"n": 400}}
    effect = RR.effects([conv, base])[0]
    assert effect["verdict"] == "undecided" and effect["difference"] == pytest.approx(0.0667, abs=1e-3)
    assert RR.effects([conv, {**base, "still_learning": []}])[0]["verdict"] == "higher"
    cfg = {"threshold": 0.99, "stop_at": 0.99}
    control = _row("transformer", 5000, [0.985, 0.999, 0.5], group="reference", knobs={})
    assert P.control_verdicts([{**control, "still_learning": [2]}], cfg)["4"]["verdict"] == \
        "undecided: the control was still learning at the cap"
    assert P.control_verdicts([control], cfg)["4"]["verdict"] == "inconclusive: the control did not learn"
    # seeds stopped at their first validation accuracy of 0.99 learned, whichever side of 0.99 the test split fell
    assert P.control_verdicts([{**control, "accuracy": [0.985, 0.999, 0.992], "converged": [0, 1, 2]}],
                              cfg)["4"]["verdict"] == "learned"
    assert P.control_verdicts([{**control, "accuracy": [0.985, 0.999, 0.992], "converged": [0, 1, 2]}],
                              {"threshold": 0.99})["4"]["verdict"] == "inconclusive: the control did not learn"


def test_an_addition_is_also_compared_with_the_base_nearest_its_state_within_ten_percent():
    rows = [_row("gateloop", 2704, [0.6, 0.7, 0.65], knobs={"n_heads": 4}),
            _row("gateloop", 3888, [0.7, 0.72, 0.71], knobs={"n_heads": 3}),
            _row("gateloop", 4212, [0.99, 0.98, 0.99], group="short-conv", knobs={"n_heads": 3, "short_conv": 4}),
            _row("gateloop", 3016, [0.99, 0.99, 0.99], group="short-conv", knobs={"n_heads": 4, "short_conv": 4}),
            _row("linear-transformer", 2400, [0.25] * 3, knobs={"n_heads": 2}),
            _row("linear-transformer", 2352, [0.25, 0.26, 0.24], group="feature-map",
                 knobs={"n_heads": 4, "feature_map": "taylor", "feature_dim": 4})]
    found = {e["cell"]: e for e in RR.matched_effects(rows)}
    assert set(found) == {"gateloop 4212", "linear-transformer 2352"}          # 3016: 1.115 x 2704, none within 10 %
    assert found["gateloop 4212"]["base"] == "gateloop 3888" and found["gateloop 4212"]["ratio"] == 1.0833
    assert found["gateloop 4212"]["verdict"] == "higher" and found["linear-transformer 2352"]["verdict"] == "tie"
    assert [e["base"] for e in RR.effects(rows)] == ["gateloop 3888", "gateloop 2704"]      # same knobs: as before


def test_the_figure_marks_a_cell_still_learning_and_says_each_state_per_layer():
    from seqlab.viz.recall import STILL_LEARNING_LABEL

    rows = [{**_row("gateloop", 100, [0.2, 0.3, 0.25]), "state_per_layer": 50},
            {**_row("gateloop", 400, [0.5, 0.7, 0.6]), "still_learning": [1], "no_commit": [0], "state_per_layer": 200,
             "protocol": "to convergence, fresh data"}]
    fig = recall_vs_state(rows)
    line = next(t for t in fig.data if t.name == "gateloop")
    assert list(line.marker.symbol) == ["circle", "circle-open-dot"]
    assert "state 400 floats (200 a layer)" in line.hovertext[1] and "still learning at the cap: seed 1" in \
        line.hovertext[1] and "no commit recorded: seed 0" in line.hovertext[1]
    legend = [t for t in fig.data if t.name == STILL_LEARNING_LABEL]
    assert len(legend) == 1 and legend[0].marker.symbol == "circle-open-dot"
    assert not [t for t in recall_vs_state(rows[:1]).data if t.name == STILL_LEARNING_LABEL]


def test_the_results_page_says_the_protocol_and_marks_each_cells_provenance(tmp_path):
    cfg = {**P.SIZES["quick"], "seeds": 2, "lrs": [3e-3], "steps": 12000, "stop_at": 0.99, "fresh": True}
    plan = P.plan_cells(cfg, ["transformer", "gateloop"], [2])
    ref, gl = plan[0], next(c for c in plan if c["knobs"] == {"n_heads": 2})
    proto = {"stop_at": 0.99, "data": "fresh", "commit": "abc", "dirty": False}
    runs = [{**_sweep_run(ref, s, 3e-3, 0.995, cfg), **proto, "stopped": "converged", "stop_step": 900}
            for s in (0, 1)]
    runs += [{**_sweep_run(gl, 0, 3e-3, 0.5, cfg), **proto, "stopped": "cap", "stop_step": 12000,
              "still_learning": True},
             {**_sweep_run(gl, 1, 3e-3, 0.6, cfg), "stop_at": 0.99, "data": "fresh", "stopped": "cap",
              "stop_step": 12000, "dirty": True}]                                   # no commit, changed code
    (tmp_path / "arena").mkdir()
    recall_report.sweep_file(tmp_path).write_text(json.dumps({"config": cfg, "runs": runs}))
    page = claims.render_readme({"claims": []}, notes_dir=tmp_path / "notes")
    section = page[page.index("## The recall sweep"):]
    assert ("up to 12000 steps (a run stops at the first evaluation reaching 0.99 validation accuracy) of batch"
            in section)
    assert "training sequences drawn fresh at every step" in section
    assert "Of the 4 runs, 1 recorded no commit and 1 ran changed code" in section
    assert "| done | still learning: seed 0; no commit: seed 1; dirty: seed 1 |" in section
    row = next(line for line in section.splitlines() if line.startswith("| gateloop | "))
    assert "undecided: " in row and "none of" not in row                       # seed 0 missed, still rising
