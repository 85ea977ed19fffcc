"""The float64 reference: the gated delta rule token by token, in the papers' own convention.

Gated DeltaNet (arXiv 2412.06464, "the gated delta rule") and DeltaNet (arXiv 2406.06484, ``alpha_t = 1``) keep
the state as ``S: (dv, dk)`` and read it with a column query::

    S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,      o_t = S_t q_t

This file writes exactly that, with the ``dk x dk`` transition materialised; seqlab's ``(dk, dv)`` state is its
transpose, so ``h0`` comes in transposed and ``S_L`` goes out transposed. Every other form is tested against it.
"""
from __future__ import annotations

import torch

from seqlab.ops.delta._common import check_sequence_inputs, check_values


def _paper_recurrence(q, k, v, beta, g, h0):
    """The papers' loop on float64 tensors: ``(y (B, H, L, dv), S_L (B, H, dk, dv))``."""
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    S = q.new_zeros(B, H, dv, dk) if h0 is None else h0.transpose(-1, -2)     # the papers' (dv, dk) state
    eye = torch.eye(dk, dtype=q.dtype, device=q.device)
    alpha = torch.ones_like(beta) if g is None else torch.exp(g)               # g = log alpha
    outputs = []
    for t in range(L):
        k_t, q_t, v_t = k[:, :, t], q[:, :, t], v[:, :, t]
        b_t, a_t = beta[:, :, t, None, None], alpha[:, :, t, None, None]
        projection = eye - b_t * k_t[..., :, None] * k_t[..., None, :]      # I - beta_t k_t k_t^T   (B, H, dk, dk)
        write = b_t * v_t[..., :, None] * k_t[..., None, :]                  # beta_t v_t k_t^T       (B, H, dv, dk)
        S = a_t * S @ projection + write                                     # the gated delta rule
        outputs.append((S @ q_t[..., :, None])[..., 0])                      # o_t = S_t q_t          (B, H, dv)
    y = torch.stack(outputs, dim=2) if outputs else q.new_zeros(B, H, 0, dv)
    return y, S.transpose(-1, -2)


def delta_rule_reference(q, k, v, beta, g=None, *, h0=None, return_state: bool = False):
    """The gated delta rule as the papers write it, in float64 (the ground truth of the tests).

    Same arguments as :func:`seqlab.ops.delta_rule`; returns float64 ``y`` ``(B, H, L, dv)`` (and the final
    state ``(B, H, dk, dv)`` with ``return_state``) whatever the input dtype. Autograd flows through the loop.
    """
    check_sequence_inputs(q, k, v, beta, g, h0)
    check_values("delta_rule_reference", q=q, k=k, v=v, beta=beta, g=g, h0=h0)
    to64 = lambda t: None if t is None else t.to(torch.float64)  # noqa: E731
    y, S = _paper_recurrence(*map(to64, (q, k, v, beta, g, h0)))
    return (y, S) if return_state else y
