"""The recall sweep: MQAR accuracy against state size, each linear family at several settings of the knob
that sets its state, at several numbers of key-value pairs, the Transformer as the reference at each (Zoology,
arXiv 2312.04927, Fig. 2; Based, arXiv 2402.18668, Fig. 2: recall against state size as the pairs grow).

The plan (:mod:`.recall_sweep_plan`). A *cell* is a family at one setting of its knobs (``cells`` of the profile:
``{family, group, knobs}``) at one number of pairs (``pairs``). Its ``d_model`` is matched to the reference's
parameter budget at ``width`` (or held where the knobs name it, the budget then said as a ratio). The task is MQAR
(:func:`seqlab.tasks.mqar`) with the profile's ``mqar`` arguments and the cell's ``num_kv_pairs``; each seed draws
its own data: a train split of ``train_size`` sequences (medium: 100 000; its 6000 steps of 32 read 192 000, so
every sequence about 1.9 times: each once, most twice), or, with ``fresh = true``, every training batch drawn new
from a stream seeded by the seed and the step (never a validation or test sequence); fixed validation and test
splits either way.

How long a run trains. ``steps`` is its cap and the length of its cosine schedule. With ``stop_at`` (medium
frontier profile: 0.99) a run stops at the first evaluation (every ``eval_every`` steps) whose validation accuracy
reaches it: ``stopped`` is ``"converged"`` (the last validation accuracy reached ``stop_at``) or ``"cap"``, and
``stop_step`` the last step trained. A run stopped at the cap whose validation accuracy rose by more than 0.02 over
its last fifth of steps is ``still_learning`` (:func:`.recall_sweep_plan.rose_at_the_end`): a failing cell with such
a seed is undecided, not "does not recall" (:mod:`.recall_sweep_results`). Runs recorded before these fields (the
first medium record) are the old protocol and read as they were.

Continuing an old run to a longer cap is not the same run: ``fit`` resumes a checkpoint at a larger ``steps`` on
the schedule of the new total (:func:`seqlab.train.checkpoint.restore`), so a run cosine-decayed to 0.1 lr at step
6000 would restart at 0.55 lr (the 12 000-step cosine at its middle); nor did its checkpoints outlive the machine.
The runs to convergence are trained again from step 0 under their own schedule, into their own record.

Each cell as the arena's (:mod:`seqlab.experiments.rate_search`): seed 0 at every rate of ``lrs``, extended one
step beyond an edge while the best validation accuracy sits there (at most two steps a side), so that the chosen
rate lies strictly inside what was searched; then seeds ``1 .. seeds-1`` at the chosen rate (when seed 0 learned
there and another seed did not, the seeds also run at seed 0's next-best rate that learned: :func:`seed_rates` of
the plan); accuracy read on the test split (a run whose loss diverged is recorded at accuracy 0 with ``diverged``
saying where, so that a search moves away from its rate). Every run records ``state_size`` (floats held at decoding,
``model.state_size``), ``initial_loss`` (the loss before the first step, checked against ln(vocabulary)) and
``curve`` (validation accuracy every ``eval_every`` steps), ``state_per_layer`` (Zoology's unit), ``stopped``,
``stop_step``, ``still_learning`` and the protocol's ``stop_at`` and ``data`` (where set), and ``commit``/``dirty``
(the code it ran, :func:`code_version`). The reference cells run first (the controls: every seed must reach
``threshold``), then every other cell at the fewest pairs, the state cells at more pairs, the additions at more pairs
last (:func:`.recall_sweep_plan.plan_cells`), each cell whole before the next.

The record, ``results/arena/recall-sweep-<profile>.json``: ``{"command", "versions", "profile", "config",
"runs": [...], "cells": [...], "verdicts": {...}}``. Each finished run is merged into it at once under its lock and
the file replaced atomically (:func:`seqlab.results.merge`): a sitting stopped at any moment leaves it valid, and
the same command again trains only the runs it lacks (with ``checkpoint_dir``, a run stopped midway resumes from
its last save). Several sittings may share the file (``families=`` splits the work between them).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from seqlab import config
from seqlab.experiments import experiment
from seqlab.experiments._common import checkpointing, code_version, profile_sizes
from seqlab.experiments.arena_results import RESULTS_DIR, load
from seqlab.experiments.arena_runner import make_task, versions
from seqlab.experiments.rate_search import MAX_EXTENSIONS
from seqlab.experiments.recall_sweep_plan import (GROUPS, LINEAR, NAME, SIZES, cell_label, cell_rows,  # noqa: F401
                                                  cell_width, control_verdicts, model_config, next_specs, per_layer,
                                                  plan_cells, protocol_fields, rate_state, rose_at_the_end, run_key,
                                                  spec_key, state_spans)
from seqlab.train import THRESHOLDS

__all__ = ["recall_sweep", "run_one", "run_name", "default_out", "plan_cells", "state_spans", "cell_rows",
           "run_key", "SIZES", "LINEAR"]


def default_out(profile: str) -> Path:
    """``results/arena/recall-sweep-<profile>.json``."""
    from seqlab.results import profile_tag

    return RESULTS_DIR / f"{NAME}-{profile_tag(profile)}.json"


def run_name(spec: dict, cfg: dict) -> str:
    """The run's name: its progress bar's label and its checkpoint file's stem (every field of :func:`run_key`)."""
    task = cfg["mqar"]
    knobs = "-".join(f"{k}{v}" for k, v in sorted(spec["knobs"].items())) or "as-built"
    extra = protocol_fields(cfg)
    return (f"recall-{spec['family']}-{knobs}-p{spec['pairs']}-L{task['seq_len']}-V{task['vocab_size']}"
            f"-{task.get('filler', 'random')}-n{cfg['train_size']}-w{cfg['width']}-lr{spec['lr']:g}"
            f"-seed{spec['seed']}-steps{cfg['steps']}" + (f"-stop{extra['stop_at']:g}" if "stop_at" in extra else "")
            + ("-fresh" if extra.get("data") == "fresh" else ""))


def answers_on_test(model, task, pairs: int, batch_size: int = 256) -> dict:
    """How the trained ``model`` answered the test split's queries (:func:`seqlab.tasks.recall.mqar_answers`, summed
    over batches): ``{"by_pair": [[correct, asked], ...], "wrong", "another_value"}``."""
    import torch

    from seqlab.tasks.recall import mqar_answers

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total = {"by_pair": [[0, 0] for _ in range(pairs)], "wrong": 0, "another_value": 0}
    try:
        with torch.no_grad():
            for batch in task.batches("test", batch_size):
                ids, labels = batch["input_ids"].to(device), batch["labels"].to(device)
                got = mqar_answers(ids, labels, model(ids).argmax(-1), pairs)
                for i, (c, n) in enumerate(got["by_pair"]):
                    total["by_pair"][i][0] += c
                    total["by_pair"][i][1] += n
                total["wrong"] += got["wrong"]
                total["another_value"] += got["another_value"]
    finally:
        model.train(was_training)
    return total


class _Watch:
    """A ``fit`` callback that keeps a run's validation records and the step its checkpoint resumed it at, and ends
    the run (``StopTraining``) at an evaluation before its last step ``steps`` whose accuracy reaches ``stop_at``
    (None: never; the last step's evaluation ends the run anyway, and ``fit`` would not catch it there)."""

    def __init__(self, stop_at: float | None = None, steps: int = 0):
        self.validation: list = []
        self.resumed_at = 0
        self.stop_at, self.steps = stop_at, steps

    def on_resume(self, step: int, checkpoint: str, steps: int) -> None:
        self.resumed_at = step

    def __call__(self, history, record: dict) -> None:
        if record.get("split") == "validation":
            self.validation.append(record)
            if self.stop_at is not None and 0 < record["step"] < self.steps and record["accuracy"] >= self.stop_at:
                from seqlab.train import StopTraining

                raise StopTraining


def stopping(curve: list, steps: int, stop_at: float | None) -> dict:
    """How a run ended, from its validation ``curve`` and its cap ``steps``: ``stopped`` ("converged" where its last
    validation accuracy reached ``stop_at``, else "cap"), ``stop_step`` (its last step) and ``still_learning`` (at the
    cap, rising at the end: :func:`.recall_sweep_plan.rose_at_the_end`)."""
    last_step, last = curve[-1] if curve else (0, 0.0)
    converged = stop_at is not None and last >= stop_at
    return {"stopped": "converged" if converged else "cap", "stop_step": int(last_step),
            "still_learning": bool(not converged and rose_at_the_end(curve))}


def run_one(spec: dict, cfg: dict, *, progress: bool = False, checkpoint_dir=None) -> dict:
    """Train one run (``spec``: a cell of :func:`plan_cells` with ``seed`` and ``lr``) and return its record."""
    from seqlab import models, train
    from seqlab.train.config import TrainConfig

    start = time.perf_counter()
    family, knobs, seed = spec["family"], dict(spec["knobs"]), spec["seed"]
    args = {**cfg["mqar"], "num_kv_pairs": spec["pairs"], **({"fresh": True} if cfg.get("fresh") else {})}
    eval_every = cfg.get("eval_every") or max(1, cfg["steps"] // 20)
    width = cell_width(family, knobs, cfg)
    with config.one_math_thread():
        task = make_task("mqar", args, seed, cfg)
        config.seed_everything(seed)
        model = models.build(family, vocab_size=task.vocab_size, seq_len=task.seq_len,
                             **model_config(family, knobs, width["d_model"], cfg["n_layers"]))
        name = run_name(spec, cfg)
        run = TrainConfig.from_sizes(cfg, lr=spec["lr"], seed=seed, eval_split="validation", eval_every=eval_every,
                                     progress=progress, desc=name, **checkpointing(checkpoint_dir, name, cfg["steps"]))
        keep = _Watch(cfg.get("stop_at"), cfg["steps"])
        seen = keep.validation                     # the validation records, kept for a run that diverges
        diverged, earlier = None, 0.0
        try:
            with train.observe() as watched:       # the loss before step 1 is checked against ln(num_targets)
                history = train.fit(model, task, run, callbacks=[keep])
            earlier = history.seconds(through_step=keep.resumed_at)   # the sittings before this one, if resumed
            test = train.evaluate(model, task, "test")
            answers = answers_on_test(model, task, spec["pairs"])
            summary = watched[-1]                  # a run stopped at stop_at has no final evaluation: its last one
            val = float(history.final["accuracy"]) if history.final else float(summary["curve"][-1][1])
        except FloatingPointError as err:          # a rate too large: recorded at accuracy 0, the search moves on
            diverged, test, val, answers = str(err), {"accuracy": 0.0, "loss": None}, 0.0, None
            curve = [[r["step"], round(float(r["accuracy"]), 6)] for r in seen]
            summary = {"num_targets": task.vocab_size, "curve": curve,
                       "initial_loss": next((round(float(r["loss"]), 6) for r in seen if r["step"] == 0), None),
                       **{f"steps_to_{t}": train.first_step_at(curve, t) for t in THRESHOLDS}}
    state = int(model.state_size(task.seq_len))
    ended = {"stopped": "diverged", "stop_step": int(summary["curve"][-1][0]) if summary["curve"] else 0,
             "still_learning": False} if diverged else stopping(summary["curve"], cfg["steps"], cfg.get("stop_at"))
    return {"family": family, "cell": spec["cell"], "group": spec["group"], "knobs": knobs, "task": "mqar",
            "pairs": spec["pairs"], "seed": seed, "lr": float(spec["lr"]), **width, "state_size": state,
            "state_per_layer": per_layer(state, cfg["n_layers"]), "seq_len": task.seq_len,
            "vocab_size": task.vocab_size,
            "filler": args.get("filler", "random"), "train_size": cfg["train_size"], "width": cfg["width"],
            "steps": cfg["steps"], **protocol_fields(cfg), **ended, "batch_size": cfg["batch_size"],
            "eval_every": eval_every,
            "accuracy": round(float(test["accuracy"]), 6), "validation_accuracy": round(val, 6),
            "test_loss": None if test["loss"] is None else round(float(test["loss"]), 6),
            **{k: summary[k] for k in ("num_targets", "initial_loss", "curve")},
            **{f"steps_to_{t}": summary[f"steps_to_{t}"] for t in THRESHOLDS},
            "init": models.init_rule(family), "device": str(next(model.parameters()).device),
            "answers": answers, "wall_s": round(earlier + time.perf_counter() - start, 2), **code_version(),
            **({"diverged": diverged} if diverged else {})}


def describe_run(run: dict) -> str:
    ended = (f" {run['stopped']} at {run['stop_step']}" + (", still learning" if run.get("still_learning") else "")
             if "stopped" in run else "")
    return (f"{run['cell']:<58s} pairs={run['pairs']:<3d} seed {run['seed']} lr={run['lr']:g} d_model={run['d_model']} "
            f"params={run['params']} ({run['budget']:.2f}x) state={run['state_size']} acc={run['accuracy']:.3f} "
            f"(val {run['validation_accuracy']:.3f}){ended} {run['wall_s']:.0f}s")


def _as_list(value, what: str, known, kind=str) -> list | None:
    if value is None:
        return None
    items = [kind(v) for v in (str(value).split(",") if isinstance(value, (str, int)) else value)]
    bad = [v for v in items if v not in known]
    if bad:
        raise ValueError(f"{what}: {bad} not in the profile's {list(known)}")
    return items


@experiment(NAME)
def recall_sweep(*, profile: str | None = None, families=None, only_pairs=None, out="auto", dry_run: bool = False,
                 progress: bool = False, verbose: bool = True, checkpoint_dir: str | None = None, **overrides) -> dict:
    """MQAR recall against state size (the module docstring has the plan and the record).

    ``profile``: quick, medium, full, or a config file or folder (None: ``$SEQLAB_PROFILE``).
    ``families``, ``only_pairs``: train only these cells (a list or a comma-separated string); the record's config
    stays the profile's, so that sittings with different subsets share one file.
    ``out``: the record; ``"auto"``: ``results/arena/recall-sweep-<profile>.json``; None: nothing written or resumed.
    ``dry_run``: train nothing; return the plan (every cell's ``d_model``, parameters and state) and the record.
    ``progress``: a progress bar per run. ``verbose``: one line per finished run.
    ``checkpoint_dir``: save each run there and resume it from there.
    Sizes (``seeds, steps, eval_every, batch_size, n_layers, lrs, reference, width, threads, train_size, test_size,
    validation_size, pairs, threshold, learned_at, mqar, cells``, and where a profile sets them ``stop_at`` and
    ``fresh``) come from the profile and may be overridden.

    Returns the record plus ``"plan"`` (the cells), ``"spans"`` (each family's largest / smallest state over its
    ``state`` cells), ``"cells"`` and ``"verdicts"`` (the reference's control at each number of pairs).
    """
    from seqlab import results

    prof = profile or config.profile()
    if code_version().get("dirty") and verbose and not dry_run:   # read before any run; said, each run records it
        print("recall-sweep: seqlab/ differs from its commit: every run of this sitting records dirty=true",
              flush=True)
    cfg = profile_sizes(SIZES, prof, overrides)
    plan = plan_cells(cfg)
    fams = _as_list(families, "families", sorted({c["family"] for c in plan}))
    pairs = _as_list(only_pairs, "only_pairs", cfg["pairs"], int)
    todo = plan_cells(cfg, fams, pairs)
    path = default_out(prof) if out == "auto" else (Path(out) if out is not None else None)
    data = load(path) if path is not None else {"runs": []}
    from_cli = sys.argv[1:3] == ["experiment", NAME]
    command = (" ".join(["python -m seqlab"] + sys.argv[1:]) if from_cli
               else f"seqlab.experiments.run({NAME!r}, profile={str(prof)!r})")
    fields = {"command": command, "versions": versions(), "profile": str(prof), "config": cfg,
              "rate_search": {"max_extensions": MAX_EXTENSIONS}}

    def summary() -> dict:
        rows = cell_rows(data["runs"], plan, cfg)
        return {"cells": rows, "verdicts": control_verdicts(rows, cfg)}

    since = time.perf_counter()

    def record(run: dict) -> None:
        nonlocal since
        if verbose:
            print(describe_run(run), flush=True)
        if path is None:
            data["runs"].append(run)
            return
        now = time.perf_counter()
        fresh = results.merge(path, key=run_key, runs=[run], fields=fields, wall_s=now - since)
        since = now
        data.clear()
        data.update(fresh)
        data.update(results.merge(path, key=run_key, fields=summary()))     # derived from the runs, each time

    if not dry_run:
        for cell in todo:                                  # each cell whole before the next
            while specs := next_specs(data["runs"], cell, cfg):
                for spec in specs:
                    record(run_one(spec, cfg, progress=progress, checkpoint_dir=checkpoint_dir))
    if path is not None and not dry_run:
        data.update(results.merge(path, key=run_key, fields={**fields, **summary()}))
    return {**data, **fields, **summary(), "plan": plan, "spans": state_spans(plan)}
