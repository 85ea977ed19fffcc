"""Benchmark ``seqlab.ops.linear_scan``: every mode against the loop, the memory floor and public peers.

    .venv/bin/python benchmarks/scan.py                      # L = 256 .. 65536, B = 8, D = 256, fp32, CPU
    .venv/bin/python benchmarks/scan.py --threads 1 --clock cpu  # on a shared machine (see below)

For every length it prints the minimum over ``--repeats`` runs (the machine may be shared: the minimum
is the least disturbed run) of:

- each mode of ``linear_scan`` (``doubling`` on a time-invariant ``a`` of shape ``(D,)``, as in
  Algorithm 1 of paper 002; every other mode on a time-varying ``a`` of shape ``(B, L, D)``);
- the memory-traffic floor ``torch.addcmul(x, a, x)``: one fused pass reading ``a`` and ``x`` and
  writing one tensor, the bytes any scan must move;
- ``accelerated_scan.ref.scan`` and ``gateloop_transformer``'s ``associative_scan`` (torch
  implementations of the same recurrence) when those packages are installed;

then the ratios (time / floor, sequential / time, peer / time) and the slope of log t against log L
fitted from ``L >= 1024`` (1.0 = linear). Each mode's output is checked against ``blocked`` first.

On a machine shared with other jobs, wall-clock times of multi-threaded runs measure the contention
more than the code (every small parallel op waits at an OpenMP barrier for a descheduled thread):
``--threads 1 --clock cpu`` times this process's own CPU seconds on one thread, which is stable.

Memory regime. Every method allocates its output and streams its inputs; left alone, two effects of
the machine rather than the algorithm bend the time-per-element curve, so by default the script
removes both, for every method alike (the floor included):

- fresh pages: glibc serves blocks of 32 MiB and more (L >= 4096 at B=8, D=256) from new ``mmap``s,
  so every call page-faults its whole output (measured: 11 of the floor's 12 ms at L=4096) while
  smaller blocks are reused. ``--alloc steady`` (default) turns ``mmap`` off (``mallopt(M_MMAP_MAX,
  0)``, and no trimming of the heap): freed outputs are reused at every length, as PyTorch's caching allocator does on a GPU.
  ``--alloc fresh`` keeps glibc's default.
- caches: at L=1024 inputs and output (24 MiB) fit in a 32 MiB L3, at L >= 4096 they stream from
  DRAM. ``--cache cold`` (default) reads a 256 MiB buffer before every timed call (outside the timing;
  ``triton.testing.do_bench`` does the same on a GPU), so every length starts from DRAM.
  ``--cache warm`` times back-to-back calls.

With both defaults the floor's own slope is 1.0 (measured 1.03); with ``--alloc fresh --cache warm``
it is about 1.35, and every method inherits that bend.
"""
from __future__ import annotations

import argparse
import math
import time

import torch
from _memory import steady_allocation

from seqlab.ops import linear_scan, relative_error

MODES = ("sequential", "blocked", "associative", "doubling", "numba", "auto")


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = time.perf_counter
SWEEP = None  # a 256 MiB buffer read before every timed call (--cache cold)


def best_time(fn, repeats: int) -> float:
    """Minimum over ``repeats`` runs after one warm-up, on ``CLOCK`` (wall, or this process's CPU time)."""
    fn()  # warm-up (allocator, caches)
    times = []
    for _ in range(repeats):
        if SWEEP is not None:
            SWEEP.sum()  # evict the inputs from every cache level (read-only: nothing dirty to write back)
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return min(times)


def peers():
    """The public torch scans that are installed: name -> fn(a, x) computing h for (B, L, D) inputs."""
    found = {}
    try:
        from accelerated_scan.ref import scan as acc_scan

        def accelerated(a, x):
            # accelerated_scan.ref.scan takes (B, C, T) with T a power of two
            return acc_scan(a.transpose(1, 2).contiguous(), x.transpose(1, 2).contiguous()).transpose(1, 2)

        found["accelerated_scan.ref"] = accelerated
    except ImportError:
        pass
    try:
        from gateloop_transformer.associative_scan import associative_scan

        def op(left, right):
            a_i, x_i = left
            a_j, x_j = right
            return a_j * a_i, a_j * x_i + x_j  # paper 004 eq. 13

        found["gateloop associative_scan"] = lambda a, x: associative_scan(op, (a, x))[1]
    except ImportError:
        pass
    return found


def slope(lengths, times) -> float:
    pts = [(math.log(L), math.log(t)) for L, t in zip(lengths, times) if L >= 1024 and t is not None]
    if len(pts) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sum((p[0] - mx) ** 2 for p in pts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 16384, 65536])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--max-sequential", type=int, default=16384, help="longest L for the Python loop")
    parser.add_argument("--max-peer", type=int, default=16384, help="longest L for the public peers (memory)")
    parser.add_argument("--modes", nargs="+", default=list(MODES))
    parser.add_argument("--alloc", choices=("steady", "fresh"), default="steady",
                        help="steady: reuse freed outputs (no mmap); fresh: glibc's default (see 'Memory regime')")
    parser.add_argument("--cache", choices=("cold", "warm"), default="cold",
                        help="cold: sweep the caches before every timed call; warm: back-to-back calls")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="'cpu' = this process's CPU time: robust on a shared machine (use with --threads 1)")
    args = parser.parse_args(argv)
    global CLOCK, SWEEP
    CLOCK = CLOCKS[args.clock]
    alloc = args.alloc
    if alloc == "steady" and not steady_allocation():
        alloc = "fresh (mallopt unavailable)"
    if args.cache == "cold":
        SWEEP = torch.ones(64 << 20)
    if args.threads:
        torch.set_num_threads(args.threads)
    B, D = args.batch, args.dim
    others = peers()
    print(f"linear_scan on {torch.device('cpu')}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"B={B}, D={D}, float32, min of {args.repeats} runs of {args.clock} time, "
          f"allocation {alloc}, {args.cache} cache; peers installed: {sorted(others) or 'none'}")
    names = ["floor (addcmul)"] + list(args.modes) + list(others)
    table = {n: [] for n in names}
    g = torch.Generator().manual_seed(0)
    for L in args.lengths:
        x = torch.randn(B, L, D, generator=g)
        a = torch.rand(B, L, D, generator=g) * 0.5 + 0.5
        lam = torch.rand(D, generator=g) * 0.5 + 0.5
        ref_tv = linear_scan(a, x, mode="blocked")
        ref_ti = linear_scan(lam, x, mode="blocked")
        table["floor (addcmul)"].append(best_time(lambda: torch.addcmul(x, a, x), args.repeats))
        for mode in args.modes:
            if mode == "sequential" and L > args.max_sequential:
                table[mode].append(None)
                continue
            dec, ref = (lam, ref_ti) if mode == "doubling" else (a, ref_tv)
            err = relative_error(linear_scan(dec, x, mode=mode), ref)
            assert err < 1e-5, f"{mode} L={L}: relative error {err:.2e} against blocked"
            reps = 1 if mode == "sequential" else args.repeats
            table[mode].append(best_time(lambda: linear_scan(dec, x, mode=mode), reps))
        for name, fn in others.items():
            if L > args.max_peer or (name.startswith("accelerated") and L & (L - 1)):
                table[name].append(None)
                continue
            err = relative_error(fn(a, x), ref_tv)
            assert err < 1e-4, f"{name} L={L}: relative error {err:.2e} against blocked"
            table[name].append(best_time(lambda: fn(a, x), max(1, args.repeats // 2)))
        print(f"  L={L:6d} done", flush=True)
    lengths = args.lengths
    floor, seq = table["floor (addcmul)"], table.get("sequential")
    print()
    print(f"{'method':28s}" + "".join(f"{'L=' + str(L):>11s}" for L in lengths) + f"{'slope':>8s}")
    for name in names:
        row = "".join(f"{t * 1e3:9.2f}ms" if t is not None else f"{'-':>11s}" for t in table[name])
        print(f"{name:28s}{row}{slope(lengths, table[name]):8.3f}")
    print("\ntime / floor (1.0 = as fast as one fused pass over the same bytes)")
    for name in names[1:]:
        row = "".join(f"{t / f:11.2f}" if t is not None else f"{'-':>11s}" for t, f in zip(table[name], floor))
        print(f"{name:28s}{row}")
    if seq is not None:
        print("\nspeed-up over the sequential loop")
        for name in names[1:]:
            row = "".join(f"{s / t:11.1f}" if t is not None and s is not None else f"{'-':>11s}"
                          for t, s in zip(table[name], seq))
            print(f"{name:28s}{row}")
    for peer in others:
        print(f"\nspeed-up over {peer}")
        for mode in args.modes:
            row = "".join(f"{p / t:11.1f}" if t is not None and p is not None else f"{'-':>11s}"
                          for t, p in zip(table[mode], table[peer]))
            print(f"{mode:28s}{row}")
    return table


if __name__ == "__main__":
    main()
