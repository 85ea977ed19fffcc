"""The arena: matched sizes, the rate chosen on validation, the resumable grid, the recorded medium run, and a
family registered from outside seqlab entering it."""
from __future__ import annotations

import functools
import json
import math

import pytest

from seqlab import experiments, models
from seqlab.experiments import arena as A
from seqlab.experiments import arena_runner, rate_search


@pytest.mark.parametrize("width", [16, 32, 64])
def test_every_family_is_matched_within_ten_percent_by_d_model(width):
    target = A.target_parameters("transformer", width, 2)
    for family in A.FAMILIES:
        d_model, params = A.matched_width(family, target, 2)
        assert abs(params - target) <= 0.10 * target, (family, d_model, params, target)
        step = A.width_step(family)
        assert d_model % step == 0
        # no other allowed width is nearer
        for other in (d_model - step, d_model + step):
            if other > 0:
                assert abs(A._core_count(family, other, 2) - target) >= abs(params - target)


@pytest.mark.parametrize("family", ["deltanet", "gated-deltanet"])
def test_the_delta_rule_families_are_matched_within_ten_percent_at_every_profiles_widths(family):
    """DeltaNet and Gated DeltaNet enter the arena by name (families=...): at every reference width of the quick,
    medium and full profiles, a d_model in whole heads comes within 10 % of the Transformer's count."""
    profiles = [A.sizes(p) for p in ("quick", "medium", "full")]
    widths = sorted({w for cfg in profiles for w in (*cfg["widths"], cfg["base_width"])})
    for width in widths:
        target = A.target_parameters("transformer", width, 2)
        d_model, params = A.matched_width(family, target, 2)
        assert abs(params - target) <= 0.10 * target and d_model % A.width_step(family) == 0, (width, d_model, params)


def test_core_parameters_leave_out_embedding_positions_and_head():
    from seqlab import models

    small = models.build("transformer", vocab_size=10, d_model=16, n_layers=1)
    large = models.build("transformer", vocab_size=1000, d_model=16, n_layers=1, max_len=2048)
    assert A.core_parameters(small) == A.core_parameters(large)
    assert A.core_parameters(small) < sum(p.numel() for p in small.parameters())


def _run(family, task, seed, lr, val, acc, width=16, seq_len=32, steps=40):
    return {"family": family, "task": task, "seed": seed, "lr": lr, "width": width, "seq_len": seq_len,
            "validation_accuracy": val, "accuracy": acc, "d_model": 16, "params": 1, "state_size": 1, "wall_s": 1.0,
            "steps": steps}


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
    assert then2[:len(base)] == base                            # the ranking's seeds before the sweeps
    assert sorted(s["seed"] for s in base if s["family"] == "gateloop") == [1, 2]
    wider = [s for s in then2 if s["width"] != cfg["base_width"]]
    assert {s["width"] for s in wider} == set(cfg["widths"]) - {cfg["base_width"]}
    assert sorted(s["seed"] for s in wider if s["family"] == "lrnn") == [0, 1, 2]
    longer = [s for s in then2 if s["seq_len"] not in (None, 32)]
    assert {s["seq_len"] for s in longer} == set(cfg["mqar_lengths"]) - {32}
    assert {s["family"] for s in longer} == {"gateloop", "lrnn"}
    short = A.plan({**cfg, "length_sweep_families": ["lrnn"]}, done)[1]     # a profile keeps one at the base length
    assert {s["family"] for s in short if s["seq_len"] not in (None, 32)} == {"lrnn"}
    assert len(short) == len(then2) - 3
    band = A.plan({**cfg, "rate_band_tasks": ["mqar"]}, done)[1]          # every seed at every rate on MQAR
    assert len(band) == len(then2) + 2 * 2                                # 2 families x 1 other rate x seeds 1, 2
    assert {(s["lr"], s["seed"]) for s in band if s["family"] == "lrnn" and s["width"] == cfg["base_width"]
            and s["seq_len"] == 32} == {(1e-3, 1), (1e-3, 2), (3e-3, 1), (3e-3, 2)}


def test_the_quick_grid_writes_each_run_and_a_second_call_skips_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path / "data"))
    out = tmp_path / "arena.json"
    kw = dict(profile="quick", families="gateloop,transformer", tasks=["mqar", "memorization"], out=str(out),
              steps=2, widths=[16], mqar_lengths=[32], progress=False)
    result = experiments.run("arena", **kw)
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 4 and len(result["summary"]) == 4
    for run in data["runs"]:
        for key in ("family", "task", "seed", "d_model", "params", "state_size", "seq_len", "accuracy", "wall_s",
                    "initial_loss", "num_targets", "curve", "steps_to_0.9", "steps_to_0.99", "filler", "init"):
            assert key in run
        assert 0.0 <= run["accuracy"] <= 1.0 and run["state_size"] > 0
        assert abs(run["initial_loss"] - math.log(run["num_targets"])) <= A.INITIAL_LOSS_TOLERANCE
        assert run["num_targets"] == run["vocab_size"] and [s for s, _ in run["curve"]] == [0, 1, 2]
        assert run["filler"] == ("random" if run["task"] == "mqar" else None)
        assert run["init"] == models.init_rule(run["family"])
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
    path = A.RESULTS_DIR / "medium-800steps-gpt2init.json"
    data = json.loads(path.read_text())
    cfg = data["config"]
    smallest = min(cfg["widths"])
    base_len = cfg["tasks"]["mqar"]["seq_len"]
    runs = [r for r in data["runs"] if r["family"] == "gateloop" and r["task"] == "mqar" and r["seed"] == 0
            and r["width"] == smallest and r["seq_len"] == base_len]
    assert runs, "results/arena/medium-800steps-gpt2init.json has no GateLoop MQAR run at the smallest width, seed 0"
    recorded = runs[0]
    spec = {k: recorded[k] for k in ("family", "task", "seed", "width", "seq_len", "lr")}
    again = A.run_one(spec, cfg)
    assert again["d_model"] == recorded["d_model"] and again["params"] == recorded["params"]
    assert abs(again["accuracy"] - recorded["accuracy"]) <= 0.01, (again["accuracy"], recorded["accuracy"])
    from seqlab.experiments._common import code_version
    assert {k: again[k] for k in ("commit", "dirty") if k in again} == code_version()   # the code it ran


def test_steps_filler_and_init_make_a_run_another_run():
    old = _run("gateloop", "mqar", 0, 1e-3, 0.5, 0.5)          # a record from before they were recorded
    assert A.run_key(old) == A.run_key({**old, "filler": "random", "init": models.init_rule("gateloop")})
    for change in ({"steps": 80}, {"filler": "zoology"}, {"init": "another-rule"}):
        assert A.run_key({**old, **change}) != A.run_key(old), change
    cfg = _cfg()
    assert A.in_grid(old, cfg) and not A.in_grid({**old, "steps": 80}, cfg)
    zoology = _cfg(tasks={"mqar": {**cfg["tasks"]["mqar"], "filler": "zoology"}})
    assert not A.in_grid(old, zoology) and A.in_grid({**old, "filler": "zoology"}, zoology)
    assert len(A.plan(zoology, [old])[0]) == len(A.plan(zoology, [])[0])       # the random-filler run counts for nothing
    spec = {k: old[k] for k in ("family", "task", "seed", "width", "seq_len", "lr")}
    assert A.run_name(spec, cfg, 32) != A.run_name(spec, zoology, 32)         # nor shares its checkpoint


def test_a_wrong_initial_scale_is_refused_before_training():
    A.check_initial_loss(math.log(64) + 0.2, 64, "run")
    with pytest.raises(ValueError, match=r"run: initial validation loss 5\.000 is more than 0\.3 nats from ln\(64\)"):
        A.check_initial_loss(5.0, 64, "run")


def test_curve_thresholds():
    curve = [[0, 0.1], [10, 0.85], [20, 0.95], [30, 0.992]]
    assert (A.first_step_at(curve, 0.9), A.first_step_at(curve, 0.99), A.first_step_at(curve, 0.999)) == (20, 30, None)


def test_the_grid_workers_checkpoint_like_a_single_run(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(arena_runner, "run_one", lambda spec, cfg, checkpoint_dir=None: seen.append(checkpoint_dir) or {})
    arena_runner._worker(({"family": "gateloop"}, {}, str(tmp_path)))
    assert seen == [str(tmp_path)]


def test_a_best_rate_at_an_edge_extends_the_grid_until_it_lies_inside():
    cfg = _cfg(lrs=[1e-3, 3e-3, 1e-2], families=["gateloop"])
    first, _ = A.plan(cfg, [])
    assert sorted(s["lr"] for s in first) == [1e-3, 3e-3, 1e-2]
    done = [_run("gateloop", "mqar", 0, lr, val=v, acc=0.5) for lr, v in ((1e-3, 0.2), (3e-3, 0.5), (1e-2, 0.7))]
    assert ("gateloop", "mqar") not in A.chosen_lrs(done, cfg)            # 1e-2 is the best and the largest rate
    first, then = A.plan(cfg, done)
    assert [s["lr"] for s in first] == [0.03] and not then                 # one grid step further
    done.append(_run("gateloop", "mqar", 0, 0.03, val=0.6, acc=0.5))
    assert A.chosen_lrs(done, cfg) == {("gateloop", "mqar"): 1e-2}        # now strictly inside
    grid = A.rate_grid(done, cfg, "gateloop", "mqar")
    assert grid == {"rates": [1e-3, 3e-3, 1e-2, 0.03], "chosen": 1e-2, "extended": True, "at_edge": False}
    # a rate that keeps improving stops after MAX_EXTENSIONS steps and says it is still at the edge
    rising = [_run("gateloop", "mqar", 0, lr, val=lr, acc=0.5) for lr in (1e-3, 3e-3, 1e-2, 0.03, 0.09)]
    assert A.rate_grid(rising, cfg, "gateloop", "mqar")["at_edge"] is True
    # a task every rate solves: the tie goes inside the grid, which is not extended
    solved = [_run("gateloop", "mqar", 0, lr, val=1.0, acc=1.0) for lr in (1e-3, 3e-3, 1e-2)]
    assert A.plan(cfg, solved)[0] == [] and A.chosen_lrs(solved, cfg) == {("gateloop", "mqar"): 3e-3}
    # two rates (the old medium grid) are searched as they are, and say the choice sits at an edge
    two = _cfg(lrs=[1e-3, 3e-3], families=["gateloop"])
    assert A.rate_grid(done, two, "gateloop", "mqar")["at_edge"] is True


def test_the_arena_and_the_claims_share_one_rate_search():
    """One extension rule: the claims' search over k (rates times 3 ** k) and the arena's over rates stop after the
    same number of steps a side."""
    from seqlab.claims import run

    assert run.MAX_EXTENSIONS == A.MAX_EXTENSIONS == rate_search.MAX_EXTENSIONS
    assert run.best_rate is A.best_rate is rate_search.best_rate
    rising = {k: k for k in range(-10, 10)}                     # the largest k always best: extended to the limit
    assert run.search_grid(rising) == [-1, 0, 1, *range(2, 2 + rate_search.MAX_EXTENSIONS)]
    cfg = _cfg(lrs=[1e-3, 3e-3, 1e-2], families=["gateloop"])
    falling = {lr: -lr for lr in (1e-3, 3e-3, 1e-2, 3.33e-4, 1.11e-4, 3.7e-5)}
    assert A.search_rates(falling, cfg) == [1.11e-4, 3.33e-4, 1e-3, 3e-3, 1e-2]


def test_controls_run_beside_the_grid_and_a_task_whose_control_did_not_learn_is_not_ranked(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path / "data"))
    out = tmp_path / "arena.json"
    controls = {"mqar": {"family": "transformer", "lr": 3e-3, "threshold": 0.99, "source": "Zoology"},
                "memorization": {"family": "gateloop", "lr": 3e-3, "threshold": 0.0, "source": "a test"}}
    kw = dict(profile="quick", families="gateloop", tasks=["mqar", "memorization"], out=str(out), steps=2,
              widths=[16], mqar_lengths=[32], progress=False, verbose=False, controls=controls)
    result = experiments.run("arena", **kw)
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 2 and len(data["controls"]) == 2                    # one seed in the quick sizes
    assert {(c["family"], c["task"], c["control"], c["threshold"]) for c in data["controls"]} == {
        ("transformer", "mqar", True, 0.99), ("gateloop", "memorization", True, 0.0)}
    copied = next(c for c in data["controls"] if c["task"] == "memorization")       # the grid's own run, not again
    grid_run = next(r for r in data["runs"] if r["task"] == "memorization")
    assert {k: v for k, v in copied.items() if k not in ("control", "threshold")} == grid_run
    verdicts = result["verdicts"]
    assert verdicts["mqar"]["verdict"] == "inconclusive: the control did not learn"   # 2 steps learn nothing
    assert verdicts["memorization"]["verdict"] == "ranked"
    assert A.control_verdicts({"controls": []}, {**result["config"]})["mqar"]["verdict"] == "control not run yet"
    again = experiments.run("arena", **kw)
    assert len(again["controls"]) == 2                                              # not trained twice


def _build_toy(*, vocab_size: int, num_classes=None, seq_len=None, d_model: int = 16, n_layers: int = 2,
               n_heads: int = 4, mlp_ratio: float = 2.0):
    """A family registered by a test: the Transformer with a narrower MLP (its heads set d_model's step)."""
    return models.build("transformer", vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len,
                        d_model=d_model, n_layers=n_layers, n_heads=n_heads, mlp_ratio=mlp_ratio)


@pytest.fixture
def toy():
    """``"toy"`` registered for the test and taken out after it (other tests list every registered family)."""
    models.register("toy")(_build_toy)
    yield "toy"
    if "toy" in models.names():
        models.unregister("toy")


def test_a_registered_family_is_matched_in_whole_heads_and_counted_as_its_builder_builds_it(toy):
    assert [A.width_step(f) for f in ("transformer", "lightnet", "gateloop", "lrnn", toy)] == [4, 4, 2, 2, 4]
    target = A.target_parameters("transformer", 16, 2)
    d_model, params = A.matched_width(toy, target, 2)
    assert d_model % 4 == 0 and abs(params - target) <= 0.10 * target
    assert params == A.core_parameters(models.build(toy, vocab_size=5, d_model=d_model, n_layers=2))
    models.register(toy, replace=True)(functools.partial(_build_toy, mlp_ratio=4.0))   # the Transformer's MLP
    assert A.matched_width(toy, target, 2) == A.matched_width("transformer", target, 2) != (d_model, params)


def test_a_registered_family_enters_the_quick_arena_after_the_seven(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path / "data"))
    out = tmp_path / "arena.json"
    result = experiments.run("arena", profile="quick", families=[toy], tasks=["mqar"], out=str(out), steps=2,
                             widths=[16], mqar_lengths=[32], train_size=64, validation_size=32, test_size=32,
                             progress=False, verbose=False)
    (run,) = json.loads(out.read_text())["runs"]
    assert run["family"] == toy and run["init"] == models.init_rule(toy) == "as-built"
    assert abs(run["params"] - run["target_params"]) <= A.TOLERANCE * run["target_params"]
    assert abs(run["initial_loss"] - math.log(run["num_targets"])) <= A.INITIAL_LOSS_TOLERANCE
    assert [s for s, _ in run["curve"]] == [0, 1, 2] and 0.0 <= run["accuracy"] <= 1.0
    assert [(r["family"], r["task"]) for r in result["summary"]] == [(toy, "mqar")]
    assert sorted([toy, "gateloop", "aaa", "transformer"], key=A.family_order) == ["transformer", "gateloop", "aaa",
                                                                                     toy]


def test_an_unregistered_family_is_refused_with_the_registered_names(toy):
    with pytest.raises(ValueError, match=r"families: unknown \['toy2'\]; expected some of .*'toy'") as err:
        experiments.run("arena", profile="quick", families="toy2", out=None)
    assert all(repr(name) in str(err.value) for name in models.names())
    with pytest.raises(ValueError, match=r"families: \['toy'\] registered in this process only.*workers=1"):
        experiments.run("arena", profile="quick", families=[toy, "lrnn"], workers=2, out=None)
    models.unregister(toy)
    with pytest.raises(ValueError, match="families: unknown"):
        experiments.run("arena", profile="quick", families=[toy], out=None)


def _row(family, task, acc, spread, seeds=3, width=16, seq_len=32):
    return {"family": family, "task": task, "accuracy": acc, "spread": spread, "seeds": seeds, "width": width,
            "seq_len": seq_len}


def test_a_task_is_ranked_only_when_its_control_learned_every_family_has_its_seeds_and_the_gap_is_clear():
    cfg = _cfg(families=["gateloop", "lrnn", "transformer"])
    ranked = {"mqar": {"verdict": "ranked"}}

    def verdict(rows, verdicts=ranked):
        return A.rank(rows, verdicts, cfg)["mqar"]["verdict"]

    clear = [_row("gateloop", "mqar", 0.95, 0.01), _row("lrnn", "mqar", 0.80, 0.05), _row("transformer", "mqar", 0.3, 0)]
    assert verdict(clear) == "gateloop"
    assert A.rank(clear, ranked, cfg)["mqar"]["leaders"] == ["gateloop"]
    # within the two spreads: a tie, listed from the best
    assert verdict([_row("gateloop", "mqar", 0.95, 0.05), _row("lrnn", "mqar", 0.90, 0.01),
                    _row("transformer", "mqar", 0.3, 0)]) == "tie: gateloop, lrnn"
    # two solutions with no spread are not an order
    assert verdict([_row("gateloop", "mqar", 1.0, 0.0), _row("lrnn", "mqar", 0.995, 0.0),
                    _row("transformer", "mqar", 0.999, 0.0)]) == "tie: every family"
    # a best mean under 0.5 is not a ranking; nor are missing seeds; nor a control that did not learn
    assert verdict([_row(f, "mqar", 0.4 - i / 10, 0) for i, f in enumerate(cfg["families"])]).startswith("not learned")
    assert verdict(clear[:2] + [_row("transformer", "mqar", 0.3, 0, seeds=1)]).startswith("pending")
    assert verdict(clear[:2]).startswith("pending")                               # a family with no row at all
    for control in ("inconclusive: the control did not learn", "control not run yet"):
        assert verdict(clear, {"mqar": {"verdict": control}}) == control
    # rows off the base budget are not ranked
    wide = [dict(r, width=24) for r in clear]
    assert verdict(clear + [dict(wide[2], accuracy=1.0)]) == "gateloop"


def test_cell_runs_are_the_chosen_rates_seeds_or_the_whole_search():
    cfg = _cfg(families=["gateloop"])
    runs = [_run("gateloop", "mqar", 0, 1e-3, val=0.9, acc=0.8), _run("gateloop", "mqar", 0, 3e-3, val=0.2, acc=0.2),
            _run("gateloop", "mqar", 1, 1e-3, val=0.9, acc=0.7), _run("gateloop", "mqar", 0, 1e-3, 0.9, 0.8, width=24),
            _run("gateloop", "mqar", 1, 1e-3, val=0.9, acc=0.7, steps=800)]                  # another setup's run
    chosen = A.cell_runs(runs, cfg, "mqar")
    assert [(r["seed"], r["lr"]) for r in chosen["gateloop"]] == [(0, 1e-3), (1, 1e-3)]
    every = A.cell_runs(runs, cfg, "mqar", chosen_only=False)
    assert [(r["lr"], r["seed"]) for r in every["gateloop"]] == [(1e-3, 0), (1e-3, 1), (3e-3, 0)]
    assert A.cell_runs(runs, cfg, "memorization") == {}


def _sitting(families, tasks=("mqar", "memorization"), runs=(), controls=(), **kw):
    """A results file of the quick sizes: two seeds, two rates, ``tasks``, the Transformer as every task's control."""
    cfg = _cfg(families=list(families), seeds=2, tasks={t: A.SIZES["quick"]["tasks"][t] for t in tasks},
               controls={t: {"family": "transformer", "lr": 1e-3, "threshold": 0.99, "source": "a test"}
                         for t in tasks},
               **kw)
    return {"runs": list(runs), "controls": list(controls), "command": "python -m seqlab experiment arena",
            "profile": "quick", "config": cfg}


def _cell(family, task, accs=(0.9, 0.8)):
    """A finished cell: seed 0 at both rates (1e-3 chosen), the other seed at it."""
    return [_run(family, task, 0, 1e-3, val=0.9, acc=accs[0]), _run(family, task, 0, 3e-3, val=0.1, acc=0.1),
            *[_run(family, task, s, 1e-3, val=0.9, acc=a) for s, a in enumerate(accs[1:], 1)]]


def _controls(task, accs):
    return [dict(_run("transformer", task, s, 1e-3, val=a, acc=a), control=True, threshold=0.99)
            for s, a in enumerate(accs)]


def test_a_later_sitting_adds_its_runs_and_families_and_keeps_its_controls_apart(tmp_path):
    first = _sitting(["gateloop", "lrnn"], runs=[*_cell("gateloop", "mqar"), *_cell("lrnn", "mqar", (0.5, 0.5)),
                                                 *_cell("gateloop", "memorization"), *_cell("lrnn", "memorization")],
                     controls=_controls("mqar", (1.0, 1.0)) + _controls("memorization", (1.0, 1.0)),
                     length_sweep_families=["gateloop"])
    (tmp_path / "medium.json").write_text(json.dumps(first))
    assert A.load_with_delta(tmp_path) == first                                  # no later sitting: the grid alone
    later = _sitting(["deltanet", "gated-deltanet"], runs=[*_cell("deltanet", "mqar", (1.0, 1.0)),
                                                           *_cell("gated-deltanet", "mqar", (1.0, 1.0))],
                     controls=_controls("mqar", (1.0, 0.95)))                      # memorization not reached yet
    (tmp_path / "medium-delta.json").write_text(json.dumps(later))
    merged = A.load_with_delta(tmp_path)
    cfg = merged["config"]
    assert cfg["families"] == ["gateloop", "lrnn", "deltanet", "gated-deltanet"]
    assert cfg["length_sweep_families"] == ["gateloop", "deltanet", "gated-deltanet"]
    assert merged["runs"] == first["runs"] + later["runs"]
    assert merged["delta_families"] == ["deltanet", "gated-deltanet"]
    assert merged["controls"] == first["controls"] and merged["delta_controls"] == later["controls"]
    assert json.loads((tmp_path / "medium.json").read_text()) == first           # neither file is rewritten
    assert {t: v["verdict"] for t, v in A.control_verdicts(merged, cfg).items()} == {"mqar": "ranked",
                                                                                     "memorization": "ranked"}
    again = A.control_replication(merged, cfg)
    assert again["mqar"] == {"family": "transformer", "threshold": 0.99, "accuracy": [1.0, 0.95], "passed": False}
    assert again["memorization"]["accuracy"] == [] and again["memorization"]["passed"] is None
    rows = A.summarize(merged["runs"], cfg)
    assert {(r["family"], r["task"]) for r in A.base_rows(rows, cfg) if "delta" in r["family"]} == {
        ("deltanet", "mqar"), ("gated-deltanet", "mqar")}                      # no rows where it has no runs yet
    assert set(A.cell_runs(merged["runs"], cfg, "memorization")) == {"gateloop", "lrnn"}
    ranking = A.rank(rows, A.control_verdicts(merged, cfg), cfg)
    assert ranking["mqar"]["verdict"] == "tie: deltanet, gated-deltanet"
    assert ranking["memorization"]["verdict"].startswith("pending")               # its later families have no seeds


def test_a_later_sitting_passing_its_controls_again_on_every_task():
    first = _sitting(["gateloop"], runs=_cell("gateloop", "mqar"), controls=_controls("mqar", (1.0, 1.0)),
                     tasks=("mqar",))
    later = _sitting(["deltanet"], runs=_cell("deltanet", "mqar"), controls=_controls("mqar", (0.995, 1.0)),
                     tasks=("mqar",))
    merged = A.add_sitting(first, later)
    assert A.control_replication(merged, merged["config"])["mqar"]["passed"] is True
    assert "length_sweep_families" not in merged["config"] and first["config"]["families"] == ["gateloop"]


@pytest.mark.parametrize("key, value", [("steps", 80), ("seeds", 3), ("lrs", [1e-3, 1e-2]), ("base_width", 24),
                                        ("batch_size", 16), ("tasks", {"mqar": A.SIZES["quick"]["tasks"]["mqar"]})])
def test_a_later_sitting_of_another_protocol_is_refused_naming_the_setting(tmp_path, key, value):
    first, later = _sitting(["gateloop"]), _sitting(["deltanet"])
    later["config"][key] = value
    (tmp_path / "medium.json").write_text(json.dumps(first))
    (tmp_path / "medium-delta.json").write_text(json.dumps(later))
    with pytest.raises(ValueError, match=rf"^{key}: the later sitting ran"):
        A.load_with_delta(tmp_path)


def test_a_later_sitting_with_other_controls_or_the_same_families_or_no_config_is_refused():
    first = _sitting(["gateloop"])
    later = _sitting(["deltanet"])
    later["config"]["controls"]["mqar"]["threshold"] = 0.9
    with pytest.raises(ValueError, match="^controls: "):
        A.add_sitting(first, later)
    with pytest.raises(ValueError, match=r"^later: families \['gateloop'\] are already"):
        A.add_sitting(first, _sitting(["gateloop", "deltanet"]))
    with pytest.raises(ValueError, match="^later: a results file without a config"):
        A.add_sitting(first, {"runs": [], "controls": []})
