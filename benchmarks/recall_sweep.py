"""Training-step time of every cell of the recall sweep, and what the runs its record still lacks cost.

    .venv/bin/python benchmarks/recall_sweep.py                         # the medium plan, 4 pairs
    .venv/bin/python benchmarks/recall_sweep.py --families gateloop linear-causalrn --repeats 10

Each cell of the profile's plan (``seqlab.experiments.recall_sweep_plan.plan_cells``) is built at its width and
trained for ``--repeats`` steps on random tokens of the sweep's length and vocabulary, ``--pairs`` of them
labelled a sequence, batch as the profile says (AdamW, gradient clipping at 1, the head on the labelled tokens:
as ``fit`` trains), after two untimed steps (compilation, allocation); the time is the median step, on one math
thread (what a sweep sitting uses). Columns: the cell, ``d_model``, the parameters (x the budget), the state
(floats), milliseconds a step, the ratio to the reference (the Transformer), and, from the record
(``results/arena/recall-sweep-<profile>.json``), the runs the cell still lacks (at least five a cell: three rates
and two more seeds; the search may extend) and their CPU-hours at this step time (the validation passes add about
5 %). The times depend on the machine and on its load: compare ratios, not milliseconds, between machines.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from seqlab import models
from seqlab.experiments import recall_sweep as R
from seqlab.experiments import recall_sweep_plan as P
from seqlab.experiments._common import profile_sizes
from seqlab.experiments.arena_results import load
from seqlab.tasks.base import IGNORE
from seqlab.train.loop import head_on_features, training_logits

MIN_RUNS = 5        # a cell's fewest runs: three rates at seed 0, two more seeds


def step_ms(model: torch.nn.Module, vocab: int, batch: int, length: int, pairs: int, repeats: int) -> float:
    """The median milliseconds of one training step (forward, backward, clip, AdamW) on random tokens with
    ``pairs`` labelled positions a sequence (MQAR's queries), as ``seqlab.train.fit`` runs it (the head on the
    labelled tokens alone where it can)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab, (batch, length))
    y = torch.full((batch, length), IGNORE)
    for row in y:
        row[length - 1 - torch.randperm(length // 2)[:pairs]] = torch.randint(0, vocab, (pairs,))
    data = {"input_ids": x, "labels": y}
    labelled_only = head_on_features(model)

    def step():
        logits, scored = training_logits(model, model, data, labelled_only)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), scored["labels"].reshape(-1), ignore_index=IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(2):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def runs_lacking(row: dict) -> int:
    """The runs a cell still needs, at least (its record's searched rates and seeds against :data:`MIN_RUNS`)."""
    if row["status"] == "done":
        return 0
    have = len(row["searched"]) + max(0, len(row["accuracy"]) - 1)
    return max(MIN_RUNS - have, 2 if row["status"] == "seeds pending" else 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="medium")
    ap.add_argument("--families", nargs="+", default=None)
    ap.add_argument("--pairs", type=int, default=None, help="the number of pairs whose cells are timed (default: "
                                                            "the fewest): as many labelled tokens a sequence")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = profile_sizes(P.SIZES, args.profile, {})
    task = cfg["mqar"]
    pairs = args.pairs or min(cfg["pairs"])
    plan = P.plan_cells(cfg, args.families, [pairs])
    record = R.default_out(args.profile)
    data = load(record) if record.is_file() else {"runs": []}
    rows = {(r["cell"], r["pairs"]): r for r in P.cell_rows(data["runs"], P.plan_cells(cfg), cfg)}
    print(f"{args.profile} recall sweep: batch {cfg['batch_size']}, {task['seq_len']} tokens, {task['vocab_size']} "
          f"in the vocabulary, {cfg['steps']} steps a run, {args.threads} thread(s), median of {args.repeats} steps; "
          f"runs lacking from {record.name} ({len(data['runs'])} runs recorded)")
    head = f"{'cell':<74} {'d_model':>7} {'params (x)':>15} {'state':>7} {'ms/step':>8} {'x ref':>6} {'lacking':>8} {'CPU-h':>6}"
    print(head)
    print("-" * len(head))
    ref_ms, total_h, total_runs = None, 0.0, 0
    for cell in plan:
        torch.manual_seed(0)
        model = models.build(cell["family"], vocab_size=task["vocab_size"], seq_len=task["seq_len"],
                             **P.model_config(cell["family"], cell["knobs"], cell["d_model"], cfg["n_layers"]))
        ms = step_ms(model, task["vocab_size"], cfg["batch_size"], task["seq_len"], pairs, args.repeats)
        ref_ms = ms if cell["group"] == "reference" else ref_ms
        lacking = sum(runs_lacking(rows[(cell["cell"], p)]) for p in cfg["pairs"] if (cell["cell"], p) in rows)
        hours = lacking * cfg["steps"] * ms / 1e3 / 3600
        total_h, total_runs = total_h + hours, total_runs + lacking
        ratio = f"{ms / ref_ms:6.2f}" if ref_ms else f"{'—':>6}"
        print(f"{cell['cell']:<74} {cell['d_model']:>7} {cell['params']:>8,} ({cell['budget']:.2f}) "
              f"{cell['state_size']:>7,} {ms:>8.1f} {ratio} {lacking:>8} {hours:>6.1f}", flush=True)
    print(f"lacking over every number of pairs: at least {total_runs} runs, about {total_h:.1f} CPU-hours of training "
          f"at these step times")
    return 0


if __name__ == "__main__":
    sys.exit(main())
