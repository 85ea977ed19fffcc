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
  ``triton.py``): ``exp`` only. With ``psi = exp`` (eq. 9)

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

Files: ``reference.py`` (the pairs materialised, float64 ground truth), ``quadratic.py`` (pairs in
memory-bounded chunks), ``linear.py`` (the log-domain factorised form), ``streaming.py`` (O(1) per token
decoding), ``triton.py`` (the prefix log-sum-exp as a Triton kernel), ``_common.py`` (checks, the
pre-activation normalisations).
"""
from __future__ import annotations

from seqlab.ops._checks import at_least_float32, check_finite, check_finite_inputs, traceable_mode
from seqlab.ops.relation._common import (
    LN_EPS,
    RELATION_ACTIVATIONS,
    RELATION_MODES,
    RELATION_PAIR_BUDGET,
    RELATION_PRE_NORMS,
    _check_args,
    feature_layer_norm,
)
from seqlab.ops.relation.linear import _linear
from seqlab.ops.relation.quadratic import _quadratic
from seqlab.ops.relation.reference import relation_attention_matrix, relation_pairs, relation_reference
from seqlab.ops.relation.streaming import RelationState, relation_query, relation_state, relation_step

__all__ = ["relation", "relation_reference", "relation_pairs", "relation_attention_matrix", "relation_query",
           "relation_state", "relation_step", "RelationState", "feature_layer_norm",
           "RELATION_ACTIVATIONS", "RELATION_PRE_NORMS", "RELATION_MODES", "RELATION_PAIR_BUDGET", "resolve_mode"]


def _auto_linear(device) -> str:
    """The linear form on a GPU with Triton is the kernel; elsewhere torch's logcumsumexp."""
    from seqlab.kernels import fast_backend

    return "triton" if device is not None and fast_backend(device) == "triton" else "linear"


def resolve_mode(mode: str, activation: str, pre_norm: str, device=None) -> str:
    """The mode ``relation`` runs for ``mode`` (``"auto"`` picks by activation, pre-norm and device); an error that
    says why for a mode the activation or the pre-norm cannot run."""
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
    mode = traceable_mode(resolve_mode(mode, activation, pre_norm, p.device), "linear", p, q)
    out_dtype = p.dtype
    p, q, weight, bias = map(at_least_float32, (p, q, weight, bias))  # half precision is computed in float32
    if mode in ("linear", "triton"):
        out = _linear(p, q, weight, bias, causal=causal, pre_norm=pre_norm, normalized=normalized, eps=eps,
                      triton=mode == "triton")
    else:
        out = _quadratic(p, q, weight, bias, causal=causal, activation=activation, pre_norm=pre_norm,
                         normalized=normalized, eps=eps, chunk=chunk)
    return check_finite("relation", out).to(out_dtype)
