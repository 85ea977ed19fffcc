"""Relative positions on a grid of any dimension: MD-TPE and MD-LRPE (paper 003 §4.2, Appendix A.2).

Additive decay is permutation-invariant in the non-causal case (eq. 8 sums over every token with
weights that do not depend on where it sits), so LightNet adds positions twice:

**MD-TPE** (eq. 10-11). The full multi-dimensional Toeplitz sum of eq. 10,
``y_n = sum_{m <= n} t_{n-m} x_m``, is simplified to one Toeplitz sum per axis, each kernel a sum of
``e`` decaying exponentials (an SSM with hidden size ``e``)::

    y_{n_1..n_k} = sum_{s=1}^{k} sum_{m_s=1}^{n_s} sum_{r=1}^{e} lambda_r^{n_s - m_s} x_{n_1..m_s..n_k}     (eq. 11)

Each inner sum is the linear recurrence ``h_{n_s} = lambda_r h_{n_s - 1} + x_{n_s}`` along axis ``s``:
one :func:`seqlab.ops.linear_scan` per axis, ``O(N e)`` in all.

**MD-LRPE** (eq. 12-16). Complex LRPE multiplies ``x_t`` by ``W_t = diag(exp(i t theta))`` so that
``(W_s q)^H (W_t k) = q^H W_{t-s} k`` (eq. 12). In ``k`` dimensions the ``d`` features are split into
``k`` groups, group ``s`` rotated by the coordinate ``n_s`` (eq. 14), so dot products depend only on
the offset ``m - n`` (eq. 16). Appendix A.2 uses the real form
``[x * cos(phi), x * sin(phi)]`` (``2d`` features), whose dot products are
``sum_j q_j k_j cos(phi_j(n) - phi_j(m))``: the real part of eq. 16.

Frequencies: eq. 14 writes ``theta_j = 10000^{-2j/d}``; we count ``j`` and ``d`` *within each axis
group* (``theta_j = base^{-2j/d_s}``, ``j = 0..d_s-1``), so every axis gets the same spectrum (with a
global ``j`` the last axis would only get the lowest frequencies, near-constant phases on small grids).
"""
from __future__ import annotations

import math

import torch

from seqlab.ops._checks import check_tensor, describe

__all__ = ["md_tpe", "md_tpe_reference", "md_lrpe", "md_lrpe_phases", "grid_coordinates", "sinusoidal_positions"]


def _check_grid(x: torch.Tensor, shape) -> tuple[int, ...]:
    check_tensor("x", x, min_ndim=2)
    try:
        shape = tuple(int(n) for n in shape)
    except TypeError:
        raise TypeError(f"shape: expected a tuple of ints (the grid), got {shape!r}") from None
    if not shape or any(n < 1 for n in shape):
        raise ValueError(f"shape: expected a non-empty tuple of positive ints, got {shape}")
    if math.prod(shape) != x.shape[-2]:
        raise ValueError(f"x: expected N = prod(shape) = {math.prod(shape)} tokens on dim -2 for grid {shape}, "
                         f"got {describe(x)}")
    return shape


def grid_coordinates(shape, device=None) -> torch.Tensor:
    """Row-major coordinates ``(N, k)`` (0-based) of the ``N = prod(shape)`` grid points."""
    axes = [torch.arange(n, device=device) for n in shape]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, len(shape))


# ----------------------------------------------------------------------------------------------
# MD-TPE
# ----------------------------------------------------------------------------------------------

def _check_decays(decays: torch.Tensor, k: int, d: int) -> torch.Tensor:
    """``decays`` of shape ``(e,)``, ``(e, d)`` or ``(k, e, d)`` -> ``(k, e, d)``."""
    check_tensor("decays", decays, ndim=(1, 2, 3))
    if decays.dim() == 1:
        decays = decays[:, None]
    if decays.dim() == 2:
        decays = decays[None]
    if decays.shape[0] not in (1, k) or decays.shape[2] not in (1, d):
        raise ValueError(f"decays: expected shape (e,), (e, d={d}) or (k={k}, e, d={d}), got {describe(decays)}")
    return decays.expand(k, decays.shape[1], d)


def md_tpe_reference(x: torch.Tensor, shape, decays: torch.Tensor) -> torch.Tensor:
    """Eq. 11 as an ``O(N^2)`` materialised Toeplitz matrix, in float64/complex128.

    ``T[n, m] = sum_s [m differs from n only on axis s and m_s <= n_s] sum_r lambda_{s,r}^{n_s - m_s}``,
    ``y_n = sum_m T[n, m] x_m`` (per feature).
    """
    shape = _check_grid(x, shape)
    k, d = len(shape), x.shape[-1]
    lam = _check_decays(decays, k, d)
    wide = torch.complex128 if (x.is_complex() or lam.is_complex()) else torch.float64
    lam = lam.to(wide)
    coords = grid_coordinates(shape, x.device)
    diff = coords[:, None, :] - coords[None, :, :]                               # (N, N, k): n - m
    N = coords.shape[0]
    T = torch.zeros(N, N, d, dtype=wide, device=x.device)
    for s in range(k):
        others = [a for a in range(k) if a != s]
        same_line = (diff[..., others] == 0).all(-1) if others else torch.ones(N, N, dtype=torch.bool, device=x.device)
        valid = same_line & (diff[..., s] >= 0)                                  # m_s <= n_s on n's line
        power = diff[..., s].clamp_min(0).to(torch.float64)                      # n_s - m_s
        kernel = (lam[s][None, None] ** power[..., None, None]).sum(-2)          # sum_r lambda_r^{n_s-m_s}  (N,N,d)
        T = T + torch.where(valid[..., None], kernel, torch.zeros((), dtype=wide))
    return torch.einsum("nmd,...md->...nd", T, x.to(wide))


def md_tpe(x: torch.Tensor, shape, decays: torch.Tensor, *, mode: str = "auto") -> torch.Tensor:
    """Eq. 11: per-axis decayed Toeplitz sums on a grid, by ``linear_scan`` along each axis.

    ``x: (..., N, d)`` holds the tokens of the row-major grid ``shape`` (``N = prod(shape)``);
    ``decays``: the SSM decays ``lambda`` of shape ``(e,)``, ``(e, d)`` (shared by all axes, as in
    eq. 11) or ``(k, e, d)`` (one set per axis); real or complex, ``|lambda| <= 1`` keeps it bounded.
    ``mode`` is passed to :func:`seqlab.ops.linear_scan`. Returns ``(..., N, d)``.
    """
    from seqlab.ops.scan import linear_scan

    shape = _check_grid(x, shape)
    k, d = len(shape), x.shape[-1]
    lam = _check_decays(decays, k, d)
    e = lam.shape[1]
    lead = x.shape[:-2]
    dt = torch.result_type(x, lam)
    grid = x.to(dt).reshape(*lead, *shape, d)
    y = torch.zeros_like(grid)
    for s in range(k):
        axis = len(lead) + s
        xs = grid.movedim(axis, -2)                                              # (..., n_s, d)
        xe = xs[..., None, :].expand(*xs.shape[:-1], e, d).reshape(*xs.shape[:-1], e * d)   # one copy per r
        # short axes (image grids): the plain loop is the fastest scan; long ones: the scan engine's choice
        axis_mode = "sequential" if mode == "auto" and shape[s] <= 64 else mode
        h = linear_scan(lam[s].reshape(e * d).to(dt), xe, mode=axis_mode)         # h_n = lambda h_{n-1} + x_n
        y = y + h.reshape(*xs.shape[:-1], e, d).sum(-2).movedim(-2, axis)        # sum over r
    return y.reshape(*lead, -1, d)


# ----------------------------------------------------------------------------------------------
# MD-LRPE
# ----------------------------------------------------------------------------------------------

def md_lrpe_phases(shape, d: int, *, base: float = 10000.0, device=None, dtype=torch.float32) -> torch.Tensor:
    """The phases ``phi: (N, d)`` of eq. 14: feature ``j`` of group ``s`` gets ``n_s * theta_j``,
    ``theta_j = base^{-2j/d_s}`` with ``j`` counted inside the group of ``d_s = d / k`` features."""
    k = len(shape)
    if d % k:
        raise ValueError(f"x: MD-LRPE splits the d features into len(shape)={k} equal groups; d={d} is not divisible")
    ds = d // k
    theta = base ** (-2.0 * torch.arange(ds, dtype=torch.float64, device=device) / ds)        # (d_s,)
    coords = grid_coordinates(shape, device).to(torch.float64)                                # (N, k)
    phi = (coords[:, :, None] * theta[None, None, :]).reshape(coords.shape[0], d)             # group s <- n_s
    return phi.to(dtype)


def md_lrpe(x: torch.Tensor, shape, *, base: float = 10000.0) -> torch.Tensor:
    """Eq. 14-16 in the real form of Appendix A.2: ``(..., N, d) -> (..., N, 2d) = [x cos(phi), x sin(phi)]``.

    Dot products of two encoded vectors depend only on the grid offset between their positions:
    ``<md_lrpe(q)_n, md_lrpe(k)_m> = sum_j q_j k_j cos(phi_j(n) - phi_j(m))``.
    """
    shape = _check_grid(x, shape)
    if not (isinstance(base, (int, float)) and base > 1):
        raise ValueError(f"base: expected a number > 1, got {base!r}")
    real = torch.float64 if x.dtype in (torch.float64, torch.complex128) else torch.float32
    phi = md_lrpe_phases(shape, x.shape[-1], base=base, device=x.device, dtype=real)
    return torch.cat([x * phi.cos().to(x.dtype if not x.is_complex() else real),
                      x * phi.sin().to(x.dtype if not x.is_complex() else real)], dim=-1)


def sinusoidal_positions(start: int, length: int, d: int, *, base: float = 10000.0, device=None,
                         dtype=torch.float32) -> torch.Tensor:
    """Fixed absolute positions ``(length, d)`` for positions ``start .. start + length - 1`` (Vaswani et al.
    2017, §3.5): ``PE[p, 2i] = sin(p / base^(2i/d))``, ``PE[p, 2i+1] = cos(p / base^(2i/d))``. No table, so no
    longest length: what a language model that decodes as a recurrence can use at any position. Computed in
    float64 (the angles of large ``p`` keep their digits), returned in ``dtype``."""
    for name, value, low in (("start", start, 0), ("length", length, 0), ("d", d, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
    pos = torch.arange(start, start + length, dtype=torch.float64, device=device)[:, None]
    freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)        # (ceil(d/2),)
    angles = pos * freq                                                                      # (length, ceil(d/2))
    out = torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(length, 2 * freq.numel())[:, :d]  # interleaved
    return out.to(dtype)
