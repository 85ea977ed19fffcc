"""seqlab.claims and ``python -m seqlab reproduce``: the verdict rule, the claims as data, every claim run end to end at
the tiny sizes of ``tests/tiny_profile/`` (seconds), resuming, skipping, the results page, the medium sizes."""
import json
import math

import pytest
from helpers import TESTS

from seqlab import claims, experiments, train
from seqlab.__main__ import main
from seqlab.experiments import _common

TINY = str(TESTS / "tiny_profile")


# --------------------------------------------------------------------------------------------- the verdict rule


def test_reproduced_needs_a_margin_of_twice_the_larger_spread():
    # means 0.35 vs 0.22; sample stds 0.01 and 0.02: margin 0.04 < gap 0.13
    assert claims.verdict([0.34, 0.35, 0.36], [0.20, 0.22, 0.24]) == "reproduced"
    # the same gap, a spread of 0.1: the direction holds, not the margin
    assert claims.verdict([0.25, 0.35, 0.45], [0.20, 0.22, 0.24]) == "partly"
    assert claims.verdict([0.20, 0.22, 0.24], [0.34, 0.35, 0.36]) == "not reproduced"
    assert claims.verdict([0.3, 0.3, 0.3], [0.3, 0.3, 0.3]) == "not reproduced"      # a tie is no win
    assert claims.verdict([1.0, 1.0, 1.0], [0.17, 0.2, 0.18]) == "reproduced"        # no spread in one arm


def test_the_margin_is_exactly_twice_the_sample_std():
    worse = [0.0, 0.0, 0.0]
    better = [0.9, 1.0, 1.1]            # sample std 0.1: the margin is 0.2
    assert claims.verdict(better, worse) == "reproduced"                           # gap 1.0
    assert claims.verdict([b - 0.81 for b in better], worse) == "partly"             # gap 0.19 < 0.2
    assert claims.verdict([b - 0.79 for b in better], worse) == "reproduced"         # gap 0.21 > 0.2


def test_lower_is_better_turns_the_comparison_around():
    steps_better, steps_worse = [100, 110, 120], [300, 310, 290]
    assert claims.verdict(steps_better, steps_worse, higher_is_better=False) == "reproduced"
    assert claims.verdict(steps_worse, steps_better, higher_is_better=False) == "not reproduced"
    assert claims.verdict([100, 110, 300], [300, 310, 290], higher_is_better=False) == "partly"


def test_a_censored_better_arm_is_at_most_partly():
    """A run that never reached its target records its budget: a bound, not a measurement."""
    better, worse = [100, 110, 600], [600, 600, 600]
    assert claims.verdict(better[:2] + [120], worse, higher_is_better=False) == "reproduced"
    assert claims.verdict(better, worse, higher_is_better=False, better_censored=[False, False, True]) == "partly"
    # censored runs of the rival only make the comparison conservative
    assert claims.verdict([100, 110, 120], worse, higher_is_better=False, better_censored=[False] * 3) == "reproduced"
    both_never = claims.verdict([600] * 3, [600] * 3, higher_is_better=False, better_censored=[True] * 3)
    assert both_never == "not reproduced"


def test_verdict_refuses_empty_arms_and_a_single_seed_has_no_spread():
    with pytest.raises(ValueError, match="verdict: expected at least one value per arm"):
        claims.verdict([], [0.1])
    assert claims.verdict([0.5], [0.4]) == "reproduced"


def test_the_strongest_rival_is_the_best_mean_in_the_metrics_direction():
    arms = {"a": [0.9, 0.9], "b": [0.5, 0.6], "c": [0.7, 0.8], "d": [0.7, 0.8]}
    assert claims.strongest_rival(arms, ("b", "c", "d")) == "c"                      # ties: the first named
    assert claims.strongest_rival(arms, ("b", "c", "d"), higher_is_better=False) == "b"


# --------------------------------------------------------------------------------------------- the claims as data


def test_the_eight_claims():
    assert list(claims.CLAIMS) == ["causalrn-copying", "causalrn-activation", "causalrn-copying-speed", "fst-digits",
                                   "fst-alpha-depth", "lightnet-one-scan", "lightnet-ablation",
                                   "gateloop-memory-horizon"]
    for claim in claims.CLAIMS.values():
        assert set(claim.paper_values) == set(claim.arms), claim.id
        assert claim.better not in claim.rivals and claim.rivals
        assert claim.stand_in and claim.paper_data and claim.paper and claim.statement and claim.metric
        assert isinstance(claim.table(), experiments.Sizes)
    assert claims.CLAIMS["causalrn-copying-speed"].censored and not claims.CLAIMS["fst-digits"].censored
    assert not claims.CLAIMS["causalrn-copying-speed"].higher_is_better


def test_unknown_ids_get_a_suggestion(capsys):
    with pytest.raises(ValueError, match=r"unknown id 'gateloop-memory'; did you mean 'gateloop-memory-horizon'\?"):
        claims.get("gateloop-memory")
    assert main(["reproduce", "causalrn-copyng", "--profile", TINY]) == 2
    assert "did you mean 'causalrn-copying'?" in capsys.readouterr().err


@pytest.mark.parametrize("claim_id", list(claims.CLAIMS))
def test_every_claim_has_medium_sizes_with_a_validation_split(claim_id):
    """The medium sizes are read from configs/medium/ (not quick's) and every trained task gets a validation split."""
    claim = claims.CLAIMS[claim_id]
    path = _common.MEDIUM_DIR / f"{claim.experiment}.toml"
    assert path.is_file(), f"{claim_id}: no {path}"
    medium, quick = claim.sizes("medium"), claim.table().quick
    assert medium != quick and set(quick) <= set(medium)
    if "steps" in quick:                    # a timing has none
        assert medium["steps"] >= quick["steps"]
    if claim_id != "lightnet-one-scan":     # a timing: nothing is trained, no split to watch
        task = medium.get("task_config") or {}
        assert medium.get("validation_size") or task.get("validation_fraction") or task.get("validation_size")


# --------------------------------------------------------------------------------------------- end to end, tiny


def _check_record(record: dict, claim: claims.Claim, seeds: int = 3) -> None:
    assert set(claims.FIELDS) <= set(record)
    assert record["id"] == claim.id and record["profile"] == "tiny_profile" and record["better"] == claim.better
    assert record["worse"] == claims.strongest_rival(record["arms"], claim.rivals, claim.higher_is_better)
    assert set(record["arms"]) == set(claim.arms) and all(len(v) == seeds for v in record["arms"].values())
    censored = record.get("censored", {}).get(claim.better, ())
    compared = claims.verdict(record["arms"][claim.better], record["arms"][record["worse"]],
                              higher_is_better=claim.higher_is_better, better_censored=censored)
    if claim.control is None:
        assert "control" not in record and record["verdict"] == compared
    else:                                   # a control that missed in one seed: the arms are not compared
        control = record["control"]
        assert control["arm"] == claim.control.arm and len(control["values"]) == seeds
        assert control["passed"] == all(v >= claim.control.threshold for v in control["values"])
        assert record["verdict"] == (compared if control["passed"] else claims.INCONCLUSIVE)
    _check_rates(record, claim)
    assert record["seeds"] == list(range(seeds)) and record["wall_s"] >= 0
    assert {"cpu", "cores", "torch"} <= set(record["machine"])
    assert record["command"].startswith("python -m seqlab reproduce " + claim.id)
    assert len(record["runs"]) == seeds
    for runs in record["runs"]:                         # every trained run: its start, its curve, its thresholds
        assert (runs == []) == (claim.id == "lightnet-one-scan")     # a timing trains nothing
        for run in runs:
            assert abs(run["initial_loss"] - math.log(run["num_targets"])) <= train.INITIAL_LOSS_TOLERANCE
            assert run["curve"][0][0] == 0 and len(run["curve"]) >= 2
            assert {"steps_to_0.9", "steps_to_0.99", "name", "task"} <= set(run)
    if claim.censored:
        assert set(record["censored"]) == set(claim.arms)
        for arm, flags in record["censored"].items():     # a censored run records its budget
            assert all(v == record["sizes"]["steps"] for v, c in zip(record["arms"][arm], flags) if c)


def _check_rates(record: dict, claim: claims.Claim) -> None:
    """Each arm's rate chosen on seed 0 strictly inside a grid of at least three (or at its edge, said so); a claim
    with nothing trained to compare says why it runs at one rate."""
    if claim.one_rate is not None:
        assert record["rate_search"] is None and record["one_rate"] == claim.one_rate
        return
    assert set(record["rate_search"]) == set(claim.arms)
    for arm, search in record["rate_search"].items():
        grid = search["lr_grid"]
        assert len(grid) >= 3 and grid == sorted(grid) and search["chosen_lr"] in grid
        assert search["key"] == claim.rate_key(arm, record["sizes"])
        assert search["at_edge"] == (search["chosen_lr"] in (grid[0], grid[-1]))
        assert search["at_edge"] <= (len(grid) >= 3 + claims.run.MAX_EXTENSIONS)      # an edge only once the extensions ran out
        assert search["extended"] == (len(grid) > 3)


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    records = claims.reproduce(profile=TINY, out=out, progress=False)
    return out, records


def test_every_claim_runs_end_to_end_at_tiny_sizes(tiny_results):
    out, records = tiny_results
    assert [r["id"] for r in records] == list(claims.CLAIMS)
    for record in records:
        _check_record(record, claims.CLAIMS[record["id"]])
        assert json.loads((out / f"{record['id']}.json").read_text()) == record
        assert (out / record["figure"]).is_file()
        assert any((out / ".runs" / "tiny_profile" / record["id"] / "seed2").rglob("result.json"))   # kept
    gathered = json.loads((out / "claims.json").read_text())
    assert [r["id"] for r in gathered["claims"]] == list(claims.CLAIMS)
    page = (out / "README.md").read_text()
    assert all(f"| `{cid}` |" in page for cid in claims.CLAIMS) and "not run yet" not in page


def test_a_claim_done_in_this_profile_is_skipped_and_redo_runs_it_again(tiny_results, monkeypatch):
    out, records = tiny_results
    record = next(r for r in records if r["id"] == "gateloop-memory-horizon")
    claim = claims.CLAIMS["gateloop-memory-horizon"]

    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(claims.Claim, "run", no_training)
    assert claims.reproduce_claim(claim.id, profile=TINY, out=out, progress=False) == record
    monkeypatch.undo()
    again = claims.reproduce_claim(claim.id, profile=TINY, out=out, redo=True, progress=False)
    assert again["arms"] == record["arms"]           # same seeds, same profile: the same accuracies, bit for bit


def test_an_interrupted_claim_resumes_from_its_kept_seeds(tmp_path, monkeypatch):
    """A claim stopped in its second run keeps the first; the same call again runs only what is left."""
    claim = claims.CLAIMS["causalrn-copying"]
    calls = []

    one_seed = claims.Claim.run

    def run(self, seed, rates=None, **kw):
        calls.append((seed, json.dumps(rates)))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return one_seed(self, seed, rates=rates, **kw)

    monkeypatch.setattr(claims.Claim, "run", run)
    with pytest.raises(KeyboardInterrupt):
        claims.reproduce_claim(claim.id, profile=TINY, out=tmp_path, progress=False)
    folder = tmp_path / ".runs" / "tiny_profile" / claim.id
    assert (folder / "seed0" / "rate-1" / "result.json").is_file()
    assert (folder / "seed0" / "rate+0" / "interrupted_s.json").is_file()
    record = claims.reproduce_claim(claim.id, profile=TINY, out=tmp_path, progress=False)
    assert calls[2] == calls[1] and calls[0] not in calls[1:] and len(calls) == len(set(calls)) + 1
    assert len(record["arms"]["causalrn"]) == 3


def test_the_search_extends_past_an_edge_and_stops_after_max_extensions_steps():
    grid = claims.run.search_grid
    assert grid({}) == [-1, 0, 1]
    assert grid({-1: 0.1, 0: 0.5, 1: 0.3}) == [-1, 0, 1]                    # best inside: done
    assert grid({-1: 0.1, 0: 0.2, 1: 0.3}) == [-1, 0, 1, 2]                 # best at the top: one more above
    assert grid({-1: 0.1, 0: 0.2, 1: 0.3, 2: 0.25}) == [-1, 0, 1, 2]
    falling = {-1: 0.5, 0: 0.2, 1: 0.3, -2: 0.6, -3: 0.7, -4: 0.8, -5: 0.9}
    assert grid(falling) == [-3, -2, -1, 0, 1]                             # MAX_EXTENSIONS (2) at most
    assert grid({-1: 1.0, 0: 1.0, 1: 1.0}) == [-1, 0, 1]                    # a tie goes inside
    assert grid({-1: 0.3, 0: 0.5, 1: float("-inf")}) == [-1, 0, 1]          # a diverged rate ranks last


def _fake_run(best_k: dict, calls: list):
    """A claim's run without training: each arm's validation value peaks at its rate ``best_k[arm]`` (x3**k), and
    its test value names the rate it was read at."""
    base = claims.CLAIMS["causalrn-copying"].sizes(TINY)["lr"]

    def run(self, seed, *, rates=None, **kw):
        k = round(math.log(rates["lr"] / base, 3))
        calls.append((seed, k))
        return {"values": {arm: 10 * seed + k for arm in self.arms},
                "validation": {arm: 1.0 - abs(k - best_k[arm]) / 10 for arm in self.arms},
                "control": 1.0}
    return run


def test_each_arm_runs_at_its_own_chosen_rate_read_from_that_rates_run(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(claims.Claim, "run", _fake_run({"causalrn": 0, "linear-causalrn": 2}, calls))
    record = claims.reproduce_claim("causalrn-copying", profile=TINY, out=tmp_path, progress=False)
    # seed 0: the grid, then 2 and 3 (the linear arm's best at the top twice); seeds 1 and 2 at k = 0 and 2 only
    assert calls == [(0, -1), (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 2), (2, 0), (2, 2)]
    assert record["arms"] == {"causalrn": [0, 10, 20], "linear-causalrn": [2, 12, 22]}
    search = record["rate_search"]
    assert search["causalrn"]["lr_grid"] == [0.00333, 0.01, 0.03] and search["causalrn"]["chosen_lr"] == 0.01
    assert search["linear-causalrn"]["lr_grid"] == [0.00333, 0.01, 0.03, 0.09, 0.27]
    assert search["linear-causalrn"]["chosen_lr"] == 0.09 and search["linear-causalrn"]["extended"]
    assert not search["linear-causalrn"]["at_edge"] and record["verdict"] == "not reproduced"


def test_a_control_that_missed_in_one_seed_makes_the_claim_inconclusive():
    claim = claims.CLAIMS["causalrn-copying"]
    seeds = [{"values": {"causalrn": 1.0, "linear-causalrn": 0.2}, "control": c} for c in (1.0, 0.98, 1.0)]
    record = claims.summarize(claim, [0, 1, 2], seeds)
    assert record["verdict"] == claims.INCONCLUSIVE and record["control"]["values"] == [1.0, 0.98, 1.0]
    assert not record["control"]["passed"]
    for seed in seeds:
        seed["control"] = 0.995
    assert claims.summarize(claim, [0, 1, 2], seeds)["verdict"] == "reproduced"


def test_the_quick_profile_runs_one_rate_and_a_search_needs_a_validation_split():
    assert not claims.run.searched(claims.CLAIMS["fst-digits"], "quick")
    assert claims.run.searched(claims.CLAIMS["fst-digits"], "medium")
    assert not claims.run.searched(claims.CLAIMS["fst-alpha-depth"], "medium")
    with pytest.raises(ValueError, match="validation split"):
        claims.run._score(claims.CLAIMS["fst-digits"], {"validation": {"fst": None}}, "fst")


def test_a_record_at_other_sizes_is_not_skipped(tiny_results, tmp_path):
    """A record whose sizes are not the profile's any more runs again, and its kept runs say --redo."""
    out, _ = tiny_results
    stale = tmp_path / "fst-alpha-depth.json"
    record = json.loads((out / "fst-alpha-depth.json").read_text())
    stale.write_text(json.dumps({**record, "sizes": {**record["sizes"], "steps": 2}}))
    claims._check_runs_folder(tmp_path / ".runs" / "tiny_profile" / "fst-alpha-depth", {"steps": 2})
    with pytest.raises(ValueError, match="holds runs at other sizes"):
        claims.reproduce_claim("fst-alpha-depth", profile=TINY, out=tmp_path, progress=False)


def test_runs_kept_at_other_sizes_are_refused(tmp_path):
    folder = tmp_path / "runs"
    claims._check_runs_folder(folder, {"steps": 3})
    claims._check_runs_folder(folder, {"steps": 3})
    with pytest.raises(ValueError, match=r"other sizes \(steps: 3 there, 4 now\); pass --redo"):
        claims._check_runs_folder(folder, {"steps": 4})


def test_cli_reproduce_prints_a_summary_and_writes_the_record(tmp_path, capsys):
    args = ["reproduce", "lightnet-one-scan", "fst-alpha-depth", "--profile", TINY, "--out", str(tmp_path),
            "--seeds", "2", "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "lightnet-one-scan" in out and "fst-alpha-depth" in out and "verdict" in out
    record = json.loads((tmp_path / "fst-alpha-depth.json").read_text())
    _check_record(record, claims.CLAIMS["fst-alpha-depth"], seeds=2)
    assert record["command"].endswith("--seeds 2")
    assert main(["reproduce", "fst-digits", "--seeds", "0", "--profile", TINY, "--out", str(tmp_path)]) == 2
    assert "seeds: expected a positive int, got 0" in capsys.readouterr().err


def test_the_results_page_shows_claims_not_run_yet(tmp_path):
    page = claims.render_readme({"claims": []}, notes_dir=tmp_path)
    for cid in claims.CLAIMS:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{cid}` |"))
        assert "not run yet" in row
    (tmp_path / "fst-digits.md").write_text("Tried 800 and 1000 steps.\n")
    assert "Tried 800 and 1000 steps." in claims.render_readme({"claims": []}, notes_dir=tmp_path)


def test_the_committed_results_page_is_the_rendering_of_claims_json():
    """results/README.md is generated: it must equal the rendering of results/claims.json (and link from README)."""
    results = claims.RESULTS_DIR
    gathered = json.loads((results / "claims.json").read_text())
    assert (results / "README.md").read_text() == claims.render_readme(gathered)
    assert all(r["profile"] == "medium" for r in gathered["claims"])
    assert "results/README.md" in (results.parent / "README.md").read_text()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the thread rule is for CPU runs")
def test_claims_run_on_one_math_thread_even_after_a_numba_kernel():
    """Numba's OpenMP pool, launched by its first kernel, resets OpenMP's thread count (torch's too): inside
    one_math_thread the pool is launched first, so torch stays on one thread whatever runs."""
    import torch

    from seqlab.ops import gateloop

    before = torch.get_num_threads()
    q, a = torch.randn(2, 3, 16, 1), torch.rand(2, 3, 16, 1) * 0.9
    with claims.one_math_thread():
        assert torch.get_num_threads() == 1
        gateloop(q, q, q, a, mode="numba")
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_lesson_table_reads_the_medium_record_and_names_the_full_run(tmp_path, capsys):
    from seqlab import claims as C

    record = {"id": "gateloop-memory-horizon", "better": "data_controlled", "worse": "fixed", "seeds": [0, 1, 2],
              "metric": "test accuracy", "mean": {"data_controlled": 0.25, "fixed": 0.18},
              "std": {"data_controlled": 0.01, "fixed": 0.002}, "verdict": "reproduced"}
    path = tmp_path / "claims.json"
    path.write_text(json.dumps({"claims": [record]}))
    rows = C.lesson_table(["gateloop-memory-horizon", "fst-digits"], {"gateloop-memory-horizon": "0.14 vs 0.11"},
                          path=path)
    assert rows[0]["verdict"] == "reproduced" and "0.250 ± 0.010" in rows[0]["medium"]
    assert rows[0]["here"] == "0.14 vs 0.11" and rows[0]["full"].endswith("gateloop-memory-horizon --seeds 3")
    assert rows[1]["medium"] == "not run yet" and rows[1]["here"] == "—"
    assert "0.430" in rows[0]["paper_value"]                    # the paper's number, from the claim itself
    assert "reproduced" in capsys.readouterr().out
    with pytest.raises(ValueError, match="here"):
        C.lesson_table(["fst-digits"], {"gateloop-memory-horizon": "x"}, path=path)


def test_without_a_browser_a_claims_figure_is_its_plotly_json(tmp_path, monkeypatch, capsys):
    """No Chromium: the figure is written as JSON at once (kaleido alone would wait forever)."""
    from seqlab.claims import figures
    from seqlab.viz import nbstate

    monkeypatch.setattr(nbstate, "browser_found", lambda: False)
    record = json.loads((claims.RESULTS_DIR / "gateloop-memory-horizon.json").read_text())
    assert figures.save_claim_figure(record, tmp_path) == "gateloop-memory-horizon.plotly.json"
    assert json.loads((tmp_path / "gateloop-memory-horizon.plotly.json").read_text())["data"]
    assert "apt-get install chromium" in capsys.readouterr().err


def test_the_results_page_ends_with_the_arenas_verdicts_and_leaves_a_task_unranked_when_its_control_failed(
        tmp_path, monkeypatch):
    from seqlab.claims import report
    from seqlab.experiments import arena

    cfg = {**arena.SIZES["quick"], "families": ["gateloop", "lrnn"], "lrs": [1e-3], "seeds": 2,
           "tasks": {t: arena.SIZES["quick"]["tasks"][t] for t in ("mqar", "memorization")},
           "controls": {t: {"family": "transformer", "lr": 1e-3, "threshold": 0.99} for t in ("mqar", "memorization")}}

    def run(family, task, seed, acc, **kw):
        return {"family": family, "task": task, "seed": seed, "lr": 1e-3, "width": cfg["base_width"], "seq_len": 32,
                "accuracy": acc, "validation_accuracy": acc, "steps": cfg["steps"], "d_model": 16, "params": 1,
                "state_size": 1, "wall_s": 1.0, "curve": [[0, 0.0], [40, acc]], **kw}

    runs = [run(f, t, s, acc) for t in ("mqar", "memorization") for s in (0, 1)
            for f, acc in (("gateloop", 0.95), ("lrnn", 0.60))]
    controls = [run("transformer", "mqar", s, 1.0, control=True, threshold=0.99) for s in (0, 1)]
    controls += [run("transformer", "memorization", s, a, control=True, threshold=0.99) for s, a in ((0, 1.0), (1, 0.5))]
    (tmp_path / "arena").mkdir()
    (tmp_path / "arena" / "medium.json").write_text(json.dumps({"runs": runs, "controls": controls}))
    monkeypatch.setattr(report, "_arena", lambda out: (arena.load(report.arena_file(out)), cfg))
    page = claims.render_readme({"claims": []}, notes_dir=tmp_path / "notes")
    section = page[page.index("## The arena"):]
    assert "| mqar | transformer: 1.000 / 1.000 (0.99) | gateloop |" in section
    assert "| memorization | transformer: 1.000 / 0.500 (0.99) | inconclusive: the control did not learn |" in section
    assert "| gateloop | 0.950 ± 0.000 (0.001) | 0.950 ± 0.000 (0.001) |" in section
    assert "![arena" not in section                                  # no figure drawn yet, none linked
    (tmp_path / "arena" / "medium-curves.png").write_bytes(b"png")
    assert "![arena: validation accuracy during training at each family's chosen rate](arena/medium-curves.png)" in (
        claims.render_readme({"claims": []}, notes_dir=tmp_path / "notes"))
    assert "## The arena" not in claims.render_readme({"claims": []}, notes_dir=tmp_path / "elsewhere" / "notes")


def test_the_results_pages_arena_shows_a_later_sittings_families_and_its_controls_run_again(tmp_path):
    from seqlab.experiments import arena

    tasks = ("mqar", "memorization")
    cfg = {**arena.SIZES["quick"], "families": ["gateloop", "lrnn"], "lrs": [1e-3], "seeds": 2,
           "tasks": {t: arena.SIZES["quick"]["tasks"][t] for t in tasks},
           "controls": {t: {"family": "transformer", "lr": 1e-3, "threshold": 0.99} for t in tasks}}

    def run(family, task, seed, acc, **kw):
        return {"family": family, "task": task, "seed": seed, "lr": 1e-3, "width": cfg["base_width"], "seq_len": 32,
                "accuracy": acc, "validation_accuracy": acc, "steps": cfg["steps"], "d_model": 16, "params": 1,
                "state_size": 1, "wall_s": 1.0, "curve": [[0, 0.0], [40, acc]], **kw}

    def controls(task, accs):
        return [run("transformer", task, s, a, control=True, threshold=0.99) for s, a in enumerate(accs)]

    first = {"runs": [run(f, t, s, acc) for t in tasks for s in (0, 1)
                      for f, acc in (("gateloop", 0.95), ("lrnn", 0.6))],
             "controls": controls("mqar", (1.0, 1.0)) + controls("memorization", (1.0, 1.0)), "config": cfg}
    (tmp_path / "arena").mkdir()
    (tmp_path / "arena" / "medium.json").write_text(json.dumps(first))
    section = claims.report.arena_section(tmp_path)
    assert "two families on two tasks" in section[2] and "run again" not in "\n".join(section)    # no later sitting
    later = {"runs": [run("deltanet", "mqar", s, 1.0) for s in (0, 1)], "controls": controls("mqar", (1.0, 0.5)),
             "config": {**cfg, "families": ["deltanet"]}}                        # memorization not reached yet
    (tmp_path / "arena" / "medium-delta.json").write_text(json.dumps(later))
    page = claims.render_readme({"claims": []}, notes_dir=tmp_path / "notes")
    section = page[page.index("## The arena"):]
    assert "three families on two tasks" in section
    assert ("DeltaNet (`deltanet`) was run later in its own sitting (`arena/medium-delta.json`, 2 runs and 2 "
            "control runs: the same protocol") in section
    assert "| mqar | transformer: 1.000 / 1.000 (0.99) | 1.000 / 0.500: **missed** | deltanet |" in section
    assert ("| memorization | transformer: 1.000 / 1.000 (0.99) | not run yet | pending: not every family has 2 seeds "
            "yet |") in section
    assert "| deltanet | 1.000 ± 0.000 (0.001) | — |" in section
    later["config"]["steps"] = 80
    (tmp_path / "arena" / "medium-delta.json").write_text(json.dumps(later))
    with pytest.raises(ValueError, match="^steps: "):
        claims.render_readme({"claims": []}, notes_dir=tmp_path / "notes")
