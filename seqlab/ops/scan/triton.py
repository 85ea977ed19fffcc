r"""Triton kernels for ``h_t = a_t h_{t-1} + x_t`` (``seqlab.ops.linear_scan(mode="triton")``).

One program owns ``BLOCK_D`` channels of one batch row and walks the sequence in time, keeping
the state in registers (float32, or float64 for float64 inputs): every element of ``a`` and ``x`` is
read once and every ``h`` written once, which is the memory-traffic floor of the scan. Channels past
``D`` are masked; ``L`` is any length (the time loop has no block). Triton has no complex dtype, so
a complex tensor is passed as two planes, its real and imaginary parts (strided views of
``torch.view_as_real``, no copy), and the complex products are written out:

    (a_r + i a_i)(h_r + i h_i) = (a_r h_r - a_i h_i) + i (a_r h_i + a_i h_r)

The backward kernel runs the reverse recurrence in the opposite direction (``g = ∂loss/∂h``):

    ∂x_t = g_t + conj(a_{t+1}) ∂x_{t+1},      ∂a_t = ∂x_t conj(h_{t-1})

and writes ``∂a`` for every ``(b, t, d)``; broadcast dimensions of ``a`` are summed in torch.
"""
from __future__ import annotations

import torch

from seqlab.kernels import require_triton

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - Triton ships for Linux only
    triton = None

__all__ = ["triton_linear_scan", "linear_scan_fwd_kernel", "linear_scan_bwd_kernel"]

if triton is not None:

    @triton.jit
    def linear_scan_fwd_kernel(
        a_re_ptr, a_im_ptr, x_re_ptr, x_im_ptr, h0_re_ptr, h0_im_ptr, h_re_ptr, h_im_ptr,
        L, D,
        stride_ab, stride_al, stride_ad,  # a: (Ba, La, D); 0 where broadcast (time-invariant: stride_al = 0)
        stride_xb, stride_xl, stride_xd,  # x and h: (B, L, D)
        stride_h0b, stride_h0d,  # h0: (B, D)
        BLOCK_D: tl.constexpr, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr,
        HAS_H0: tl.constexpr, REVERSE: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        pid_b = tl.program_id(0)  # batch row
        pid_d = tl.program_id(1)  # block of channels
        offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)  # (BLOCK_D,)
        mask = offs_d < D  # (BLOCK_D,) channels past D are masked
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        h_re = tl.zeros([BLOCK_D], dtype=state_ty)  # (BLOCK_D,) the state, kept in registers
        h_im = tl.zeros([BLOCK_D], dtype=state_ty)
        if HAS_H0:
            h0_off = pid_b * stride_h0b + offs_d * stride_h0d
            h_re = tl.load(h0_re_ptr + h0_off, mask=mask, other=0.0).to(state_ty)
            if COMPLEX_X:
                h_im = tl.load(h0_im_ptr + h0_off, mask=mask, other=0.0).to(state_ty)
        a_base = pid_b * stride_ab + offs_d * stride_ad  # (BLOCK_D,)
        x_base = pid_b * stride_xb + offs_d * stride_xd  # (BLOCK_D,)
        for i in range(0, L):
            if REVERSE:
                t = L - 1 - i
            else:
                t = i
            a_r = tl.load(a_re_ptr + a_base + t * stride_al, mask=mask, other=0.0).to(state_ty)  # (BLOCK_D,) a_t
            x_r = tl.load(x_re_ptr + x_base + t * stride_xl, mask=mask, other=0.0).to(state_ty)  # (BLOCK_D,) x_t
            if COMPLEX_A:
                a_i = tl.load(a_im_ptr + a_base + t * stride_al, mask=mask, other=0.0).to(state_ty)
                x_i = tl.load(x_im_ptr + x_base + t * stride_xl, mask=mask, other=0.0).to(state_ty)
                new_re = a_r * h_re - a_i * h_im + x_r  # Re(a h) + Re(x)
                new_im = a_r * h_im + a_i * h_re + x_i  # Im(a h) + Im(x)
                h_re = new_re
                h_im = new_im
            elif COMPLEX_X:
                x_i = tl.load(x_im_ptr + x_base + t * stride_xl, mask=mask, other=0.0).to(state_ty)
                h_re = a_r * h_re + x_r  # real a scales both planes
                h_im = a_r * h_im + x_i
            else:
                h_re = a_r * h_re + x_r  # h_t = a_t h_{t-1} + x_t
            tl.store(h_re_ptr + x_base + t * stride_xl, h_re.to(h_re_ptr.dtype.element_ty), mask=mask)
            if COMPLEX_X:
                tl.store(h_im_ptr + x_base + t * stride_xl, h_im.to(h_im_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def linear_scan_bwd_kernel(
        a_re_ptr, a_im_ptr, h_re_ptr, h_im_ptr, h0_re_ptr, h0_im_ptr, g_re_ptr, g_im_ptr,
        dx_re_ptr, dx_im_ptr, da_re_ptr, da_im_ptr,
        L, D,
        stride_ab, stride_al, stride_ad,  # a: (Ba, La, D), 0 where broadcast
        stride_xb, stride_xl, stride_xd,  # h, g, dx, da: (B, L, D)
        stride_h0b, stride_h0d,  # h0: (B, D)
        BLOCK_D: tl.constexpr, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr,
        HAS_H0: tl.constexpr, REVERSE: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        pid_b = tl.program_id(0)
        pid_d = tl.program_id(1)
        offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)  # (BLOCK_D,)
        mask = offs_d < D
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        # carries of the reverse recurrence: ∂x_{t+1} and a_{t+1} (zero past the end)
        dn_re = tl.zeros([BLOCK_D], dtype=state_ty)
        dn_im = tl.zeros([BLOCK_D], dtype=state_ty)
        an_re = tl.zeros([BLOCK_D], dtype=state_ty)
        an_im = tl.zeros([BLOCK_D], dtype=state_ty)
        h0_re = tl.zeros([BLOCK_D], dtype=state_ty)  # state before the first step
        h0_im = tl.zeros([BLOCK_D], dtype=state_ty)
        if HAS_H0:
            h0_off = pid_b * stride_h0b + offs_d * stride_h0d
            h0_re = tl.load(h0_re_ptr + h0_off, mask=mask, other=0.0).to(state_ty)
            if COMPLEX_X:
                h0_im = tl.load(h0_im_ptr + h0_off, mask=mask, other=0.0).to(state_ty)
        a_base = pid_b * stride_ab + offs_d * stride_ad
        x_base = pid_b * stride_xb + offs_d * stride_xd
        for i in range(0, L):
            # walk opposite to the forward scan
            if REVERSE:
                t = i
                t_prev = t + 1  # the forward step before t (reverse scan: h_{t+1})
                at_first = t == L - 1
            else:
                t = L - 1 - i
                t_prev = t - 1
                at_first = t == 0
            t_prev = tl.minimum(tl.maximum(t_prev, 0), L - 1)  # clamped; replaced by h0 at the first step
            g_r = tl.load(g_re_ptr + x_base + t * stride_xl, mask=mask, other=0.0).to(state_ty)  # (BLOCK_D,) g_t
            # ∂x_t = g_t + conj(a_{t+1}) ∂x_{t+1}
            if COMPLEX_X:
                g_i = tl.load(g_im_ptr + x_base + t * stride_xl, mask=mask, other=0.0).to(state_ty)
                d_re = g_r + an_re * dn_re + an_im * dn_im
                d_im = g_i + an_re * dn_im - an_im * dn_re
            else:
                d_re = g_r + an_re * dn_re
                d_im = dn_im
            tl.store(dx_re_ptr + x_base + t * stride_xl, d_re.to(dx_re_ptr.dtype.element_ty), mask=mask)
            if COMPLEX_X:
                tl.store(dx_im_ptr + x_base + t * stride_xl, d_im.to(dx_im_ptr.dtype.element_ty), mask=mask)
            # ∂a_t = ∂x_t conj(h_{t-1})
            hp_re = tl.load(h_re_ptr + x_base + t_prev * stride_xl, mask=mask, other=0.0).to(state_ty)
            hp_re = tl.where(at_first, h0_re, hp_re)
            if COMPLEX_X:
                hp_im = tl.load(h_im_ptr + x_base + t_prev * stride_xl, mask=mask, other=0.0).to(state_ty)
                hp_im = tl.where(at_first, h0_im, hp_im)
                da_re = d_re * hp_re + d_im * hp_im  # Re(∂x conj(h)); the whole ∂a for a real a
                tl.store(da_re_ptr + x_base + t * stride_xl, da_re.to(da_re_ptr.dtype.element_ty), mask=mask)
                if COMPLEX_A:
                    da_im = d_im * hp_re - d_re * hp_im  # Im(∂x conj(h))
                    tl.store(da_im_ptr + x_base + t * stride_xl, da_im.to(da_im_ptr.dtype.element_ty), mask=mask)
            else:
                tl.store(da_re_ptr + x_base + t * stride_xl, (d_re * hp_re).to(da_re_ptr.dtype.element_ty), mask=mask)
            an_re = tl.load(a_re_ptr + a_base + t * stride_al, mask=mask, other=0.0).to(state_ty)  # a_t for step t-1
            if COMPLEX_A:
                an_im = tl.load(a_im_ptr + a_base + t * stride_al, mask=mask, other=0.0).to(state_ty)
            dn_re = d_re
            dn_im = d_im


_SUPPORTED = (torch.float32, torch.bfloat16, torch.float64, torch.complex64, torch.complex128)


def _planes(t: torch.Tensor):
    """``(real plane, imaginary plane, strides of one plane)``, each plane contiguous (the interpreter copies
    arguments by their element count, so interleaved views would not do); a real tensor is its own (unused)
    imaginary plane."""
    if t.is_complex():
        re, im = t.real.contiguous(), t.imag.contiguous()
        return re, im, re.stride()
    t = t.contiguous()
    return t, t, t.stride()


def _from_planes(re: torch.Tensor, im: torch.Tensor, complex_: bool) -> torch.Tensor:
    return torch.complex(re, im) if complex_ else re


def block_d(D: int) -> int:
    """The channels one program owns for ``D`` channels (what ``auto`` launches)."""
    return min(128, triton.next_power_of_2(D))


def _h0_planes(h0, like_re, like_im):
    """``h0``'s planes and plane strides; without ``h0`` any valid pointer (unread: ``HAS_H0=False``)."""
    return _planes(h0) if h0 is not None else (like_re, like_im, (0, 0))


def _shape_args(a, sa, sx, h0, sh0):
    """The stride arguments the scan kernels share: a's (0 where broadcast), x's or h's, h0's."""
    return (sa[0] if a.shape[0] > 1 else 0, sa[1] if a.shape[1] > 1 else 0, sa[2],
            sx[0], sx[1], sx[2], sh0[0] if h0 is not None and h0.shape[0] > 1 else 0, sh0[1])


def _launch_fwd(a, x, h0, reverse):
    B, L, D = x.shape
    a_re, a_im, sa = _planes(a)
    x_re, x_im, sx = _planes(x)
    h_re = torch.empty_like(x_re)
    h_im = torch.empty_like(x_im) if x.is_complex() else h_re
    h0_re, h0_im, sh0 = _h0_planes(h0, x_re, x_im)
    BLOCK_D = block_d(D)
    grid = (B, triton.cdiv(D, BLOCK_D))
    linear_scan_fwd_kernel[grid](
        a_re, a_im, x_re, x_im, h0_re, h0_im, h_re, h_im, L, D, *_shape_args(a, sa, sx, h0, sh0),
        BLOCK_D=BLOCK_D, COMPLEX_A=a.is_complex(), COMPLEX_X=x.is_complex(), HAS_H0=h0 is not None,
        REVERSE=bool(reverse), STATE_FP64=x.dtype in (torch.float64, torch.complex128),
    )
    return _from_planes(h_re, h_im, x.is_complex())


def _launch_bwd(a, h, h0, g, reverse):
    B, L, D = h.shape
    a_re, a_im, sa = _planes(a)
    h_re, h_im, sx = _planes(h)
    g_re, g_im, sg = _planes(g)
    dx_re = torch.empty_like(h_re)
    dx_im = torch.empty_like(h_im) if h.is_complex() else dx_re
    da_re = torch.empty(h_re.shape, dtype=a_re.dtype, device=h.device)  # ∂a in a's precision
    da_im = torch.empty_like(da_re) if a.is_complex() else da_re
    if sg != sx:
        raise RuntimeError("internal: g and h must share strides")
    h0_re, h0_im, sh0 = _h0_planes(h0, h_re, h_im)
    BLOCK_D = block_d(D)
    grid = (B, triton.cdiv(D, BLOCK_D))
    linear_scan_bwd_kernel[grid](
        a_re, a_im, h_re, h_im, h0_re, h0_im, g_re, g_im, dx_re, dx_im, da_re, da_im, L, D,
        *_shape_args(a, sa, sx, h0, sh0),
        BLOCK_D=BLOCK_D, COMPLEX_A=a.is_complex(), COMPLEX_X=h.is_complex(), HAS_H0=h0 is not None,
        REVERSE=bool(reverse), STATE_FP64=h.dtype in (torch.float64, torch.complex128),
    )
    return _from_planes(dx_re, dx_im, h.is_complex()), _from_planes(da_re, da_im, a.is_complex())


def _sum_to(t: torch.Tensor, shape) -> torch.Tensor:
    dims = [i for i, (n, m) in enumerate(zip(shape, t.shape)) if n == 1 and m != 1]
    return t.sum(dim=dims, keepdim=True) if dims else t


class TritonLinearScan(torch.autograd.Function):
    """``h = scan(a, x, h0)`` by :func:`linear_scan_fwd_kernel`, gradients by :func:`linear_scan_bwd_kernel`."""

    @staticmethod
    def forward(ctx, a, x, h0, reverse):
        h = _launch_fwd(a, x, h0, reverse)
        ctx.save_for_backward(a, h, h0)
        ctx.reverse = reverse
        return h

    @staticmethod
    def backward(ctx, g):
        a, h, h0 = ctx.saved_tensors
        g = g.to(h.dtype).contiguous()
        dx, da_full = _launch_bwd(a, h, h0, g, ctx.reverse)
        da = _sum_to(da_full, a.shape).to(a.dtype) if ctx.needs_input_grad[0] else None
        dh0 = None
        if h0 is not None and ctx.needs_input_grad[2]:
            first = -1 if ctx.reverse else 0
            a_first = a[:, first] if a.shape[1] > 1 else a[:, 0]
            dh0 = _sum_to(a_first.conj() * dx[:, first], h0.shape)
            if not h0.is_complex() and dh0.is_complex():
                dh0 = dh0.real
            dh0 = dh0.to(h0.dtype)
        return da, dx, dh0, None


def triton_linear_scan(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None = None, *,
                       reverse: bool = False) -> torch.Tensor:
    """The Triton scan on the canonical layout: ``x (B, L, D)``, ``a (Ba, La, D)`` (``Ba in {1, B}``,
    ``La in {1, L}``), ``h0 (Bh, D)`` or ``None``. ``x`` in float32, bfloat16 (float32 state, output
    in bfloat16; ``a`` and ``h0`` in bfloat16 or float32), float64 or complex64/128; ``a`` real or
    complex of the same precision."""
    require_triton("linear_scan", a, x)
    if x.dtype not in _SUPPORTED:
        raise TypeError(f"linear_scan(mode='triton'): x dtype must be one of {_SUPPORTED}, got {x.dtype}")
    if x.shape[1] == 0:
        return x.clone()
    x, a = x.contiguous(), a.contiguous()
    h0 = None if h0 is None else h0.contiguous()
    return TritonLinearScan.apply(a, x, h0, bool(reverse))
