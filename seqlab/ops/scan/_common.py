"""Helpers of the fast forms. Internal layout: x (B, L, *F), a (Ba, La, *F) with Ba in {1, B} and La in
{1, L} (La = 1: time-invariant), h0 (Bh, *F) or None; *F is (D,) or (D, 2) (a complex x with a real a is
computed on its real view, a broadcast over the last axis). No autograd here: ``autograd.py`` wraps the forms."""
from __future__ import annotations

import math

import torch

from seqlab.ops._checks import check_same_device, check_tensor, describe

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}


_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _wide(t: torch.Tensor) -> torch.Tensor:
    """float64/complex128 copy: products of many decays (``a^C``, ``Λ^k``) are formed in double precision.

    With ``|a| = 1 - ε`` the state remembers ``W = 1/ε`` steps; a product shared by many chunks (or
    blocks) with relative error δ moves ``h`` by about ``δ W / C`` -- coherently, since every chunk
    uses the same product. Forming products in float64 and rounding once keeps that below the
    float32 loop's own error (tested with ``|a| = 1 - 1e-4`` over 65 536 steps).
    """
    return t.to(torch.complex128 if t.is_complex() else torch.float64)


def _a_at(a: torch.Tensor, t) -> torch.Tensor:
    """``a_t`` (a slice along time, or the one time-invariant value)."""
    return a[:, t] if a.shape[1] > 1 else a[:, 0]


def _fold_h0(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None, reverse: bool) -> torch.Tensor:
    """``x_1 <- x_1 + a_1 h_0``: the initial state becomes part of the first input (a copy of x)."""
    if h0 is None:
        return x
    first = -1 if x.shape[1] and reverse else 0
    x = x.clone()
    x[:, first] += _a_at(a, first) * h0
    return x


def _sequential_into(out, a, x, h, steps) -> torch.Tensor:
    """Run ``h_t = a_t h_{t-1} + x_t`` over ``steps`` (time indices in order), writing into ``out``."""
    for t in steps:
        if h is None:
            out[:, t] = x[:, t]
        else:
            torch.addcmul(x[:, t], _a_at(a, t), h, out=out[:, t])
        h = out[:, t]
    return h


def _forward_loop(a, x, h0, reverse):
    out = torch.empty_like(x)
    L = x.shape[1]
    _sequential_into(out, a, x, h0, range(L - 1, -1, -1) if reverse else range(L))
    return out


def _zeros_or(h0, like):
    """``h0`` as a ``(B, 1, *F)`` block (zeros when absent)."""
    if h0 is None:
        return torch.zeros_like(like)
    return (h0 + torch.zeros_like(like[:, 0])).unsqueeze(1)


def _real_view(a, x, h0):
    """Real a with complex x: compute on the real view ``(..., D, 2)`` with ``a`` broadcast over the pair."""
    if x.is_complex() and not a.is_complex():
        h0r = None if h0 is None else torch.view_as_real(h0)
        return a.unsqueeze(-1), torch.view_as_real(x), h0r, True
    return a, x, h0, False


def _shift_a(a, reverse):
    """``a_{t+1}`` at position ``t`` (``a_{t-1}`` when reverse); the wrapped-around value multiplies a zero."""
    if a.shape[1] == 1:
        return a
    return torch.roll(a, -1 if not reverse else 1, dims=1)


def _sum_to(t: torch.Tensor, shape) -> torch.Tensor:
    """Sum a gradient over the dimensions that were broadcast to reach ``t.shape``."""
    dims = [i for i, (n, m) in enumerate(zip(shape, t.shape)) if n == 1 and m != 1]
    return t.sum(dim=dims, keepdim=True) if dims else t


def _real_dtype(t: torch.Tensor) -> torch.dtype:
    return _REAL_OF.get(t.dtype, t.dtype)


def _check_inputs(a, x, h0):
    check_tensor("x", x, min_ndim=2)
    check_tensor("a", a, min_ndim=1)
    if h0 is not None:
        check_tensor("h0", h0, min_ndim=1)
    check_same_device(a=a, x=x, h0=h0)
    L, D = x.shape[-2:]
    if a.dim() == 1:
        if a.shape[0] != D:
            raise ValueError(f"a: a time-invariant a must have shape (D,) = ({D},) matching x's last dimension; "
                             f"got a {describe(a)}, x {describe(x)}")
    else:
        try:
            shape = torch.broadcast_shapes(a.shape, x.shape)
        except RuntimeError:
            shape = None
        if shape != x.shape:
            raise ValueError(f"a: expected (D,) = ({D},) or a shape broadcastable to x's {tuple(x.shape)} "
                             f"(time along dim -2), got a {describe(a)}")
    if h0 is not None:
        state_shape = x.shape[:-2] + (D,)
        try:
            shape = torch.broadcast_shapes(h0.shape, state_shape)
        except RuntimeError:
            shape = None
        if shape != state_shape:
            raise ValueError(f"h0: expected a shape broadcastable to x.shape[:-2] + (D,) = {tuple(state_shape)}, got h0 {describe(h0)}")
    if a.is_complex() and not x.is_complex():
        raise TypeError(f"a is complex ({a.dtype}) but x is real ({x.dtype}): the state would be complex; "
                        f"pass a complex x (x.to({a.dtype}))")
    if h0 is not None and h0.is_complex() and not x.is_complex():
        raise TypeError(f"h0 is complex ({h0.dtype}) but x is real ({x.dtype}): pass a complex x")
    allowed = {_real_dtype(x)} | ({torch.float32} if x.dtype in _LOW_PRECISION else set())
    for name, t in (("a", a), ("h0", h0)):
        if t is not None and _real_dtype(t) not in allowed:
            raise TypeError(f"{name}: precision must match x's: x is {x.dtype} (real part {_real_dtype(x)}), "
                            f"{name} is {t.dtype} (real part {_real_dtype(t)}); cast one of them "
                            "(with a bfloat16/float16 x, a float32 a or h0 is fine too)")


def _canonical(a, x, h0):
    """Flatten leading dims: x (B, L, D); a (Ba, La, D) with Ba in {1, B}, La in {1, L}; h0 (Bh, D)."""
    L, D = x.shape[-2:]
    lead = x.shape[:-2]
    B = math.prod(lead)
    x3 = x.reshape(B, L, D)
    if a.dim() == 1:
        a3 = a.view(1, 1, D)
    else:
        a_full = a.reshape((1,) * (x.dim() - a.dim()) + tuple(a.shape))
        La = a_full.shape[-2]
        if all(s == 1 for s in a_full.shape[:-2]):
            a3 = a_full.reshape(1, La, a_full.shape[-1])
        else:
            a3 = a_full.expand(*lead, La, a_full.shape[-1]).reshape(B, La, a_full.shape[-1])
        if a3.shape[-1] != D:
            a3 = a3.expand(a3.shape[0], La, D)
    h03 = None
    if h0 is not None:
        h0_full = h0.reshape((1,) * (x.dim() - 1 - h0.dim()) + tuple(h0.shape))
        if all(s == 1 for s in h0_full.shape[:-1]):
            h03 = h0_full.reshape(1, h0_full.shape[-1]).expand(1, D)
        else:
            h03 = h0_full.expand(*lead, D).reshape(B, D)
    return a3, x3, h03
