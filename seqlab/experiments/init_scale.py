"""What scale each family's initial weights should have at the width it is trained at, measured.

GPT-2's std 0.02 (the Transformer baselines' rule) was chosen for widths of hundreds; the arena trains at widths of
16 to 72. This experiment trains every family on MQAR with its weights drawn again by each variant of
:data:`seqlab.models.init.VARIANTS` (one group at a time: the blocks' linears, the embeddings, the head), at two
widths and several seeds, at one learning rate and one budget, and records each run as the arena does (its
initial loss against ``ln(num_targets)``, its learning curve, the first steps reaching 0.9 and 0.99, the test
accuracy): ``python -m seqlab experiment init-scale profile=medium workers=2``. Runs are keyed as the arena's
(:func:`seqlab.experiments.arena.run_key`, the variant in ``init``), written to ``results/init/<profile>.json``
as each finishes, and skipped when there, so a measurement resumes where it stopped.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from seqlab import config
from seqlab.experiments import experiment
from seqlab.experiments import arena as A
from seqlab.experiments._common import Sizes, profile_sizes

__all__ = ["SIZES", "init_scale", "specs", "table", "RESULTS_DIR"]

RESULTS_DIR = Path(__file__).resolve().parents[2] / "results" / "init"
ATTENTION = ("transformer", "linear-transformer")      # the families whose block linears redraw() can draw again

SIZES = Sizes("init-scale", dict(
    families=["transformer", "linear-transformer"], variants=["as-built", "default-linears+embeddings-1"],
    widths=[16, 24], seeds=1, steps=40, eval_every=10, batch_size=32, n_layers=2, lr=1e-3, reference="transformer",
    threads=1, train_size=512, test_size=128, validation_size=128,
    tasks={"mqar": {"vocab_size": 64, "seq_len": 32, "num_kv_pairs": 4}}))


def applies(family: str, variant: str) -> bool:
    """A variant that draws the blocks' linears again applies to the attention baselines only."""
    from seqlab.models.init import VARIANTS

    return "linears" not in VARIANTS[variant] or family in ATTENTION


def specs(cfg: dict) -> list[dict]:
    """Every run of the measurement: family x variant x width x seed, MQAR at the base length."""
    return [{"family": f, "task": "mqar", "seed": s, "width": w, "seq_len": None, "lr": float(cfg["lr"]), "init": v}
            for f in cfg["families"] for v in cfg["variants"] if applies(f, v)
            for w in cfg["widths"] for s in range(cfg["seeds"])]


def table(runs: list[dict]) -> list[dict]:
    """One row per (family, init, width): the seeds' mean and spread of the final validation accuracy, the
    initial loss's largest distance from ``ln(num_targets)``, and the first step at 0.9 (None in a seed that never
    got there)."""
    import math

    cells: dict = {}
    for r in runs:
        cells.setdefault((r["family"], r["init"], r["width"]), []).append(r)
    rows = []
    for (family, init, width), rs in sorted(cells.items()):
        acc = [r["validation_accuracy"] for r in rs]
        rows.append({"family": family, "init": init, "width": width, "d_model": rs[0]["d_model"], "seeds": len(rs),
                     "validation_accuracy": statistics.fmean(acc),
                     "spread": statistics.stdev(acc) if len(acc) > 1 else 0.0,
                     "initial_loss_off": max(abs(r["initial_loss"] - math.log(r["num_targets"])) for r in rs),
                     "steps_to_0.9": [r["steps_to_0.9"] for r in rs]})
    return rows


@experiment("init-scale")
def init_scale(*, profile: str | None = None, families=None, variants=None, out="auto", workers: int = 1,
               progress: bool = True, verbose: bool = True, checkpoint_dir: str | None = None, **overrides) -> dict:
    """Every family of ``families`` with its weights drawn by every variant of ``variants`` (module docstring).

    ``families`` and ``variants``: subsets of the profile's, as lists or comma-separated strings. ``out``: the
    results file (``"auto"``: ``results/init/<profile>.json``; None: nothing written or resumed). ``workers``,
    ``progress``, ``verbose`` and ``checkpoint_dir`` as the arena's. Returns the file's contents plus ``"table"``.
    """
    from seqlab.results import profile_tag
    from seqlab.models.init import VARIANTS

    prof = profile or config.profile()
    cfg = profile_sizes(SIZES, prof, overrides)
    cfg["families"] = A._as_list(families, "families", A.FAMILIES) or list(cfg["families"])
    cfg["variants"] = A._as_list(variants, "variants", VARIANTS) or list(cfg["variants"])
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected a positive int, got {workers!r}")
    path = RESULTS_DIR / f"{profile_tag(prof)}.json" if out == "auto" else (Path(out) if out is not None else None)
    data = A.load(path) if path is not None else {"runs": [], "controls": []}
    fields = {"command": f"python -m seqlab experiment init-scale profile={prof}", "versions": A.versions(),
              "profile": str(prof), "config": cfg}
    data.update(fields)
    have = {A.run_key(r) for r in data["runs"]}
    todo = [s for s in specs(cfg) if A.spec_key(s, cfg) not in have]

    record = A.recorder(path, data, fields, verbose, describe=lambda run: f"{run['init']:>32s} " + A.describe_run(run))
    A.run_all(todo, cfg, workers, record, progress, checkpoint_dir)
    return {**data, "table": table(data["runs"])}
