"""The Relation-Network reduction of CausalRN / BiRN (paper 000 §3, paper 001 §2 and Appendix A).

A single-hidden-layer MLP applied to every pair ``[x_i; x_j]`` (000 eq. 4-5) is

    y_j = b_out + W_out · mean_{i in S(j)} psi(W_left x_i + W_right x_j + b_in)      (000 eq. 7)

with ``S(j) = {i <= j}`` (CausalRN, eq. 5) or ``S(j) = {1..N}`` (BiRN, eq. 4). The affine layers
move outside the pairwise sum, so the only quadratic work is the *reduction* (eq. 8)

    r_j = mean_{i in S(j)} psi(p_i + q_j),    p_i = W_left x_i,   q_j = W_right x_j + b_in.

This module computes ``r`` for ``p, q`` of shape ``(B, L, H)`` (batch, sequence, hidden width
``H = d_h``), real floating point (LayerNorm and ReLU have no complex meaning).

Modes
-----
- ``relation_reference``: float64, one query ``j`` at a time, exactly as eq. 8 reads.
- ``mode="quadratic"``: every pair materialised, any activation, chunked over the query axis so
  that at most ``_PAIR_BUDGET`` pair entries exist at once (never a full ``B·L·L·H`` tensor for
  long ``L``); under autograd each chunk is recomputed in the backward pass (checkpointing).
- ``mode="linear"`` (and ``mode="triton"``, the same with the prefix sum in a Triton kernel,
  ``seqlab.kernels.relation``): ``exp`` only. With ``psi = exp`` (eq. 9)

      sum_i exp(p_i + q_j) = exp(q_j) ⊙ sum_i exp(p_i),

  so ``log r_j = q_j + logcumsumexp_{i<=j}(p_i) - log j``: O(L) time and O(1) state per step.

Pre-activation normalisation (000 §3.4), ``LN`` over the hidden axis ``H`` without affine
parameters, followed by an optional shared affine map ``weight ⊙ (.) + bias`` (``weight``,
``bias``: ``(H,)`` tensors, learnable in the layer):

- ``pre_norm="exact"``:  ``psi(weight ⊙ LN(p_i + q_j) + bias)``. ``LN`` of a sum is not a sum of
  per-token terms, so eq. 9 no longer applies: quadratic only (this is the KV-cache-like memory).
- ``pre_norm="approx"``: ``psi(weight ⊙ (LN(p_i) + LN(q_j)) + bias)``: per-token, so it still
  factorises and works in both modes.

``normalized=True`` (001 Appendix A) returns ``r_j / c_j`` with a positive per-token constant
``c_j``: for ``exp``, ``c_j = exp(max_h log r_j[h])``, computed in the log domain so the result lies
in ``(0, 1]`` and is finite for any input scale. A LayerNorm over ``H`` is invariant to a positive
per-token scale (up to its ``eps``), so ``LN(r_j / c_j) = LN(r_j)``: the trick is exact after the
post-reduction norm. (Appendix A subtracts ``max_h(q_j + cummax_i p_i)`` instead; any per-token
constant works.) For other activations ``c_j = max_h |r_j[h]|`` (kept above a tiny floor).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from seqlab.ops._checks import (at_least_float32, check_finite, check_finite_inputs, check_mode, check_shape, check_tensor,
                                traceable_mode)

__all__ = ["relation", "relation_reference", "relation_pairs", "relation_attention_matrix", "relation_query",
           "relation_state", "relation_step", "RelationState", "feature_layer_norm",
           "RELATION_ACTIVATIONS", "RELATION_PRE_NORMS", "RELATION_MODES", "RELATION_PAIR_BUDGET"]

RELATION_ACTIVATIONS = ("exp", "relu", "elu", "gelu")
RELATION_PRE_NORMS = ("none", "approx", "exact")
RELATION_MODES = ("auto", "quadratic", "linear", "triton")
_PAIR_BUDGET = 1 << 22      # max pair entries (B * chunk * L * H) alive at once in quadratic mode
RELATION_PAIR_BUDGET = _PAIR_BUDGET  # public, read-only view of the quadratic mode's memory bound
_TINY = 1e-30               # floor of the per-token constant for non-exp activations
LN_EPS = 1e-5

_ACT = {"exp": torch.exp, "relu": F.relu, "elu": F.elu, "gelu": F.gelu}


# ----------------------------------------------------------------------------- argument checks


def _check_args(p, q, activation, pre_norm, weight, bias, mode=None):
    check_tensor("p", p, ndim=3)
    check_tensor("q", q, ndim=3)
    for name, t in (("p", p), ("q", q)):
        if t.is_complex():
            raise TypeError(f"{name}: expected a real tensor (LayerNorm and ReLU have no complex form), got {t.dtype}")
    check_shape("q", q, tuple(p.shape), "q must match p: (B, L, H)")
    if q.dtype != p.dtype:
        raise TypeError(f"q: expected dtype {p.dtype} like p, got {q.dtype}")
    if activation not in RELATION_ACTIVATIONS:
        raise ValueError(f"activation: expected one of {RELATION_ACTIVATIONS}, got {activation!r}")
    if pre_norm not in RELATION_PRE_NORMS:
        raise ValueError(f"pre_norm: expected one of {RELATION_PRE_NORMS}, got {pre_norm!r}")
    H = p.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            check_tensor(name, t, ndim=1)
            check_shape(name, t, (H,), "one value per hidden feature H")
            if pre_norm == "none":
                raise ValueError(f"{name}: the pre-activation affine map needs pre_norm='exact' or 'approx', got pre_norm='none'")
    if mode is not None:
        check_mode("relation", mode, RELATION_MODES)


def _auto_linear(device) -> str:
    """The linear form on a GPU with Triton is the kernel; elsewhere torch's logcumsumexp."""
    if device is not None and torch.device(device).type == "cuda":
        from seqlab.kernels import HAVE_TRITON, interpreted

        if HAVE_TRITON and not interpreted():
            return "triton"
    return "linear"


def _resolve_mode(mode: str, activation: str, pre_norm: str, device=None) -> str:
    if mode == "auto":
        return _auto_linear(device) if activation == "exp" and pre_norm != "exact" else "quadratic"
    if mode == "triton" and (activation != "exp" or pre_norm == "exact"):
        raise ValueError(f"relation: mode='triton' runs the linear form (a log-domain prefix sum), which needs "
                         f"activation='exp' and pre_norm 'none' or 'approx'; got activation={activation!r}, "
                         f"pre_norm={pre_norm!r}. Use mode='quadratic'")
    if mode == "linear" and activation != "exp":
        raise ValueError(f"relation: mode='linear' needs activation='exp', got {activation!r}. The linear form rests on "
                         "exp(p_i + q_j) = exp(p_i) * exp(q_j) (000 eq. 9); no other activation factorises, so use mode='quadratic'")
    if mode == "linear" and pre_norm == "exact":
        raise ValueError("relation: mode='linear' cannot use pre_norm='exact': LN(p_i + q_j) mixes p_i and q_j inside one "
                         "normalisation, so exp(LN(p_i + q_j)) does not split into exp(.)(p_i) * exp(.)(q_j) and the sum over i "
                         "cannot be shared between queries (000 §3.4). Use mode='quadratic', or pre_norm='approx' "
                         "(LN(p_i) + LN(q_j)), which does factorise")
    return mode


def feature_layer_norm(x: torch.Tensor, eps: float = LN_EPS) -> torch.Tensor:
    """LayerNorm over the last (hidden) axis without affine parameters."""
    return F.layer_norm(x, (x.shape[-1],), eps=eps)


def _affine(z, weight, bias):
    if weight is not None:
        z = z * weight
    if bias is not None:
        z = z + bias
    return z


def _counts(L: int, causal: bool, like: torch.Tensor) -> torch.Tensor:
    """Number of keys each query averages over: j (1-based) when causal, else L; shape (L, 1)."""
    n = torch.arange(1, L + 1, device=like.device, dtype=like.dtype) if causal else torch.full((L,), float(L), device=like.device, dtype=like.dtype)
    return n[:, None]


# ----------------------------------------------------------------------------- reference (eq. 8, float64)


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


# ----------------------------------------------------------------------------- quadratic mode


def _prepare(p, q, pre_norm, weight, bias, eps):
    """Per-token parts: for ``approx`` the normalised and scaled ``p' = w LN(p)``, ``q' = w LN(q) + b``."""
    if pre_norm == "approx":
        p = _affine(feature_layer_norm(p, eps), weight, None)
        q = _affine(feature_layer_norm(q, eps), weight, bias)
    return p, q


def _pair_preactivations(p, q, pre_norm, weight, bias, eps):
    """``z_ij`` of shape (B, Lq, Lk, H) for queries ``q`` (B, Lq, H) and keys ``p`` (B, Lk, H)."""
    if pre_norm == "exact":
        return _affine(_exact_pair_norm(p, q, weight, eps), None, bias)   # w LN(p_i + q_j) + b
    return q[:, :, None, :] + p[:, None, :, :]                        # broadcast p_i + q_j


def _exact_pair_norm(p, q, weight, eps):
    """``w ⊙ LN(p_i + q_j)`` for every pair without a pairwise LayerNorm pass.

    The mean of a sum is the sum of the means, and the variance of ``p_i + q_j`` over the hidden
    axis is ``var(p_i) + var(q_j) + 2 cov(p_i, q_j)``, where the covariances of all pairs are one
    matrix product of the centred vectors. So ``LN(p_i + q_j) = (p~_i + q~_j) * rstd_ij``.
    """
    H = p.shape[-1]
    pc = p - p.mean(-1, keepdim=True)                                  # centred keys    (B, K, H)
    qc = q - q.mean(-1, keepdim=True)                                  # centred queries (B, C, H)
    # The three terms cancel when p_i ~ -q_j: sum them in float64 (small (B, C, K) tensors), so
    # the variance is as accurate as a direct LayerNorm's.
    wide = torch.float64 if pc.dtype in (torch.float32, torch.float16, torch.bfloat16) else pc.dtype
    pw, qw = pc.to(wide), qc.to(wide)
    cov = torch.matmul(qw, pw.transpose(-1, -2)) / H                   # (B, C, K)
    var = qw.pow(2).mean(-1)[:, :, None] + pw.pow(2).mean(-1)[:, None, :] + 2 * cov
    rstd = torch.rsqrt(var.clamp_min(0) + eps).to(pc.dtype)           # 1 / sqrt(var(p_i + q_j) + eps)
    if weight is not None:
        pc, qc = pc * weight, qc * weight
    return (qc[:, :, None, :] + pc[:, None, :, :]) * rstd[..., None]   # (B, C, K, H)


def _future_mask(j0: int, j1: int, n_keys: int, device) -> torch.Tensor:
    """True where key i lies after query j, for queries j0..j1-1: (j1-j0, n_keys)."""
    j = torch.arange(j0, j1, device=device)[:, None]
    i = torch.arange(n_keys, device=device)[None, :]
    return i > j


def _finish(log_or_sum, normalized, activation):
    """From log r (exp) or r (others) to the returned r or r / c_j."""
    if activation == "exp":
        if normalized:
            return torch.exp(log_or_sum - log_or_sum.amax(-1, keepdim=True))  # r_j / max_h r_j, in (0, 1]
        return torch.exp(log_or_sum)
    if normalized:
        return log_or_sum / log_or_sum.abs().amax(-1, keepdim=True).clamp_min(_TINY)
    return log_or_sum


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


# ----------------------------------------------------------------------------- linear mode (eq. 9, log domain)


def _linear(p, q, weight, bias, *, causal, pre_norm, normalized, eps, triton=False):
    p, q = _prepare(p, q, pre_norm, weight, bias, eps)
    L = p.shape[1]
    if triton:                                                          # the same prefix sum, by a Triton kernel
        from seqlab.kernels.relation import triton_logcumsumexp

        log_sum = triton_logcumsumexp(p)
        if not causal:
            log_sum = log_sum[:, -1:]                                   # the last prefix is the whole sum
    elif causal:
        log_sum = torch.logcumsumexp(p, dim=1)                          # log sum_{i<=j} exp(p_i)
    else:
        log_sum = torch.logsumexp(p, dim=1, keepdim=True)               # log sum_i exp(p_i)
    log_r = q + log_sum - torch.log(_counts(L, causal, p))             # eq. 9 in logs, divided by the count
    return _finish(log_r, normalized, "exp")


# ----------------------------------------------------------------------------- public op


def relation(p, q, *, causal=True, activation="exp", pre_norm="none", normalized=False, mode="auto",
             weight=None, bias=None, eps=LN_EPS, chunk=None):
    """CausalRN / BiRN reduction ``r_j = mean_{i<=j} psi(p_i + q_j)`` (000 eq. 5, 8, 9).

    Args:
        p: ``(B, L, H)`` keys, the linear branch ``W_left x_i``.
        q: ``(B, L, H)`` queries, the affine branch ``W_right x_j + b_in``.
        causal: mean over ``i <= j`` (CausalRN) or over all ``i`` (BiRN, eq. 4).
        activation: ``"exp" | "relu" | "elu" | "gelu"``.
        pre_norm: ``"none" | "approx" | "exact"`` (see the module docstring).
        normalized: divide every ``r_j`` by a positive per-token constant (001 Appendix A).
        mode: ``"auto"`` (linear when it is exact, else quadratic; the Triton kernel on a CUDA GPU),
            ``"quadratic"``, ``"linear"``, ``"triton"`` (linear, prefix sum in a Triton kernel).
        weight, bias: optional ``(H,)`` affine map applied after the pre-activation LN.
        chunk: queries per chunk in quadratic mode (default: bounded by a fixed memory budget).

    Returns ``(B, L, H)`` in the dtype of ``p``. Raises ``FloatingPointError`` rather than return
    inf/NaN (``normalized=False`` with ``exp`` overflows once ``p + q`` exceeds ~88 in float32).
    """
    _check_args(p, q, activation, pre_norm, weight, bias, mode)
    check_finite_inputs("relation", p=p, q=q, weight=weight, bias=bias)
    mode = traceable_mode(_resolve_mode(mode, activation, pre_norm, p.device), "linear", p, q)
    out_dtype = p.dtype
    p, q, weight, bias = map(at_least_float32, (p, q, weight, bias))  # half precision is computed in float32
    if mode in ("linear", "triton"):
        out = _linear(p, q, weight, bias, causal=causal, pre_norm=pre_norm, normalized=normalized, eps=eps,
                      triton=mode == "triton")
    else:
        out = _quadratic(p, q, weight, bias, causal=causal, activation=activation, pre_norm=pre_norm,
                         normalized=normalized, eps=eps, chunk=chunk)
    return check_finite("relation", out).to(out_dtype)


# ----------------------------------------------------------------------------- streaming (O(1) per token)


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
    """Running state of the causal linear reduction: ``log sum_{i<=t} exp(p_i)`` (B, H) and ``t``."""
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
    count = state.count + 1
    log_r = q1 + log_sum - math.log(count)
    return check_finite("relation_step", _finish(log_r, normalized, "exp")), RelationState(log_sum, count)
