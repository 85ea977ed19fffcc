r"""Triton kernels for the log-domain prefix sum of the linear CausalRN (``ops.relation(mode="triton")``).

000 eq. 9 needs ``y_j = log sum_{i<=j} exp(p_i)`` (a ``logcumsumexp`` along the sequence); the rest of
the linear mode is elementwise. One program owns ``BH`` hidden features of one batch row and walks the
sequence in tiles of ``BT`` steps. In a tile it loads a ``(BT, BH)`` block of ``p`` and scans it down the
rows with ``tl.associative_scan`` and the log-sum-exp of two running sums,

    a ⊕ b = log(e^a + e^b) = max(a, b) + log(1 + e^{min(a, b) - max(a, b)}),

which is associative, shifted by the larger argument so that it never overflows, and has ``-inf``
(``log 0``) as its identity: equal arguments give ``a + log 2`` (two ``-inf`` give ``-inf``, never
``-inf - (-inf) = NaN``). The running sum carried from the tile before enters as ``y = c ⊕ Y`` and
the last row is carried on:

    forward:  y_j = y_{j-1} ⊕ p_j,  y_{-1} = -inf

Steps past ``L`` load the identity ``-inf``, features past ``H`` are masked. Every ``p`` is read once
and every ``y`` written once; ``B * cdiv(H, BH)`` programs run side by side (:func:`block_h` narrows
``BH`` until they fill the GPU), with no waiting between programs. The state is float32, or float64
for float64 inputs.

The backward pass needs ``dp_i = sum_{j>=i} g_j exp(p_i - y_j)`` (``g = dloss/dy``). ``y`` never
decreases along the sequence, so with ``R_i = sum_{j>=i} g_j exp(y_i - y_j)`` (every factor <= 1):

    backward: R_i = g_i + exp(y_i - y_{i+1}) R_{i+1},   dp_i = exp(p_i - y_i) R_i

a reverse linear recurrence whose coefficients lie in [0, 1]: stable for any input scale. The backward
kernel scans the same tiles from the end of the sequence with GateLoop's operator (004 eq. 12-13),
``(a1, x1) • (a2, x2) = (a1 a2, a2 x1 + x2)``, its gates ``exp(y_i - y_{i+1})`` read from
``y`` and ``y`` shifted by one step. A key ``p_i = -inf`` adds ``e^{p_i} = 0`` to every sum, so its
gradient is 0, as in the float64 reference (000 eq. 8, which sums ``exp(p_i + q_j)`` itself); where
``y_i = -inf`` too (only such keys so far) the kernel reads ``y_i`` as 0 rather than form ``0 / 0``.
"""
from __future__ import annotations

import torch

from seqlab.kernels import require_triton

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - Triton ships for Linux only
    triton = None

__all__ = ["triton_logcumsumexp", "logcumsumexp_fwd_kernel", "logcumsumexp_bwd_kernel", "launch_plan"]

if triton is not None:

    @triton.jit
    def _logaddexp(a, b):
        # a ⊕ b = log(e^a + e^b) = top + log(1 + e^{min - top}) for a finite top = max(a, b) (e^{..} <= 1); an
        # infinite top is the sum itself, so it shifts by 0 (never -inf - (-inf) = NaN): -inf ⊕ -inf = -inf
        top = tl.maximum(a, b)
        shift = tl.where(tl.abs(top) == float("inf"), 0.0, top)
        return top + tl.log(1.0 + tl.exp(tl.minimum(a, b) - shift))

    @triton.jit
    def _combine_decay(a1, r1, a2, r2):
        # (a1, r1) • (a2, r2) = (a1 a2, a2 r1 + r2): two steps of R_i = g_i + a_i R_{i+1}, the earlier one of the
        # backward walk on the left
        return a1 * a2, a2 * r1 + r2

    @triton.jit
    def _log0_as_0(y):
        # y with log 0 read as 0: a running sum y_t = -inf has only keys p_i = -inf (i <= t), whose gradient
        # exp(p_i) R_i / exp(y_i) is 0 (e^{p_i} = 0) whatever R_i is; read as 0, exp(p_i - y_t) gives that 0
        return tl.where(y == float("-inf"), 0.0, y)

    @triton.jit
    def _last_row(v, rows, BT: tl.constexpr):
        """Row ``BT - 1`` of a ``(BT, BH)`` tile: what is carried into the next tile (only the last tile has
        padding rows past the end of the sequence, and what it carries is not read)."""
        return tl.sum(tl.where(rows[:, None] == BT - 1, v, 0.0), axis=0)

    @triton.jit
    def logcumsumexp_fwd_kernel(
        p_ptr, y_ptr,
        L, H,
        stride_b, stride_l, stride_h,  # p and y: (B, L, H)
        BT: tl.constexpr, BH: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        pid_b = tl.program_id(0)  # batch row
        pid_h = tl.program_id(1)  # block of hidden features
        offs_h = pid_h * BH + tl.arange(0, BH)  # (BH,)
        mask_h = offs_h < H  # (BH,) features past H are masked
        rows = tl.arange(0, BT)  # (BT,) steps of a tile
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        c = tl.full([BH], float("-inf"), dtype=state_ty)  # (BH,) y of the step before the tile: log 0 at first
        base = pid_b.to(tl.int64) * stride_b + offs_h * stride_h  # (BH,) int64 offsets: no wrap past 2^31
        for start in range(0, L, BT):
            t = start + rows  # (BT,)
            mask = (t < L)[:, None] & mask_h[None, :]  # (BT, BH)
            off = base[None, :] + t.to(tl.int64)[:, None] * stride_l  # (BT, BH)
            p = tl.load(p_ptr + off, mask=mask, other=float("-inf")).to(state_ty)  # (BT, BH); padding: log 0
            y = _logaddexp(c[None, :], tl.associative_scan(p, 0, _logaddexp))  # (BT, BH) c ⊕ p_start ⊕ .. ⊕ p_t
            tl.store(y_ptr + off, y.to(y_ptr.dtype.element_ty), mask=mask)
            c = _last_row(y, rows, BT)

    @triton.jit
    def logcumsumexp_bwd_kernel(
        p_ptr, y_ptr, g_ptr, dp_ptr,
        L, H,
        stride_b, stride_l, stride_h,  # p, y, g, dp: (B, L, H)
        BT: tl.constexpr, BH: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        pid_b = tl.program_id(0)
        pid_h = tl.program_id(1)
        offs_h = pid_h * BH + tl.arange(0, BH)  # (BH,)
        mask_h = offs_h < H
        rows = tl.arange(0, BT)  # (BT,) steps of a tile, in the order of the backward walk
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        c = tl.zeros([BH], dtype=state_ty)  # (BH,) R of the step after the tile: zero past the end
        base = pid_b.to(tl.int64) * stride_b + offs_h * stride_h  # (BH,)
        for start in range(0, L, BT):
            step = start + rows  # (BT,) steps from the end
            t = L - 1 - step  # (BT,) time, going down
            mask = (step < L)[:, None] & mask_h[None, :]  # (BT, BH)
            has_next = (t + 1 < L)[:, None] & mask  # (BT, BH) t + 1 is a step of the sequence
            off = base[None, :] + t.to(tl.int64)[:, None] * stride_l  # (BT, BH)
            y = tl.load(y_ptr + off, mask=mask, other=0.0).to(state_ty)  # (BT, BH) y_t
            # y_{t+1}, +inf past the end (nothing after t = L - 1: gate 0); -inf (then y_t = -inf) read as 0: no NaN
            y_next = tl.load(y_ptr + off + stride_l, mask=has_next, other=float("inf")).to(state_ty)  # (BT, BH)
            gate = tl.exp(y - _log0_as_0(y_next))  # (BT, BH) exp(y_t - y_{t+1}) in [0, 1]
            g = tl.load(g_ptr + off, mask=mask, other=0.0).to(state_ty)  # (BT, BH) g_t
            gates, r = tl.associative_scan((gate, g), 0, _combine_decay)  # (BT, BH) R_t with R after the tile = 0
            r = r + gates * c[None, :]  # R_t = g_t + exp(y_t - y_{t+1}) R_{t+1}, the carried R_{t+1} folded in
            p = tl.load(p_ptr + off, mask=mask, other=0.0).to(state_ty)  # (BT, BH) p_t
            dp = tl.exp(p - _log0_as_0(y)) * r  # dp_t = exp(p_t - y_t) R_t: 0 for p_t = -inf, y_t = -inf included
            tl.store(dp_ptr + off, dp.to(dp_ptr.dtype.element_ty), mask=mask)
            c = _last_row(r, rows, BT)


TARGET_PROGRAMS = 132  # an H100's SMs (an A100 has 108): at least one program per SM
MIN_BLOCK_H = 8  # 8 float32 features = 32 bytes, one DRAM sector per row of a tile (fewer features are masked)
MAX_BLOCK_H = 128
TILE_ELEMENTS = 2048  # elements of one (BT, BH) tile: 16 per thread of 4 warps
MAX_BLOCK_T = 256


def block_h(B: int, H: int) -> int:
    """The features one program owns: the widest power of two (up to ``MAX_BLOCK_H``, at most ``H`` rounded
    up, at least ``MIN_BLOCK_H``) that still gives ``B * cdiv(H, BH) >= TARGET_PROGRAMS`` programs, halved
    down to ``MIN_BLOCK_H`` when ``B`` and ``H`` are too small to fill the GPU. Each program walks all of
    ``L``, so the programs, not the time steps, are what run side by side. Five widths in all, each compiled
    in CI at its full tile (``tests/ops/test_triton_spills.py``)."""
    bh = max(MIN_BLOCK_H, min(MAX_BLOCK_H, triton.next_power_of_2(H)))
    while bh > MIN_BLOCK_H and B * triton.cdiv(H, bh) < TARGET_PROGRAMS:
        bh //= 2
    return bh


def block_t(BH: int, L: int) -> int:
    """The time steps of one tile: ``TILE_ELEMENTS / BH`` (so every tile holds the same registers and loads as
    much in flight), at most ``MAX_BLOCK_T`` and no more than ``L`` needs (rounded up to a power of two: a short
    sequence is not scanned through rows of padding), at least 16. Tests set it small, so that short sequences
    cross tile edges in the interpreter."""
    return max(16, min(MAX_BLOCK_T, TILE_ELEMENTS // BH, triton.next_power_of_2(L)))


def launch_plan(B: int, L: int, H: int, *, itemsize: int = 4, backward: bool = False) -> dict:
    """What one launch of the kernels does for ``p (B, L, H)``, without a GPU: its grid and blocks, the tiles
    each program scans one after another (``serial_steps``), and the bytes it moves per element of ``p``:
    each element of each tensor is read or written once (forward: ``p`` in, ``y`` out; backward: ``p, y, g``
    in, ``dp`` out; the shifted rows of ``y`` are the same elements)."""
    BH = block_h(B, H)
    BT = block_t(BH, L)
    grid = (B, triton.cdiv(H, BH))
    return dict(grid=grid, programs=grid[0] * grid[1], BT=BT, BH=BH, serial_steps=triton.cdiv(L, BT),
                bytes_per_element=(4 if backward else 2) * itemsize,
                num_warps=max(1, min(4, BT * BH // 512)))  # a warp per 512 elements: at most 16 a thread


class _LogCumSumExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p):
        p = p.contiguous()
        B, L, H = p.shape
        y = torch.empty_like(p)
        fp64 = p.dtype == torch.float64
        plan = launch_plan(B, L, H, itemsize=p.element_size())
        if L > 0:
            logcumsumexp_fwd_kernel[plan["grid"]](p, y, L, H, *p.stride(), BT=plan["BT"], BH=plan["BH"],
                                                  STATE_FP64=fp64, num_warps=plan["num_warps"])
        ctx.save_for_backward(p, y)
        ctx.fp64 = fp64
        return y

    @staticmethod
    def backward(ctx, g):
        p, y = ctx.saved_tensors
        g = g.contiguous()
        B, L, H = p.shape
        dp = torch.empty_like(p)
        plan = launch_plan(B, L, H, itemsize=p.element_size(), backward=True)
        if L > 0:
            logcumsumexp_bwd_kernel[plan["grid"]](p, y, g, dp, L, H, *p.stride(), BT=plan["BT"], BH=plan["BH"],
                                                  STATE_FP64=ctx.fp64, num_warps=plan["num_warps"])
        return dp


def triton_logcumsumexp(p: torch.Tensor) -> torch.Tensor:
    """``torch.logcumsumexp(p, dim=1)`` for ``p`` of shape (B, L, H), float32 or float64, by the kernels above.
    Keys of ``-inf`` (``log 0``) are allowed: a prefix of them gives ``-inf``, and their gradient is 0."""
    require_triton("relation", p)
    if p.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"p: mode='triton' takes float32 or float64, got {p.dtype}")
    return _LogCumSumExp.apply(p)
