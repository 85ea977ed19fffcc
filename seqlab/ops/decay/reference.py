"""The float64 references: eq. 2, 7 and 8 as loops, exactly as the paper writes them."""
from __future__ import annotations

import torch

from seqlab.ops.decay._common import _check_inputs


def _additive_loop_reference(q, k, v, log_decay):
    """Eq. 7 literally: ``s_t = s_{t-1} + exp(k_t)``, ``kbar_t = exp(k_t)/s_t``, ``kv_t = diag(1-kbar_t) kv_{t-1} + kbar_t v_t^T``."""
    d = k if log_decay is None else log_decay
    mult = torch.ones_like(k) if log_decay is None else k
    s = torch.zeros_like(d[..., 0, :])
    kv = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=torch.result_type(k, v), device=k.device)
    out = []
    for t in range(k.shape[-2]):
        s = s + d[..., t, :].exp()
        kbar = d[..., t, :].exp() / s
        kv = (1 - kbar)[..., :, None] * kv + (kbar * mult[..., t, :])[..., :, None] * v[..., t, None, :]
        dt = torch.result_type(q, kv)
        out.append(torch.einsum("...i,...ij->...j", q[..., t, :].to(dt), kv.to(dt)))        # o_t = kv_t^T q_t
    return torch.stack(out, dim=-2)


def _additive_noncausal_reference(q, k, v, log_decay):
    """Eq. 8 literally: ``s = sum_t exp(k_t)``, ``o_t = q_t^T sum_t (exp(k_t)/s) v_t^T``."""
    d = k if log_decay is None else log_decay
    mult = torch.ones_like(k) if log_decay is None else k
    s = d.exp().sum(-2, keepdim=True)
    kv = torch.einsum("...ti,...tj->...ij", (d.exp() / s * mult).to(torch.result_type(k, v)), v)
    return torch.einsum("...ti,...ij->...tj", q.to(torch.result_type(q, kv)), kv.to(torch.result_type(q, kv)))


def _multiplicative_loop_reference(q, k, v, log_decay, reverse=False):
    """Eq. 2: ``kv_t = diag(lambda_t) kv_{t-1} + k_t v_t^T`` with ``lambda_t = exp(-log_decay_t)``; ``reverse``
    runs the backward scan ``kv_t = diag(lambda_t) kv_{t+1} + k_t v_t^T`` of §3.1."""
    lam = (-log_decay).exp() if log_decay is not None else torch.ones_like(k)
    kv = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=torch.result_type(k, v), device=k.device)
    out = [None] * k.shape[-2]
    order = range(k.shape[-2] - 1, -1, -1) if reverse else range(k.shape[-2])
    for t in order:
        kv = lam[..., t, :, None] * kv + k[..., t, :, None].to(kv.dtype) * v[..., t, None, :]
        dt = torch.result_type(q, kv)
        out[t] = torch.einsum("...i,...ij->...j", q[..., t, :].to(dt), kv.to(dt))
    return torch.stack(out, dim=-2)


def decay_attention_reference(q, k, v, *, decay="additive", log_decay=None, causal=True):
    """The paper's equations as float64 loops (the ground truth every mode is tested against).

    ``additive``: eq. 7 (causal) / eq. 8 (non-causal); ``multiplicative``: eq. 2 (causal) and the
    "2 scan" of §3.1 (non-causal); ``none``: ``lambda_t = 1`` (plain linear attention, §2).
    """
    q, k, v, log_decay = _check_inputs(q, k, v, decay, log_decay)
    to64 = lambda t: None if t is None else t.to(torch.complex128 if t.is_complex() else torch.float64)  # noqa: E731
    q, k, v, log_decay = map(to64, (q, k, v, log_decay))
    if decay == "additive":
        return (_additive_loop_reference if causal else _additive_noncausal_reference)(q, k, v, log_decay)
    if decay == "none" and not causal:   # the right product (§3.1, "1 scan"): o_t = q_t^T sum_s k_s v_s^T
        kv = sum(torch.einsum("...i,...j->...ij", k[..., s, :].to(v.dtype), v[..., s, :]) for s in range(k.shape[-2]))
        dt = torch.result_type(q, kv)
        return torch.einsum("...ti,...ij->...tj", q.to(dt), kv.to(dt))
    ld = log_decay if decay == "multiplicative" else None
    out = _multiplicative_loop_reference(q, k, v, ld)
    if not causal:
        out = out + _multiplicative_loop_reference(q, k, v, ld, reverse=True)
    return out
