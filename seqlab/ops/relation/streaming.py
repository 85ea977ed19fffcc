"""Decoding: the causal reduction one token at a time, O(1) state for the linear form, the kept keys otherwise."""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from seqlab.ops._checks import check_finite, check_finite_inputs, check_shape, check_tensor
from seqlab.ops.relation._common import LN_EPS, _check_args, _finish, _prepare
from seqlab.ops.relation.quadratic import _quadratic_chunk


def relation_query(p, q_t, *, activation="exp", pre_norm="none", normalized=False, weight=None, bias=None, eps=LN_EPS):
    """The newest row of the causal reduction: ``mean_{i<=t} psi(pre(p_i, q_t))`` for keys ``p`` (B, t, H)
    and one query ``q_t`` (B, H). The decoding step when the reduction does not factorise (``exact``
    pre-norm, non-exp activations): all past ``p_i`` are kept, like a Transformer's KV cache."""
    check_tensor("q_t", q_t, ndim=2)
    check_tensor("p", p, ndim=3)
    check_shape("q_t", q_t, (p.shape[0], p.shape[2]), "one query (B, H) for keys p (B, t, H)")
    _check_args(p[:, -1:], q_t[:, None], activation, pre_norm, weight, bias)
    check_finite_inputs("relation_query", p=p, q_t=q_t, weight=weight, bias=bias)
    keys, query = _prepare(p, q_t[:, None], pre_norm, weight, bias, eps)
    out = _quadratic_chunk(keys, query, p.shape[1] - 1, weight, bias, causal=True, activation=activation,
                           pre_norm=pre_norm, normalized=normalized, eps=eps)
    return check_finite("relation_query", out[:, 0])


class RelationState(NamedTuple):
    """Running state of the causal linear reduction: ``log sum_{i<=t} exp(p_i)`` (B, H) and ``t`` (an int, or a
    (B,) tensor when the rows of a ragged batch have read different numbers of tokens)."""
    log_sum: torch.Tensor
    count: int


def relation_state(batch: int, hidden: int, *, dtype=torch.float32, device=None) -> RelationState:
    """The empty state (``log 0 = -inf``) before the first token."""
    return RelationState(torch.full((batch, hidden), float("-inf"), dtype=dtype, device=device), 0)


def relation_step(p_t, q_t, state: RelationState, *, pre_norm="none", normalized=False, weight=None, bias=None,
                  eps=LN_EPS):
    """One causal step of the linear (exp) reduction: O(H) work, O(H) state, whatever the position.

    ``p_t, q_t``: ``(B, H)``. Returns ``(r_t, new_state)`` with ``r_t`` equal to row ``t`` of
    ``relation(p, q, causal=True, mode="linear", ...)``:
    ``log S_t = logaddexp(log S_{t-1}, p_t)``, ``log r_t = q_t + log S_t - log t``.
    """
    check_tensor("p_t", p_t, ndim=2)
    check_tensor("q_t", q_t, ndim=2)
    check_shape("q_t", q_t, tuple(p_t.shape), "q_t must match p_t: (B, H)")
    check_shape("state.log_sum", state.log_sum, tuple(p_t.shape), "state from relation_state(B, H)")
    if pre_norm == "exact":
        raise ValueError("relation_step: pre_norm='exact' has no O(1) step (the reduction does not factorise); "
                         "keep all past p_i and call relation on them")
    _check_args(p_t[:, None], q_t[:, None], "exp", pre_norm, weight, bias)
    check_finite_inputs("relation_step", p_t=p_t, q_t=q_t, weight=weight, bias=bias)
    p1, q1 = _prepare(p_t, q_t, pre_norm, weight, bias, eps)
    log_sum = torch.logaddexp(state.log_sum, p1)
    count = state.count + 1                  # an int, or one per row (B,) for rows at different positions
    log_count = math.log(count) if not isinstance(count, torch.Tensor) else torch.log(count.to(p1.dtype))[:, None]
    log_r = q1 + log_sum - log_count
    return check_finite("relation_step", _finish(log_r, normalized, "exp")), RelationState(log_sum, count)
