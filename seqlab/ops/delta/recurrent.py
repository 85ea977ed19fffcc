"""The recurrent form: one token at a time in the working precision, O(dk dv) per token (decoding's form).

In seqlab's convention (``S: (dk, dv)``, ``y = q S``) the gated delta rule reads before it writes::

    S'     = alpha_t S_{t-1}                     decay (Gated DeltaNet's gate; alpha_t = 1 is DeltaNet)
    v_old  = k_t S'                              what the state recalls for k_t          (dv,)
    S_t    = S' + beta_t k_t^T (v_t - v_old)     move the recall a fraction beta_t towards v_t
    y_t    = q_t S_t

which is ``S_t = alpha_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t`` multiplied out: a rank-one
correction instead of the ``dk x dk`` projection the reference materialises.
"""
from __future__ import annotations

import torch


def _step(q_t, k_t, v_t, beta_t, g_t, S):
    """One token: ``(B, H, dk)`` query and key, ``(B, H, dv)`` value, ``(B, H)`` beta and log alpha (or None),
    state ``(B, H, dk, dv)``; returns ``(y_t (B, H, dv), S_t)``."""
    if g_t is not None:
        S = torch.exp(g_t)[..., None, None] * S                                  # alpha_t S_{t-1}
    v_old = torch.einsum("bhd,bhde->bhe", k_t, S)                                # k_t S'        (B, H, dv)
    correction = beta_t[..., None] * (v_t - v_old)                               # beta_t (v_t - v_old)
    S = S + k_t[..., :, None] * correction[..., None, :]                         # the delta rule's write
    return torch.einsum("bhd,bhde->bhe", q_t, S), S


def _recurrent(q, k, v, beta, g, h0):
    """The gated delta rule token by token: ``(y (B, H, L, dv), S_L (B, H, dk, dv))``."""
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    S = h0 if h0 is not None else q.new_zeros(B, H, dk, dv)
    gates = g.unbind(2) if g is not None else [None] * L
    outputs = []
    for q_t, k_t, v_t, beta_t, g_t in zip(q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2), gates):
        y_t, S = _step(q_t, k_t, v_t, beta_t, g_t, S)
        outputs.append(y_t)
    y = torch.stack(outputs, dim=2) if outputs else q.new_zeros(B, H, 0, dv)
    return y, S
