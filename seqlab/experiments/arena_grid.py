"""The arena's grid (:mod:`seqlab.experiments.arena`): its settings by profile (:data:`SIZES`), what makes a run
(:func:`run_key`), the runs still to do (:func:`plan`) and each cell's learning-rate search (:func:`search_rates`,
:func:`chosen_lrs`, :func:`rate_grid`), the one search of :mod:`seqlab.experiments.rate_search`.

A cell is a (family, task) pair. Its seed 0 runs at each rate of the profile's ``lrs`` at the base width (and
MQAR's base length); the rate with the best *validation* accuracy is chosen and every other run of the cell
(seeds ``1 .. seeds-1``, the width and length sweeps, the rate band) trains at it.
"""
from __future__ import annotations

import functools
import json

from seqlab.experiments._common import Sizes, profile_sizes
from seqlab.experiments.arena_families import FAMILIES
from seqlab.experiments.rate_search import MAX_EXTENSIONS, at_edge, best_rate, extend_grid  # noqa: F401

__all__ = ["TASKS", "SIZES", "sizes", "filler_of", "run_key", "spec_key", "init_of", "control_specs", "search_rates",
           "chosen_lrs", "rate_grid", "in_grid", "plan", "best_rate", "MAX_EXTENSIONS"]

TASKS = ("mqar", "in_context_recall", "fuzzy_in_context_recall", "noisy_in_context_recall", "selective_copying",
         "memorization", "copying", "memory_horizon")

# Quick sizes: the whole grid on a CPU in a few minutes (lesson 08 trains a part of it live). The medium and full
# sizes are in configs/medium/arena.toml and configs/arena.toml.
SIZES = Sizes("arena", dict(
    families=list(FAMILIES), seeds=1, steps=40, batch_size=32, n_layers=2, lrs=[3e-3], reference="transformer",
    base_width=16, widths=[16, 24], mqar_lengths=[32, 64], threads=1, train_size=512, test_size=128,
    validation_size=128,
    tasks={"mqar": {"vocab_size": 64, "seq_len": 32, "num_kv_pairs": 4},
           "in_context_recall": {"seq_len": 32},
           "fuzzy_in_context_recall": {"seq_len": 32},
           "noisy_in_context_recall": {"seq_len": 32},
           "selective_copying": {"seq_len": 32, "num_tokens_to_copy": 4},
           "memorization": {},
           "copying": {"min_len": 6, "max_len": 6},
           "memory_horizon": {"seq_len": 32}}),
    optional=("controls", "eval_every", "length_sweep_families", "rate_band_tasks"))


def sizes(profile: str) -> dict:
    """The grid's settings in ``profile`` (quick, medium, full, or a config file or folder), as a sitting runs them."""
    return profile_sizes(SIZES, profile, {})


def filler_of(task: str, args: dict) -> str | None:
    """MQAR's filler (``"random"`` unless the task's arguments say ``"zoology"``); None for the other tasks."""
    return args.get("filler", "random") if task == "mqar" else None


def run_key(run: dict) -> tuple:
    """What makes two runs the same run: a finished one is never trained again, and no two share a checkpoint.
    Records written before steps, filler and init were part of it read as what they were then (their steps are
    recorded; the random filler; the family's rule of that time, which :data:`seqlab.models.registry.INIT_RULES`
    still names)."""
    from seqlab.models import init_rule

    filler = run.get("filler", "random" if run["task"] == "mqar" else None)
    return (run["family"], run["task"], run["seed"], run["width"], run["seq_len"], float(run["lr"]),
            int(run["steps"]), filler, run.get("init") or init_rule(run["family"]))


def spec_key(spec: dict, cfg: dict) -> tuple:
    """:func:`run_key` of the run ``spec`` asks for, under the grid's settings ``cfg``."""
    length = spec["seq_len"] if spec["seq_len"] is not None else _default_length(cfg, spec["task"])
    return run_key({**spec, "seq_len": length, "steps": cfg["steps"], "init": init_of(spec),
                    "filler": filler_of(spec["task"], cfg["tasks"][spec["task"]])})


def init_of(spec: dict) -> str:
    """The init rule a spec asks for: a variant of :data:`seqlab.models.init.VARIANTS` (``"as-built"``: the
    family's own), else the family's own rule's name (:data:`seqlab.models.registry.INIT_RULES`)."""
    from seqlab.models import init_rule

    init = spec.get("init")
    return init_rule(spec["family"]) if init in (None, "as-built") else init


def control_specs(cfg: dict, task: str) -> list[dict]:
    """The positive control of ``task`` (the profile's ``controls``: a configuration known to solve it, with the
    threshold it must reach): one run per seed at the grid's budget, base width and length."""
    control = cfg.get("controls", {}).get(task)
    if not control:
        return []
    return [{"family": control["family"], "task": task, "seed": seed, "width": cfg["base_width"],
             "seq_len": _base_length(cfg, task), "lr": float(control["lr"]), "init": control.get("init")}
            for seed in range(cfg["seeds"])]


def _base_length(cfg: dict, task: str):
    return None if task != "mqar" else cfg["tasks"]["mqar"].get("seq_len")


def search_rates(by_lr: dict, cfg: dict) -> list[float]:
    """The rates one cell's search needs, given the seed-0 validation accuracies ``by_lr`` it has so far: the
    profile's ``lrs``, extended one grid step (the ratio of its first two rates, 3 significant digits) beyond an
    edge while the best of them sits there (:func:`seqlab.experiments.rate_search.extend_grid`). A grid of fewer than
    three rates (the quick profile's) is searched as it is."""
    rates = sorted(float(lr) for lr in cfg["lrs"])
    if len(rates) < 3:
        return rates
    step = rates[1] / rates[0]
    return extend_grid(by_lr, rates, lambda lr: float(f"{lr / step:.3g}"), lambda lr: float(f"{lr * step:.3g}"))


def _search(runs: list[dict], cfg: dict, family: str, task: str) -> dict:
    """``{lr: validation accuracy}`` of the cell's seed-0 runs at the base width and length."""
    return {float(r["lr"]): r["validation_accuracy"] for r in runs
            if r["family"] == family and r["task"] == task and r["seed"] == 0 and r["width"] == cfg["base_width"]
            and _is_base_length(r, cfg) and in_grid(r, cfg)}


def chosen_lrs(runs: list[dict], cfg: dict) -> dict:
    """``{(family, task): lr}``: the searched rate (:func:`search_rates`) whose seed-0 run at the base width and
    length has the best validation accuracy (ties: the smaller rate); only cells whose search has finished."""
    out = {}
    for family in cfg["families"]:
        for task in cfg["tasks"]:
            by_lr = _search(runs, cfg, family, task)
            rates = search_rates(by_lr, cfg)
            if all(lr in by_lr for lr in rates):
                out[(family, task)] = best_rate(by_lr, rates)
    return out


def rate_grid(runs: list[dict], cfg: dict, family: str, task: str) -> dict:
    """What the search of one cell says of itself: the rates searched, the one chosen, whether the grid was
    extended beyond the profile's rates, and whether the choice still sits at an edge (a grid of fewer than
    three rates, or one that reached :data:`~seqlab.experiments.rate_search.MAX_EXTENSIONS`): then the rate is not
    known to be the best."""
    by_lr = _search(runs, cfg, family, task)
    rates = search_rates(by_lr, cfg)
    chosen = best_rate(by_lr, rates) if all(lr in by_lr for lr in rates) else None
    return {"rates": rates, "chosen": chosen, "extended": len(rates) > len(cfg["lrs"]),
            "at_edge": at_edge(chosen, rates)}


def in_grid(run: dict, cfg: dict) -> bool:
    """The run was trained by this grid's setup: its steps, MQAR filler and the family's current init rule."""
    from seqlab.models import init_rule

    if run["task"] not in cfg["tasks"]:
        return False
    key = run_key(run)
    return key[6:] == (int(cfg["steps"]), filler_of(run["task"], cfg["tasks"][run["task"]]), init_rule(run["family"]))


def _is_base_length(run: dict, cfg: dict) -> bool:
    base = _base_length(cfg, run["task"])
    return base is None or run["seq_len"] == base


def plan(cfg: dict, done: list[dict]) -> tuple[list[dict], list[dict]]:
    """The runs still to do, in two phases: the seed-0 rate search (``first``) and the runs that need its choice
    (``then``, empty until every rate of a cell has run). A spec: family, task, seed, width, seq_len, lr."""
    have = {run_key(r) for r in done}
    base_w = cfg["base_width"]

    def spec(family, task, seed, width, seq_len, lr):
        s = {"family": family, "task": task, "seed": seed, "width": width, "seq_len": seq_len, "lr": float(lr)}
        return s

    def missing(s):
        return spec_key(s, cfg) not in have

    first = [spec(f, t, 0, base_w, _base_length(cfg, t), lr) for t in cfg["tasks"] for f in cfg["families"]
             for lr in search_rates(_search(done, cfg, f, t), cfg)]
    chosen = chosen_lrs(done, cfg)
    then = []                                           # the seeds of the ranking first, then the sweeps
    for t in cfg["tasks"]:
        for f in cfg["families"]:
            if (f, t) in chosen:
                then += [spec(f, t, s, base_w, _base_length(cfg, t), chosen[(f, t)]) for s in range(1, cfg["seeds"])]
    for f in cfg["families"]:                           # MQAR's sweeps: the smallest width leads
        if (f, "mqar") not in chosen:
            continue
        lr = chosen[(f, "mqar")]
        for w in sorted(cfg["widths"]):
            if w != base_w:
                then += [spec(f, "mqar", s, w, _base_length(cfg, "mqar"), lr) for s in range(cfg["seeds"])]
        if f not in cfg.get("length_sweep_families", cfg["families"]):
            continue                                    # a family the profile keeps at the base length
        for length in cfg["mqar_lengths"]:
            if length != _base_length(cfg, "mqar"):
                then += [spec(f, "mqar", s, base_w, length, lr) for s in range(cfg["seeds"])]
    for t in [t for t in cfg.get("rate_band_tasks", ()) if t in cfg["tasks"]]:    # every seed at every rate
        for f in [f for f in cfg["families"] if (f, t) in chosen]:
            rates = [lr for lr in search_rates(_search(done, cfg, f, t), cfg) if lr != chosen[(f, t)]]
            then += [spec(f, t, s, base_w, _base_length(cfg, t), lr) for lr in rates for s in range(1, cfg["seeds"])]
    return [s for s in first if missing(s)], [s for s in then if missing(s)]


@functools.lru_cache(maxsize=None)
def _task_length(name: str, args_json: str) -> int:
    from seqlab import tasks

    args = json.loads(args_json)
    return tasks.get(name, **{**args, "train_size": 1, "test_size": 1, "validation_size": 1}).seq_len


def _default_length(cfg: dict, task: str) -> int:
    """The input length task ``task`` has at the grid's arguments (built once, with one example per split)."""
    return _task_length(task, json.dumps(cfg["tasks"][task], sort_keys=True))
