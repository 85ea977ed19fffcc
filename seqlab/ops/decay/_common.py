"""Input checks and the chunk helpers the decay forms share."""
from __future__ import annotations

import torch

from seqlab.ops._checks import check_tensor, describe

DECAY_KINDS = ("additive", "multiplicative", "none")


def _check_inputs(q, k, v, decay, log_decay):
    check_tensor("q", q, min_ndim=2)
    check_tensor("k", k, min_ndim=2)
    check_tensor("v", v, min_ndim=2)
    if decay not in DECAY_KINDS:
        raise ValueError(f"decay: expected one of {DECAY_KINDS}, got {decay!r}")
    if q.shape != k.shape:
        raise ValueError(f"q: expected the shape of k {tuple(k.shape)} (..., L, dk), got {describe(q)}")
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"v: expected shape {tuple(k.shape[:-1]) + ('dv',)} (..., L, dv) to match k, got {describe(v)}")
    if k.is_complex():
        raise TypeError(f"k: expected a real tensor (exp(k) is a decay/importance score), got {describe(k)}")
    if decay == "multiplicative" and log_decay is None:
        raise ValueError("log_decay: multiplicative decay needs log_decay (delta_t >= 0, lambda_t = exp(-delta_t)), got None")
    if decay == "none" and log_decay is not None:
        raise ValueError("log_decay: decay='none' takes no log_decay, got a tensor")
    if log_decay is not None:
        check_tensor("log_decay", log_decay)
        if log_decay.is_complex():
            raise TypeError(f"log_decay: expected a real tensor, got {describe(log_decay)}")
        scalar = decay == "multiplicative" and log_decay.shape == k.shape[:-1] + (1,)
        if log_decay.shape != k.shape and not scalar:
            extra = " or (..., L, 1) (one decay per head)" if decay == "multiplicative" else ""
            raise ValueError(f"log_decay: expected the shape of k {tuple(k.shape)}{extra}, got {describe(log_decay)}")
    devices = {t.device for t in (q, k, v, log_decay) if t is not None}
    if len(devices) > 1:
        raise ValueError(f"q, k, v, log_decay: expected one device, got {sorted(map(str, devices))}")
    return q, k, v, log_decay


def _out_dtype(q, v):
    return torch.result_type(q, v)


def _qdot(q, kv):
    """``o_t = kv_t^T q_t`` over the last two dims: ``(..., L, dk) x (..., L, dk, dv) -> (..., L, dv)``."""
    dt = torch.result_type(q, kv)
    return torch.einsum("...ti,...tij->...tj", q.to(dt), kv.to(dt))


def _pad_to_chunks(x, C, value=0.0):
    L = x.shape[-2]
    pad = (-L) % C
    if pad:
        x = torch.cat([x, x.new_full((*x.shape[:-2], pad, x.shape[-1]), value)], dim=-2)
    return x.reshape(*x.shape[:-2], x.shape[-2] // C, C, x.shape[-1])


def _chunk_scan(a, x):
    """Inter-chunk state recurrence ``S_c = a_c * S_{c-1} + x_c`` over the chunk axis (dim -3)
    of ``x: (..., n, dk, dv)``, with ``a: (..., n, dk)``: computed by ``seqlab.ops.linear_scan``."""
    from seqlab.ops.scan import linear_scan

    *lead, n, dk, dv = x.shape
    a_full = a[..., None].to(x.dtype).expand(*lead, n, dk, dv).reshape(*lead, n, dk * dv)
    h = linear_scan(a_full, x.reshape(*lead, n, dk * dv))
    return h.reshape(*lead, n, dk, dv)


def _shift_states(S):
    """State before each chunk: ``[0, S_1, ..., S_{n-1}]`` along dim -3."""
    return torch.cat([torch.zeros_like(S[..., :1, :, :]), S[..., :-1, :, :]], dim=-3)
