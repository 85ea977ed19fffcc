"""The recall sweep on the results page (``results/README.md``): its controls, its figure (accuracy against state
size, :func:`seqlab.viz.recall.recall_vs_state`), each family's threshold, the effects of the short convolution,
Based's feature map and LightNet's TPE, and every cell. Read from ``arena/recall-sweep-medium.json`` as it stands:
the cells are derived again from its runs under its own config, so that the page says what the runs say."""
from __future__ import annotations

from pathlib import Path

__all__ = ["sweep_file", "sweep_rows", "sweep_figure", "sweep_section", "threshold_text", "cell_notes",
           "FIGURE_TITLE"]

FIGURE_TITLE = "MQAR recall against state size (medium recall sweep)"


def sweep_file(out: Path) -> Path:
    """The medium recall sweep's record in the results folder ``out``."""
    return Path(out) / "arena" / "recall-sweep-medium.json"


def sweep_rows(out: Path) -> tuple[dict, list[dict]]:
    """``(record, cells)``: the record and what it says of each cell (:func:`.recall_sweep_plan.cell_rows` over
    its runs, under the record's config)."""
    from seqlab.experiments.arena_results import load
    from seqlab.experiments.recall_sweep_plan import cell_rows, plan_cells

    data = load(sweep_file(out))
    cfg = data["config"]
    return data, cell_rows(data["runs"], plan_cells(cfg), cfg)


def sweep_figure(out: Path):
    from seqlab.experiments.recall_sweep_results import RECALLS, frontier
    from seqlab.viz.recall import recall_vs_state

    _, rows = sweep_rows(out)
    return recall_vs_state(rows, frontier=frontier(rows), level=RECALLS, title=FIGURE_TITLE)


def _seeds(row: dict) -> str:
    return " / ".join(f"{a:.3f}" for a in row["accuracy"]) or "—"


def threshold_text(entry: dict | None) -> str:
    """A family's threshold as the page and lesson 08 write it: the state, "none of" the sizes finished, or
    "pending", with the sizes still to come and those undecided (a seed still learning at the cap)."""
    if entry is None:
        return "—"
    pending = f" ({len(entry['pending'])} size{'s' if len(entry['pending']) != 1 else ''} pending)" \
        if entry["pending"] else ""
    if entry.get("undecided"):
        pending += f" (undecided: {', '.join(f'{s:,}' for s in entry['undecided'])}, still learning)"
    if entry["state"] is not None:
        return f"{entry['state']:,}{pending}"
    if not entry["sizes"]:
        return "pending" if not entry.get("undecided") else pending.strip()
    return f"none of {', '.join(f'{s:,}' for s in entry['sizes'])}{pending}"


def cell_notes(row: dict) -> str:
    """What a cell's runs at its chosen rate say beyond their accuracy: seeds still learning at the cap, curves that
    rose at the end (the old protocol's runs record no ``still_learning``), runs without a commit or on changed
    code ("—": none)."""
    said = [f"{what}: seed {', '.join(map(str, row[key]))}" for key, what in
            (("still_learning", "still learning"), ("no_commit", "no commit"), ("dirty", "dirty"))
            if row.get(key)]
    if row.get("rose") and not row.get("still_learning"):
        said.insert(0, f"rose at the end: seed {', '.join(map(str, row['rose']))}")
    return "; ".join(said) or "—"


def _protocol_text(cfg: dict) -> str:
    steps = (f"up to {cfg['steps']} steps (a run stops at the first evaluation reaching {cfg['stop_at']} validation "
             f"accuracy)" if cfg.get("stop_at") is not None else f"{cfg['steps']} steps")
    data = ("training sequences drawn fresh at every step" if cfg.get("fresh")
            else f"{cfg['train_size']:,} training sequences a seed")
    return steps, data


def sweep_section(out: Path) -> list[str]:
    """The section's lines (module docstring); the figure is linked where ``write_summary`` drew it."""
    from seqlab.experiments.recall_sweep_plan import control_verdicts
    from seqlab.experiments.recall_sweep_results import RECALLS, answers, effects, matched_effects, thresholds

    data, rows = sweep_rows(out)
    cfg, task = data["config"], data["config"]["mqar"]
    finished = sum(r["status"] == "done" for r in rows)
    pairs = cfg["pairs"]
    steps, data_text = _protocol_text(cfg)
    lines = ["## The recall sweep: `arena/recall-sweep-medium.json`", "",
             f"MQAR with Zoology's filler, {task['vocab_size']} tokens, {task['seq_len']} tokens a sequence, "
             f"{', '.join(map(str, pairs))} key-value pairs, {data_text}; every "
             f"family at the parameters of a {cfg['n_layers']}-layer Transformer of `d_model` {cfg['width']} (or the "
             f"budget said), each at several settings of the knob that sets its state; {steps} of batch "
             f"{cfg['batch_size']}; seed 0 searches the rate ({', '.join(f'{lr:g}' for lr in cfg['lrs'])}, extended "
             f"past an edge), seeds 1-{cfg['seeds'] - 1} run at it (and at seed 0's next-best rate that reached "
             f"{cfg['learned_at']} where seed 0 reached it and another seed did not; the rate where most seeds did is "
             f"kept); test accuracy. " + (f"**Not finished: {len(data['runs'])} runs, {finished} of {len(rows)} cells "
                                         "done.**" if finished < len(rows) else
                                         f"**Finished: {len(data['runs'])} runs, all {len(rows)} cells.**")
             + " Made by `python -m seqlab experiment recall-sweep "
             "profile=medium checkpoint_dir=results/.runs/recall-sweep` (resumable); `notes/recall-sweep.md` has the "
             "plan, the calibration and where it stands.", "",
             "| pairs | positive control (Transformer): test accuracy per seed (threshold) | verdict |", "|---|---|---|"]
    controls = control_verdicts(rows, cfg)
    lines += [f"| {p} | {' / '.join(f'{a:.3f}' for a in v['accuracy']) or '—'} ({v['threshold']}) | {v['verdict']} |"
              for p, v in sorted(controls.items(), key=lambda kv: int(kv[0]))]
    png = sweep_file(out).with_suffix(".png")
    if png.is_file():
        lines += ["", f"![{FIGURE_TITLE}](arena/{png.name})"]
    elif png.with_suffix(".plotly.json").is_file():
        lines += ["", f"Figure: [`arena/{png.with_suffix('.plotly.json').name}`](arena/"
                      f"{png.with_suffix('.plotly.json').name}) (plotly JSON)."]
    found = thresholds(rows, RECALLS)
    families = list(dict.fromkeys(r["family"] for r in rows if r["group"] == "state"))
    lines += ["", f"The smallest state (floats) at which every seed reaches {RECALLS} test accuracy, over each "
                  "family's state sizes:", "", "| family | " + " | ".join(f"{p} pairs" for p in pairs) + " |",
              "|---|" + "---|" * len(pairs)]
    lines += [f"| {f} | " + " | ".join(threshold_text(found.get(p, {}).get(f)) for p in pairs) + " |" for f in families]
    lines += ["", "What an addition changes, against the same cell without it (a difference counts beyond both "
                  "cells' seed spreads and 0.01):", "", "| pairs | cell | against | test accuracy: with / without | "
                  "verdict |", "|---|---|---|---|---|"]
    lines += [f"| {e['pairs']} | {e['cell']} | {e['base']} | "
              + (f"{e['mean']:.3f} / {e['base_mean']:.3f}" if e["mean"] is not None else "—") + f" | {e['verdict']} |"
              for e in effects(rows)]
    matched = matched_effects(rows)
    if matched:
        lines += ["", "Each addition against the cell without it nearest in state (within 10 %):", "",
                  "| pairs | cell | state | against | state | test accuracy: with / without | verdict |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {e['pairs']} | {e['cell']} | {e['state']:,} | {e['base']} | {e['base_state']:,} | "
                  + (f"{e['mean']:.3f} / {e['base_mean']:.3f}" if e["mean"] is not None else "—")
                  + f" | {e['verdict']} |" for e in matched]
    told = [(r, a) for r in rows for a in [answers(r, data["runs"])] if a]
    if told:
        lines += ["", "How the cells answered (the test queries of every seed at the chosen rate): the accuracy on the "
                      "pair asked for, in the order the pairs were written (a state that forgets scores the first "
                      "lowest), and of the wrong answers, the share that is the value of another pair of the same "
                      "sequence (the value read, its key confused):", "",
                  "| pairs | cell | state | accuracy by pair, first to last | wrong answers: another pair's value |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['pairs']} | {r['cell']} | {r['state_size']:,} | {' / '.join(f'{x:.2f}' for x in a['by_pair'])}"
                  f" | {'—' if a['another_value'] is None else format(a['another_value'], '.2f')} |"
                  for r, a in sorted(told, key=lambda ra: (ra[0]["pairs"], ra[0]["group"] != "reference", ra[0]["family"],
                                                     ra[0]["state_size"]))]
    unknown = [r for r in data["runs"] if not r.get("commit")]
    dirty = [r for r in data["runs"] if r.get("dirty")]
    lines += ["", "Every cell (the rates: seed 0's validation accuracy at each; test accuracy per seed at the chosen "
                  "rate; notes on those seeds' runs: still learning at the cap, a curve that rose by more than 0.02 "
                  "over its last fifth, no commit recorded, code changed from its commit). "
              + f"Of the {len(data['runs'])} runs, {len(unknown)} recorded no commit and {len(dirty)} ran changed code "
                "(`dirty`).", "", "| pairs | cell | d_model | parameters (x budget) | state | rates searched | chosen | "
                "test accuracy per seed | mean ± spread | status | notes |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["pairs"], r["group"] != "reference", r["family"], r["state_size"])):
        searched = ", ".join(f"{float(lr):g}: {v:.3f}" for lr, v in r["searched"].items()) or "—"
        mean = f"{r['mean']:.3f} ± {r['spread']:.3f}" if r["spread"] is not None else (
            f"{r['mean']:.3f}" if r["mean"] is not None else "—")
        chosen = f"{r['chosen_lr']:g}" + (" (edge)" if r["lr_at_edge"] else "") if r["chosen_lr"] else "—"
        lines.append(f"| {r['pairs']} | {r['cell']} | {r['d_model']} | {r['params']:,} ({r['budget']:.2f}) | "
                     f"{r['state_size']:,} | {searched} | {chosen} | {_seeds(r)} | {mean} | {r['status']} | "
                     f"{cell_notes(r)} |")
    return lines
