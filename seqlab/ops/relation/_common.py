"""Checks, constants and the pre-activation normalisations every form of the reduction shares."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from seqlab.ops._checks import check_mode, check_shape, check_tensor

RELATION_ACTIVATIONS = ("exp", "relu", "elu", "gelu")


RELATION_PRE_NORMS = ("none", "approx", "exact")


RELATION_MODES = ("auto", "quadratic", "linear", "triton")


_PAIR_BUDGET = 1 << 22      # max pair entries (B * chunk * L * H) alive at once in quadratic mode


RELATION_PAIR_BUDGET = _PAIR_BUDGET  # public, read-only view of the quadratic mode's memory bound


_TINY = 1e-30               # floor of the per-token constant for non-exp activations


LN_EPS = 1e-5


_ACT = {"exp": torch.exp, "relu": F.relu, "elu": F.elu, "gelu": F.gelu}


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
