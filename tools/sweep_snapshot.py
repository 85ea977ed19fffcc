"""Stage the recall sweep as it stands, for a commit, while its sittings keep running.

    .venv/bin/python tools/sweep_snapshot.py && git commit -m "Recall sweep: ..."            # the staged files: no paths
    .venv/bin/python tools/sweep_snapshot.py --lesson && git commit -m "Recall sweep: ..."   # and lesson 08 on it

Under the record's lock (the one every sitting takes to add a run: ``seqlab.results.merge``), the results page and
the sweep's figure are drawn again from the record (``seqlab.claims.run.write_summary``) and the three files are
staged (``git add``), so that the page committed is the rendering of the record committed: the test
``test_the_committed_results_page_is_the_rendering_of_claims_json`` compares them. Lesson 08 §6 reads the record too,
and nbval compares what it printed: ``--lesson`` executes it (``workbench.py execute``, about a minute) under the
same lock and stages it with the rest. A sitting that finishes a run meanwhile waits for the lock; none is lost.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
LESSON = Path("notebooks") / "08_arena.ipynb"


def main(argv: list[str] | None = None) -> int:
    from seqlab.claims.recall_report import sweep_file
    from seqlab.claims.run import write_summary

    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--lesson"]):
        raise SystemExit(f"usage: tools/sweep_snapshot.py [--lesson]; got {' '.join(argv)!r}")
    results = ROOT / "results"
    record = sweep_file(results)
    with FileLock(str(record) + ".lock"):
        write_summary(results)
        staged = [record, results / "README.md", results / "claims.json",
                  *[p for p in (record.with_suffix(".png"), record.with_suffix(".plotly.json")) if p.is_file()]]
        if argv:
            subprocess.run([sys.executable, str(ROOT / "workbench.py"), "execute", str(LESSON)], cwd=ROOT, check=True)
            staged.append(ROOT / LESSON)
        subprocess.run(["git", "add", "--", *map(str, staged)], cwd=ROOT, check=True)
    print("staged:", ", ".join(str(p.relative_to(ROOT)) for p in staged))
    return 0


if __name__ == "__main__":
    sys.exit(main())
