"""Eq. 7-8 step by step: the recurrent form, O(L), the float64 reference of the tests."""
from __future__ import annotations

import torch


def _recurrent(q, k, v, a, h0):
    """Eq. 7-8 step by step, the transition on the key side (the package docstring says why):
    ``S_n = diag(a_n) S_{n-1} + k_n^T v_n``, ``y_n = q_n S_n``."""
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    S = h0 if h0 is not None else torch.zeros(B, H, dk, dv, dtype=q.dtype, device=q.device)
    ys = []
    for n in range(L):
        S = a[:, :, n, :, None] * S + k[:, :, n, :, None] * v[:, :, n, None, :]   # eq. 7, key side   (B, H, dk, dv)
        ys.append(torch.einsum("bhd,bhde->bhe", q[:, :, n], S))                   # eq. 8   (B, H, dv)
    y = torch.stack(ys, dim=2) if ys else q.new_zeros(B, H, 0, dv)
    return y, S
