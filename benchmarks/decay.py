"""Fig. 2 of paper 003 on CPU: non-causal "1 scan" (additive decay, eq. 8) against "2 scan"
(multiplicative decay: a forward and a backward chunked scan, §3.1), forward and backward.

    .venv/bin/python benchmarks/decay.py                       # L = 512 .. 32768, 4 heads of width 64
    .venv/bin/python benchmarks/decay.py --lengths 512 2048 --repeats 3 --threads 2

Both sides use ``seqlab.ops.decay_attention`` in its fastest CPU mode (``auto``): the 1 scan is two
matrix products (``softmax(K)^T V``, then ``Q [KV]``); the 2 scan is the chunked form of eq. 2 with one
decay per head (Lightning Attention's setting, as in the paper's Fig. 2) run in both directions.
Columns: times (min over repeats, ms), the ratio 2 scan / 1 scan, the recurrent loop of eq. 7 (the
sequential reference, short lengths only) and the memory-traffic floor (one elementwise pass reading
q, k, v and writing o). The machine is shared: each time is the minimum of ``--repeats`` runs.
"""
from __future__ import annotations

import argparse
import sys

from seqlab.experiments.lightnet import scan_speed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384, 32768])
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=64, help="dk = dv per head")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (1 is fastest on a busy shared CPU)")
    p.add_argument("--loop-max", type=int, default=2048, help="longest L for the sequential eq. 7 loop")
    args = p.parse_args(argv)
    rows = scan_speed(lengths=args.lengths, heads=args.heads, dim=args.dim, repeats=args.repeats,
                      threads=args.threads, loop_max=args.loop_max, progress=True)
    head = (f"{'L':>6} | {'1 scan fwd':>10} {'2 scan fwd':>10} {'ratio':>6} | {'1 scan bwd':>10} {'2 scan bwd':>10} "
            f"{'ratio':>6} | {'eq.7 loop':>9} {'floor':>7}")
    print(f"non-causal decay attention, B=1, H={args.heads}, dk=dv={args.dim}, threads={args.threads}, "
          f"min of {args.repeats} runs, times in ms")
    print(head)
    print("-" * len(head))
    for r in rows:
        loop = f"{r['loop_fwd_ms']:9.1f}" if r.get("loop_fwd_ms") is not None else f"{'-':>9}"
        print(f"{r['L']:>6} | {r['one_fwd_ms']:10.2f} {r['two_fwd_ms']:10.2f} {r['ratio_fwd']:6.1f} | "
              f"{r['one_bwd_ms']:10.2f} {r['two_bwd_ms']:10.2f} {r['ratio_bwd']:6.1f} | {loop} {r['floor_ms']:7.2f}")
    long = [r for r in rows if r["L"] >= 8192]
    if long:
        worst = min(min(r["ratio_fwd"], r["ratio_bwd"]) for r in long)
        print(f"\nat L >= 8192 the 1 scan is at least {worst:.1f}x faster than the 2 scan (forward and backward)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
