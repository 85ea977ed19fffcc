"""The recall sweep's plan (:mod:`seqlab.experiments.recall_sweep`): its sizes by profile (:data:`SIZES`), its cells
(a family at one setting of its state knob, at one number of key-value pairs), each cell's width at the parameter
budget (:func:`cell_width`), what makes a run (:func:`run_key`), each cell's learning-rate search and the runs it
still needs (:func:`rate_state`, :func:`next_specs`), and what the record says of each cell (:func:`cell_rows`).

A cell's width. The reference family (the Transformer) at width ``width`` sets the budget: its parameters outside
the token embedding, the position table and the output head (:func:`seqlab.experiments.arena_families.core_parameters`,
as the arena counts them). A cell whose knobs leave ``d_model`` free gets the ``d_model`` nearest that budget (in
steps of whole heads: the family's arena step and the cell's ``n_heads``), refused beyond 10 %; a cell whose knobs
name ``d_model`` holds it, and its record says how far its count is from the budget (``budget``: the ratio). That is
where the budget moves: a family whose state knob is also its parameter count at a fixed ``d_model`` (the linear
CausalRN's ``state_expansion`` is its hidden width) can only grow its state at a fixed budget by narrowing
``d_model`` with the square root of the knob. The LRNN's ``d_mlp`` (its MLP's hidden width, else ``d_state``) lets
a cell hold ``d_model`` and choose ``d_mlp`` for the budget, so that ``d_state`` moves the state alone.

The protocol. A profile's ``steps`` is each run's cap (and the length of its cosine schedule). With ``stop_at`` (an
optional size) a run stops at the first evaluation whose validation accuracy reaches it; with ``fresh = true`` its
training sequences are drawn new at every step (:func:`seqlab.tasks.mqar`). Both are part of what makes a run
(:func:`run_key`): runs recorded without them (the first medium record: 6000 steps, a fixed train split) are the old
protocol, read as they were; :func:`protocol` names it. Each cell's row (:func:`cell_rows`) says which seeds at its
chosen rate were still learning at the cap, rose at the end (read from the curve, whatever the protocol), or ran
code without a commit or with ``seqlab/`` changed (``dirty``).
"""
from __future__ import annotations

import functools
import json
import math

from seqlab.experiments._common import Sizes
from seqlab.experiments.arena_families import TOLERANCE, core_parameters, family_config, width_step
from seqlab.experiments.arena_grid import search_rates
from seqlab.experiments.rate_search import at_edge, best_rate

__all__ = ["NAME", "LINEAR", "GROUPS", "SIZES", "cell_label", "cell_width", "plan_cells", "state_spans", "run_key",
           "spec_key", "rate_state", "seed_rates", "next_specs", "cell_rows", "control_verdicts", "protocol",
           "rose_at_the_end", "RISE"]

NAME = "recall-sweep"
LINEAR = ("gateloop", "linear-transformer", "lrnn", "lightnet", "linear-causalrn")
# what a cell varies: the reference (the Transformer), the state knob, or one of the two additions Zoology and
# Based name (a short convolution; the Taylor feature map of the Linear Transformer), or an ablation
GROUPS = ("reference", "state", "short-conv", "feature-map", "ablation")
# a run is still learning when its validation accuracy rose by more than RISE[1] over the last RISE[0] of its steps
RISE = (0.2, 0.02)

# Quick sizes: the whole plan on a CPU in minutes (each family at three state sizes). The medium sizes are in
# configs/medium/recall-sweep.toml, the full ones in configs/recall-sweep.toml.
_QUICK_CELLS = [
    {"family": "transformer", "group": "reference", "knobs": {}},
    *({"family": "gateloop", "group": "state", "knobs": {"n_heads": h}} for h in (26, 2, 1)),
    *({"family": "linear-transformer", "group": "state", "knobs": {"n_heads": h}} for h in (12, 4, 1)),
    *({"family": "lrnn", "group": "state", "knobs": {"d_state": s}} for s in (8, 24, 64)),
    *({"family": "lightnet", "group": "state", "knobs": {"n_heads": h}} for h in (24, 4, 1)),
    *({"family": "linear-causalrn", "group": "state", "knobs": {"d_model": 24, "state_expansion": e}}
      for e in (1, 4, 8)),
    {"family": "linear-transformer", "group": "feature-map", "knobs": {"n_heads": 4, "feature_map": "taylor",
                                                                       "feature_dim": 4}},
    {"family": "gateloop", "group": "short-conv", "knobs": {"n_heads": 2, "short_conv": 4}},
]
SIZES = Sizes(NAME, dict(
    seeds=1, steps=40, eval_every=10, batch_size=32, n_layers=2, lrs=[3e-3], reference="transformer", width=24,
    threads=1, train_size=512, test_size=128, validation_size=128, pairs=[2, 4], threshold=0.99, learned_at=0.9,
    mqar={"vocab_size": 64, "seq_len": 16, "filler": "zoology"}, cells=_QUICK_CELLS), optional=("stop_at", "fresh"))


def cell_label(cell: dict) -> str:
    """``"gateloop n_heads=4"``: the family and its knobs (none: the family as built)."""
    knobs = cell.get("knobs") or {}
    return " ".join([cell["family"], *(f"{k}={v}" for k, v in sorted(knobs.items()))])


def _knobs_json(knobs: dict) -> str:
    return json.dumps(knobs or {}, sort_keys=True)


def model_config(family: str, knobs: dict, d_model: int, n_layers: int) -> dict:
    """The builder's keywords: the arena's (``d_model``, ``n_layers``, GateLoop's ``d_ff = 2 d_model``) and the knobs."""
    return {**family_config(family, d_model, n_layers), **{k: v for k, v in knobs.items() if k != "d_model"}}


@functools.lru_cache(maxsize=None)
def _built(family: str, knobs_json: str, d_model: int, n_layers: int, seq_len: int) -> tuple[int, int]:
    """``(core parameters, state_size(seq_len))`` of the family built with these knobs."""
    from seqlab import models

    model = models.build(family, vocab_size=2, **model_config(family, json.loads(knobs_json), d_model, n_layers))
    return core_parameters(model), int(model.state_size(seq_len))


@functools.lru_cache(maxsize=None)
def _target(reference: str, width: int, n_layers: int) -> int:
    return _built(reference, "{}", width, n_layers, 2)[0]


def cell_width(family: str, knobs: dict, cfg: dict) -> dict:
    """``{"d_model", "params", "target_params", "budget", "matched"}`` of a cell (module docstring): the reference
    at ``width``; ``d_model`` held where the knobs name it; else the nearest count in whole heads, refused beyond
    10 % of the budget."""
    n_layers, knobs = cfg["n_layers"], dict(knobs or {})
    target = _target(cfg["reference"], cfg["width"], n_layers)
    count = lambda d: _built(family, _knobs_json(knobs), d, n_layers, 2)[0]      # noqa: E731
    if "d_model" in knobs or (family == cfg["reference"] and not knobs):
        d = int(knobs.get("d_model", cfg["width"]))
        return {"d_model": d, "params": count(d), "target_params": target, "budget": round(count(d) / target, 4),
                "matched": "d_model" not in knobs}
    step = math.lcm(width_step(family), int(knobs.get("n_heads") or 1))
    lo, hi = 1, 2
    while count(hi * step) < target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:                                    # count(lo * step) < target <= count(hi * step)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid * step) < target else (lo, mid)
    d = min((lo * step, hi * step), key=lambda w: abs(count(w) - target))
    if abs(count(d) - target) > TOLERANCE * target:
        raise ValueError(f"{cell_label({'family': family, 'knobs': knobs})}: no d_model (a multiple of {step}) "
                         f"comes within 10% of {target} parameters (nearest: d_model={d} with {count(d)}); "
                         "name d_model in its knobs to hold it and let the budget move")
    return {"d_model": d, "params": count(d), "target_params": target, "budget": round(count(d) / target, 4),
            "matched": True}


def _cell_pairs(cell: dict, cfg: dict) -> list[int]:
    """The numbers of pairs a cell runs at: the sweep's, or the subset its ``pairs`` names (an addition that did not
    recall at the fewest pairs is not carried to more, where the same state only has more to hold; a size that
    refines a bracket runs only where the bracket is)."""
    if "pairs" not in cell:
        return list(cfg["pairs"])
    own = cell["pairs"]
    if not isinstance(own, list) or not own or not set(own) <= set(cfg["pairs"]):
        raise ValueError(f"cells: pairs of {cell_label(cell)} must be a non-empty list of the sweep's pairs "
                         f"{cfg['pairs']}; got {own!r}")
    return sorted(own)


def plan_cells(cfg: dict, families=None, pairs=None) -> list[dict]:
    """Every cell of the sweep in the order it runs: the reference at every number of pairs first (the controls:
    a budget the Transformer cannot learn in is learnt early), then every other cell at the fewest pairs, then the
    state cells at more pairs (fewest first), last the additions (short convolution, feature map, ablation) at more
    pairs: what a sweep cut short lacks is then the least needed. A cell runs at the numbers of pairs its ``pairs``
    names (all of them when it names none). Each with its width (:func:`cell_width`), ``state_size`` at the
    task's length and ``state_per_layer`` (Zoology's unit: the state of one of the ``n_layers`` equal layers).
    ``families``/``pairs``: a subset."""
    seq_len = cfg["mqar"]["seq_len"]
    out = []
    for cell in cfg["cells"]:
        if cell.get("group", "state") not in GROUPS:
            raise ValueError(f"cells: group {cell.get('group')!r} of {cell_label(cell)}; expected one of {GROUPS}")
        knobs = dict(cell.get("knobs") or {})
        width = cell_width(cell["family"], knobs, cfg)
        state = _built(cell["family"], _knobs_json(knobs), width["d_model"], cfg["n_layers"], seq_len)[1]
        for p in _cell_pairs(cell, cfg):
            if 4 * p > seq_len:
                raise ValueError(f"pairs: {p} pairs need seq_len >= {4 * p}, got mqar.seq_len={seq_len}")
            out.append({"family": cell["family"], "knobs": knobs, "group": cell.get("group", "state"),
                        "cell": cell_label(cell), "pairs": p, "state_size": state,
                        "state_per_layer": per_layer(state, cfg["n_layers"]), **width})
    out = [c for c in out if (families is None or c["family"] in families) and (pairs is None or c["pairs"] in pairs)]
    fewest = min(cfg["pairs"])
    # the controls; every cell at the fewest pairs; the state cells at more pairs; last the additions at more pairs
    return sorted(out, key=lambda c: (c["group"] != "reference", c["pairs"] != fewest and c["group"] != "state",
                                      c["pairs"]))


def per_layer(state: int, n_layers: int) -> int | float:
    """Floats a layer (Zoology's unit): every layer of a sweep's model holds the same state."""
    return state // n_layers if state % n_layers == 0 else round(state / n_layers, 1)


def state_spans(cells: list[dict], group: str = "state") -> dict:
    """``{family: largest / smallest state}`` over the cells of ``group`` (a family's state-size sweep)."""
    sizes: dict = {}
    for c in cells:
        if c["group"] == group:
            sizes.setdefault(c["family"], set()).add(c["state_size"])
    return {f: max(s) / min(s) for f, s in sizes.items()}


def run_key(run: dict) -> tuple:
    """What makes two runs the same run (a run recorded is never trained again): the cell, the task, the budget,
    the protocol (the cap ``steps``, ``stop_at`` and the training ``data``: None and "fixed" in the old protocol), the
    seed and the rate."""
    return (run["family"], _knobs_json(run["knobs"]), run["pairs"], run["seq_len"], run["vocab_size"], run["filler"],
            run["train_size"], run["width"], int(run["steps"]), run.get("stop_at"), run.get("data", "fixed"),
            run["seed"], float(run["lr"]))


def spec_key(spec: dict, cfg: dict) -> tuple:
    """:func:`run_key` of the run ``spec`` (a cell of :func:`plan_cells` with ``seed`` and ``lr``) under ``cfg``."""
    task = cfg["mqar"]
    return run_key({**spec, "seq_len": task["seq_len"], "vocab_size": task["vocab_size"],
                    "filler": task.get("filler", "random"), "train_size": cfg["train_size"], "width": cfg["width"],
                    "steps": cfg["steps"], **protocol_fields(cfg)})


def protocol_fields(cfg: dict) -> dict:
    """What a run of ``cfg`` records of its protocol beyond ``steps``: ``stop_at`` and ``data`` (none of either in
    the old protocol, whose records lack them)."""
    out = {"stop_at": float(cfg["stop_at"])} if cfg.get("stop_at") is not None else {}
    return {**out, "data": "fresh"} if cfg.get("fresh") else out


def protocol(run: dict) -> str:
    """``"old"`` for a run recorded before the runs to convergence (no ``stopped``: a fixed ``steps``), else
    ``"to convergence"`` (stopped at ``stop_at`` or at the cap); ``", fresh data"`` where its sequences were drawn
    new every step."""
    name = "old" if "stopped" not in run else "to convergence" if run.get("stop_at") is not None else "fixed steps"
    return name + (", fresh data" if run.get("data") == "fresh" else "")


def rose_at_the_end(curve, fraction: float = RISE[0], by: float = RISE[1]) -> bool | None:
    """Whether a validation curve (``[[step, accuracy], ...]``) rose by more than ``by`` over the last ``fraction``
    of its steps: its last accuracy against the last one at or before ``(1 - fraction)`` of its last step. None
    without a curve of two points."""
    if not curve or len(curve) < 2:
        return None
    last_step, last = curve[-1]
    start = next((a for s, a in reversed(curve) if s <= (1 - fraction) * last_step), curve[0][1])
    return last - start > by


def _cell_of(runs: list[dict], cell: dict, cfg: dict) -> dict:
    """``{(seed, lr): run}``: the runs of ``cell`` trained under this budget."""
    want = spec_key({**cell, "seed": 0, "lr": 0.0}, cfg)[:-2]
    return {(r["seed"], float(r["lr"])): r for r in runs if run_key(r)[:-2] == want}


def rate_state(runs: list[dict], cell: dict, cfg: dict) -> dict:
    """The cell's search, as :func:`seqlab.experiments.arena_grid.rate_grid` says it: the rates searched (seed 0,
    extended one step beyond an edge while the best sits there), the seed-0 validation accuracies, the rate chosen
    (None while the search runs) and whether it is still at an edge. Runs to convergence are ranked at their
    validation accuracy capped at ``stop_at``: every rate that converged ties (then the rate inside the grid, then the
    smaller, as :func:`.rate_search.best_rate` breaks ties), so that the noise above 0.99 extends no search."""
    mine = _cell_of(runs, cell, cfg)
    by_lr = {lr: r["validation_accuracy"] for (seed, lr), r in mine.items() if seed == 0}
    cap = cfg.get("stop_at")
    scores = {lr: v if cap is None else min(v, cap) for lr, v in by_lr.items()}
    rates = search_rates(scores, cfg)
    chosen = best_rate(scores, rates) if all(lr in scores for lr in rates) else None
    return {"rates": rates, "searched": {str(lr): by_lr[lr] for lr in rates if lr in by_lr}, "chosen": chosen,
            "extended": len(rates) > len(cfg["lrs"]), "at_edge": at_edge(chosen, rates)}


def seed_rates(runs: list[dict], cell: dict, cfg: dict) -> dict:
    """Where the seeds run. First at seed 0's best rate (:func:`rate_state`). When seed 0 reached ``learned_at``
    (validation accuracy) there and another seed did not, the seeds run again at seed 0's next-best rate that also
    reached it, and so on down seed 0's ranking: one seed's lucky rate is not the family's rate. The cell keeps the
    rate tried at which the most seeds reached ``learned_at``; ties go to the rate tried first. Only validation
    accuracy chooses (the test split decides nothing).

    ``{"tried": [rates in the order the seeds ran at them], "rate": the cell's rate (None while a seed is missing),
    "todo": [(seed, rate) still to run]}``."""
    grid = rate_state(runs, cell, cfg)
    if grid["chosen"] is None:
        return {"tried": [], "rate": None, "todo": []}
    have, seeds, bar = _cell_of(runs, cell, cfg), range(cfg["seeds"]), cfg["learned_at"]
    seed0 = {float(lr): v for lr, v in grid["searched"].items()}
    reached = lambda lr: [s for s in seeds if have[(s, lr)]["validation_accuracy"] >= bar]   # noqa: E731
    ranked = sorted((lr for lr, v in seed0.items() if v >= bar and lr != grid["chosen"]), key=lambda lr: -seed0[lr])
    tried = [grid["chosen"]]
    while True:
        todo = [(s, tried[-1]) for s in seeds if (s, tried[-1]) not in have]
        if todo:
            return {"tried": tried, "rate": None, "todo": todo}
        missed = seed0[tried[-1]] >= bar and len(reached(tried[-1])) < len(seeds)
        if not (missed and ranked):
            break
        tried.append(ranked.pop(0))
    rate = max(tried, key=lambda lr: (len(reached(lr)), -tried.index(lr)))
    return {"tried": tried, "rate": rate, "todo": []}


def next_specs(runs: list[dict], cell: dict, cfg: dict) -> list[dict]:
    """The runs ``cell`` needs next: the seed-0 rates its search still lacks, else the other seeds at the rate
    :func:`seed_rates` has them at (empty once the cell is whole)."""
    grid = rate_state(runs, cell, cfg)
    if grid["chosen"] is None:
        have = _cell_of(runs, cell, cfg)
        todo = [(0, lr) for lr in grid["rates"] if (0, lr) not in have]
    else:
        todo = seed_rates(runs, cell, cfg)["todo"]
    return [{**cell, "seed": s, "lr": float(lr)} for s, lr in todo]


def cell_rows(runs: list[dict], cells: list[dict], cfg: dict) -> list[dict]:
    """What the record says of each cell: its width, parameters and state, the rates searched and the one chosen,
    and the test accuracy of every seed at the chosen rate (mean, sample spread, min); of those runs, the seeds
    ``still_learning`` at the cap (recorded by the runs to convergence), those whose curve ``rose`` at the end
    without converging (:func:`rose_at_the_end`, any protocol), ``protocol`` (:func:`protocol`, "old" where any run is), and
    ``no_commit``, ``dirty``: the seeds whose run recorded no commit, or ``seqlab/`` changed from it."""
    import statistics

    rows = []
    for cell in cells:
        grid, seeded = rate_state(runs, cell, cfg), seed_rates(runs, cell, cfg)
        mine = _cell_of(runs, cell, cfg)
        chosen = seeded["rate"] if seeded["rate"] is not None else grid["chosen"]
        at = [mine[(s, chosen)] for s in range(cfg["seeds"]) if (s, chosen) in mine]
        acc = [r["accuracy"] for r in at]
        status = ("not started" if not grid["searched"] else "searching" if grid["chosen"] is None
                  else "seeds pending" if seeded["rate"] is None else "done")
        rows.append({k: cell[k] for k in ("family", "cell", "group", "knobs", "pairs", "d_model", "params",
                                          "target_params", "budget", "matched", "state_size")}
                    | {"lr_grid": grid["rates"], "searched": grid["searched"], "chosen_lr": chosen,
                       "seed0_best_lr": grid["chosen"], "seeds_tried_at": seeded["tried"],
                       "lr_extended": grid["extended"], "lr_at_edge": at_edge(chosen, grid["rates"]) if chosen
                       else grid["at_edge"], "status": status,
                       "accuracy": acc, "mean": round(statistics.fmean(acc), 6) if acc else None,
                       "spread": round(statistics.stdev(acc), 6) if len(acc) > 1 else None,
                       "min": min(acc) if acc else None}
                    | {"state_per_layer": cell.get("state_per_layer"),
                       "protocol": min((protocol(r) for r in at), key=lambda p: p != "old", default=None),
                       "still_learning": [r["seed"] for r in at if r.get("still_learning")],
                       "converged": [r["seed"] for r in at if r.get("stopped") == "converged"],
                       "rose": [r["seed"] for r in at if r.get("stopped") != "converged"
                                and rose_at_the_end(r.get("curve"))],
                       "no_commit": [r["seed"] for r in at if not r.get("commit")],
                       "dirty": [r["seed"] for r in at if r.get("dirty")]})
    return rows


def control_verdicts(rows: list[dict], cfg: dict) -> dict:
    """``{pairs: verdict}`` of the reference at each number of pairs: ``"learned"`` when every seed at its chosen
    rate reached ``threshold`` (test accuracy), ``"inconclusive: the control did not learn"`` when one missed it
    (no family is then ranked at that number of pairs), ``"undecided: the control was still learning at the cap"``
    when a seed that missed it was still learning, ``"control not run yet"`` before its seeds are in. A seed whose
    run stopped converged, at a ``stop_at`` of ``threshold`` or more, learned: stopped at the first validation
    accuracy of 0.99, its test accuracy falls on either side of 0.99 by the splits' sampling alone."""
    out = {}
    for row in rows:
        if row["group"] != "reference":
            continue
        if row["status"] != "done":
            verdict = "control not run yet"
        elif all(a >= cfg["threshold"] or (s in (row.get("converged") or ()) and cfg.get("stop_at") is not None
                                           and cfg["stop_at"] >= cfg["threshold"])
                 for s, a in enumerate(row["accuracy"])):
            verdict = "learned"
        elif any(row["accuracy"][s] < cfg["threshold"] for s in row.get("still_learning") or ()):
            verdict = "undecided: the control was still learning at the cap"
        else:
            verdict = "inconclusive: the control did not learn"
        out[str(row["pairs"])] = {"verdict": verdict, "threshold": cfg["threshold"], "accuracy": row["accuracy"]}
    return out
