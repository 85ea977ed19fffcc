"""Theorem 3.1 and Proposition 3.2 of paper 003: the coefficients ``c_ts = g_s / g_t`` of every linear recurrence."""
from __future__ import annotations

import torch

from seqlab.ops._checks import check_tensor, describe


def decay_coefficients(delta: torch.Tensor, kind: str, causal: bool = True) -> torch.Tensor:
    """The ``c_ts`` matrix ``(..., L, L)`` of Theorem 3.1 for ``delta: (..., L)``, ``delta >= 0``.

    ``y_t = a_t y_{t-1} + x_t`` equals ``y = C x`` with ``C[t, s] = c_ts = g_s / g_t`` (s <= t), where
    (Prop. 3.2) ``g_t = g_{t-1} + delta_t`` (``additive``, ``a_t = g_{t-1}/g_t``) or
    ``log g_t = log g_{t-1} + delta_t`` (``multiplicative``, ``a_t = exp(-delta_t)``).

    Non-causal (``causal=False``):

    - ``additive``: the denominator becomes ``Delta = g_n = sum_s delta_s`` (§3.2), so every row is the
      last row of the causal matrix, ``c_ts = g_s / g_n``: one scan, whose final state every position reads;
    - ``multiplicative``: the forward scan plus the backward scan ``y'_t = a_t y'_{t+1} + x_t`` (§3.1):
      ``c_ts = prod_{r=t}^{s-1} a_r`` above the diagonal; both scans include ``x_t``, so ``c_tt = 2``.
    """
    check_tensor("delta", delta, min_ndim=1)
    if delta.is_complex():
        raise TypeError(f"delta: expected a real tensor (Prop. 3.2 needs delta >= 0), got {describe(delta)}")
    if kind not in ("additive", "multiplicative"):
        raise ValueError(f"kind: expected 'additive' or 'multiplicative', got {kind!r}")
    if (delta < 0).any():
        raise ValueError(f"delta: Proposition 3.2 needs delta_t >= 0, got min {float(delta.min()):.3g}")
    L = delta.shape[-1]
    s_le_t = torch.ones(L, L, dtype=torch.bool, device=delta.device).tril()          # [t, s]: s <= t
    if kind == "additive":
        g = delta.cumsum(-1)                                                         # g_t = sum_{r<=t} delta_r
        if (g[..., :1] <= 0).any():
            raise ValueError("delta: additive decay needs delta_1 > 0 (g_1 = delta_1 is a denominator)")
        if not causal:
            return (g[..., None, :] / g[..., -1:, None]).expand(*g.shape, L).clone()   # c_ts = g_s / g_n
        ratio = g[..., None, :] / g[..., :, None]                                   # [t, s] = g_s / g_t
        return torch.where(s_le_t, ratio, torch.zeros((), dtype=g.dtype, device=g.device))
    G = delta.cumsum(-1)                                                             # log g_t
    diff = G[..., None, :] - G[..., :, None]                                         # [t, s] = log g_s - log g_t
    forward = torch.where(s_le_t, diff, torch.full((), -torch.inf, dtype=G.dtype, device=G.device)).exp()
    if causal:
        return forward
    # backward scan: c_ts = prod_{r=t}^{s-1} exp(-delta_r) = exp(-(G_{s-1} - G_{t-1})) for s >= t
    Gm1 = G - delta                                                                  # G_{t-1}
    back = torch.where(s_le_t.T, (Gm1[..., :, None] - Gm1[..., None, :]), torch.full((), -torch.inf, dtype=G.dtype,
                                                                                     device=G.device)).exp()
    return forward + back
