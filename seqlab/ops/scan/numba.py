"""``linear_scan(mode="numba")``: the loop ``h_t = a_t h_{t-1} + x_t`` compiled for the CPU by Numba.

One pass that reads ``a`` and ``x`` once and writes ``h`` once (about what one fused elementwise pass
over the same bytes costs, ``benchmarks/scan.py``), parallel over batch rows and blocks of channels;
on real inputs it equals ``linear_scan(mode="sequential")`` to the bit.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from seqlab.kernels.numba import HAVE_NUMBA, as_numpy, require_numba, use_threads

__all__ = ["scan_forward"]

# Sequences (rows x channel blocks) handed to one thread at a time: a block of at least this many
# contiguous channels keeps whole cache lines per row; narrower rows are interleaved in groups instead
# (independent chains side by side, so a step does not wait for the latency of the previous one).
_MIN_BLOCK = 64
_INTERLEAVE = 16

if HAVE_NUMBA:
    from numba import prange

    from seqlab.kernels.numba import jit

    @jit
    def _scan_kernel(a, x, h0, reverse, rows_per_task, blocks, out):  # pragma: no cover - compiled
        """``out[b, t] = a[b, t] * out[b, t-1] + x[b, t]`` (``t`` descending when ``reverse``).

        x, out: (B, L, D); a: (Ba, La, D) with Ba in {1, B}, La in {1, L} (1: time-invariant);
        h0: (Bh, D) with Bh in {1, B} (zeros when there is no initial state).
        One task: ``rows_per_task`` rows x one block of D / ``blocks`` channels, all L steps.
        """
        B, L, D = x.shape
        width = (D + blocks - 1) // blocks
        groups = (B + rows_per_task - 1) // rows_per_task
        for task in prange(groups * blocks):
            r0 = (task // blocks) * rows_per_task
            r1 = min(B, r0 + rows_per_task)
            d0 = (task % blocks) * width
            d1 = min(D, d0 + width)
            h = np.empty((r1 - r0, d1 - d0), dtype=out.dtype)
            for r in range(r0, r1):
                for d in range(d0, d1):
                    h[r - r0, d - d0] = h0[r if h0.shape[0] > 1 else 0, d]
            n = d1 - d0
            for s in range(L):
                t = L - 1 - s if reverse else s
                ta = t if a.shape[1] > 1 else 0
                for r in range(r0, r1):
                    # 1-D rows: contiguous inner loops, which LLVM vectorises
                    a_row = a[r if a.shape[0] > 1 else 0, ta, d0:d1]
                    x_row = x[r, t, d0:d1]
                    o_row = out[r, t, d0:d1]
                    h_row = h[r - r0]
                    for d in range(n):
                        v = a_row[d] * h_row[d] + x_row[d]
                        h_row[d] = v
                        o_row[d] = v
        return out


def _tasks(B: int, D: int, threads: int) -> tuple[int, int]:
    """(rows per task, channel blocks per row) for the scan kernel on ``threads`` threads."""
    if D < _MIN_BLOCK:
        rows = max(1, min(_INTERLEAVE // max(D, 1), math.ceil(B / threads)))
        return rows, 1
    blocks = max(1, min(D // _MIN_BLOCK, math.ceil(2 * threads / B)))
    return 1, blocks


def scan_forward(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None, reverse: bool) -> torch.Tensor:
    """The compiled loop for ``seqlab.ops.linear_scan``'s canonical layout (no autograd here).

    x: (B, L, D) real or complex; a: (Ba, La, D) with Ba in {1, B}, La in {1, L}, real or complex
    (a real ``a`` with a complex ``x`` decays real and imaginary parts alike); h0: (Bh, D) or None.
    """
    require_numba("linear_scan", a, x, h0)
    B, L, D = x.shape
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    h0 = torch.zeros(1, D, dtype=x.dtype) if h0 is None else h0.to(x.dtype)
    rows, blocks = _tasks(B, D, use_threads())
    _scan_kernel(as_numpy(a), as_numpy(x), as_numpy(h0), bool(reverse), rows, blocks, out.numpy())
    return out
