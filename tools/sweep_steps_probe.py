"""The recall sweep's step-budget probe: does a family that recalls at none of its cells learn with more steps?

    .venv/bin/python tools/sweep_steps_probe.py linear-transformer --checkpoint-dir results/.runs/recall-sweep
    .venv/bin/python tools/sweep_steps_probe.py linear-transformer --dry-run  # only say which cell and rate

Among the family's finished cells at ``--pairs`` pairs (4) in the medium record
(``results/arena/recall-sweep-medium.json``), the cell with the highest mean *validation* accuracy over its seeds at
its chosen rate is trained again at that rate, seeds 0-2, for ``--factor`` (2) times the sweep's steps, everything
else as the sweep trains it (``seqlab.experiments.recall_sweep.run_one``). The choice is made on validation before
the probe runs, and the probe's result is kept whatever it is. Each finished run is merged at once into
``results/arena/recall-sweep-steps.json`` (``--out``) under the sweep's run key, in which the steps differ, so a
run recorded is never trained again; ``--checkpoint-dir`` resumes one that was stopped.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "results" / "arena" / "recall-sweep-medium.json"
OUT = ROOT / "results" / "arena" / "recall-sweep-steps.json"


def choose(record: Path, family: str, pairs: int) -> dict:
    """The family's finished cell at ``pairs`` pairs with the highest mean validation accuracy at its chosen rate:
    ``{"cell", "lr", "validation", "test"}`` (means over the seeds); a SystemExit naming what is missing when the
    family has no finished cell there."""
    from seqlab.experiments.arena_results import load
    from seqlab.experiments.recall_sweep_plan import cell_rows, plan_cells
    from seqlab.experiments.recall_sweep_results import chosen_runs

    data = load(record)
    cfg = data["config"]
    rows = [r for r in cell_rows(data["runs"], plan_cells(cfg), cfg)
            if r["family"] == family and r["pairs"] == pairs and r["status"] == "done"]
    if not rows:
        raise SystemExit(f"family: {family!r} has no finished cell at {pairs} pairs in {record}")

    def validation(row: dict) -> float:
        return statistics.fmean(r["validation_accuracy"] for r in chosen_runs(row, data["runs"]))

    best = max(rows, key=validation)
    return {"cell": best["cell"], "lr": float(best["chosen_lr"]), "validation": round(validation(best), 6),
            "test": best["mean"]}


def probe(family: str, *, pairs: int = 4, factor: int = 2, record: Path = RECORD, out: Path = OUT,
          checkpoint_dir: str | None = None, dry_run: bool = False) -> dict:
    """Choose the cell (:func:`choose`) and train its seeds at ``factor`` times the steps, under the record's own
    config otherwise; returns the probe's record (``{"probe": {...}, "config": ..., "runs": [...]}``)."""
    from seqlab import results
    from seqlab.experiments.arena_results import load
    from seqlab.experiments.recall_sweep import describe_run, run_one
    from seqlab.experiments.recall_sweep_plan import plan_cells, run_key, spec_key

    chosen = choose(record, family, pairs)
    cfg = load(record)["config"]
    cfg = {**cfg, "steps": cfg["steps"] * factor}
    cell = next(c for c in plan_cells(cfg, [family], [pairs]) if c["cell"] == chosen["cell"])
    fields = {"probe": {**chosen, "family": family, "pairs": pairs, "steps": cfg["steps"], "factor": factor,
                        "source": record.name, "command": " ".join(["python", "tools/sweep_steps_probe.py",
                                                                     *sys.argv[1:]])},
              "config": cfg}
    print(f"probe: {chosen['cell']} at {pairs} pairs, lr {chosen['lr']:g} (its validation accuracy "
          f"{chosen['validation']:.3f}, test {chosen['test']:.3f} at {cfg['steps'] // factor} steps), "
          f"{cfg['steps']} steps, seeds 0-{cfg['seeds'] - 1}", flush=True)
    data = load(out) if out.is_file() else {"runs": []}
    if dry_run:
        return {**data, **fields}
    done = {run_key(r) for r in data["runs"]}
    for seed in range(cfg["seeds"]):
        spec = {**cell, "seed": seed, "lr": chosen["lr"]}
        if spec_key(spec, cfg) in done:
            continue
        run = run_one(spec, cfg, checkpoint_dir=checkpoint_dir)
        print(describe_run(run), flush=True)
        data = results.merge(out, key=run_key, runs=[run], fields=fields)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/sweep_steps_probe.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("family")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--factor", type=int, default=2, help="the sweep's steps times this (default 2)")
    parser.add_argument("--record", type=Path, default=RECORD)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if args.factor < 2:
        raise SystemExit(f"--factor: expected an integer of 2 or more, got {args.factor}")
    probe(args.family, pairs=args.pairs, factor=args.factor, record=args.record, out=args.out,
          checkpoint_dir=args.checkpoint_dir, dry_run=args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
