"""The recall sweep's next sitting (the frontier measured, not bracketed): the cells to run, under which
protocol, and what they cost, read from a record (the finished medium one, ``results/arena/recall-sweep-medium.json``).

The protocol (:data:`PROTOCOL`): runs to convergence. Each run stops at the first evaluation whose validation
accuracy reaches 0.99, or at a cap of 12 000 steps (twice the old 6000; the cosine schedule spans the cap), and draws
its training sequences fresh at every step. Old runs cannot be continued to it: ``fit`` would resume them on the
schedule of the longer total (a jump from 0.1 to 0.55 of the rate at step 6000), and their checkpoints are gone
(:mod:`.recall_sweep`). So every cell of the new record is trained under the new protocol from step 0, the ends of a
bracket and the bases of an addition included: each comparison it makes is within one protocol.

What is proposed (:func:`propose`), each cell with why, in the order the budget is spent (:data:`TIERS`):

- ``control``: the Transformer at every number of pairs;
- ``refine`` (a): for each family and number of pairs where a size recalls (every seed at 0.9) and the next smaller
  does not, the two ends and sizes between them until neighbours differ by at most :data:`RATIO` in state (or no
  setting of the family's state knob between them holds the budget: then the gap left is said);
- ``undecided``: the failing cells whose verdict rests on a seed whose curve still rose at the end (the old protocol
  records no ``still_learning``; :func:`.recall_sweep_plan.rose_at_the_end` reads it from the curve);
- ``delta`` (e): DeltaNet and Gated DeltaNet at three settings of their knobs (:data:`DELTA_KNOBS`, the same for
  both), spanning more than 8x of state, at every number of pairs;
- ``addition`` (b): each addition (a short convolution on GateLoop, the Linear Transformer and the LRNN; Based's
  Taylor map on the Linear Transformer; LightNet's TPE) against the cell without it whose state is within 10 %
  (:func:`.recall_sweep_results.matched_effects` reads them), at two sizes;
- ``state-alone`` (c): the LRNN at ``d_model`` 48 held, ``d_state`` 16 to 256, its MLP's width ``d_mlp`` chosen so
  that the parameters stay at the budget (the state moves alone); the linear CausalRN has no such knob (its state is
  its hidden width, the width of all its weights), so it runs at the budget held with ``d_model`` narrowed
  (``state_expansion`` 1 to 64), each cell's width and budget recorded;
- ``long`` (d): 16 pairs at 128 tokens (a profile of its own) for the families that recall 8 pairs, with the
  Transformer as its control.

The estimate (:func:`estimate`) comes from the recorded ``wall_s`` of the most similar cell of the record (the same
family, group and number of pairs where there is one, the nearest state): its runs again, each for the steps it took
to reach 0.99 validation accuracy (the cap where it did not), at its seconds a step, times the length ratio. DeltaNet
has no run in the sweep: its seconds a step are the sweep's Transformer's at the same number of pairs times the ratio
of their training steps timed back to back (``tools/recall_sweep.py plan`` times them; without a timing, its arena
runs' over the arena's Transformer), every run at the cap, as many runs as the sweep's cells averaged.
:func:`select` spends a budget (the issue: at most 60 CPU-hours, said before starting) in that order and defers the
rest; ``tools/recall_sweep.py plan`` prints it and writes the profiles (:func:`profile_text`).
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from seqlab.experiments import recall_sweep_plan as P
from seqlab.experiments.recall_sweep_results import RECALLS, undecided

__all__ = ["PROTOCOL", "RATIO", "TIERS", "DELTA_KNOBS", "LRNN_STATES", "CAUSALRN_EXPANSIONS", "LONG", "propose",
           "refine", "brackets", "estimate", "select", "profile_text", "profile_cfg", "flags", "lrnn_cell",
           "arena_times", "order"]

PROTOCOL = {"steps": 12000, "stop_at": 0.99, "fresh": True}
RATIO = 1.5
TIERS = ("control", "refine", "undecided", "delta", "addition", "state-alone", "long")
STATE_KNOB = {"gateloop": "n_heads", "linear-transformer": "n_heads", "lightnet": "n_heads", "lrnn": "d_state",
              "linear-causalrn": "state_expansion", "deltanet": "n_heads", "gated-deltanet": "n_heads"}
DELTA_KNOBS = ({"n_heads": 4}, {"n_heads": 2, "expand_v": 2.0}, {"n_heads": 1, "expand_k": 2.0, "expand_v": 4.0})
LRNN_STATES, LRNN_WIDTH = (16, 32, 64, 128, 256), 48
CAUSALRN_EXPANSIONS = (1, 4, 16, 64)
HEADS = (1, 2, 3, 4, 6, 8, 12, 13, 16)
LONG = {"seq_len": 128, "pairs": [16]}


def _sized(family: str, knobs: dict, cfg: dict) -> dict | None:
    """``{"knobs", "state", **width}`` of a cell, or None where no width holds the budget (or it does not build)."""
    try:
        width = P.cell_width(family, knobs, cfg)
        state = P._built(family, P._knobs_json(knobs), width["d_model"], cfg["n_layers"], cfg["mqar"]["seq_len"])[1]
    except (ValueError, TypeError):
        return None
    return {"family": family, "knobs": dict(knobs), "state": state, **width}


def lrnn_cell(d_state: int, cfg: dict, **extra) -> dict | None:
    """The LRNN at ``d_model`` 48 held and ``d_state``, its ``d_mlp`` chosen for the parameters nearest the budget
    (the count is linear in ``d_mlp``); None where none comes within 10 %."""
    knobs = {"d_model": LRNN_WIDTH, "d_state": d_state, **extra}
    one, two = (P.cell_width("lrnn", {**knobs, "d_mlp": m}, cfg) for m in (1, 2))
    slope = two["params"] - one["params"]
    best = max(1, round(1 + (one["target_params"] - one["params"]) / slope))
    cell = _sized("lrnn", {**knobs, "d_mlp": best}, cfg)
    return cell if cell and abs(cell["budget"] - 1) <= 0.1 else None


def _between(lo, hi) -> list[int]:
    """Integer settings strictly between two of a knob (a geometric sample of 16 where there are more)."""
    lo, hi = sorted((int(lo), int(hi)))
    if hi - lo <= 17:
        return list(range(lo + 1, hi))
    return sorted({round(lo * (hi / lo) ** (i / 16)) for i in range(1, 16)} - {lo, hi})


def refine(lo: dict, hi: dict, cfg: dict) -> tuple[list[dict], str]:
    """Cells between the cell rows ``lo`` (fails) and ``hi`` (recalls) of one family: the fewest settings of its state
    knob whose states step from ``lo``'s to ``hi``'s by at most :data:`RATIO`; where no setting between holds the
    budget, the nearest step larger than that. Returns the cells and a note of the largest ratio left."""
    knob = STATE_KNOB[lo["family"]]
    cands = [c for v in _between(lo["knobs"][knob], hi["knobs"][knob])
             if (c := _sized(lo["family"], {**lo["knobs"], knob: v}, cfg))
             and lo["state_size"] < c["state"] < hi["state_size"]]
    picked, cur = [], lo["state_size"]
    while hi["state_size"] / cur > RATIO:
        ahead = [c for c in cands if c["state"] > cur]
        if not ahead:
            break
        within = [c for c in ahead if c["state"] / cur <= RATIO]
        nxt = max(within, key=lambda c: c["state"]) if within else min(ahead, key=lambda c: c["state"])
        picked.append(nxt)
        cur = nxt["state"]
    states = [lo["state_size"], *(c["state"] for c in picked), hi["state_size"]]
    worst = max(b / a for a, b in zip(states, states[1:]))
    note = (f"steps of at most {worst:.2f}" if worst <= RATIO else
            f"a step of {worst:.2f} left: no {knob} between holds the budget within 10 %")
    return picked, note


def brackets(rows: list[dict]) -> list[tuple[dict, dict]]:
    """``[(lo, hi), ...]``: each family's finished state cells at one number of pairs where ``hi`` recalls (every seed
    at :data:`RECALLS`) and the next smaller, ``lo``, does not (and is not undecided)."""
    out = []
    for key in sorted({(r["family"], r["pairs"]) for r in rows if r["group"] == "state" and r["status"] == "done"}):
        line = sorted((r for r in rows if (r["family"], r["pairs"]) == key and r["group"] == "state"
                       and r["status"] == "done"), key=lambda r: r["state_size"])
        out += [(a, b) for a, b in zip(line, line[1:])
                if b["min"] >= RECALLS > a["min"] and not undecided(a, RECALLS)]
    return out


def _additions(cfg: dict) -> list[tuple[str, list[tuple[dict, str]], list[tuple[dict, str]]]]:
    """``[(name, [(addition cell, group)], [(base cell, group)])]``: the candidate cells of each addition and of its
    base over the family's state knob."""
    def over(family, extra, values=HEADS, knob="n_heads"):
        return [c for v in values if (c := _sized(family, {knob: v, **extra}, cfg))]
    taylor = [c for f in (2, 3, 4) for c in over("linear-transformer", {"feature_map": "taylor", "feature_dim": f})]
    lrnn_conv = [c for s in LRNN_STATES if (c := lrnn_cell(s, cfg, short_conv=4))]
    lrnn_base = [c for s in sorted({*LRNN_STATES, *(s + 72 for s in LRNN_STATES)}) if (c := lrnn_cell(s, cfg))]
    return [("short convolution on GateLoop", [(c, "short-conv") for c in over("gateloop", {"short_conv": 4})],
             [(c, "state") for c in over("gateloop", {})]),
            ("short convolution on the Linear Transformer",
             [(c, "short-conv") for c in over("linear-transformer", {"short_conv": 4})],
             [(c, "state") for c in over("linear-transformer", {})]),
            ("short convolution on the LRNN (d_model 48)", [(c, "short-conv") for c in lrnn_conv],
             [(c, "state") for c in lrnn_base]),
            ("Based's Taylor map on the Linear Transformer", [(c, "feature-map") for c in taylor],
             [(c, "state") for c in over("linear-transformer", {})]),
            ("LightNet's TPE", [(c, "state") for c in over("lightnet", {})],
             [(c, "ablation") for c in over("lightnet", {"tpe": False})])]


def _matched(adds, bases, sizes: int = 2) -> list[tuple]:
    """``sizes`` pairs (addition, base) with states within 10 %, as far apart in state as there are."""
    pairs = [(a, b) for a in adds for b in bases if abs(a[0]["state"] / b[0]["state"] - 1) <= 0.1]
    best = {}
    for a, b in pairs:                    # per addition cell: its nearest base
        if a[0]["state"] not in best or abs(a[0]["state"] / b[0]["state"] - 1) < abs(
                best[a[0]["state"]][0][0]["state"] / best[a[0]["state"]][1][0]["state"] - 1):
            best[a[0]["state"]] = (a, b)
    ranked = [best[s] for s in sorted(best)]
    if len(ranked) <= sizes:
        return ranked
    return [ranked[round(i * (len(ranked) - 1) / (sizes - 1))] for i in range(sizes)]


def _entry(family, group, knobs, pairs, tier, why, profile="frontier", unit=None) -> dict:
    """One cell at one number of pairs; ``unit``: the entries the budget takes or defers together (a bracket, an
    addition and its base), by default the entry alone."""
    return {"family": family, "group": group, "knobs": dict(knobs), "pairs": pairs, "tier": tier, "why": why,
            "profile": profile, "unit": unit or f"{profile} {P.cell_label({'family': family, 'knobs': knobs})} {pairs}"}


def propose(rows: list[dict], cfg: dict) -> tuple[list[dict], list[str]]:
    """Every cell of the next sitting, one entry per cell and number of pairs, with its ``tier`` and ``why``; and the
    notes (gaps left, cells superseded). ``rows``: the record's cells (:func:`.recall_sweep_plan.cell_rows`)."""
    out, notes = [], []
    every = list(cfg["pairs"])
    out += [_entry(cfg["reference"], "reference", {}, p, "control", "the control") for p in every]
    for lo, hi in brackets(rows):
        cells, note = refine(lo, hi, cfg)
        notes.append(f"{lo['family']} at {lo['pairs']} pairs: {lo['state_size']:,} -> {hi['state_size']:,}, {note}")
        unit = f"refine {lo['family']} {lo['pairs']}"
        for c, why in [(lo, "bracket end (fails)"), (hi, "bracket end (recalls)")]:
            out.append(_entry(c["family"], "state", c["knobs"], c["pairs"], "refine", why, unit=unit))
        out += [_entry(lo["family"], "state", c["knobs"], lo["pairs"], "refine",
                       f"between {lo['state_size']:,} and {hi['state_size']:,}", unit=unit) for c in cells]
    series = {c["state"]: c for s in LRNN_STATES if (c := lrnn_cell(s, cfg))}
    for r in rows:
        if r["status"] != "done" or r["group"] == "reference" or not r["accuracy"]:
            continue
        failing_rose = [s for s in r.get("rose") or () if r["accuracy"][s] < RECALLS]
        if min(r["accuracy"]) >= RECALLS or not failing_rose:
            continue
        if r["family"] == "lrnn" and "d_mlp" not in r["knobs"] and r["state_size"] in series:
            notes.append(f"{r['cell']} at {r['pairs']} pairs (rose at the end): superseded by the LRNN of d_model "
                         f"{LRNN_WIDTH} at the same state ({r['state_size']:,} floats)")
            continue
        out.append(_entry(r["family"], r["group"], r["knobs"], r["pairs"], "undecided",
                          f"failed with seed {', '.join(map(str, failing_rose))} still rising at {cfg['steps']} steps"))
    for family in ("deltanet", "gated-deltanet"):
        for k in DELTA_KNOBS:
            if _sized(family, k, cfg) is None:
                notes.append(f"{P.cell_label({'family': family, 'knobs': k})}: no width holds the budget")
                continue
            out += [_entry(family, "state", k, p, "delta", "a state size of the delta rule",
                           unit=f"delta {family} {p}") for p in every]
    for name, adds, bases in _additions(cfg):
        matched = _matched(adds, bases)
        if len(matched) < 2:
            notes.append(f"{name}: {len(matched)} size(s) with a base within 10 % of its state")
        for (a, ga), (b, gb) in matched:
            why = f"{name}: {a['state']:,} against {b['state']:,} floats"
            out += [_entry(c["family"], g, c["knobs"], p, "addition", why, unit=f"{why} {p}")
                    for c, g in ((a, ga), (b, gb)) for p in every]
    for c in series.values():
        out += [_entry("lrnn", "state", c["knobs"], p, "state-alone",
                       f"d_state alone: d_model {LRNN_WIDTH}, d_mlp {c['knobs']['d_mlp']} for the budget",
                       unit=f"state-alone lrnn {p}") for p in every]
    for e in CAUSALRN_EXPANSIONS:
        if (c := _sized("linear-causalrn", {"state_expansion": e}, cfg)):
            out += [_entry("linear-causalrn", "state", c["knobs"], p, "state-alone",
                           f"the budget held: d_model {c['d_model']} (its state is its width)",
                           unit=f"state-alone linear-causalrn {p}") for p in every]
    at8 = [r for r in rows if r["pairs"] == 8 and r["status"] == "done" and r["group"] != "reference"
           and r["min"] >= RECALLS]
    long = [r for r in rows if r["pairs"] == 8 and r["status"] == "done" and (r["cell"] in {a["cell"] for a in at8} or (
        r["group"] == "state" and r["family"] in {a["family"] for a in at8 if a["group"] == "state"}))]
    out += [_entry(cfg["reference"], "reference", {}, p, "long", "the control at 128 tokens", "frontier-128",
                   unit="long") for p in LONG["pairs"]]
    out += [_entry(r["family"], r["group"], r["knobs"], p, "long", "recalls 8 pairs (or its family does) at 64 tokens",
                   "frontier-128", unit="long") for r in long for p in LONG["pairs"]]
    seen, unique = set(), []
    for e in out:                         # a cell wanted twice runs once, in its first (cheapest-tier) reason
        key = (e["profile"], e["family"], P._knobs_json(e["knobs"]), e["pairs"])
        if key not in seen:
            seen.add(key)
            unique.append(e)
    return unique, notes


def _per_step(runs) -> float:
    return statistics.median(r["wall_s"] / r["steps"] for r in runs)


def profile_cfg(profile: str, cfg: dict) -> dict:
    """The sizes of a profile of the next sitting: ``cfg`` (the record's) under :data:`PROTOCOL`, at 128 tokens and
    16 pairs for ``frontier-128``."""
    out = {**cfg, **PROTOCOL}
    if profile == "frontier-128":
        out = {**out, "mqar": {**cfg["mqar"], "seq_len": LONG["seq_len"]}, "pairs": LONG["pairs"]}
    return out


def estimate(entry: dict, rows: list[dict], runs: list[dict], cfg: dict, arena: dict | None = None,
             protocol: dict = PROTOCOL, ratios: dict | None = None) -> dict:
    """``{"runs", "steps", "s_per_step", "cpu_h", "similar"}`` of one entry (module docstring), with its width
    (``d_model``, ``params``, ``budget``), ``state`` and ``state_per_layer`` at its profile's length."""
    sized = _sized(entry["family"], entry["knobs"], profile_cfg(entry["profile"], cfg)) or {"state": 1}
    state = sized["state"]
    sizes = {k: sized.get(k) for k in ("d_model", "params", "budget", "state")}
    sizes["state_per_layer"] = P.per_layer(state, cfg["n_layers"])
    return {**sizes, **_cost(entry, state, rows, runs, cfg, arena, protocol, ratios or {})}


def _cost(entry, state, rows, runs, cfg, arena, protocol, ratios) -> dict:
    scale = (LONG["seq_len"] if entry["profile"] == "frontier-128" else cfg["mqar"]["seq_len"]) / cfg["mqar"]["seq_len"]
    same = [r for r in rows if r["family"] == entry["family"] and r["status"] == "done"]
    cap = protocol["steps"]
    state = max(state, 1)
    near = min(same, key=lambda r: (r["group"] != entry["group"], abs(math.log(r["pairs"] / entry["pairs"])),
                                    abs(math.log(r["state_size"] / state)))) if same else None
    mine = [r for r in runs if near and r["cell"] == near["cell"] and r["pairs"] == near["pairs"] and r.get("wall_s")]
    if mine:
        steps = statistics.fmean(r.get("steps_to_0.99") or cap for r in mine)
        per = _per_step(mine) * scale
        return {"runs": len(mine), "steps": round(steps), "s_per_step": round(per, 4),
                "cpu_h": len(mine) * steps * per / 3600, "similar": f"{near['cell']} at {near['pairs']} pairs"}
    reference = [r for r in runs if r["family"] == cfg["reference"] and r["pairs"] == entry["pairs"]]
    theirs = [r for r in (arena or {}).get("runs", []) if r["family"] == entry["family"]]
    n = round(len(runs) / max(1, len({(r["cell"], r["pairs"]) for r in runs})), 1)
    near = min(theirs, key=lambda r: abs(math.log(r["state_size"] / state))) if theirs else None
    ref_arena = [r for r in (arena or {}).get("reference_runs", []) if near and r["seq_len"] == near["seq_len"]
                 and r["d_model"] == (arena or {}).get("width")]
    ratio = ratios.get(P.cell_label(entry))
    if ratio and reference:                        # its step timed here against the Transformer's
        per = _per_step(reference) * ratio * scale
        similar = f"the sweep's Transformer at {entry['pairs']} pairs x {ratio:.2f} (their steps timed here)"
    elif near and ref_arena and reference:         # the family's runs at that width and length, medians
        like = [r for r in theirs if (r["d_model"], r["seq_len"]) == (near["d_model"], near["seq_len"])]
        per = _per_step(like) * _per_step(reference) / _per_step(ref_arena) * scale
        similar = (f"arena {entry['family']} d_model {near['d_model']} ({near['state_size']:,} floats) x the sweep's "
                   "Transformer over the arena's")
    else:
        per, similar = 3 * _per_step(reference or runs) * scale, "3x the Transformer (no run of the family)"
    return {"runs": n, "steps": cap, "s_per_step": round(per, 4), "cpu_h": n * cap * per / 3600, "similar": similar}


def order(entry: dict, cfg: dict) -> tuple:
    """Where an entry comes in the budget: its tier; the delta rule, the additions and the state-alone cells by number
    of pairs first (the three at the fewest pairs before any at more)."""
    tier = TIERS.index(entry["tier"])
    if entry["tier"] in ("delta", "addition", "state-alone"):
        return (TIERS.index("delta") + cfg["pairs"].index(entry["pairs"]) / 10, tier)
    return (tier, 0)


def select(entries: list[dict], budget: float, cfg: dict) -> tuple[list[dict], list[dict]]:
    """``(chosen, deferred)``: whole units of entries (a bracket with the sizes between, an addition with its base,
    the long profile with its control; each with its ``cpu_h``) taken in :func:`_order` where the sum stays within
    ``budget`` (a cheaper unit after a deferred one still fits); the controls always."""
    units: dict = {}
    for e in sorted(entries, key=lambda e: order(e, cfg)):
        units.setdefault(e["unit"], []).append(e)
    chosen, deferred, total = [], [], 0.0
    for unit in units.values():
        cost = sum(e["cpu_h"] for e in unit)
        if all(e["tier"] == "control" for e in unit) or total + cost <= budget:
            chosen += unit
            total += cost
        else:
            deferred += unit
    return chosen, deferred


def flags(runs: list[dict], rows: list[dict], planned: list[dict] = ()) -> list[str]:
    """What the record's provenance says: runs without a commit, runs on changed code, and the cells whose chosen-rate
    seeds include them, each marked where ``planned`` (entries of :func:`propose`) trains it again under the new
    protocol."""
    again = {(P.cell_label(e), e["pairs"]) for e in planned if e["profile"] == "frontier"}
    out = [f"{sum(not r.get('commit') for r in runs)} of {len(runs)} runs recorded no commit; "
           f"{sum(bool(r.get('dirty')) for r in runs)} ran with seqlab/ changed from theirs (dirty)"]
    for key, what in (("no_commit", "no commit"), ("dirty", "dirty code")):
        cells = [f"{r['cell']} at {r['pairs']}" + (" (trained again)" if (r["cell"], r["pairs"]) in again else "")
                 for r in rows if r.get(key)]
        if cells:
            out.append(f"cells whose verdict rests on a run with {what}: {len(cells)}: {'; '.join(cells)}")
    return out


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"


def profile_text(entries: list[dict], base: dict, profile: str, header: list[str]) -> str:
    """A profile of the sweep (``configs/medium/<profile>/recall-sweep.toml``) for ``entries`` of that profile: the
    ``base`` sizes (the record's) under :data:`PROTOCOL`, one ``[[sizes.cells]]`` a cell with its pairs and why."""
    mine = [e for e in entries if e["profile"] == profile]
    cells: dict = {}
    for e in mine:
        cell = cells.setdefault((e["family"], e["group"], P._knobs_json(e["knobs"])), {**e, "pairs": [], "whys": []})
        cell["pairs"].append(e["pairs"])
        cell["whys"].append(e["why"])
    full = profile_cfg(profile, base)
    sizes = {k: v for k, v in full.items() if k not in ("cells", "mqar")}
    mqar = dict(full["mqar"])
    sizes["pairs"] = sorted({p for c in cells.values() for p in c["pairs"]})
    lines = [f"# {line}" if line else "#" for line in header]
    lines += ['experiment = "recall-sweep"',
              f"paper = {_toml('Zoology Fig. 2 / Based Fig. 2: MQAR recall against state size, runs to convergence')}",
              "estimated_time = " + _toml("about %.0f CPU-hours (tools/recall_sweep.py plan)"
                                          % sum(e["cpu_h"] for e in mine)),
              "", "[sizes]"]
    lines += [f"{k} = {_toml(v)}" for k, v in sizes.items()]
    lines += ["", "[sizes.mqar]"] + [f"{k} = {_toml(v)}" for k, v in mqar.items()]
    for c in cells.values():
        why = "; ".join(dict.fromkeys(c["whys"]))
        lines += ["", f"# {c['tier']}: {why}", "[[sizes.cells]]", f"family = {_toml(c['family'])}",
                  f"group = {_toml(c['group'])}", f"knobs = {_toml(c['knobs'])}"]
        if sorted(c["pairs"]) != sizes["pairs"]:
            lines.append(f"pairs = {_toml(sorted(c['pairs']))}")
    return "\n".join(lines) + "\n"


def arena_times(results_dir: Path, reference: str = "transformer") -> dict:
    """The delta families' arena runs and the arena's reference runs on the same task (MQAR), for :func:`estimate`."""
    out = {"runs": [], "reference_runs": [], "width": None}
    delta, grid = results_dir / "medium-delta.json", results_dir / "medium.json"
    cpu = lambda r: r.get("task") == "mqar" and r.get("wall_s") and r.get("device", "cpu") == "cpu"   # noqa: E731
    if delta.is_file():
        data = json.loads(delta.read_text())
        out["runs"] = [r for r in data["runs"] if cpu(r)]
        out["width"] = data.get("config", {}).get("base_width")
        if grid.is_file():
            out["reference_runs"] = [r for r in json.loads(grid.read_text())["runs"] if r["family"] == reference
                                     and cpu(r)]
    return out
