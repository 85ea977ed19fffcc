"""Causal ``decay_attention`` from a state and to a state (``h0=``, ``return_state=True``): decoding and
prompts read in parts. Running it on ``a + b`` equals running it on ``a``, then on ``b`` from
``a``'s state.

The state (LightNet paper 003, eq. 2 and 7):

- additive (eq. 7): the pair ``(kv, log_s)``: ``kv_t = sum_{r<=t} exp(d_r - log s_t) m_r v_r^T``
  ``(..., dk, dv)``, the normalised running sum, and ``log s_t = log sum_{r<=t} exp(d_r)`` ``(..., dk)``,
  the log of the running normaliser (``-inf`` before the first token). From a state ``(kv_0, z_0)``
  the sum goes on: ``z_t = logaddexp(z_0, logcumsumexp(d)_t)`` and, as GateLoop's recurrence,
  ``kv_t = exp(z_{t-1} - z_t) kv_{t-1} + exp(d_t - z_t) m_t v_t^T`` (every exponent ``<= 0``);
- multiplicative (eq. 2) and none: the decayed ``kv_t = diag(lambda_t) kv_{t-1} + k_t v_t^T`` ``(..., dk, dv)``.

Each causal mode runs that recurrence from ``kv_0`` in its own kind of form, on GateLoop's op
(``seqlab.ops.gateloop``, which takes ``h0`` and returns ``S_L`` in every mode): ``recurrent`` its loop,
``parallel`` its associative scan, ``chunked`` its chunked form, ``numba`` its compiled loop, ``triton``
its Triton kernels fed ``log a``. The final state comes from the op, not from a loop here.
"""
from __future__ import annotations

import torch

from seqlab.ops._checks import describe as _describe

__all__ = ["check_state", "causal_with_state", "causal_step", "empty_state"]


def describe(t) -> str:
    return _describe(t) if isinstance(t, torch.Tensor) else type(t).__name__


_GATELOOP_MODE = {"recurrent": "recurrent", "parallel": "associative", "chunked": "chunked", "numba": "numba"}


def empty_state(q, k, v, decay, dtype):
    """The state before the first token (what ``h0=None`` means)."""
    lead, dk, dv = k.shape[:-2], k.shape[-1], v.shape[-1]
    kv = torch.zeros(*lead, dk, dv, dtype=dtype, device=k.device)
    if decay != "additive":
        return kv
    return kv, torch.full((*lead, dk), -torch.inf, dtype=k.dtype, device=k.device)


def check_state(h0, k, v, decay):
    """``h0`` as given, after checking its form against ``k``, ``v`` and ``decay``."""
    lead, dk, dv = tuple(k.shape[:-2]), k.shape[-1], v.shape[-1]
    if decay == "additive":
        if not (isinstance(h0, (tuple, list)) and len(h0) == 2):
            raise ValueError(f"h0: additive decay's state is the pair (kv (..., dk, dv), log_s (..., dk)), "
                             f"got {type(h0).__name__}")
        kv, log_s = h0
        for name, t, shape in (("h0[0] (kv)", kv, lead + (dk, dv)), ("h0[1] (log_s)", log_s, lead + (dk,))):
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
                raise ValueError(f"{name}: expected shape {shape}, got {describe(t)}")
        if log_s.is_complex():
            raise TypeError(f"h0[1] (log_s): expected a real tensor, got {describe(log_s)}")
        tensors = (kv, log_s)
    else:
        if not isinstance(h0, torch.Tensor) or tuple(h0.shape) != lead + (dk, dv):
            raise ValueError(f"h0: {decay} decay's state is kv of shape {lead + (dk, dv)}, got {describe(h0)}")
        tensors = (h0,)
    if any(t.device != k.device for t in tensors):
        raise ValueError(f"h0: expected the device of k ({k.device}), got {[str(t.device) for t in tensors]}")
    return h0


def _transitions(k, decay, log_decay, z0):
    """``(key, log_a, z_L)``: GateLoop's key and ``log a_t`` of the causal decay from a normaliser ``z0``."""
    if decay == "additive":
        d = k if log_decay is None else log_decay
        z = torch.logcumsumexp(d.double(), dim=-2)                                 # log s_t, from 0
        z = torch.logaddexp(z0.double()[..., None, :], z)                          # ... from z_0
        z_prev = torch.cat([z0.double()[..., None, :], z[..., :-1, :]], dim=-2)
        key = torch.exp(d.double() - z).to(d.dtype)                                # kbar_t = exp(d_t - z_t)
        key = key if log_decay is None else key * k
        return key, (z_prev - z).to(d.dtype), z[..., -1, :].to(z0.dtype)
    if decay == "multiplicative":
        return k, (-log_decay).expand(k.shape), None
    return k, torch.zeros_like(k), None


def causal_with_state(q, k, v, decay, log_decay, mode, h0):
    """``(o, state)`` of causal ``decay_attention`` on ``L >= 1`` tokens from the state ``h0`` (``None``: empty)."""
    from seqlab.ops.gateloop import gateloop

    dtype = torch.result_type(q, v)
    h0 = empty_state(q, k, v, decay, dtype) if h0 is None else h0
    kv0, z0 = h0 if decay == "additive" else (h0, None)
    key, log_a, z_end = _transitions(k, decay, log_decay, z0)
    *lead, L, dk = k.shape
    dv = v.shape[-1]
    rows = lambda t: t.reshape(1, -1, L, t.shape[-1])  # noqa: E731  every leading index a head: (1, N, L, d)
    S0 = kv0.reshape(1, -1, dk, dv)
    if mode == "triton":
        from seqlab.ops.gateloop.triton import gateloop_triton_log

        y, S = gateloop_triton_log(rows(q), rows(key), rows(v), rows(log_a), h0=S0, return_state=True)
    else:
        y, S = gateloop(rows(q), rows(key), rows(v), rows(log_a.exp()), h0=S0, mode=_GATELOOP_MODE[mode],
                        return_state=True)
    y, S = y.reshape(*lead, L, dv), S.reshape(*lead, dk, dv)
    return y, ((S, z_end) if decay == "additive" else S)


def causal_step(q, k, v, decay, log_decay, mode, h0):
    """``(o, state)`` of one token (``L = 1``) from the state ``h0``: the recurrence of
    :func:`causal_with_state` taken once, written out (decoding's O(1) step, without an op's dispatch):

        S = a S_0 + key^T v,    o = q S    (a and key from :func:`_transitions`: eq. 7, eq. 2 or none)

    ``mode`` is not used: every mode computes this same function."""
    kv0, z0 = h0 if decay == "additive" else (h0, None)
    key, log_a, z_end = _transitions(k, decay, log_decay, z0)
    dtype = torch.promote_types(kv0.dtype, torch.result_type(q, v))
    a = log_a[..., 0, :, None].exp().to(dtype)                                   # (..., dk, 1)
    S = a * kv0.to(dtype) + key[..., 0, :, None].to(dtype) * v[..., 0, None, :]   # eq. 7    (..., dk, dv)
    o = (q[..., 0, :, None].to(dtype) * S).sum(-2)                                # eq. 8    (..., dv)
    return o[..., None, :], ((S, z_end) if decay == "additive" else S)
