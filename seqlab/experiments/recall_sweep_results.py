"""What the recall sweep's record says (:mod:`.recall_sweep`), read from its cells (:func:`.recall_sweep_plan.cell_rows`):
the smallest state at which each family recalls (:func:`thresholds`), the frontier of accuracy against state
(:func:`frontier`), and what a short convolution, Based's feature map and LightNet's TPE change against the same
cell without them (:func:`effects`), or against the cell without them nearest in state, within 10 %
(:func:`matched_effects`). Only finished cells (every seed at the chosen rate) count, and a difference counts only
where it exceeds the seeds' spreads (the arena's rule, :data:`.arena_results.MIN_GAP`).

No "does not recall" rests on a run that was still learning when it stopped (``still_learning``, recorded by the runs
to convergence, :mod:`.recall_sweep`): a failing cell with such a seed is ``undecided``, in the thresholds and in the
effects. Runs of the old protocol (6000 steps, no ``still_learning`` recorded) are read as they were; the plan of the
next sitting (:mod:`.recall_sweep_next`) trains again the failing cells whose curves rose at the end.
"""
from __future__ import annotations

from seqlab.experiments.arena_results import MIN_GAP

__all__ = ["RECALLS", "EFFECT_KNOBS", "STATE_KNOBS", "done", "chosen_runs", "thresholds", "frontier", "base_of",
           "effects", "matched_effects", "compare", "answers", "undecided"]

RECALLS = 0.9           # a cell recalls when every seed reaches this test accuracy
# what each group adds to the cell it is compared with: the knobs that, removed, name that cell
EFFECT_KNOBS = {"short-conv": ("short_conv",), "feature-map": ("feature_map", "feature_dim"), "ablation": ("tpe",)}
# the knobs that set a cell's state and width (a matched comparison lets them differ between the two cells)
STATE_KNOBS = ("n_heads", "d_state", "d_model", "d_mlp", "state_expansion", "expand_k", "expand_v")
MATCHED = 0.10          # a matched comparison: the two states within 10 %


def undecided(row: dict, level: float) -> bool:
    """Whether a finished cell that misses ``level`` in some seed rests that on a seed still learning at the cap."""
    return any(row["accuracy"][s] < level for s in row.get("still_learning") or ())


def done(rows: list[dict]) -> list[dict]:
    """The cells with every seed in at their chosen rate."""
    return [r for r in rows if r["status"] == "done"]


def chosen_runs(row: dict, runs: list[dict]) -> list[dict]:
    """The runs of the cell ``row`` at its chosen rate (one per seed in); empty while no rate is chosen."""
    if row["chosen_lr"] is None:
        return []
    return [r for r in runs if r["cell"] == row["cell"] and r["pairs"] == row["pairs"]
            and float(r["lr"]) == float(row["chosen_lr"])]


def thresholds(rows: list[dict], level: float = RECALLS) -> dict:
    """``{pairs: {family: {...}}}`` over each family's ``state`` cells: ``"state"``, the smallest state at which every
    seed reached ``level`` (None where none did), ``"sizes"``, the states finished and decided, ``"pending"``, those
    not yet finished (a threshold read while smaller sizes are pending may still move down), and ``"undecided"``,
    the finished states that missed ``level`` in a seed still learning at the cap (:func:`undecided`: not a "does
    not recall"; the threshold may move down to one of them)."""
    out: dict = {}
    for r in rows:
        if r["group"] != "state":
            continue
        entry = out.setdefault(r["pairs"], {}).setdefault(r["family"], {"state": None, "sizes": [], "pending": [],
                                                                          "undecided": []})
        if r["status"] != "done":
            entry["pending"].append(r["state_size"])
            continue
        if undecided(r, level):
            entry["undecided"].append(r["state_size"])
            continue
        entry["sizes"].append(r["state_size"])
        if r["min"] >= level and (entry["state"] is None or r["state_size"] < entry["state"]):
            entry["state"] = r["state_size"]
    for by_family in out.values():
        for entry in by_family.values():
            entry["sizes"].sort()
            entry["pending"].sort()
            entry["undecided"].sort()
    return out


def frontier(rows: list[dict]) -> dict:
    """``{pairs: [(state, mean accuracy, cell), ...]}``: the finished cells no smaller state beats (the best mean
    accuracy reached at that state or below), by increasing state."""
    out: dict = {}
    for pairs in sorted({r["pairs"] for r in rows}):
        best = -1.0
        for r in sorted(done([r for r in rows if r["pairs"] == pairs]), key=lambda r: (r["state_size"], -r["mean"])):
            if r["mean"] > best:
                best = r["mean"]
                out.setdefault(pairs, []).append((r["state_size"], r["mean"], r["cell"]))
    return out


def _knobs_without(knobs: dict, names) -> dict:
    return {k: v for k, v in knobs.items() if k not in (*names, "d_model")}


def base_of(row: dict, rows: list[dict], group: str | None = None) -> dict | None:
    """The cell ``row`` is compared with for the addition ``group`` (a short convolution, a feature map or an
    ablation; None: the row's own group): the same family at the same number of pairs with that group's knobs
    removed (``d_model`` aside), None when the plan has none."""
    want = _knobs_without(row["knobs"], EFFECT_KNOBS[group or row["group"]])
    return next((r for r in rows if r is not row and r["family"] == row["family"] and r["pairs"] == row["pairs"]
                 and _knobs_without(r["knobs"], ()) == want), None)


def compare(a: dict, b: dict) -> str:
    """``"higher"``, ``"lower"`` or ``"tie"``: ``a``'s mean against ``b``'s, a difference counted only beyond both
    seeds' spreads together and beyond :data:`MIN_GAP`."""
    gap = a["mean"] - b["mean"]
    if abs(gap) <= max(MIN_GAP, (a["spread"] or 0.0) + (b["spread"] or 0.0)):
        return "tie"
    return "higher" if gap > 0 else "lower"


def effects(rows: list[dict]) -> list[dict]:
    """Each addition a cell of the groups of :data:`EFFECT_KNOBS` carries, against the same cell without it
    (:func:`base_of`; a cell with two, as Based's feature map with a short convolution, gives one row for each):
    ``{"cell", "base", "pairs", "group", "mean", "base_mean", "difference", "verdict"}``, ``group`` the addition
    measured; the verdict is :func:`compare`'s ("higher": the addition helped), ``"pending"`` while either cell
    lacks seeds, or ``"undecided"`` where the lower of the two has a seed still learning at the cap."""
    out = []
    for r in rows:
        if r["group"] not in EFFECT_KNOBS:
            continue
        for group, names in EFFECT_KNOBS.items():
            base = base_of(r, rows, group) if set(names) & set(r["knobs"]) else None
            if base is None:
                continue
            ready = r["status"] == "done" and base["status"] == "done"
            out.append({"cell": r["cell"], "base": base["cell"], "pairs": r["pairs"], "group": group,
                        "mean": r["mean"] if ready else None, "base_mean": base["mean"] if ready else None,
                        "difference": round(r["mean"] - base["mean"], 6) if ready else None,
                        "verdict": _verdict(r, base) if ready else "pending"})
    return out


def _verdict(row: dict, base: dict) -> str:
    """:func:`compare`, ``"undecided"`` where the cell found lower has a seed still learning at the cap."""
    said = compare(row, base)
    lower = base if said == "higher" else row if said == "lower" else None
    return "undecided" if lower is not None and lower.get("still_learning") else said


def _without(knobs: dict, names) -> dict:
    return {k: v for k, v in knobs.items() if k not in (*names, *STATE_KNOBS)}


def matched_effects(rows: list[dict], tolerance: float = MATCHED) -> list[dict]:
    """Each addition against the cell without it whose state is nearest its own, within ``tolerance`` (the two
    may differ in the knobs of :data:`STATE_KNOBS`, heads or widths, and in nothing else): the question "at the same
    state, does the addition recall more?". Rows as :func:`effects`' with ``"state"``, ``"base_state"`` and
    ``"ratio"`` (the cell's state over the base's); cells without a base within ``tolerance`` give none."""
    out = []
    for r in rows:
        if r["group"] not in EFFECT_KNOBS:
            continue
        for group, names in EFFECT_KNOBS.items():
            if not set(names) & set(r["knobs"]):
                continue
            want = _without(r["knobs"], names)
            near = [b for b in rows if b is not r and b["family"] == r["family"] and b["pairs"] == r["pairs"]
                    and not set(names) & set(b["knobs"]) and _without(b["knobs"], ()) == want
                    and abs(r["state_size"] / b["state_size"] - 1) <= tolerance]
            if not near:
                continue
            base = min(near, key=lambda b: abs(r["state_size"] / b["state_size"] - 1))
            ready = r["status"] == "done" and base["status"] == "done"
            out.append({"cell": r["cell"], "base": base["cell"], "pairs": r["pairs"], "group": group,
                        "state": r["state_size"], "base_state": base["state_size"],
                        "ratio": round(r["state_size"] / base["state_size"], 4),
                        "mean": r["mean"] if ready else None, "base_mean": base["mean"] if ready else None,
                        "difference": round(r["mean"] - base["mean"], 6) if ready else None,
                        "verdict": _verdict(r, base) if ready else "pending"})
    return out


def answers(row: dict, runs: list[dict]) -> dict | None:
    """How the cell's seeds at its chosen rate answered their test queries, summed over the seeds
    (:func:`seqlab.tasks.recall.mqar_answers`): ``"by_pair"``, the accuracy on the pair asked for, in the order the
    pairs were written (first to last: a state that forgets scores the first lowest); ``"another_value"``, the share
    of the wrong answers that are the value of another pair of the same sequence (the value read, its key confused);
    ``"wrong"``, how many were wrong. None until every seed is in with its answers."""
    mine = chosen_runs(row, runs)
    if row["status"] != "done" or len(mine) != len(row["accuracy"]) or any(not r.get("answers") for r in mine):
        return None
    pairs = [[sum(r["answers"]["by_pair"][i][k] for r in mine) for k in (0, 1)] for i in range(row["pairs"])]
    wrong = sum(r["answers"]["wrong"] for r in mine)
    return {"by_pair": [round(c / n, 6) for c, n in pairs], "wrong": wrong,
            "another_value": round(sum(r["answers"]["another_value"] for r in mine) / wrong, 6) if wrong else None}

