"""Time GateLoop's modes on CPU and compare ``mode="auto"`` with the public ``gateloop-transformer`` operator.

    python benchmarks/gateloop.py                 # L = 4096, both shape settings
    python benchmarks/gateloop.py --lengths 1024 4096 16384 --repeats 5

Columns: milliseconds per call (forward, float32), ratio against the sequential recurrence (eq. 7-8),
against the memory-traffic floor (one fused elementwise pass over the same input and output bytes),
and against the public operator ``gateloop_transformer.gateloop_transformer.gate_loop_operator``
(Phil Wang's PyTorch port: an associative scan over the ``(a_n, k_n^T v_n)`` pairs, eq. 12-13) when
that package is installed (``pip install gateloop-transformer``; not a seqlab dependency). Both get
the same inputs; the public operator returns ``q Re(S_n)``, which is ``Re(y_n)`` for real ``q``.
The "speed-up vs public" line is ``time(public) / time(auto)``, each the best call of
``--compare-rounds`` turns taken in alternation (a warm-up call and 5 timed calls of auto, then of the
public operator, and again), so that a busy moment of a shared machine slows both alike. Inputs are
warm in cache, as they are in a layer, where the projections that make them have just written them.

Shapes: ``max-headed`` is the paper's setting (Appendix C: d_h = 1, one head per channel, 64 channels),
with every head's sequence contiguous; ``max-headed, layer layout`` the same sizes laid out the way the
GateLoop layer's projections leave them, ``(B, L, H)`` in memory viewed as ``(B, H, L, 1)`` (seqlab's
compiled kernel then updates all heads of a step with vector instructions; both operators get the
very same tensors);
``multi-dim`` uses 8 heads with dk = dv = 16, ``wide-heads`` 4 heads with dk = dv = 64 (a usual
attention head size; the associative scan then holds L x 64 x 64 states per head).
"""
from __future__ import annotations

import argparse
import math
import time

import torch
from _memory import steady_allocation
from _timing import best_ms

from seqlab.ops import relative_error
from seqlab.ops.gateloop import gateloop

SETTINGS = {"max-headed": dict(B=1, H=64, dk=1, dv=1),
            "max-headed, layer layout": dict(B=1, H=64, dk=1, dv=1, heads_last=True),
            "multi-dim": dict(B=1, H=8, dk=16, dv=16),
            "wide-heads": dict(B=1, H=4, dk=64, dv=64)}


def make_inputs(B, H, L, dk, dv, seed=0, heads_last=False):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, H, L, dk, generator=g), torch.randn(B, H, L, dk, generator=g)
    v = torch.randn(B, H, L, dv, generator=g)
    mag = torch.sigmoid(torch.randn(B, H, L, dk, generator=g) + 2.0)
    a = torch.polar(mag, torch.randn(B, H, L, dk, generator=g))
    if heads_last:  # the same values, stored (B, L, H, d) and viewed as (B, H, L, d)
        q, k, v, a = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v, a))
    return q, k, v, a


timed = best_ms   # one untimed call, then the minimum over repeats (benchmarks/_timing.py)


def timed_alternating(fns, rounds: int, block: int = 5) -> list[float]:
    """Best milliseconds of each function over ``rounds`` turns, a turn being one untimed call (it brings
    the function's data back into cache: each call of the other function evicts it) and ``block``
    timed calls. Taking turns, every function sees the same quiet and busy moments of a shared
    machine, so the ratio of two results is not the ratio of a quiet moment and a busy one."""
    best = [math.inf] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            fn()
            for _ in range(block):
                start = time.perf_counter()
                fn()
                best[i] = min(best[i], time.perf_counter() - start)
    return [b * 1e3 for b in best]


def public_operator():
    try:
        from gateloop_transformer.gateloop_transformer import gate_loop_operator
    except ImportError:
        return None

    def run(q, k, v, a):
        B, H, L, dk = q.shape
        fold = lambda t: t.reshape(B * H, L, t.shape[-1])                          # noqa: E731
        return gate_loop_operator(fold(q), fold(k), fold(v), fold(a)[..., None])    # (B*H, L, dv), real
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096])
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per mode (the best is shown)")
    parser.add_argument("--compare-rounds", type=int, default=5,
                        help="turns of auto and the public operator (5 timed calls each per turn)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on a shared machine)")
    parser.add_argument("--alloc", choices=("steady", "fresh"), default="steady",
                        help="steady: freed outputs are reused (no mmap); fresh: glibc's default (see benchmarks/scan.py)")
    parser.add_argument("--sequential-max", type=int, default=4096, help="skip the recurrent mode above this length")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    alloc = args.alloc
    if alloc == "steady" and not steady_allocation():
        alloc = "fresh (mallopt unavailable)"
    public = public_operator()
    print(f"torch {torch.__version__}, {args.threads} thread(s), allocation {alloc}; public operator: "
          f"{'gateloop-transformer installed' if public else 'not installed (pip install gateloop-transformer)'}")
    for name, shape in SETTINGS.items():
        for L in args.lengths:
            q, k, v, a = make_inputs(L=L, **shape)
            print(f"\n{name}: B={shape['B']} H={shape['H']} L={L} dk={shape['dk']} dv={shape['dv']}"
                  + (", stored (B, L, H)" if shape.get("heads_last") else ""))
            floor = timed(lambda: torch.add(q * k + a.real, v.sum(-1, keepdim=True)), args.repeats)
            modes = ["auto", "chunked", "associative"] + (["recurrent"] if L <= args.sequential_max else [])
            if shape["dk"] * shape["dv"] * L * shape["H"] >= (1 << 26):
                modes.remove("associative")                      # its L x dk x dv stack would not fit well
            times = {m: timed(lambda m=m: gateloop(q, k, v, a, mode=m), args.repeats) for m in modes}
            base = times.get("recurrent")
            print(f"{'mode':>14} {'ms':>10} {'vs recurrent':>13} {'vs floor':>9}")
            for m, t in times.items():
                speed = f"{base / t:12.1f}x" if base else f"{'-':>13}"
                print(f"{m:>14} {t:10.2f} {speed} {t / floor:8.1f}x")
            print(f"{'floor':>14} {floor:10.2f}")
            if public is not None:
                t_auto, t_pub = timed_alternating([lambda: gateloop(q, k, v, a), lambda: public(q, k, v, a)],
                                                  args.compare_rounds)
                err = relative_error(public(q, k, v, a).reshape(v.shape), gateloop(q, k, v, a).real)
                print(f"{'public op':>14} {t_pub:10.2f}   (same outputs: relative difference {err:.1e})")
                print(f"speed-up of auto vs the public gateloop-transformer operator: {t_pub / t_auto:.1f}x "
                      f"({t_auto:.2f} ms vs {t_pub:.2f} ms, taken in turns)")


if __name__ == "__main__":
    main()
