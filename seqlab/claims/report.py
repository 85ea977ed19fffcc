"""The claims on a page: the terminal summary, the results page (``results/README.md``) and the "paper vs here"
table each lesson ends with."""
from __future__ import annotations

import os
from pathlib import Path

from seqlab.claims.catalogue import CLAIMS, get
from seqlab.claims.claim import Claim
from seqlab.claims.recall_report import sweep_file, sweep_section
from seqlab.results import RESULTS_DIR
from seqlab.results import read_json as _read

__all__ = ["summary_table", "lesson_table", "render_readme"]


def summary_table(records: list[dict]) -> str:
    """The terminal summary of ``reproduce``: one line per claim."""
    head = f"{'claim':<26} {'better (mean ± std)':<34} {'worse (mean ± std)':<34} {'verdict':<15} {'wall':>8}"
    lines = [head, "-" * len(head)]
    for r in records:
        better = f"{r['better']} {_mean_std(r, r['better'])}"
        worse = f"{r['worse']} {_mean_std(r, r['worse'])}"
        lines.append(f"{r['id']:<26} {better:<34} {worse:<34} {r['verdict']:<15} {r['wall_s'] / 60:>6.1f} m")
    return "\n".join(lines)


def fmt(value, metric: str = "") -> str:
    """A number as the table shows it: steps as integers, the rest to 3 significant decimals."""
    if value is None:
        return "—"
    if metric.startswith("steps"):
        return f"{value:.0f}"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def _mean_std(record: dict, arm: str) -> str:
    metric = record["metric"]
    cens = sum(record.get("censored", {}).get(arm, []))
    note = f" ({cens} censored)" if cens else ""
    return f"{fmt(record['mean'][arm], metric)} ± {fmt(record['std'][arm], metric)}{note}"


def _paper(claim: Claim) -> str:
    """The paper's values, every arm it gives one for, and what they were measured on."""
    given = [f"{arm} {fmt(v)}" for arm, v in claim.paper_values.items() if v is not None]
    return f"{', '.join(given) if given else 'figure only'} ({claim.paper_data})"


def table_row(claim: Claim, record: dict | None) -> str:
    """One row of the results table; ``record`` None: the claim has not been run yet."""
    head = f"| `{claim.id}` | {claim.paper} | {claim.statement} | {_paper(claim)} |"
    if record is None:
        return f"{head} not run yet | — | — | — |"
    better, worse = record["better"], record["worse"]
    seqlab = (f"{better} {_mean_std(record, better)} vs {worse} {_mean_std(record, worse)} "
              f"({record['profile']}, {len(record['seeds'])} seeds)")
    return f"{head} {seqlab} | **{record['verdict']}** | `{record['command']}` | {record['wall_s'] / 60:.1f} min |"


def lesson_table(ids, here: dict | None = None, *, path=None) -> list[dict]:
    """The "paper vs here" table a lesson ends with: for each claim in ``ids``, the paper's value, the medium
    profile's mean ± std over seeds and verdict (read from ``results/claims.json``, or ``path``), this lesson's own
    quick run (``here[id]``: a short string the lesson measured, e.g. ``"causalrn 1.000 vs linear 0.214, 1 seed"``)
    and the command of the full run. Prints the table and returns its rows (dicts)."""
    data = _read(Path(path) if path else RESULTS_DIR / "claims.json") or {"claims": []}
    records = {r["id"]: r for r in data["claims"]}
    here = dict(here or {})
    unknown = sorted(set(here) - set(ids))
    if unknown:
        raise ValueError(f"here: claims {unknown} are not among ids {list(ids)}")
    rows = []
    for claim_id in ids:
        claim, record = get(claim_id), records.get(claim_id)
        medium = ("not run yet" if record is None else
                  f"{record['better']} {_mean_std(record, record['better'])} vs "
                  f"{record['worse']} {_mean_std(record, record['worse'])} ({len(record['seeds'])} seeds)")
        search = (record or {}).get("rate_search") or {}
        rates = ", ".join(f"{arm} {s['chosen_lr']:g}" for arm, s in search.items())
        rows.append({"id": claim_id, "paper": claim.paper, "statement": claim.statement, "paper_value": _paper(claim),
                     "medium": medium, "rates": rates, "verdict": record["verdict"] if record else "—",
                     "here": here.get(claim_id, "—"),
                     "full": f"SEQLAB_PROFILE=full python -m seqlab reproduce {claim_id} --seeds 3"})
    for row in rows:
        print(f"{row['id']} ({row['paper']}): {row['statement']}")
        print(f"    paper:            {row['paper_value']}")
        print(f"    medium (CPU):     {row['medium']}  ->  {row['verdict']}")
        if row["rates"]:
            print(f"    rates chosen:     {row['rates']} (each arm's, on seed 0's validation split)")
        print(f"    this lesson:      {row['here']}")
        print(f"    full run:         {row['full']}")
    return rows


README_HEAD = """# Reproduced claims

Written by `python -m seqlab reproduce` (`seqlab/claims/`) from `claims.json`; do not edit by hand. Each
claim runs over several seeds (every run watched on a validation split, the test split read once for the
number reported) and its verdict follows one rule: **reproduced** when the mean of the arm that should win
beats the mean of its strongest rival by more than twice the larger seed standard deviation (sample std),
**partly** when it wins by less, **not reproduced** otherwise, and **inconclusive: the control did not learn**
when the claim's positive control (an arm known to solve the task) missed its threshold in a seed: then the
arms are not compared. Every arm runs at its own learning rate: seed 0 at the profile's rate times 1/3, 1 and 3
(extended by a factor of 3 past an edge while the best sits there, at most three times a side), the rate with the
best validation value kept, seeds 1 and 2 at it. Paper values are on the papers' own data; the stand-in seqlab
uses is said under each claim. Notes on what was tried, where a claim does not hold, are in `notes/<id>.md` and
shown under the claim.

```bash
SEQLAB_PROFILE=medium python -m seqlab reproduce            # every claim not yet done; --redo to run again
SEQLAB_PROFILE=medium python -m seqlab reproduce gateloop-memory-horizon --seeds 3
```
"""


def render_readme(gathered: dict, notes_dir: str | os.PathLike | None = None) -> str:
    """The results page: one table of every claim (``"not run yet"`` where there is no record), then one
    section per claim with its figure, its numbers per seed, the stand-in and any notes, and last the medium
    arena's verdicts (:func:`arena_section`) where the folder holds ``arena/medium.json``, and the recall sweep
    (:func:`seqlab.claims.recall_report.sweep_section`) where it holds ``arena/recall-sweep-medium.json``."""
    out = Path(notes_dir).parent if notes_dir else RESULTS_DIR
    records = {r["id"]: r for r in gathered.get("claims", [])}
    lines = [README_HEAD, "## All claims", "",
             "| id | paper | claim | paper value | seqlab mean ± std | verdict | command | wall time |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [table_row(claim, records.get(cid)) for cid, claim in CLAIMS.items()]
    for cid, claim in CLAIMS.items():
        lines += ["", f"## `{cid}`", "", f"{claim.paper}: {claim.statement}.", "", f"Stand-in: {claim.stand_in}", ""]
        record = records.get(cid)
        lines += _section(record) if record else ["Not run yet."]
        note = Path(notes_dir or RESULTS_DIR / "notes") / f"{cid}.md"
        if note.is_file():
            lines += ["", note.read_text().strip()]
    if arena_file(out).is_file():
        lines += ["", *arena_section(out)]
    if sweep_file(out).is_file():
        lines += ["", *sweep_section(out)]
    return "\n".join(lines) + "\n"


ARENA_FIGURES = {"curves": "validation accuracy during training at each family's chosen rate",
                 "rates": "test accuracy against the learning rate"}


def arena_file(out: Path) -> Path:
    """The medium arena grid of the results folder ``out``."""
    return Path(out) / "arena" / "medium.json"


def arena_figures(out: Path) -> dict:
    """``{name: (title, figure)}``: the arena's learning curves and accuracy against rate, a panel per task."""
    from seqlab.experiments import arena_results as arena
    from seqlab.viz import arena as arena_viz

    data, cfg = _arena(out)
    return {"curves": arena_viz.curves_by_task({t: arena.cell_runs(data["runs"], cfg, t) for t in cfg["tasks"]},
                                               title=f"medium arena: {ARENA_FIGURES['curves']}"),
            "rates": arena_viz.rates_by_task({t: arena.cell_runs(data["runs"], cfg, t, chosen_only=False)
                                              for t in cfg["tasks"]},
                                             title=f"medium arena: {ARENA_FIGURES['rates']}")}


def _arena(out: Path) -> tuple[dict, dict]:
    """The medium grid with the later sitting's families beside it
    (:func:`seqlab.experiments.arena_results.load_with_delta`), and the settings to read it with: the merged
    record's config, which lists the families of both sittings (the medium profile's where there is no config)."""
    from seqlab.experiments import arena_results as arena

    data = arena.load_with_delta(arena_file(out).parent)
    return data, data.get("config") or arena.sizes("medium")


def arena_section(out: Path) -> list[str]:
    """The medium arena on the results page, with the families of the later sitting beside the first seven where
    ``arena/medium-delta.json`` is there (:func:`_arena`): its setup, each task's positive control and verdict
    (:func:`seqlab.experiments.arena_results.rank`: a task whose control did not learn is not ranked), the controls
    run again in the later sitting (:func:`seqlab.experiments.arena_results.control_replication`), each family's
    test accuracy at the base budget, and the two figures (written beside the grid by ``write_summary``)."""
    from seqlab.experiments import arena_results as arena

    data, cfg = _arena(out)
    rows = arena.summarize(data["runs"], cfg)
    verdicts = arena.control_verdicts(data, cfg)
    ranking = arena.rank(rows, verdicts, cfg)
    again = arena.control_replication(data, cfg) if "delta_controls" in data else None
    rates = ", ".join(f"{lr:g}" for lr in cfg["lrs"])
    lines = ["## The arena: `arena/medium.json`", "",
             f"{len(data['runs'])} runs and {len(data.get('controls', []))} control runs: "
             f"{_count(len(cfg['families']))} families on {_count(len(cfg['tasks']))} "
             f"tasks at matched size (a Transformer of `d_model` {cfg['base_width']}), {cfg['steps']} steps of batch "
             f"{cfg['batch_size']}, rates {rates} (a grid extended past an edge while the best rate sits there; the "
             f"rate chosen on validation at seed 0), {cfg['seeds']} seeds at the chosen rate, test accuracy. Made by "
             "`python -m seqlab experiment arena profile=medium workers=2 checkpoint_dir=results/.runs/arena` "
             "(resumable); lesson 08 §5 reads it; `notes/arena.md` says how it was calibrated and what it replaced. "
             f"A family is named alone only where its mean beats the next by more than both seeds' spreads and by "
             f"more than {arena.MIN_GAP}; a task whose positive control missed its threshold is not ranked."]
    if again is not None:
        lines[-1] += " " + _later_sitting(data)
    lines += ["", "| task | positive control: test accuracy per seed (threshold) | "
              + ("run again in the later sitting | " if again is not None else "") + "verdict |",
              "|---|---|" + ("---|" if again is not None else "") + "---|"]
    for task in cfg["tasks"]:
        v = verdicts[task]
        control = ("none" if v["verdict"] == "no control" else
                   f"{v['family']}: " + (" / ".join(f"{a:.3f}" for a in v["accuracy"]) or "not run yet")
                   + f" ({v['threshold']})")
        replication = f" {_replication(again[task])} |" if again is not None else ""
        lines.append(f"| {task} | {control} |{replication} {ranking[task]['verdict']} |")
    base = {(r["family"], r["task"]): r for r in arena.base_rows(rows, cfg)}
    lines += ["", "Test accuracy, mean ± spread over the seeds, and the chosen rate:", "",
              "| family | " + " | ".join(cfg["tasks"]) + " |", "|---|" + "---|" * len(cfg["tasks"])]
    for family in cfg["families"]:
        cells = [(f"{r['accuracy']:.3f} ± {r['spread']:.3f} ({r['lr']:g}"
                  + (f", {r['seeds']} seed{'s' if r['seeds'] > 1 else ''}" if r["seeds"] < cfg["seeds"] else "") + ")")
                 if (r := base.get((family, task))) else "—" for task in cfg["tasks"]]
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    for name, title in ARENA_FIGURES.items():
        png, json_ = arena_file(out).with_name(f"medium-{name}.png"), arena_file(out).with_name(f"medium-{name}.json")
        if png.is_file():
            lines += ["", f"![arena: {title}](arena/{png.name})"]
        elif json_.is_file():
            lines += ["", f"Figure, {title}: [`arena/{json_.name}`](arena/{json_.name}) (plotly JSON)."]
    return lines


COUNTS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
FAMILY_NAMES = {"deltanet": "DeltaNet", "gated-deltanet": "Gated DeltaNet"}


def _count(n: int) -> str:
    """``n`` in words up to twelve, in digits beyond."""
    return COUNTS[n] if 0 <= n < len(COUNTS) else str(n)


def _later_sitting(data: dict) -> str:
    """The sentence that says which families the later sitting added and where it is recorded."""
    families = data["delta_families"]
    names = " and ".join(f"{FAMILY_NAMES.get(f, f)} (`{f}`)" for f in families)
    were, their = ("were", "their") if len(families) > 1 else ("was", "its")
    runs = sum(r["family"] in families for r in data["runs"])
    return (f"{names} {were} run later in {their} own sitting (`arena/medium-delta.json`, {runs} runs and "
            f"{len(data['delta_controls'])} control runs: the same protocol, the positive controls run again and "
            "shown beside the first ones, whose verdicts stand; its command is in `arena/README.md`).")


def _replication(again: dict) -> str:
    """One cell of the controls run again: their accuracy per seed and whether every seed passed its threshold."""
    if not again.get("family"):
        return "none"
    seeds = " / ".join(f"{a:.3f}" for a in again["accuracy"])
    if again["passed"] is None:
        return f"{seeds} (not every seed run yet)" if seeds else "not run yet"
    return f"{seeds}: **{'passed again' if again['passed'] else 'missed'}**"


def _control_lines(record: dict) -> list[str]:
    control = record.get("control")
    if not control:
        return []
    values = " / ".join(fmt(v) for v in control["values"])
    return ["", f"Positive control: {control['arm']} must reach {control['threshold']} in every seed "
                f"({control['source']}): {values}, **{'passed' if control['passed'] else 'missed'}**."]


def _rate_lines(record: dict) -> list[str]:
    search = record.get("rate_search")
    if not search:
        return ["", f"One learning rate ({record['one_rate']})."] if record.get("one_rate") else []
    metric = record["metric"]
    lines = ["", "Learning rates searched on seed 0 (validation value at each; a diverged run: —), each arm's seeds "
                 "at the rate chosen:", "", "| arm | rates | validation | chosen |", "|---|---|---|---|"]
    for arm, s in search.items():
        edge = " (at the grid's edge: not known to be its best)" if s["at_edge"] else ""
        lines.append(f"| {arm} | {', '.join(f'{lr:g}' for lr in s['lr_grid'])} | "
                     f"{' / '.join(fmt(v, metric) for v in s['validation'])} | {s['chosen_lr']:g}{edge} |")
    return lines


def _section(record: dict) -> list[str]:
    metric = record["metric"]
    lines = [f"Metric: {metric} ({'higher' if record['higher_is_better'] else 'lower'} is better). "
             f"Verdict: **{record['verdict']}** ({record['profile']} profile, seeds {record['seeds']}, "
             f"{record['wall_s'] / 60:.1f} min on {record['machine']['cpu']}).", "",
             "| arm | " + " | ".join(f"seed {s}" for s in record["seeds"]) + " | mean ± std | paper |",
             "|---|" + "---|" * (len(record["seeds"]) + 2)]
    for arm, values in record["arms"].items():
        cens = record.get("censored", {}).get(arm, [False] * len(values))
        cells = " | ".join(fmt(v, metric) + (" (censored)" if c else "") for v, c in zip(values, cens))
        lines.append(f"| {arm} | {cells} | {_mean_std(record, arm)} | {fmt(record['paper_values'].get(arm))} |")
    lines += _control_lines(record) + _rate_lines(record)
    figure = record.get("figure")
    if figure and figure.endswith(".png"):
        lines += ["", f"![{record['id']}]({figure})"]
    elif figure:
        lines += ["", f"Figure: [`{figure}`]({figure}) (plotly JSON: `plotly.io.read_json`)."]
    return lines
