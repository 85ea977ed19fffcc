r"""Triton kernels for ``h_t = a_t h_{t-1} + x_t`` (``seqlab.ops.linear_scan(mode="triton")``).

One program owns ``BD`` channels of one batch row and walks the sequence in tiles of ``BT`` steps. In a
tile it loads a ``(BT, BD)`` block of ``(a, x)`` and scans it down the rows with ``tl.associative_scan``
and GateLoop's operator (eq. 12-13), ``(a1, x1) • (a2, x2) = (a1 a2, a2 x1 + x2)``, giving for every row
the product of the gates ``A`` and the state ``X`` started from zero; the state carried from the tile
before enters as ``h = A c + X``, and the last row is carried on. Steps past ``L`` load the identity
``(1, 0)``, channels past ``D`` are masked. Every element of ``a`` and ``x`` is read once and every ``h``
written once; ``B * cdiv(D, BD)`` programs run side by side (:func:`block_d` narrows ``BD`` until they
fill the GPU), with no waiting between programs. Triton has no complex dtype, so
a complex tensor is passed as two planes, its real and imaginary parts (strided views of
``torch.view_as_real``, no copy), and the complex products are written out:

    (a_r + i a_i)(h_r + i h_i) = (a_r h_r - a_i h_i) + i (a_r h_i + a_i h_r)

The backward kernel scans the same tiles in the opposite direction (``g = ∂loss/∂h``), its gates shifted
by one step and conjugated, and reads ``h`` shifted by one step for ``∂a``:

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
    def _combine_real(a1, x1, a2, x2):
        # GateLoop eq. 12-13: (a1, x1) • (a2, x2) = (a1 a2, a2 x1 + x2), the earlier pair on the left
        return a1 * a2, a2 * x1 + x2

    @triton.jit
    def _combine_real_a_complex_x(a1, xr1, xi1, a2, xr2, xi2):
        # eq. 12-13 with a real a scaling both planes of a complex x
        return a1 * a2, a2 * xr1 + xr2, a2 * xi1 + xi2

    @triton.jit
    def _combine_complex(ar1, ai1, xr1, xi1, ar2, ai2, xr2, xi2):
        # eq. 12-13 in planes: a1 a2 and a2 x1 + x2 as complex products written out
        return (ar1 * ar2 - ai1 * ai2, ar1 * ai2 + ai1 * ar2,
                ar2 * xr1 - ai2 * xi1 + xr2, ar2 * xi1 + ai2 * xr1 + xi2)

    @triton.jit
    def _scan_tile(a_r, a_i, x_r, x_i, c_r, c_i, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr):
        """``h = A_cum c + X_cum`` on a ``(BT, BD)`` tile: the prefix pairs of eq. 12-13 down the rows,
        folded into the carried state ``c = (c_r, c_i)`` (BD,) of the tile before."""
        if COMPLEX_A:
            A_r, A_i, X_r, X_i = tl.associative_scan((a_r, a_i, x_r, x_i), 0, _combine_complex)
            h_r = A_r * c_r[None, :] - A_i * c_i[None, :] + X_r
            h_i = A_r * c_i[None, :] + A_i * c_r[None, :] + X_i
        elif COMPLEX_X:
            A_r, X_r, X_i = tl.associative_scan((a_r, x_r, x_i), 0, _combine_real_a_complex_x)
            h_r = A_r * c_r[None, :] + X_r
            h_i = A_r * c_i[None, :] + X_i
        else:
            A_r, X_r = tl.associative_scan((a_r, x_r), 0, _combine_real)
            h_r = A_r * c_r[None, :] + X_r
            h_i = h_r
        return h_r, h_i

    @triton.jit
    def _last_row(h, rows, BT: tl.constexpr):
        """Row ``BT - 1`` of a ``(BT, BD)`` tile: the state carried into the next tile (padding rows past
        ``L`` hold ``a = 1, x = 0``, so the last row is the last valid state)."""
        return tl.sum(tl.where(rows[:, None] == BT - 1, h, 0.0), axis=0)

    @triton.jit
    def linear_scan_fwd_kernel(
        a_re_ptr, a_im_ptr, x_re_ptr, x_im_ptr, h0_re_ptr, h0_im_ptr, h_re_ptr, h_im_ptr,
        L, D,
        stride_ab, stride_al, stride_ad,  # a: (Ba, La, D); 0 where broadcast (time-invariant: stride_al = 0)
        stride_xb, stride_xl, stride_xd,  # x and h: (B, L, D)
        stride_h0b, stride_h0d,  # h0: (B, D)
        BT: tl.constexpr, BD: tl.constexpr, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr,
        HAS_H0: tl.constexpr, REVERSE: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        pid_b = tl.program_id(0)  # batch row
        pid_d = tl.program_id(1)  # block of channels
        offs_d = pid_d * BD + tl.arange(0, BD)  # (BD,)
        mask_d = offs_d < D  # channels past D are masked
        rows = tl.arange(0, BT)  # (BT,) rows of a tile, in scan order
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        c_r = tl.zeros([BD], dtype=state_ty)  # (BD,) the state carried from tile to tile
        c_i = tl.zeros([BD], dtype=state_ty)
        if HAS_H0:
            h0_off = pid_b * stride_h0b + offs_d * stride_h0d
            c_r = tl.load(h0_re_ptr + h0_off, mask=mask_d, other=0.0).to(state_ty)
            if COMPLEX_X:
                c_i = tl.load(h0_im_ptr + h0_off, mask=mask_d, other=0.0).to(state_ty)
        a_base = pid_b * stride_ab + offs_d * stride_ad  # (BD,)
        x_base = pid_b * stride_xb + offs_d * stride_xd  # (BD,)
        for start in range(0, L, BT):
            step = start + rows  # (BT,) position in scan order
            if REVERSE:
                t = L - 1 - step  # (BT,) time index
            else:
                t = step
            mask = (step < L)[:, None] & mask_d[None, :]  # (BT, BD)
            a_off = a_base[None, :] + t[:, None] * stride_al  # (BT, BD)
            x_off = x_base[None, :] + t[:, None] * stride_xl
            # masked steps are the identity pair (a, x) = (1, 0)
            a_r = tl.load(a_re_ptr + a_off, mask=mask, other=1.0).to(state_ty)
            x_r = tl.load(x_re_ptr + x_off, mask=mask, other=0.0).to(state_ty)
            a_i = a_r
            x_i = x_r
            if COMPLEX_A:
                a_i = tl.load(a_im_ptr + a_off, mask=mask, other=0.0).to(state_ty)
            if COMPLEX_X:
                x_i = tl.load(x_im_ptr + x_off, mask=mask, other=0.0).to(state_ty)
            h_r, h_i = _scan_tile(a_r, a_i, x_r, x_i, c_r, c_i, COMPLEX_A, COMPLEX_X)
            tl.store(h_re_ptr + x_off, h_r.to(h_re_ptr.dtype.element_ty), mask=mask)
            c_r = _last_row(h_r, rows, BT)
            if COMPLEX_X:
                tl.store(h_im_ptr + x_off, h_i.to(h_im_ptr.dtype.element_ty), mask=mask)
                c_i = _last_row(h_i, rows, BT)

    @triton.jit
    def linear_scan_bwd_kernel(
        a_re_ptr, a_im_ptr, h_re_ptr, h_im_ptr, h0_re_ptr, h0_im_ptr, g_re_ptr, g_im_ptr,
        dx_re_ptr, dx_im_ptr, da_re_ptr, da_im_ptr,
        L, D,
        stride_ab, stride_al, stride_ad,  # a: (Ba, La, D), 0 where broadcast
        stride_xb, stride_xl, stride_xd,  # h, g, dx, da: (B, L, D)
        stride_h0b, stride_h0d,  # h0: (B, D)
        BT: tl.constexpr, BD: tl.constexpr, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr,
        HAS_H0: tl.constexpr, REVERSE: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        pid_b = tl.program_id(0)
        pid_d = tl.program_id(1)
        offs_d = pid_d * BD + tl.arange(0, BD)  # (BD,)
        mask_d = offs_d < D
        rows = tl.arange(0, BT)  # (BT,) rows of a tile, in the order of the reverse recurrence
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        c_r = tl.zeros([BD], dtype=state_ty)  # (BD,) carried ∂x of the step after the tile (zero past the end)
        c_i = tl.zeros([BD], dtype=state_ty)
        h0_r = tl.zeros([BD], dtype=state_ty)  # state before the first forward step
        h0_i = tl.zeros([BD], dtype=state_ty)
        if HAS_H0:
            h0_off = pid_b * stride_h0b + offs_d * stride_h0d
            h0_r = tl.load(h0_re_ptr + h0_off, mask=mask_d, other=0.0).to(state_ty)
            if COMPLEX_X:
                h0_i = tl.load(h0_im_ptr + h0_off, mask=mask_d, other=0.0).to(state_ty)
        a_base = pid_b * stride_ab + offs_d * stride_ad
        x_base = pid_b * stride_xb + offs_d * stride_xd
        for start in range(0, L, BT):
            step = start + rows  # (BT,) walking opposite to the forward scan
            if REVERSE:
                t = step
                t_next = t - 1  # the forward step after t (a reverse scan goes down in t)
                t_prev = t + 1  # the forward step before t
            else:
                t = L - 1 - step
                t_next = t + 1
                t_prev = t - 1
            valid = step < L  # (BT,)
            mask = valid[:, None] & mask_d[None, :]  # (BT, BD)
            x_off = x_base[None, :] + t[:, None] * stride_xl
            # ∂x_t = conj(a_{t_next}) ∂x_{t_next} + g_t: the forward recurrence of the reversed sequence, its
            # gates shifted by one step (zero at the first step, where nothing is carried; one on padding rows)
            has_next = ((t_next >= 0) & (t_next < L))[:, None] & mask_d[None, :]
            an_off = a_base[None, :] + t_next[:, None] * stride_al
            an_r = tl.where(valid[:, None], tl.load(a_re_ptr + an_off, mask=has_next, other=0.0).to(state_ty), 1.0)
            an_i = an_r
            if COMPLEX_A:
                an_i = -tl.load(a_im_ptr + an_off, mask=has_next, other=0.0).to(state_ty)  # conj
            g_r = tl.load(g_re_ptr + x_off, mask=mask, other=0.0).to(state_ty)
            g_i = g_r
            if COMPLEX_X:
                g_i = tl.load(g_im_ptr + x_off, mask=mask, other=0.0).to(state_ty)
            d_r, d_i = _scan_tile(an_r, an_i, g_r, g_i, c_r, c_i, COMPLEX_A, COMPLEX_X)
            tl.store(dx_re_ptr + x_off, d_r.to(dx_re_ptr.dtype.element_ty), mask=mask)
            # ∂a_t = ∂x_t conj(h_{t_prev}), h0 before the first forward step
            has_prev = (t_prev >= 0) & (t_prev < L)  # (BT,)
            hp_off = x_base[None, :] + t_prev[:, None] * stride_xl
            hp_mask = has_prev[:, None] & mask_d[None, :]
            hp_r = tl.load(h_re_ptr + hp_off, mask=hp_mask, other=0.0).to(state_ty)
            hp_r = tl.where(has_prev[:, None], hp_r, h0_r[None, :])
            if COMPLEX_X:
                tl.store(dx_im_ptr + x_off, d_i.to(dx_im_ptr.dtype.element_ty), mask=mask)
                hp_i = tl.load(h_im_ptr + hp_off, mask=hp_mask, other=0.0).to(state_ty)
                hp_i = tl.where(has_prev[:, None], hp_i, h0_i[None, :])
                da_r = d_r * hp_r + d_i * hp_i  # Re(∂x conj(h)); the whole ∂a for a real a
                tl.store(da_re_ptr + x_off, da_r.to(da_re_ptr.dtype.element_ty), mask=mask)
                if COMPLEX_A:
                    da_i = d_i * hp_r - d_r * hp_i  # Im(∂x conj(h))
                    tl.store(da_im_ptr + x_off, da_i.to(da_im_ptr.dtype.element_ty), mask=mask)
                c_i = _last_row(d_i, rows, BT)
            else:
                tl.store(da_re_ptr + x_off, (d_r * hp_r).to(da_re_ptr.dtype.element_ty), mask=mask)
            c_r = _last_row(d_r, rows, BT)


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


TARGET_PROGRAMS = 132  # an H100's SMs (an A100 has 108): at least one program per SM
MIN_BLOCK_D = 8  # 8 float32 channels = 32 bytes, one DRAM sector per row of a tile
MAX_BLOCK_D = 128
TILE_ELEMENTS = 2048  # elements of one (BT, BD) tile and plane: 16 per thread of 4 warps


def block_d(B: int, D: int) -> int:
    """The channels one program owns: the widest power of two (up to ``MAX_BLOCK_D``, at most ``D``
    rounded up) that still gives ``B * cdiv(D, BD) >= TARGET_PROGRAMS`` programs, halved down to
    ``MIN_BLOCK_D`` when ``B`` and ``D`` are too small to fill the GPU. Each program walks all of ``L``,
    so the programs, not the time steps, are what run side by side."""
    bd = min(MAX_BLOCK_D, triton.next_power_of_2(D))
    while bd > MIN_BLOCK_D and B * triton.cdiv(D, bd) < TARGET_PROGRAMS:
        bd //= 2
    return bd


def block_t(BD: int) -> int:
    """The time steps of one tile: ``TILE_ELEMENTS / BD``, between 16 and 64 (tests set it small, so that
    short sequences cross tile edges in the interpreter)."""
    return max(16, min(64, TILE_ELEMENTS // BD))


def launch_plan(B: int, L: int, D: int, *, itemsize: int = 4, complex_: bool = False,
                backward: bool = False) -> dict:
    """What one launch of the scan does for ``x (B, L, D)``, without a GPU: its grid and blocks, the tiles
    each program scans one after another (``serial_steps``), and the bytes it moves per element of ``x``:
    each element of each tensor is read or written once (forward: ``a, x`` in, ``h`` out; backward:
    ``a, h, g`` in, ``∂x, ∂a`` out; the shifted rows of ``a`` and ``h`` are the same elements), times two
    planes for complex tensors."""
    BD = block_d(B, D)
    BT = block_t(BD)
    grid = (B, triton.cdiv(D, BD))
    tensors = 5 if backward else 3
    return dict(grid=grid, programs=grid[0] * grid[1], BT=BT, BD=BD, serial_steps=triton.cdiv(L, BT),
                bytes_per_element=tensors * (2 if complex_ else 1) * itemsize,
                num_warps=max(1, min(4, BT * BD // 256)))


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
    plan = launch_plan(B, L, D)
    linear_scan_fwd_kernel[plan["grid"]](
        a_re, a_im, x_re, x_im, h0_re, h0_im, h_re, h_im, L, D, *_shape_args(a, sa, sx, h0, sh0),
        BT=plan["BT"], BD=plan["BD"], num_warps=plan["num_warps"], COMPLEX_A=a.is_complex(), COMPLEX_X=x.is_complex(), HAS_H0=h0 is not None,
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
    plan = launch_plan(B, L, D, backward=True)
    linear_scan_bwd_kernel[plan["grid"]](
        a_re, a_im, h_re, h_im, h0_re, h0_im, g_re, g_im, dx_re, dx_im, da_re, da_im, L, D,
        *_shape_args(a, sa, sx, h0, sh0),
        BT=plan["BT"], BD=plan["BD"], num_warps=plan["num_warps"], COMPLEX_A=a.is_complex(), COMPLEX_X=h.is_complex(), HAS_H0=h0 is not None,
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
