"""Reading the arena's results (:mod:`seqlab.experiments.arena`; lesson 08 and the results page read them): the
results file (:func:`load`; the medium grid with the families of a later sitting beside it: :func:`load_with_delta`),
the rows at each cell's chosen rate (:func:`summarize`), the runs of one task (:func:`cell_runs`), the positive
controls' verdicts (:func:`control_verdicts`; run again in the later sitting: :func:`control_replication`) and the
ranking (:func:`rank`).
"""
from __future__ import annotations

from pathlib import Path

from seqlab.experiments.arena_families import family_order
from seqlab.experiments.arena_grid import (TASKS, _is_base_length, chosen_lrs, control_specs, in_grid, rate_grid,
                                          run_key, sizes, spec_key)

__all__ = ["RESULTS_DIR", "default_out", "load", "sizes", "control_verdicts", "summarize", "base_rows", "cell_runs",
           "NOT_LEARNED", "MIN_GAP", "rank", "PROTOCOL", "MEDIUM", "MEDIUM_DELTA", "load_with_delta", "add_sitting",
           "check_same_protocol", "control_replication"]

RESULTS_DIR = Path(__file__).resolve().parents[2] / "results" / "arena"


def default_out(profile: str) -> Path:
    """``results/arena/<profile>.json`` (a config file's or folder's stem for a path)."""
    from seqlab.results import profile_tag

    return RESULTS_DIR / f"{profile_tag(profile)}.json"


def load(path) -> dict:
    """A results file (``{"runs": [], "controls": []}`` where there is none yet; :func:`seqlab.results.read`)."""
    from seqlab import results

    return results.read(path)


MEDIUM, MEDIUM_DELTA = "medium.json", "medium-delta.json"   # the medium grid; DeltaNet's and Gated DeltaNet's sitting

# The settings two sittings must share for their runs to stand in one table: the budget, the seeds, the rate grid,
# the tasks and their data, the matched size. (The families and the length sweep's families may differ.)
PROTOCOL = ("steps", "seeds", "lrs", "tasks", "base_width", "batch_size", "n_layers", "reference", "train_size",
            "validation_size", "test_size")


def load_with_delta(results_dir=RESULTS_DIR) -> dict:
    """The medium grid (``medium.json`` in ``results_dir``) with the later sitting of DeltaNet and Gated DeltaNet
    (``medium-delta.json``, the same protocol) beside it (:func:`add_sitting`); the grid alone where that file is
    not there. Either file may still be growing: a task the later sitting has not reached has no rows of its
    families yet."""
    results_dir = Path(results_dir)
    data = load(results_dir / MEDIUM)
    delta = results_dir / MEDIUM_DELTA
    return add_sitting(data, load(delta)) if delta.is_file() else data


def add_sitting(data: dict, later: dict) -> dict:
    """The record ``data`` with the runs of ``later`` (a sitting of the same protocol, :func:`check_same_protocol`,
    for other families) appended and its families added to the config's ``families`` (and to
    ``length_sweep_families`` where the config has it). The later sitting's positive controls are kept apart, under
    ``"delta_controls"``: the verdicts still come from ``data``'s controls, the later ones are a replication
    (:func:`control_replication`); ``"delta_families"`` lists the families it added. Neither argument is changed.
    """
    cfg, extra = data.get("config"), later.get("config")
    if not cfg or not extra:
        raise ValueError(f"{'data' if not cfg else 'later'}: a results file without a config cannot be merged")
    check_same_protocol(cfg, extra)
    both = sorted(set(cfg["families"]) & set(extra["families"]))
    if both:
        raise ValueError(f"later: families {both} are already in the first record; a later sitting adds families")
    merged = {**cfg, "families": [*cfg["families"], *extra["families"]]}
    if "length_sweep_families" in cfg:
        merged["length_sweep_families"] = [*cfg["length_sweep_families"],
                                           *extra.get("length_sweep_families", extra["families"])]
    return {**data, "config": merged, "runs": [*data["runs"], *later["runs"]],
            "delta_controls": list(later.get("controls", [])), "delta_families": list(extra["families"])}


def check_same_protocol(cfg: dict, later: dict) -> None:
    """Raise a ValueError naming the first setting on which the configs ``cfg`` and ``later`` differ: those of
    :data:`PROTOCOL`, then ``controls`` (each control's family, rate, threshold and init: the later sitting's runs
    of them are read beside the first's)."""
    for key in PROTOCOL:
        if cfg.get(key) != later.get(key):
            raise ValueError(f"{key}: the later sitting ran {later.get(key)!r}, the first {cfg.get(key)!r}; "
                             "runs of two protocols are not put in one table")
    if _control_settings(cfg) != _control_settings(later):
        raise ValueError(f"controls: the later sitting ran {_control_settings(later)!r}, the first "
                         f"{_control_settings(cfg)!r}")


def _control_settings(cfg: dict) -> dict:
    return {task: {k: c.get(k) for k in ("family", "lr", "threshold", "init")}
            for task, c in cfg.get("controls", {}).items()}


def control_verdicts(data: dict, cfg: dict) -> dict:
    """``{task: {"verdict", "family", "threshold", "accuracy"}}``: ``"ranked"`` when every seed of the task's
    positive control reached its threshold (test accuracy), ``"inconclusive: the control did not learn"`` when one
    missed it (the families are then not ranked on that task), ``"no control"`` when the profile has none, and
    ``"control not run yet"`` before its runs are in the file."""
    out = {}
    for task in cfg["tasks"]:
        control = cfg.get("controls", {}).get(task)
        if not control:
            out[task] = {"verdict": "no control"}
            continue
        keys = {spec_key(s, cfg) for s in control_specs(cfg, task)}
        acc = [r["accuracy"] for r in data.get("controls", []) if run_key(r) in keys]
        if len(acc) < len(keys):
            verdict = "control not run yet"
        elif min(acc) >= control["threshold"]:
            verdict = "ranked"
        else:
            verdict = "inconclusive: the control did not learn"
        out[task] = {"verdict": verdict, "family": control["family"], "threshold": control["threshold"],
                     "accuracy": acc}
    return out


def control_replication(data: dict, cfg: dict) -> dict:
    """``{task: {"family", "threshold", "accuracy", "passed"}}`` of the positive controls the later sitting ran
    again (``data["delta_controls"]``, :func:`load_with_delta`): ``accuracy`` per seed as far as they ran,
    ``passed`` True when every seed reached the threshold again, False when one missed it, None while some seeds
    have not run (and for a task without a control)."""
    again = control_verdicts({"controls": data.get("delta_controls", [])}, cfg)
    passed = {"ranked": True, "inconclusive: the control did not learn": False}
    return {task: {**{k: v for k, v in verdict.items() if k != "verdict"}, "passed": passed.get(verdict["verdict"])}
            for task, verdict in again.items()}


def summarize(runs: list[dict], cfg: dict) -> list[dict]:
    """One row per (family, task, width, seq_len) at the chosen rate: mean and spread (sample std) over seeds."""
    import statistics

    chosen = chosen_lrs(runs, cfg)
    cells: dict = {}
    for r in runs:
        if chosen.get((r["family"], r["task"])) == float(r["lr"]) and in_grid(r, cfg):
            cells.setdefault((r["family"], r["task"], r["width"], r["seq_len"]), []).append(r)
    rows = []
    for (family, task, width, seq_len), rs in sorted(cells.items(), key=lambda kv: (TASKS.index(kv[0][1])
                                                                                   if kv[0][1] in TASKS else 99,
                                                                                   family_order(kv[0][0]),
                                                                                   kv[0][2], kv[0][3])):
        acc = [r["accuracy"] for r in rs]
        grid = rate_grid(runs, cfg, family, task)
        rows.append({"family": family, "task": task, "width": width, "seq_len": seq_len, "lr": rs[0]["lr"],
                     "lr_grid": grid["rates"], "lr_extended": grid["extended"], "lr_at_edge": grid["at_edge"],
                     "d_model": rs[0]["d_model"], "params": rs[0]["params"], "state_size": rs[0]["state_size"],
                     "seeds": len(rs), "accuracy": statistics.fmean(acc),
                     "spread": statistics.stdev(acc) if len(acc) > 1 else 0.0,
                     "wall_s": statistics.fmean(r["wall_s"] for r in rs)})
    return rows


def base_rows(rows: list[dict], cfg: dict) -> list[dict]:
    """The rows of :func:`summarize` at the base budget: the base width, and MQAR at its base length."""
    return [r for r in rows if r["width"] == cfg["base_width"] and _is_base_length(r, cfg)]


def cell_runs(runs: list[dict], cfg: dict, task: str, *, chosen_only: bool = True) -> dict:
    """``{family: [run, ...]}`` of ``task`` at the base width and length, in this grid's setup: the runs at each
    family's chosen rate (``chosen_only``, the seeds a ranking averages), or every rate it searched."""
    chosen = chosen_lrs(runs, cfg)
    out: dict = {}
    for r in sorted(runs, key=lambda r: (family_order(r["family"]), float(r["lr"]), r["seed"])):
        if r["task"] != task or r["width"] != cfg["base_width"] or not _is_base_length(r, cfg) or not in_grid(r, cfg):
            continue
        if chosen_only and chosen.get((r["family"], task)) != float(r["lr"]):
            continue
        out.setdefault(r["family"], []).append(r)
    return out


NOT_LEARNED = 0.5      # a task whose best mean stays under this is "not learned", whatever the order below it
MIN_GAP = 0.01         # means closer than one point of accuracy are a tie, however small the seeds' spreads


def rank(rows: list[dict], verdicts: dict, cfg: dict) -> dict:
    """``{task: {"verdict", "leaders", "rows"}}`` at the base budget (``rows``: :func:`summarize`'s; ``verdicts``:
    :func:`control_verdicts`'). A family is named alone only where its mean beats the runner-up's by more than
    the two seeds' spreads together (and by more than :data:`MIN_GAP`: 0.999 against 1.000 is two solutions, not an
    order); otherwise the leaders within that margin are listed as a tie. No ranking:
    while the task's control has not run or did not learn (its verdict is repeated), while a family lacks seeds
    (``"pending"``), or when the best mean is under :data:`NOT_LEARNED`."""
    base = base_rows(rows, cfg)
    out = {}
    for task in cfg["tasks"]:
        mine = sorted((r for r in base if r["task"] == task), key=lambda r: -r["accuracy"])
        control = verdicts.get(task, {"verdict": "no control"})["verdict"]
        seeds = {r["family"]: r["seeds"] for r in mine}
        leaders: list = []
        if control not in ("ranked", "no control"):
            verdict = control
        elif any(seeds.get(f, 0) < cfg["seeds"] for f in cfg["families"]):
            verdict = f"pending: not every family has {cfg['seeds']} seeds yet"
        elif mine[0]["accuracy"] < NOT_LEARNED:
            verdict = f"not learned at this budget (best below {NOT_LEARNED})"
        else:
            top = mine[0]
            leaders = [top["family"]] + [r["family"] for r in mine[1:]
                                         if top["accuracy"] - r["accuracy"] <= max(MIN_GAP, top["spread"] + r["spread"])]
            verdict = (top["family"] if len(leaders) == 1 else
                       "tie: every family" if len(leaders) == len(mine) else "tie: " + ", ".join(leaders))
        out[task] = {"verdict": verdict, "leaders": leaders, "rows": mine}
    return out
