"""Eq. 14-21: the surrogate attention ``Y = (Qbar Kbar^T . M) V``, stably from relative log-decays, and
literally (``attention_naive``, to show the underflow of Fig. 3)."""
from __future__ import annotations

import torch

from seqlab.ops.gateloop._logs import _BLOCK_ELEMENTS, _cumulative_logs, _decay_from_logs, _relative_decay


def _attention_rows(q, k, a, rows: slice, c_mag, c_ph, dtype, complex_a):
    """Rows ``rows`` of the masked surrogate attention matrix ``(Qbar Kbar^T . M)`` (eq. 21), stably."""
    L = q.shape[-2]
    n = torch.arange(L, device=q.device)[rows]
    causal = n[:, None] >= torch.arange(L, device=q.device)[None, :]          # M, eq. 20   (N, L)
    decay = _relative_decay(c_mag[..., rows, :], c_ph[..., rows, :], c_mag, c_ph, causal, dtype, complex_a)
    # A[n, m] = sum_d q_{n,d} k_{m,d} prod_{j=m+1..n} a_{j,d}            (B, H, N, L)
    return torch.einsum("bhnd,bhmd,bhnmd->bhnm", q[..., rows, :], k, decay)


def _row_blocks(L: int, dk: int):
    step = max(1, _BLOCK_ELEMENTS // max(1, L * dk))
    return [slice(s, min(L, s + step)) for s in range(0, L, step)]


def _attention_matrix_stable(q, k, a, dtype):
    c_mag, c_ph = _cumulative_logs(a)
    complex_a = a.is_complex()
    L, dk = q.shape[-2], q.shape[-1]
    return torch.cat([_attention_rows(q, k, a, r, c_mag, c_ph, dtype, complex_a) for r in _row_blocks(L, dk)], dim=-2)


def _state_terms(q, k, v, a, h0, c_mag, c_ph, dtype):
    """What ``h0`` adds to the outputs, ``(q_n . prod_{j<=n} a_j) h0``, and the final state ``S_L``."""
    B, H, L, dk = q.shape
    complex_a = a.is_complex()
    zeros = torch.zeros_like(c_mag[..., :1, :])
    final_decay = _relative_decay(c_mag[..., -1:, :], c_ph[..., -1:, :], c_mag, c_ph, None, dtype, complex_a)[..., 0, :, :]
    final = torch.einsum("bhmd,bhme->bhde", k * final_decay, v)              # sum_m diag(prod_{j>m} a_j) k_m^T v_m
    y_h0 = None
    if h0 is not None:
        from_start = _decay_from_logs(c_mag - zeros, c_ph - zeros, None, dtype, complex_a)  # prod_{j<=n} a_j
        y_h0 = torch.einsum("bhnd,bhde->bhne", q * from_start, h0)
        final = final + from_start[..., -1, :, None] * h0
    return y_h0, final


def _attention(q, k, v, a, h0):
    """Eq. 14-21 computed stably, row block by row block (O(L^2) time, bounded memory)."""
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    if L == 0:
        return q.new_zeros(B, H, 0, dv), (h0 if h0 is not None else q.new_zeros(B, H, dk, dv))
    dtype = q.dtype
    c_mag, c_ph = _cumulative_logs(a)
    complex_a = a.is_complex()
    y = torch.cat([_attention_rows(q, k, a, r, c_mag, c_ph, dtype, complex_a) @ v for r in _row_blocks(L, dk)], dim=-2)
    y_h0, final = _state_terms(q, k, v, a, h0, c_mag, c_ph, dtype)
    return (y if y_h0 is None else y + y_h0), final


def _attention_naive(q, k, v, a, h0):
    """Eq. 16-21 literally: ``Pi = cumprod(A)``, ``Qbar = Q . Pi``, ``Kbar = K . Pi^-1``.

    ``Pi`` shrinks geometrically; once it leaves the float range ``Pi^-1`` is infinite and the
    product ``Qbar Kbar^T`` is ``0 * inf = NaN`` (Fig. 3). ``gateloop`` then raises.
    """
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    Pi = torch.cumprod(a, dim=-2)                                             # eq. 16   (B, H, L, dk)
    Q_bar = q * Pi                                                            # eq. 18
    K_bar = k / Pi                                                            # eq. 19
    M = torch.tril(torch.ones(L, L, dtype=torch.bool, device=q.device))      # eq. 20
    scores = (Q_bar @ K_bar.transpose(-1, -2)).masked_fill(~M, 0)             # Qbar Kbar^T . M
    y = scores @ v                                                            # eq. 21
    final = Pi[..., -1, :, None] * (K_bar.transpose(-1, -2) @ v) if L else q.new_zeros(B, H, dk, dv)
    if h0 is not None:
        y = y + Q_bar @ h0
        final = final + (Pi[..., -1, :, None] * h0 if L else h0)
    return y, final
