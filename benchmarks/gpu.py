"""The CUDA kernels, timed on a GPU (``python3 workbench.py gpu-check`` runs it; CPU timings are in the
other scripts).

    .venv/bin/python benchmarks/gpu.py

Three tables, every time the median of ``triton.testing.do_bench`` (warm-up, then repeated calls with the
L2 cache flushed between them), float32:

1. ``linear_scan(mode="triton")`` (B = 8, D = 256): achieved memory bandwidth, counting the bytes any scan
   must move (read ``a`` and ``x``, write ``h``: 12 bytes per element), against the GPU's peak (from its
   memory clock and bus width) and against the memory-traffic floor ``torch.addcmul(x, a, x)``, which
   moves the same bytes in one fused elementwise pass.
2. GateLoop's chunked kernel (``gateloop(mode="triton")``, real transitions, B = 4, 8 heads of
   dk = dv = 64) forward and forward + backward, against flash-linear-attention's ``chunk_gla`` (the same
   recurrence, ``S_t = diag(a_t) S_{t-1} + k_t^T v_t``, ``y_t = q_t S_t``, with ``g = log a`` and scale 1)
   when ``fla`` is installed (``pip install flash-linear-attention``; not a seqlab dependency), and the
   paper's setting (64 heads of dk = dv = 1, Appendix C).
3. Paper 003 Fig. 2 on the GPU: non-causal 1 scan (additive decay, eq. 8) against 2 scans
   (multiplicative decay), B = 1, 4 heads of 64, forward and forward + backward.
"""
from __future__ import annotations

import argparse
import sys

import torch

# Peak memory bandwidths (bytes/s) by device name, for GPUs whose properties do not give the memory clock.
PEAK_BY_NAME = {"H200": 4.8e12, "H100 SXM": 3.35e12, "H100 80GB HBM3": 3.35e12, "H100 PCIe": 2.0e12,
                "A100-SXM4-80GB": 2.039e12, "A100 80GB PCIe": 1.935e12, "A100-SXM4-40GB": 1.555e12, "L4": 3.0e11}


def peak_bandwidth(props) -> float | None:
    """Peak DRAM bandwidth in bytes/s: ``2 x memory clock x bus width`` (double data rate) when the device
    properties carry them, else from :data:`PEAK_BY_NAME`, else None."""
    clock_khz, bus_bits = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    if clock_khz and bus_bits:
        return 2 * clock_khz * 1e3 * bus_bits / 8
    for key, value in PEAK_BY_NAME.items():
        if key in getattr(props, "name", ""):
            return value
    return None


def bench_ms(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100))


def fwd_bwd(fn, inputs):
    """A callable that runs ``fn(*inputs)`` and its backward (gradients to every input)."""
    def run():
        for t in inputs:
            t.grad = None
        out = fn(*inputs)
        out = out[0] if isinstance(out, tuple) else out
        out.float().sum().backward()
    return run


def scan_table(lengths, peak) -> None:
    from seqlab.ops import linear_scan

    print("\n1. linear_scan(mode='triton'), B=8, D=256, float32: achieved bandwidth (12 bytes per element)")
    print(f"{'L':>7} {'scan ms':>9} {'GB/s':>7} {'% peak':>7} | {'floor ms':>9} {'GB/s':>7} {'% peak':>7} | scan/floor")
    for L in lengths:
        a = torch.rand(8, L, 256, device="cuda") * 0.5 + 0.5
        x = torch.randn(8, L, 256, device="cuda")
        nbytes = 3 * a.numel() * 4
        t_scan = bench_ms(lambda: linear_scan(a, x, mode="triton"))
        t_floor = bench_ms(lambda: torch.addcmul(x, a, x))
        bw_scan, bw_floor = nbytes / t_scan / 1e6, nbytes / t_floor / 1e6
        pct = (lambda bw: f"{100 * bw * 1e9 / peak:6.1f}%" if peak else f"{'-':>7}")
        print(f"{L:>7} {t_scan:>9.3f} {bw_scan:>7.0f} {pct(bw_scan)} | {t_floor:>9.3f} {bw_floor:>7.0f} "
              f"{pct(bw_floor)} | {t_scan / t_floor:9.2f}")


def _fla_chunk_gla():
    try:
        from fla.ops.gla import chunk_gla
    except Exception:        # not installed, or built for another torch: the column is left out
        return None
    return chunk_gla


def gateloop_table(lengths) -> None:
    from seqlab.ops import gateloop

    chunk_gla = _fla_chunk_gla()
    print("\n2. GateLoop, real transitions, float32, ms (fwd / fwd+bwd)"
          + ("" if chunk_gla else "; fla is not installed: no chunk_gla column"))
    print(f"{'setting':<24} {'L':>7} {'seqlab fwd':>11} {'fwd+bwd':>9}"
          + (f" | {'fla fwd':>9} {'fwd+bwd':>9} | {'fla/seqlab fwd':>14} {'fwd+bwd':>8}" if chunk_gla else ""))
    for label, heads, d in (("4 x 8 heads, dk=dv=64", 8, 64), ("paper: 64 heads, dk=dv=1", 64, 1)):
        for L in lengths:
            g = torch.Generator(device="cuda").manual_seed(L)
            q, k, v = (torch.randn(4, heads, L, d, device="cuda", generator=g, requires_grad=True) for _ in range(3))
            log_a = (-torch.rand(4, heads, L, d, device="cuda", generator=g) * 0.1)
            a = log_a.exp().requires_grad_(True)
            ours = (bench_ms(lambda: gateloop(q, k, v, a, mode="triton")),
                    bench_ms(fwd_bwd(lambda *t: gateloop(*t, mode="triton"), [q, k, v, a])))
            row = f"{label:<24} {L:>7} {ours[0]:>11.3f} {ours[1]:>9.3f}"
            if chunk_gla and d >= 16:
                # fla's layout is (B, T, H, K); g is the per-step log transition; scale 1 as in GateLoop
                qt, kt, vt, gt = (t.detach().transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v, log_a))
                theirs = (bench_ms(lambda: chunk_gla(qt, kt, vt, gt, scale=1.0)),
                          bench_ms(fwd_bwd(lambda *t: chunk_gla(*t, scale=1.0), [qt, kt, vt, gt])))
                row += (f" | {theirs[0]:>9.3f} {theirs[1]:>9.3f} | {theirs[0] / ours[0]:>14.2f} "
                        f"{theirs[1] / ours[1]:>8.2f}")
            print(row)


def decay_table(lengths) -> None:
    from seqlab.ops import decay_attention

    print("\n3. paper 003 Fig. 2 on the GPU: non-causal 1 scan (additive) vs 2 scans (multiplicative), B=1, "
          "4 heads of 64, ms")
    print(f"{'L':>7} {'1 scan fwd':>11} {'2 scan fwd':>11} {'ratio':>6} | {'1 scan f+b':>11} {'2 scan f+b':>11} {'ratio':>6}")
    for L in lengths:
        q, k, v = (torch.randn(1, 4, L, 64, device="cuda", requires_grad=True) for _ in range(3))
        ld = torch.rand(1, 4, L, 1, device="cuda") * 0.1

        def one(*t):
            return decay_attention(*t, decay="additive", causal=False)

        def two(*t):
            return decay_attention(*t, decay="multiplicative", log_decay=ld, causal=False)

        f1, f2 = bench_ms(lambda: one(q, k, v)), bench_ms(lambda: two(q, k, v))
        b1, b2 = bench_ms(fwd_bwd(one, [q, k, v])), bench_ms(fwd_bwd(two, [q, k, v]))
        print(f"{L:>7} {f1:>11.3f} {f2:>11.3f} {f2 / f1:>6.2f} | {b1:>11.3f} {b2:>11.3f} {b2 / b1:>6.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA GPU here; it times the CUDA kernels (the other benchmarks time the CPU)")
        return 0
    props = torch.cuda.get_device_properties(0)
    peak = peak_bandwidth(props)
    print(f"{props.name}, torch {torch.__version__}; peak memory bandwidth "
          + (f"{peak / 1e9:.0f} GB/s" if peak else "unknown"))
    failed = 0
    for table in (lambda: scan_table(args.lengths, peak), lambda: gateloop_table(args.lengths[:3]),
                  lambda: decay_table(args.lengths[:3])):
        try:
            table()
        except Exception as err:      # one table's failure is reported, the others still run
            failed += 1
            print(f"FAILED: {type(err).__name__}: {err}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
