r"""Triton kernels for the log-domain prefix sum of the linear CausalRN (``ops.relation(mode="triton")``).

000 eq. 9 needs ``y_j = log sum_{i<=j} exp(p_i)`` (a ``logcumsumexp`` along the sequence); the rest of
the linear mode is elementwise. One program owns ``BLOCK_H`` hidden features of one batch row and
walks the sequence keeping the running log-sum in registers (float32, or float64 for float64
inputs): every ``p`` is read once and every ``y`` written once.

    forward:  y_j = logaddexp(y_{j-1}, p_j),  y_{-1} = -inf

The backward pass needs ``dp_i = sum_{j>=i} g_j exp(p_i - y_j)`` (``g = dloss/dy``). ``y`` never
decreases along the sequence, so with ``R_i = sum_{j>=i} g_j exp(y_i - y_j)`` (every factor <= 1):

    backward: R_i = g_i + exp(y_i - y_{i+1}) R_{i+1},   dp_i = exp(p_i - y_i) R_i

a reverse linear recurrence whose coefficients lie in (0, 1]: stable for any input scale.
"""
from __future__ import annotations

import torch

from seqlab.kernels import require_triton

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - Triton ships for Linux only
    triton = None

__all__ = ["triton_logcumsumexp", "logcumsumexp_fwd_kernel", "logcumsumexp_bwd_kernel"]

if triton is not None:

    @triton.jit
    def logcumsumexp_fwd_kernel(
        p_ptr, y_ptr,
        L, H,
        stride_b, stride_l, stride_h,  # p and y: (B, L, H)
        BLOCK_H: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        pid_b = tl.program_id(0)  # batch row
        pid_h = tl.program_id(1)  # block of hidden features
        offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)  # (BLOCK_H,)
        mask = offs_h < H  # (BLOCK_H,) features past H are masked
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        y = tl.full([BLOCK_H], float("-inf"), dtype=state_ty)  # (BLOCK_H,) log sum so far: log 0
        base = pid_b * stride_b + offs_h * stride_h  # (BLOCK_H,)
        for t in range(0, L):
            p = tl.load(p_ptr + base + t * stride_l, mask=mask, other=0.0).to(state_ty)  # (BLOCK_H,) p_t
            top = tl.maximum(y, p)  # (BLOCK_H,) finite: p is finite
            y = top + tl.log(tl.exp(y - top) + tl.exp(p - top))  # logaddexp(y_{t-1}, p_t); exp(-inf) = 0
            tl.store(y_ptr + base + t * stride_l, y.to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def logcumsumexp_bwd_kernel(
        p_ptr, y_ptr, g_ptr, dp_ptr,
        L, H,
        stride_b, stride_l, stride_h,  # p, y, g, dp: (B, L, H)
        BLOCK_H: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        pid_b = tl.program_id(0)
        pid_h = tl.program_id(1)
        offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)  # (BLOCK_H,)
        mask = offs_h < H
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        r = tl.zeros([BLOCK_H], dtype=state_ty)  # (BLOCK_H,) R_{t+1}, zero past the end
        y_next = tl.full([BLOCK_H], float("inf"), dtype=state_ty)  # (BLOCK_H,) y_{t+1}; +inf past the end: decay 0
        base = pid_b * stride_b + offs_h * stride_h
        for i in range(0, L):
            t = L - 1 - i  # walk backwards
            y = tl.load(y_ptr + base + t * stride_l, mask=mask, other=0.0).to(state_ty)  # (BLOCK_H,) y_t
            g = tl.load(g_ptr + base + t * stride_l, mask=mask, other=0.0).to(state_ty)  # (BLOCK_H,) g_t
            p = tl.load(p_ptr + base + t * stride_l, mask=mask, other=0.0).to(state_ty)  # (BLOCK_H,) p_t
            decay = tl.exp(y - y_next)  # (BLOCK_H,) exp(y_t - y_{t+1}) in [0, 1]
            r = g + decay * r  # R_t = g_t + exp(y_t - y_{t+1}) R_{t+1}
            tl.store(dp_ptr + base + t * stride_l, (tl.exp(p - y) * r).to(dp_ptr.dtype.element_ty), mask=mask)
            y_next = y



def block_h(H: int) -> int:
    """The features one program owns for ``H`` hidden features (what ``auto`` launches)."""
    return min(64, triton.next_power_of_2(max(H, 1)))


def _launch_grid(B: int, H: int, block: int):
    return (B, triton.cdiv(H, block))


class _LogCumSumExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p):
        p = p.contiguous()
        B, L, H = p.shape
        y = torch.empty_like(p)
        block = block_h(H)
        fp64 = p.dtype == torch.float64
        if L > 0:
            logcumsumexp_fwd_kernel[_launch_grid(B, H, block)](p, y, L, H, *p.stride(), BLOCK_H=block, STATE_FP64=fp64)
        ctx.save_for_backward(p, y)
        ctx.block, ctx.fp64 = block, fp64
        return y

    @staticmethod
    def backward(ctx, g):
        p, y = ctx.saved_tensors
        g = g.contiguous()
        B, L, H = p.shape
        dp = torch.empty_like(p)
        if L > 0:
            logcumsumexp_bwd_kernel[_launch_grid(B, H, ctx.block)](p, y, g, dp, L, H, *p.stride(), BLOCK_H=ctx.block,
                                                                   STATE_FP64=ctx.fp64)
        return dp


def triton_logcumsumexp(p: torch.Tensor) -> torch.Tensor:
    """``torch.logcumsumexp(p, dim=1)`` for ``p`` of shape (B, L, H), float32 or float64, by the kernels above."""
    require_triton("relation", p)
    if p.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"p: mode='triton' takes float32 or float64, got {p.dtype}")
    return _LogCumSumExp.apply(p)
