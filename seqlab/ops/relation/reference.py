"""The references: every pair ``psi(p_i + q_j)`` materialised (000 eq. 4-5, 8), and the attention-like matrix."""
from __future__ import annotations

import torch

from seqlab.ops.relation._common import (
    _ACT,
    _TINY,
    LN_EPS,
    _affine,
    _check_args,
    _future_mask,
    _pair_preactivations,
    _prepare,
    feature_layer_norm,
)


def relation_reference(p, q, *, causal=True, activation="exp", pre_norm="none", normalized=False,
                       weight=None, bias=None, eps=LN_EPS):
    """Float64 reference: for each query j, ``mean_{i in S(j)} psi(pre(p_i, q_j))`` (000 eq. 5/8)."""
    _check_args(p, q, activation, pre_norm, weight, bias)
    p, q = p.double(), q.double()
    w = None if weight is None else weight.double()
    b = None if bias is None else bias.double()
    act = _ACT[activation]
    B, L, H = p.shape
    out = torch.empty(B, L, H, dtype=torch.float64, device=p.device)
    for j in range(L):
        keys = p[:, : j + 1] if causal else p                         # (B, n, H)
        query = q[:, j: j + 1]                                        # (B, 1, H)
        if pre_norm == "exact":
            z = _affine(feature_layer_norm(keys + query, eps), w, b)  # psi(w LN(p_i + q_j) + b)
        elif pre_norm == "approx":
            z = _affine(feature_layer_norm(keys, eps) + feature_layer_norm(query, eps), w, b)
        else:
            z = keys + query
        out[:, j] = act(z).mean(dim=1)
    if normalized:
        scale = out.amax(-1, keepdim=True) if activation == "exp" else out.abs().amax(-1, keepdim=True).clamp_min(_TINY)
        out = out / scale
    return out


def relation_pairs(p, q, *, causal=True, activation="exp", pre_norm="none", weight=None, bias=None, eps=LN_EPS):
    """The pairwise hidden vectors ``psi(pre(p_i, q_j))`` as a ``(B, L_query, L_key, H)`` tensor.

    Causally masked pairs (``i > j``) are zero. Materialises everything: for pictures and small L.
    """
    _check_args(p, q, activation, pre_norm, weight, bias)
    z = _pair_preactivations(*_prepare(p, q, pre_norm, weight, bias, eps), pre_norm, weight, bias, eps)
    a = _ACT[activation](z)
    if causal:
        L = p.shape[1]
        a = a.masked_fill(_future_mask(0, L, L, p.device)[..., None], 0.0)
    return a


def relation_attention_matrix(p, q, *, causal=True, pre_norm="none", weight=None, bias=None, eps=LN_EPS):
    """How much of the reduced vector ``r_j`` comes from key ``i`` (``exp`` activation): ``(B, L, L)``.

    ``A[j, i] = sum_h exp(z_ij[h]) / sum_{i'} sum_h exp(z_i'j[h])``: the share of the (L1) mass of
    ``sum_i exp(z_ij)`` that key ``i`` contributes, computed in the log domain. Rows sum to 1 and
    future keys get 0 when ``causal``. This is the read-out behind the BiRN heat map (000 Fig. 7).
    """
    _check_args(p, q, "exp", pre_norm, weight, bias)
    z = _pair_preactivations(*_prepare(p, q, pre_norm, weight, bias, eps), pre_norm, weight, bias, eps)
    logits = z.logsumexp(-1)                                          # (B, Lq, Lk): log sum_h exp(z_ij)
    if causal:
        L = p.shape[1]
        logits = logits.masked_fill(_future_mask(0, L, L, p.device), float("-inf"))
    return torch.softmax(logits, dim=-1)
