"""Stage the recall sweep as it stands, for a commit, while its sittings keep running.

    .venv/bin/python tools/sweep_snapshot.py && git commit -m "Recall sweep: ..."   # the staged files: no paths

Under the record's lock (the one every sitting takes to add a run: ``seqlab.results.merge``), the results page and
the sweep's figure are drawn again from the record (``seqlab.claims.run.write_summary``) and the three files are
staged (``git add``), so that the page committed is the rendering of the record committed: the test
``test_the_committed_results_page_is_the_rendering_of_claims_json`` compares them.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    from seqlab.claims.recall_report import sweep_file
    from seqlab.claims.run import write_summary

    results = ROOT / "results"
    record = sweep_file(results)
    with FileLock(str(record) + ".lock"):
        write_summary(results)
        staged = [record, results / "README.md", results / "claims.json",
                  *[p for p in (record.with_suffix(".png"), record.with_suffix(".plotly.json")) if p.is_file()]]
        subprocess.run(["git", "add", "--", *map(str, staged)], cwd=ROOT, check=True)
    print("staged:", ", ".join(str(p.relative_to(ROOT)) for p in staged))
    return 0


if __name__ == "__main__":
    sys.exit(main())
