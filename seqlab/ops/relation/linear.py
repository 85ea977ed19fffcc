"""``mode="linear"``: ``exp(p_i + q_j) = exp(p_i) exp(q_j)`` (000 eq. 9), the sum over ``i`` shared by every
query, computed in the log domain (a prefix log-sum-exp; the Triton kernel with ``triton=True``)."""
from __future__ import annotations

import torch

from seqlab.ops.relation._common import _counts, _finish, _prepare


def _linear(p, q, weight, bias, *, causal, pre_norm, normalized, eps, triton=False):
    p, q = _prepare(p, q, pre_norm, weight, bias, eps)
    L = p.shape[1]
    if triton:                                                          # the same prefix sum, by a Triton kernel
        from seqlab.ops.relation.triton import triton_logcumsumexp

        log_sum = triton_logcumsumexp(p)
        if not causal:
            log_sum = log_sum[:, -1:]                                   # the last prefix is the whole sum
    elif causal:
        log_sum = torch.logcumsumexp(p, dim=1)                          # log sum_{i<=j} exp(p_i)
    else:
        log_sum = torch.logsumexp(p, dim=1, keepdim=True)               # log sum_i exp(p_i)
    log_r = q + log_sum - torch.log(_counts(L, causal, p))             # eq. 9 in logs, divided by the count
    return _finish(log_r, normalized, "exp")
