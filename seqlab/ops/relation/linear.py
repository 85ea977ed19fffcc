"""``mode="linear"``: ``exp(p_i + q_j) = exp(p_i) exp(q_j)`` (000 eq. 9), the sum over ``i`` shared by every
query, computed in the log domain (a prefix log-sum-exp; the Triton kernel with ``triton=True``)."""
from __future__ import annotations

import torch

from seqlab.ops._checks import has_values
from seqlab.ops.relation._common import _counts, _finish, _prepare

__all__ = ["prefix_logsumexp", "SHIFT_RANGE"]

# How far below its channel's largest key a sequence's first key may lie for the shifted form (below) to keep every
# prefix sum a normal float: e^-60 ~ 9e-27 in float32 (normal down to 1.2e-38), e^-600 ~ 3e-261 in float64.
SHIFT_RANGE = {torch.float32: 60.0, torch.float64: 600.0}


def prefix_logsumexp(p: torch.Tensor) -> torch.Tensor:
    """``log sum_{i<=j} exp(p_i)`` along dim 1 of ``p`` (B, L, H): the prefix of 000 eq. 9, as ``torch.logcumsumexp``.

    With ``m`` the largest key of each channel, ``log sum_{i<=j} exp(p_i) = m + log cumsum_j exp(p_i - m)``: one
    ``exp``, one cumulative sum and one ``log``, about 10x faster on a CPU than ``torch.logcumsumexp``'s sequential
    log-add. Every ``exp(p_i - m) <= 1`` cannot overflow; the prefix sums cannot underflow while a sequence's first
    key (the smallest running maximum) lies within :data:`SHIFT_RANGE` of ``m``, because each prefix holds a term
    at least ``exp(p_1 - m)``. Past that range the sequential ``torch.logcumsumexp``, exact at any range, runs
    instead. ``m`` carries no gradient: the value does not depend on it."""
    if p.shape[1] == 0:                                                 # no keys: no prefixes
        return torch.logcumsumexp(p, dim=1)
    m = p.detach().amax(dim=1, keepdim=True)
    if has_values(p) and float((p.detach()[:, :1] - m).amin()) < -SHIFT_RANGE[p.dtype]:     # (meta: shapes only)
        return torch.logcumsumexp(p, dim=1)
    return m + torch.log(torch.cumsum(torch.exp(p - m), dim=1))


def _linear(p, q, weight, bias, *, causal, pre_norm, normalized, eps, triton=False):
    p, q = _prepare(p, q, pre_norm, weight, bias, eps)
    L = p.shape[1]
    if triton:                                                          # the same prefix sum, by a Triton kernel
        from seqlab.ops.relation.triton import triton_logcumsumexp

        log_sum = triton_logcumsumexp(p)
        if not causal:
            log_sum = log_sum[:, -1:]                                   # the last prefix is the whole sum
    elif causal:
        log_sum = prefix_logsumexp(p)                                   # log sum_{i<=j} exp(p_i)
    else:
        log_sum = torch.logsumexp(p, dim=1, keepdim=True)               # log sum_i exp(p_i)
    log_r = q + log_sum - torch.log(_counts(L, causal, p))             # eq. 9 in logs, divided by the count
    return _finish(log_r, normalized, "exp")
