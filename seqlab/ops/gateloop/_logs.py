"""Log-space relative decays ``prod_{j=m+1..n} a_j`` from differences of cumulative logs (float64), masked
before ``exp``: what the attention and chunked forms share."""
from __future__ import annotations

import math

import torch

_BLOCK_ELEMENTS = 1 << 22


def _log_transitions(a: torch.Tensor):
    """``log a_n = log|a_n| + i arg(a_n)`` as float64 ``(log_magnitude, phase)``.

    For real ``a`` the phase is ``pi`` where ``a_n < 0``; the sign of a product is then carried by
    the parity of the number of negative factors (see :func:`_decay_from_logs`).
    """
    tiny = torch.finfo(a.real.dtype if a.is_complex() else a.dtype).tiny
    log_mag = a.abs().double().clamp_min(tiny).log()
    if a.is_complex():
        phase = torch.angle(a).double()
    else:
        phase = (a < 0).double() * math.pi
    return log_mag, phase


def _decay_from_logs(d_mag: torch.Tensor, d_phase: torch.Tensor, causal: torch.Tensor | None,
                     dtype: torch.dtype, complex_a: bool) -> torch.Tensor:
    """``prod_{j=m+1..n} a_j = exp(d_mag + i d_phase)`` from log differences, masked before ``exp``.

    ``d_mag``, ``d_phase``: float64 differences of cumulative sums (``<= 0`` real part where ``n >= m``).
    ``causal``: boolean mask broadcastable to them (True where ``n >= m``); the masked entries become
    ``exp(-inf) = 0`` and receive zero gradient: no overflow, no ``0 * inf``.
    """
    real = torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32
    if causal is not None:
        d_mag = d_mag.masked_fill(~causal, -math.inf)
        d_phase = d_phase.masked_fill(~causal, 0.0)
    mag = torch.exp(d_mag.to(real))
    if complex_a:
        ph = d_phase.to(real)
        return torch.complex(mag * torch.cos(ph), mag * torch.sin(ph))
    # real a: d_phase / pi counts the negative factors between m and n; odd count -> minus sign
    parity = torch.remainder(torch.round(d_phase / math.pi), 2.0).to(real)
    return mag * (1.0 - 2.0 * parity)


def _relative_decay(mag_rows, ph_rows, mag_cols, ph_cols, causal, dtype, complex_a):
    """``D[n, m, d] = prod_{j=m+1..n} a_{j,d}`` from cumulative logs at rows n and columns m."""
    d_mag = mag_rows[..., :, None, :] - mag_cols[..., None, :, :]     # (..., N, M, dk)
    d_ph = ph_rows[..., :, None, :] - ph_cols[..., None, :, :]        # (..., N, M, dk)
    mask = None if causal is None else causal[..., None]
    return _decay_from_logs(d_mag, d_ph, mask, dtype, complex_a)


def _cumulative_logs(a):
    log_mag, phase = _log_transitions(a)
    return log_mag.cumsum(-2), phase.cumsum(-2)


def _pad_to_chunks(x, C, value):
    L = x.shape[-2]
    pad = (-L) % C
    if pad:
        x = torch.cat([x, x.new_full((*x.shape[:-2], pad, x.shape[-1]), value)], dim=-2)
    return x.reshape(*x.shape[:-2], x.shape[-2] // C, C, x.shape[-1])      # (B, H, nC, C, d)
