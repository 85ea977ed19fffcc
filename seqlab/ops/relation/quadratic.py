"""``mode="quadratic"``: the pairs in chunks of queries, memory-bounded; any activation and pre-norm."""
from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from seqlab.ops.relation._common import (
    _ACT,
    _PAIR_BUDGET,
    _counts,
    _finish,
    _future_mask,
    _pair_preactivations,
    _prepare,
)


def _quadratic_chunk(p, q_chunk, j0, weight, bias, *, causal, activation, pre_norm, normalized, eps):
    """Reduction for the queries j0..j0+C-1 over their keys: (B, C, H)."""
    C = q_chunk.shape[1]
    n_keys = j0 + C if causal else p.shape[1]
    keys = p[:, :n_keys]
    # for exp, a bias constant over i leaves the log-sum: log sum_i exp(z_ij + b) = b + log sum_i exp(z_ij)
    outer_bias = bias if (activation == "exp" and pre_norm == "exact") else None
    z = _pair_preactivations(keys, q_chunk, pre_norm, weight, None if outer_bias is not None else bias, eps)
    count = _counts(p.shape[1], causal, z)[j0: j0 + C]                  # (C, 1)
    mask = _future_mask(j0, j0 + C, n_keys, p.device)[..., None] if causal else None
    if activation == "exp":
        if mask is not None:
            z = z.masked_fill(mask, float("-inf"))
        reduced = torch.logsumexp(z, dim=2) - torch.log(count)          # log r_j (stable for any scale)
        if outer_bias is not None:
            reduced = reduced + outer_bias
    else:
        a = _ACT[activation](z)
        if mask is not None:
            a = a.masked_fill(mask, 0.0)
        reduced = a.sum(dim=2) / count
    return _finish(reduced, normalized, activation)


def _chunk_size(B, L, H, budget=None) -> int:
    return max(1, min(L, (budget or _PAIR_BUDGET) // max(1, B * L * H)))


def _quadratic(p, q, weight, bias, *, causal, activation, pre_norm, normalized, eps, chunk=None):
    B, L, H = p.shape
    p, q = _prepare(p, q, pre_norm, weight, bias, eps)
    C = chunk or _chunk_size(B, L, H)
    kwargs = dict(causal=causal, activation=activation, pre_norm=pre_norm, normalized=normalized, eps=eps)
    if C >= L:
        return _quadratic_chunk(p, q, 0, weight, bias, **kwargs)
    need_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (p, q, weight, bias))
    outs = []
    for j0 in range(0, L, C):
        q_chunk = q[:, j0: j0 + C]
        if need_grad:   # recompute the chunk's pairs in backward: memory stays O(B * C * L * H)
            outs.append(checkpoint(lambda pp, qq, ww, bb, j0=j0: _quadratic_chunk(pp, qq, j0, ww, bb, **kwargs),
                                   p, q_chunk, weight, bias, use_reentrant=False))
        else:
            outs.append(_quadratic_chunk(p, q_chunk, j0, weight, bias, **kwargs))
    return torch.cat(outs, dim=1)
