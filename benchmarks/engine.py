"""One recurrence under every causal linear family: forward + backward time of ``decay_attention`` (additive
and multiplicative causal decay) and of causal linear attention, each run on GateLoop's loop, against
``gateloop(mode="auto")`` itself with a real ``a`` shaped like ``k``; and their agreement with the float64
eq. 7 / eq. 2 loops with keys of +-80.

    .venv/bin/python benchmarks/engine.py                  # B=2, H=4, L=4096, dk=dv=16, one thread
    .venv/bin/python benchmarks/engine.py --length 1024 --repeats 3

Times: one untimed call, then the minimum over ``--repeats`` (ms). The ratio column is each op's time
over GateLoop's; 1 would mean the decay costs nothing on top of the recurrence. The error column is
``|out - ref| / |ref|`` against the float64 loops of ``decay_attention_reference`` on a shorter sequence
(``--check-length``; the loops are Python loops over time) with keys drawn in [-80, 80].
"""
from __future__ import annotations

import argparse
import sys

import torch
from _timing import best_ms

from seqlab.layers.attention import linear_attention
from seqlab.ops import decay_attention, decay_attention_reference, gateloop, relative_error


def forward_backward(fn, inputs):
    def step():
        leaves = [t.detach().requires_grad_() for t in inputs]
        fn(*leaves).sum().backward()
    return step


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--dim", type=int, default=16, help="dk = dv")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--check-length", type=int, default=300)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, args.length, args.dim)
    q, k, v = (torch.randn(shape, generator=g) for _ in range(3))
    a = torch.rand(shape, generator=g) * 0.5 + 0.5
    log_decay = torch.rand(shape, generator=g)
    ops = {
        "gateloop (real a like k)": (lambda q, k, v, a: gateloop(q, k, v, a), (q, k, v, a)),
        "additive causal decay": (lambda q, k, v: decay_attention(q, k, v), (q, k, v)),
        "multiplicative causal decay": (
            lambda q, k, v, ld: decay_attention(q, k, v, decay="multiplicative", log_decay=ld), (q, k, v, log_decay)),
        "linear attention (causal)": (lambda q, k, v: linear_attention(q, k, v), (q, k, v)),
    }
    times = {name: best_ms(forward_backward(fn, ins), args.repeats) for name, (fn, ins) in ops.items()}
    # agreement with the float64 loops, keys of +-80
    L = args.check_length
    qc, vc = q[..., :L, :], v[..., :L, :]
    kc = (torch.rand(qc.shape, generator=g) * 160 - 80)
    ldc = log_decay[..., :L, :] * 5
    errors = {
        "additive causal decay": relative_error(decay_attention(qc, kc, vc),
                                                decay_attention_reference(qc, kc, vc)),
        "multiplicative causal decay": relative_error(
            decay_attention(qc, kc, vc, decay="multiplicative", log_decay=ldc),
            decay_attention_reference(qc, kc, vc, decay="multiplicative", log_decay=ldc)),
    }
    base = times["gateloop (real a like k)"]
    print(f"forward + backward, B={args.batch}, H={args.heads}, L={args.length}, dk=dv={args.dim}, "
          f"threads={args.threads}, min of {args.repeats}; error vs the float64 loops at L={L}, keys in [-80, 80]")
    head = f"{'op':>28} | {'ms':>8} {'x gateloop':>10} | {'rel. error':>10}"
    print(head)
    print("-" * len(head))
    for name, ms in times.items():
        err = f"{errors[name]:10.1e}" if name in errors else f"{'-':>10}"
        print(f"{name:>28} | {ms:8.1f} {ms / base:10.2f} | {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
