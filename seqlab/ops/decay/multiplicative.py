"""Multiplicative decay (eq. 2) and no decay: the loop, one ``linear_scan`` over the states, the chunked form
(as Lightning Attention / GLA), the right product for non-causal linear attention."""
from __future__ import annotations

import torch

from seqlab.ops.decay._common import _chunk_scan, _out_dtype, _pad_to_chunks, _qdot, _shift_states


def _multiplicative_recurrent(q, k, v, log_decay):
    """The eq. 2 loop: ``kv_t = diag(exp(-delta_t)) kv_{t-1} + k_t v_t^T`` (``log_decay=None``: no decay)."""
    dt = _out_dtype(k, v)
    kv = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=dt, device=k.device)
    lam = None if log_decay is None else (-log_decay).exp()
    out = []
    for t in range(k.shape[-2]):
        upd = k[..., t, :, None].to(dt) * v[..., t, None, :]
        kv = upd + (kv if lam is None else lam[..., t, :, None] * kv)
        out.append(kv)
    return _qdot(q, torch.stack(out, dim=-3))


def _multiplicative_parallel(q, k, v, log_decay):
    """Eq. 2 as one ``linear_scan`` over the flattened ``dk x dv`` states (parallel prefix scan)."""
    from seqlab.ops.scan import linear_scan

    dt = _out_dtype(k, v)
    *lead, L, dk = k.shape
    dv = v.shape[-1]
    x = (k[..., :, None].to(dt) * v[..., None, :]).reshape(*lead, L, dk * dv)
    if log_decay is None:
        kv = x.cumsum(-2)
    else:
        a = (-log_decay).exp()[..., None].expand(*lead, L, dk, dv).reshape(*lead, L, dk * dv).to(dt)
        kv = linear_scan(a, x)
    return _qdot(q, kv.reshape(*lead, L, dk, dv))


def _multiplicative_chunked(q, k, v, log_decay, chunk=None):
    """Chunkwise eq. 2 (as Lightning Attention / GLA): intra-chunk ``(C, C, dk)`` decays
    ``exp(-(G_t - G_s))`` with ``G`` the in-chunk cumulative ``delta`` (all exponents ``<= 0``), and
    the state carried across chunks: ``S_c = exp(-G_end) S_{c-1} + sum_s exp(-(G_end - G_s)) k_s v_s^T``."""
    L = k.shape[-2]
    if chunk is None:   # a (C, C) mask per head affords long chunks; a (C, C, dk) tensor per channel does not
        chunk = 64 if log_decay is None or log_decay.shape[-1] == 1 else 16
    C = min(chunk, L)
    dt = _out_dtype(k, v)
    qc, kc, vc = _pad_to_chunks(q, C), _pad_to_chunks(k, C), _pad_to_chunks(v, C)
    n = kc.shape[-3]
    causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    if log_decay is None:
        at = torch.result_type(qc, kc)
        A = (qc.to(at) @ kc.to(at).transpose(-1, -2)).masked_fill(~causal, 0)
        ot = torch.result_type(A, vc)
        out = A.to(ot) @ vc.to(ot)
        if n > 1:
            local = kc.transpose(-1, -2).to(dt) @ vc.to(dt)                        # (..., n, dk, dv)
            S = _shift_states(local.cumsum(-3))
            it = torch.result_type(qc, S)
            out = out + (qc.to(it) @ S.to(it)).to(out.dtype)
        return out.reshape(*out.shape[:-3], n * C, -1)[..., :L, :]
    G = _pad_to_chunks(log_decay, C).cumsum(-2)                                    # (..., n, C, dk or 1)
    expo = G[..., None, :, :] - G[..., :, None, :]                                  # [t, s] = G_s - G_t
    W = torch.where(causal[..., None], expo, torch.full((), -torch.inf, dtype=G.dtype, device=G.device)).exp()
    at = torch.result_type(qc, kc)
    if G.shape[-1] == 1:   # one decay per head (RetNet / TNL / Lightning Attention): a (C, C) decay mask
        A = (qc.to(at) @ kc.to(at).transpose(-1, -2)) * W[..., 0].to(at)            # (..., n, C, C)
    else:                  # one decay per channel (GLA / HGRN2): a (C, C, dk) tensor
        A = torch.einsum("...ti,...tsi,...si->...ts", qc.to(at), W.to(at), kc.to(at))
    ot = torch.result_type(A, vc)
    out = A.to(ot) @ vc.to(ot)
    if n > 1:
        G_end = G[..., -1, :]                                                       # (..., n, dk)
        kdec = kc * (G - G_end[..., None, :]).exp()                                # exp(-(G_end - G_s)) <= 1
        local = kdec.transpose(-1, -2).to(dt) @ vc.to(dt)                            # (..., n, dk, dv)
        S = _shift_states(_chunk_scan((-G_end).exp(), local))
        it = torch.result_type(qc, S)
        out = out + ((qc * (-G).exp()).to(it) @ S.to(it)).to(out.dtype)
    return out.reshape(*out.shape[:-3], n * C, -1)[..., :L, :]


def _multiplicative_causal(q, k, v, log_decay, mode):
    if mode == "recurrent":
        return _multiplicative_recurrent(q, k, v, log_decay)
    if mode == "parallel":
        return _multiplicative_parallel(q, k, v, log_decay)
    return _multiplicative_chunked(q, k, v, log_decay)


def _none_noncausal(q, k, v):
    """The right product trick (§3.1, "1 scan"): ``[KV] = K^T V``, ``O = Q [KV]``."""
    dt = _out_dtype(k, v)
    kv = k.transpose(-1, -2).to(dt) @ v.to(dt)
    ot = torch.result_type(q, kv)
    return q.to(ot) @ kv.to(ot)
