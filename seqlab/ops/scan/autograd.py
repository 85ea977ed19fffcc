"""The fast modes' autograd: the forward by the mode, the backward the reverse recurrence run by the same mode

    ∂x_t = g_t + conj(a_{t+1}) ∂x_{t+1},    ∂a_t = ∂x_t · conj(h_{t-1}),    ∂h_0 = conj(a_1) ∂x_1"""
from __future__ import annotations

import torch

from seqlab.ops.scan._common import _a_at, _forward_loop, _real_view, _shift_a, _sum_to
from seqlab.ops.scan.associative import _forward_associative
from seqlab.ops.scan.blocked import _forward_blocked
from seqlab.ops.scan.doubling import _forward_doubling


def _forward_numba(a, x, h0, reverse):
    from seqlab.ops.scan.numba import scan_forward

    return scan_forward(a, x, h0, reverse)


_FORWARD = {
    "blocked": _forward_blocked,
    "doubling": _forward_doubling,
    "associative": _forward_associative,
    "loop": _forward_loop,
    "numba": _forward_numba,
}


def _run(mode, a, x, h0, reverse):
    if mode == "numba":  # the compiled loop takes complex x with a real a as it is
        return _forward_numba(a, x, h0, reverse)
    ar, xr, h0r, viewed = _real_view(a, x, h0)
    out = _FORWARD[mode](ar, xr, h0r, reverse)
    return torch.view_as_complex(out) if viewed else out


class _ScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, x, h0, reverse, mode):
        h = _run(mode, a, x, h0, reverse)
        ctx.save_for_backward(a, h, h0)
        ctx.reverse, ctx.mode = reverse, mode
        return h

    @staticmethod
    def backward(ctx, g):
        a, h, h0 = ctx.saved_tensors
        reverse, mode = ctx.reverse, ctx.mode
        # ∂x_t = g_t + conj(a_{t+1}) ∂x_{t+1}: a scan in the opposite direction
        dx = _run(mode, _shift_a(a, reverse).conj(), g.contiguous(), None, not reverse)
        da = dh0 = None
        if ctx.needs_input_grad[0]:
            # ∂a_t = ∂x_t conj(h_{t-1}), h_{t-1} = h0 (or 0) at the first step
            h_prev = torch.empty_like(h)
            first = -1 if reverse else 0
            if reverse:
                h_prev[:, :-1] = h[:, 1:]
            else:
                h_prev[:, 1:] = h[:, :-1]
            h_prev[:, first] = 0 if h0 is None else h0
            da = dx * h_prev.conj()
            if not a.is_complex() and da.is_complex():
                da = da.real
            da = _sum_to(da, a.shape)
        if h0 is not None and ctx.needs_input_grad[2]:
            first = -1 if reverse else 0
            dh0 = _sum_to(_a_at(a, first).conj() * dx[:, first], (h0.shape[0],) + tuple(dx.shape[2:]))
            if not h0.is_complex() and dh0.is_complex():
                dh0 = dh0.real
        return da, dx, dh0, None, None
