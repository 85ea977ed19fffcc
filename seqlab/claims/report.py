"""The claims on a page: the terminal summary, the results page (``results/README.md``) and the "paper vs here"
table each lesson ends with."""
from __future__ import annotations

import os
from pathlib import Path

from seqlab.claims import CLAIMS, RESULTS_DIR, Claim, get
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
        rows.append({"id": claim_id, "paper": claim.paper, "statement": claim.statement, "paper_value": _paper(claim),
                     "medium": medium, "verdict": record["verdict"] if record else "—",
                     "here": here.get(claim_id, "—"),
                     "full": f"SEQLAB_PROFILE=full python -m seqlab reproduce {claim_id} --seeds 3"})
    for row in rows:
        print(f"{row['id']} ({row['paper']}): {row['statement']}")
        print(f"    paper:            {row['paper_value']}")
        print(f"    medium (CPU):     {row['medium']}  ->  {row['verdict']}")
        print(f"    this lesson:      {row['here']}")
        print(f"    full run:         {row['full']}")
    return rows


README_HEAD = """# Reproduced claims

Written by `python -m seqlab reproduce` (`seqlab/claims/`) from `claims.json`; do not edit by hand. Each
claim runs over several seeds (every run watched on a validation split, the test split read once for the
number reported) and its verdict follows one rule: **reproduced** when the mean of the arm that should win
beats the mean of its strongest rival by more than twice the larger seed standard deviation (sample std),
**partly** when it wins by less, **not reproduced** otherwise. Paper values are on the papers' own data; the
stand-in seqlab uses is said under each claim. Notes on what was tried, where a claim does not hold, are in
`notes/<id>.md` and shown under the claim.

```bash
SEQLAB_PROFILE=medium python -m seqlab reproduce            # every claim not yet done; --redo to run again
SEQLAB_PROFILE=medium python -m seqlab reproduce gateloop-memory-horizon --seeds 3
```
"""


def render_readme(gathered: dict, notes_dir: str | os.PathLike | None = None) -> str:
    """The results page: one table of every claim (``"not run yet"`` where there is no record), then one
    section per claim with its figure, its numbers per seed, the stand-in and any notes."""
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
    return "\n".join(lines) + "\n"


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
    figure = record.get("figure")
    if figure and figure.endswith(".png"):
        lines += ["", f"![{record['id']}]({figure})"]
    elif figure:
        lines += ["", f"Figure: [`{figure}`]({figure}) (plotly JSON: `plotly.io.read_json`)."]
    return lines
