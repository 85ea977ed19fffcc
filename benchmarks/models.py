"""Training-step time (forward + backward) of every registered causal language model against L.

    .venv/bin/python benchmarks/models.py                          # L = 256 .. 8192, d_model 64, 2 layers, B = 2
    .venv/bin/python benchmarks/models.py --lengths 1024 4096 --repeats 3

Every family is built from one config (``d_model``, ``n_layers``; each family's default heads), with room
for ``L`` where a family has learned positions (``max_len = L``) or a fixed length (the FST's
``seq_len = L``). A step is ``loss.backward()`` of the next-token cross-entropy on random tokens; the time
is the minimum over ``--repeats`` steps after one untimed step (compilation, allocation). Columns: the
time in ms per length, the parameter count without the embedding, positions and output head (a range
where it grows with L: the FST's twisted half), the ratio to the Transformer's step at ``--ratio-at``
(4096), and the slope of log t against log L over
``--slope-from`` .. the longest length (1 = linear time, 2 = quadratic). A family whose step passes
``--max-seconds`` stops there (the quadratic CausalRN and the FST, whose twisted half is O(H L^2)).
One math thread (``--threads``): the machine is shared, and one thread is what the lessons use.
"""
from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.nn.functional as F
from _timing import best_ms

from seqlab import models

LMS = ("transformer", "linear-transformer", "causalrn", "linear-causalrn", "lrnn", "fst", "lightnet", "gateloop")
VOCAB = 64


def build(name: str, L: int, d_model: int, n_layers: int) -> torch.nn.Module:
    extra = {"max_len": L} if name in ("transformer", "causalrn") else {}     # learned positions: a table of L
    torch.manual_seed(0)
    return models.build(name, vocab_size=VOCAB, seq_len=L if name == "fst" else None, d_model=d_model,
                        n_layers=n_layers, **extra)


def mixer_parameters(model: torch.nn.Module) -> int:
    """Parameters without the token embedding, learned positions and the output head."""
    skip = {id(p) for m in (model.embed, model.head) for p in m.parameters()}
    skip |= {id(model.pos)} if getattr(model, "pos", None) is not None else set()
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def step_ms(model: torch.nn.Module, B: int, L: int, repeats: int) -> float:
    tokens = torch.randint(0, VOCAB, (B, L + 1), generator=torch.Generator().manual_seed(0))
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()

    return best_ms(step, repeats)


def slope(lengths, times) -> float | None:
    pts = [(math.log(L), math.log(t)) for L, t in zip(lengths, times) if t is not None]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    p.add_argument("--models", nargs="+", default=list(LMS), choices=LMS)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-seconds", type=float, default=10.0, help="stop a family after a step this long")
    p.add_argument("--slope-from", type=int, default=1024, help="shortest L of the fitted slope")
    p.add_argument("--ratio-at", type=int, default=4096, help="L of the ratio to the Transformer (else the longest "
                                                              "L both ran)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    lengths = sorted(args.lengths)
    table = {}
    for name in args.models:
        times, params = [], set()
        for L in lengths:
            if times and times[-1] is not None and times[-1] > args.max_seconds * 1e3:
                times.append(None)
                continue
            model = build(name, L, args.d_model, args.n_layers)
            params.add(mixer_parameters(model))
            times.append(step_ms(model, args.batch_size, L, args.repeats))
            print(f"  {name} L={L}: {times[-1]:.1f} ms", file=sys.stderr, flush=True)
        table[name] = (params, times)
    ref = table.get("transformer", (None, [None] * len(lengths)))[1]
    print(f"training step (forward + backward), B={args.batch_size}, d_model={args.d_model}, n_layers={args.n_layers}, "
          f"threads={args.threads}, min of {args.repeats}; times in ms; params without embedding, positions and head "
          f"(a range: they grow with L); x tf = the Transformer's time / this family's at L={args.ratio_at} (or the "
          f"longest L both ran); slope of log t on log L from L={args.slope_from}")
    head = f"{'model':>18} {'params':>19} | " + " ".join(f"{L:>8}" for L in lengths) + f" | {'x tf':>6} {'slope':>6}"
    print(head)
    print("-" * len(head))
    for name, (params, times) in table.items():
        both = [i for i, (t, r) in enumerate(zip(times, ref)) if t is not None and r is not None]
        at = [i for i in both if lengths[i] == args.ratio_at] or both[-1:]
        speed = f"{ref[at[0]] / times[at[0]]:6.2f}" if at else f"{'-':>6}"
        count = f"{min(params):,}" if len(params) == 1 else f"{min(params):,}..{max(params):,}"
        fit = slope([L for L in lengths if L >= args.slope_from], [t for L, t in zip(lengths, times) if L >= args.slope_from])
        cells = " ".join(f"{t:8.1f}" if t is not None else f"{'-':>8}" for t in times)
        print(f"{name:>18} {count:>19} | {cells} | {speed} " + (f"{fit:6.2f}" if fit is not None else f"{'-':>6}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
