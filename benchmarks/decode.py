"""Decoding cost against context length: every causal language model's ``step`` after a long context, against
re-running the whole forward for each new token (what a model without a recurrent form must do).

    .venv/bin/python benchmarks/decode.py                              # contexts 128 .. 16384, batch 1 and 8
    .venv/bin/python benchmarks/decode.py --contexts 128 4096 --batches 1 --models gateloop lightnet

One intra-op thread (``--threads``), float32, random weights at ``d_model=32, n_layers=2`` (the decoding
check sizes; ``--d-model``/``--layers`` change them). For each model, batch and context ``c``:

- ``step ms``: the best of ``--repeats`` timed ``model.step`` calls on a state that has read ``c`` tokens
  (built by ``prefill`` in chunks of 1024 tokens, each continuing the last one's state), taken in
  ``--rounds`` rounds; each round times every context of the model in turn, step and rerun (a busy moment
  of a shared machine slows every context alike, so that ``t(c_max) / t(c_min)`` compares like with like:
  timed one context after another, a load that changed in between read as a cost that grows with ``c``);
- ``rerun ms``: one forward over the ``c + 1`` tokens, the cost of the next token without a state
  (skipped above ``--rerun-max``, and above ``--quadratic-max`` for the quadratic models, whose scores take
  ``c^2`` memory);
- the quadratic CausalRN's ``prefill`` steps through the prompt (its op has no parallel form from a state),
  O(c^2) in Python: its contexts above ``--quadratic-max`` are skipped altogether;
- ``state``: the memory held per sequence after ``c`` tokens, ``4 * model.state_size(c)`` bytes.

Then per model: ``t(c_max) / t(c_min)`` of ``step`` (about 1 for the linear families, growing for the
Transformer's KV cache and the quadratic CausalRN) and the speed-up of ``step`` over the rerun path. The
machine's load average is printed before and after; ``--clock cpu`` times by the process's CPU time (as
``engine.py``: a loaded machine's waits for a core left out); ``--record`` also writes the tables as JSON (by default
``benchmarks/results/cpu-decode-<date>.json``: the commit, the machine, the load, the command).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from engine import CLOCKS, best_of, write_record  # noqa: E402  the clocks and the JSON record of the CPU scripts

LMS = ("transformer", "linear-transformer", "causalrn", "linear-causalrn", "lrnn", "lightnet", "gateloop")
QUADRATIC = {"transformer", "causalrn"}
PREFILL_BY_STEPS = {"causalrn"}
ROUNDS = 3          # alternating rounds of step and rerun timings
VOCAB = 64


def build(name: str, d_model: int, n_layers: int, max_len: int):
    from seqlab import models

    extra = {"n_heads": 2} if name in ("transformer", "linear-transformer", "lightnet") else {}
    if name in ("transformer", "causalrn"):       # learned positions; the linear models' sinusoids fit any length
        extra["max_len"] = max_len
    torch.manual_seed(0)
    return models.build(name, vocab_size=VOCAB, d_model=d_model, n_layers=n_layers, **extra).eval()


def state_after(model, tokens: torch.Tensor, chunk: int = 1024):
    """The state after ``tokens`` (B, c), prefilled ``chunk`` tokens at a time."""
    state = None
    for start in range(0, tokens.shape[1], chunk):
        _, state = model.prefill(tokens[:, start:start + chunk], state)
    return state


def measure(model, name: str, batch: int, contexts: list, repeats: int, rounds: int, rerun_max: int,
            quadratic_max: int, threads: int, clock: str = "wall") -> dict:
    """``{c: {"step_ms", "rerun_ms", "state_bytes"}}`` for every context, all states built first, then timed in
    ``rounds`` rounds over every context in turn (step, then rerun); the best of each."""
    limit = min(rerun_max, quadratic_max) if name in QUADRATIC else rerun_max
    runs = {}
    with torch.no_grad():
        for c in contexts:
            gen = torch.Generator().manual_seed(c)
            tokens = torch.randint(0, VOCAB, (batch, c + 1), generator=gen)
            runs[c] = (tokens, state_after(model, tokens[:, :c]))
        torch.set_num_threads(threads)    # the first Numba kernel of a process resets torch's thread count
        step_ms = dict.fromkeys(contexts, float("inf"))
        rerun_ms = dict.fromkeys(contexts, float("inf"))
        for _ in range(rounds):
            for c, (tokens, state) in runs.items():
                step_ms[c] = min(step_ms[c], best_of(lambda: model.step(tokens[:, c], state), repeats, clock))
                if c <= limit:
                    rerun_ms[c] = min(rerun_ms[c], best_of(lambda: model(tokens), max(1, repeats // 4), clock))
    return {c: {"step_ms": step_ms[c], "rerun_ms": rerun_ms[c] if c <= limit else None,
                "state_bytes": 4 * model.state_size(c)} for c in contexts}


def fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(LMS), choices=LMS)
    p.add_argument("--contexts", type=int, nargs="+", default=[128, 512, 2048, 4096, 16384])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--rerun-max", type=int, default=16384, help="longest context timed on the rerun path")
    p.add_argument("--quadratic-max", type=int, default=4096,
                   help="longest context for the quadratic models' rerun and the quadratic CausalRN's step")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=ROUNDS, help="rounds over every context of a model")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                   help="wall clock, or the process's CPU time (a loaded machine's waits for a core left out)")
    p.add_argument("--record", nargs="?", const="", default=None, metavar="PATH",
                   help="also write the tables as JSON (default path: benchmarks/results/cpu-decode-<date>.json)")
    args = p.parse_args(argv)
    load_before = os.getloadavg()
    torch.set_num_threads(args.threads)
    contexts = sorted(args.contexts)
    print(f"decoding one token after c tokens: d_model={args.d_model}, {args.layers} layers, vocab {VOCAB}, "
          f"float32, {args.threads} thread(s); {args.clock} clock, best of {args.repeats} in {args.rounds} rounds "
          f"over the contexts; "
          f"times in ms; load average {load_before[0]:.2f} ({os.cpu_count()} CPUs)")
    summary, records = [], []
    for batch in args.batches:
        head = f"{'model':<19} {'B':>2} {'context':>7} {'step ms':>9} {'rerun ms':>9} {'rerun/step':>10} {'state/seq':>10}"
        print(f"\n{head}\n{'-' * len(head)}")
        for name in args.models:
            model = build(name, args.d_model, args.layers, max_len=contexts[-1] + 1)
            timed = [c for c in contexts if not (name in PREFILL_BY_STEPS and c > args.quadratic_max)]
            rows = measure(model, name, batch, timed, args.repeats, args.rounds, args.rerun_max, args.quadratic_max,
                           args.threads, args.clock)
            for c in contexts:
                if c not in rows:
                    print(f"{name:<19} {batch:>2} {c:>7} {'-':>9} {'-':>9} {'-':>10} "
                          f"{fmt_bytes(4 * model.state_size(c)):>10}  (prefill steps token by token: skipped)")
                    continue
                r = rows[c]
                rerun = f"{r['rerun_ms']:9.2f}" if r["rerun_ms"] is not None else f"{'-':>9}"
                speed = f"{r['rerun_ms'] / r['step_ms']:10.1f}" if r["rerun_ms"] is not None else f"{'-':>10}"
                print(f"{name:<19} {batch:>2} {c:>7} {r['step_ms']:9.3f} {rerun} {speed} "
                      f"{fmt_bytes(r['state_bytes']):>10}", flush=True)
                records.append({"model": name, "batch": batch, "context": c, "step_ms": round(r["step_ms"], 4),
                                "rerun_ms": None if r["rerun_ms"] is None else round(r["rerun_ms"], 3),
                                "state_bytes": r["state_bytes"]})
            if not rows:
                continue
            lo, hi = rows[min(rows)], rows[max(rows)]
            summary.append((name, batch, hi["step_ms"] / lo["step_ms"], max(rows),
                            {c: r["rerun_ms"] / r["step_ms"] for c, r in rows.items() if r["rerun_ms"] is not None}))
    load_after = os.getloadavg()
    print(f"\n{'model':<19} {'B':>2} {'t(c_max)/t(' + str(contexts[0]) + ')':>18}  speed-up over rerun by context")
    for name, batch, growth, c_max, speedups in summary:
        ups = ", ".join(f"{c}: {s:.0f}x" for c, s in speedups.items())
        print(f"{name:<19} {batch:>2} {growth:12.2f} ({c_max:>5})  {ups}")
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    if args.record is not None:
        config = dict(d_model=args.d_model, layers=args.layers, vocab=VOCAB, threads=args.threads,
                      repeats=args.repeats, rounds=args.rounds, clock=args.clock, contexts=contexts,
                      batches=args.batches)
        growth = [{"model": n, "batch": b, "step_growth": round(g, 3), "c_max": c} for n, b, g, c, _ in summary]
        path = write_record("decode", args.record, "cpu" if args.clock == "cpu" else "", config, records,
                            load_before, load_after, argv,
                            extra={"step_growth": growth})
        print(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
