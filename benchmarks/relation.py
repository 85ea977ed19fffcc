"""Time the CausalRN reduction (000 eq. 8-9) on CPU: quadratic (pairs, chunked) against linear (log domain).

    .venv/bin/python benchmarks/relation.py                        # L = 256 .. 8192, H = 64
    .venv/bin/python benchmarks/relation.py --lengths 256 1024 --hidden 128 --repeats 3 --backward

Columns: milliseconds per call (min over repeats, float32, B=1, causal, ``normalized=True``) of
``mode="quadratic"`` (exp, pre-norm none) and ``mode="linear"``; the quadratic mode with exact
pre-activation norm (which has no linear form); the float64 reference loop of eq. 8 (the sequential
reference, short lengths only); the memory-traffic floor (one fused elementwise pass reading p, q and
writing r); and the ratios linear / floor and quadratic / linear. Fitted log-log slopes (time ~ L^slope)
are printed at the end: ~1 for linear, ~2 for quadratic. On a CUDA machine ``mode="triton"`` is timed
too. No public peer is installed for this op (the authors' code is not a package).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from seqlab.ops.relation import relation, relation_reference


def best_ms(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reference-max", type=int, default=1024, help="longest L for the float64 loop")
    ap.add_argument("--exact-max", type=int, default=2048, help="longest L for exact pre-norm (quadratic)")
    ap.add_argument("--backward", action="store_true", help="time forward + backward")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    H = args.hidden

    def call(mode, p, q, **kw):
        if not args.backward:
            with torch.no_grad():
                return relation(p, q, mode=mode, normalized=True, **kw)
        out = relation(p, q, mode=mode, normalized=True, **kw)
        out.sum().backward()

    rows = []
    for L in args.lengths:
        p = torch.randn(1, L, H, requires_grad=args.backward)
        q = torch.randn(1, L, H, requires_grad=args.backward)
        buf = torch.empty(1, L, H)
        row = {"L": L,
               "quadratic": best_ms(lambda: call("quadratic", p, q), args.repeats),
               "linear": best_ms(lambda: call("linear", p, q), args.repeats),
               "floor": best_ms(lambda: torch.add(p.detach(), q.detach(), out=buf), args.repeats)}
        if torch.cuda.is_available():   # the Triton kernel runs compiled only on a GPU (CPU: interpreter)
            pc, qc = p.detach().cuda().requires_grad_(args.backward), q.detach().cuda().requires_grad_(args.backward)
            row["triton (cuda)"] = best_ms(lambda: (call("triton", pc, qc), torch.cuda.synchronize()), args.repeats)
        row["exact"] = best_ms(lambda: call("quadratic", p, q, pre_norm="exact"), args.repeats) if L <= args.exact_max else None
        row["reference"] = (best_ms(lambda: relation_reference(p.detach(), q.detach(), normalized=True), 1)
                            if L <= args.reference_max else None)
        rows.append(row)

    what = "forward + backward" if args.backward else "forward"
    print(f"relation reduction, {what}, B=1, H={H}, causal, threads={args.threads}, min of {args.repeats}, ms")
    head = (f"{'L':>6} | {'quadratic':>10} {'linear':>9} {'exact-pre':>10} {'f64 loop':>9} {'floor':>7} | "
            f"{'lin/floor':>9} {'quad/lin':>9} {'loop/lin':>9}")
    print(head)
    print("-" * len(head))
    fmt = lambda v, w, d=2: f"{v:{w}.{d}f}" if v is not None else f"{'-':>{w}}"
    for r in rows:
        loop_ratio = r["reference"] / r["linear"] if r["reference"] is not None else None
        print(f"{r['L']:>6} | {r['quadratic']:10.2f} {r['linear']:9.3f} {fmt(r['exact'], 10)} {fmt(r['reference'], 9, 1)} "
              f"{r['floor']:7.3f} | {r['linear'] / r['floor']:9.1f} {r['quadratic'] / r['linear']:9.1f} {fmt(loop_ratio, 9, 0)}")
    if "triton (cuda)" in rows[0]:
        print("triton (cuda) ms:", [round(r["triton (cuda)"], 3) for r in rows])
    if len(rows) >= 2:
        ls = np.log([r["L"] for r in rows])
        for key in ("linear", "quadratic"):
            slope = np.polyfit(ls, np.log([r[key] for r in rows]), 1)[0]
            print(f"slope of log(time) vs log(L), {key}: {slope:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
