"""The causal decays on GateLoop's chunked Triton kernels (``decay_attention(..., mode="triton")``, and
``"auto"`` on CUDA): the recurrence ``S_t = diag(a_t) S_{t-1} + k_t v_t^T`` of :func:`gateloop_form`, with
the transitions handed over as ``log a_t``, never as an ``a_t`` that could underflow:

- additive (eq. 7, Theorem 3.1 with ``g_t = s_t``): ``z = log s = logcumsumexp(d)`` in float64,
  ``log a_t = z_{t-1} - z_t <= 0`` (``-inf`` at ``t = 1``: no state before the first token) and the key
  ``kbar_t = exp(d_t - z_t)`` (times ``k_t`` when ``log_decay`` is given). Keys of +-80 are safe: every
  exponent is a difference of log-sums;
- multiplicative (eq. 2): ``log a_t = -log_decay_t``;
- none: ``log a_t = 0``.

The kernels themselves, forward and backward, are in ``seqlab/ops/gateloop/triton.py``.
"""
from __future__ import annotations

import torch

__all__ = ["decay_triton", "log_transitions"]


def log_transitions(k: torch.Tensor, decay: str, log_decay: torch.Tensor | None):
    """``(key, log_a)`` such that causal ``decay_attention(q, k, v) == gateloop(q, key, v, exp(log_a))``."""
    if decay == "additive":
        d = k if log_decay is None else log_decay
        z = torch.logcumsumexp(d.double(), dim=-2)                                  # log s_t
        z_prev = torch.cat([torch.full_like(z[..., :1, :], -torch.inf), z[..., :-1, :]], dim=-2)
        key = torch.exp(d.double() - z).to(d.dtype)                                 # kbar_t
        return (key if log_decay is None else key * k), (z_prev - z).to(d.dtype)
    if decay == "multiplicative":
        return k, (-log_decay).expand(k.shape)
    return k, torch.zeros_like(k)


def decay_triton(q, k, v, decay: str, log_decay=None, *, h0=None, return_state=False):
    """Causal ``decay_attention`` by GateLoop's Triton kernels; inputs checked by ``decay_attention``.
    ``q`` and ``v`` may be complex. Returns ``(o, S_L)`` (``S_L`` is ``None`` unless ``return_state``)."""
    from seqlab.ops.gateloop.triton import gateloop_triton_log

    key, log_a = log_transitions(k, decay, log_decay)
    *lead, L, dk = k.shape
    rows = lambda t: t.reshape(1, -1, L, t.shape[-1])  # noqa: E731  every leading index a head: (1, N, L, d)
    state0 = None if h0 is None else h0.reshape(1, -1, dk, h0.shape[-1])
    y, S = gateloop_triton_log(rows(q), rows(key), rows(v), rows(log_a), h0=state0, return_state=return_state)
    y = y.reshape(*lead, L, v.shape[-1])
    return y, (S.reshape(*lead, dk, v.shape[-1]) if return_state else None)
