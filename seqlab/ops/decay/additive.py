"""Additive decay (LightNet eq. 7 causal, eq. 8 non-causal): the loop in the log domain, the cumulative
log-domain form and the chunked form."""
from __future__ import annotations

import torch

from seqlab.ops.decay._common import _chunk_scan, _out_dtype, _pad_to_chunks, _qdot, _shift_states


def _additive_recurrent(q, k, v, log_decay):
    """The eq. 7 loop in the log domain (``log s_t`` instead of ``s_t``), so keys of any size are safe.

    ``log s_t = logaddexp(log s_{t-1}, k_t)``, ``kbar_t = exp(k_t - log s_t)``,
    ``1 - kbar_t = s_{t-1}/s_t = exp(log s_{t-1} - log s_t)``.
    """
    d = k if log_decay is None else log_decay
    dt = _out_dtype(k, v)
    log_s = torch.full_like(d[..., 0, :], -torch.inf)
    kv = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=dt, device=k.device)
    out = []
    for t in range(k.shape[-2]):
        log_s_new = torch.logaddexp(log_s, d[..., t, :])
        keep = (log_s - log_s_new).exp()                               # 1 - kbar_t     (dk,)
        kbar = (d[..., t, :] - log_s_new).exp()                        # kbar_t         (dk,)
        if log_decay is not None:
            kbar = kbar * k[..., t, :]
        kv = keep[..., :, None] * kv + kbar[..., :, None].to(dt) * v[..., t, None, :]   # (dk, dv)
        out.append(kv)
        log_s = log_s_new
    return _qdot(q, torch.stack(out, dim=-3))


def _additive_recurrent_noncausal(q, k, v, log_decay):
    """One scan: the eq. 7 loop run to the end; every position reads the final state (eq. 8)."""
    L = k.shape[-2]
    d = k if log_decay is None else log_decay
    dt = _out_dtype(k, v)
    log_s = torch.full_like(d[..., 0, :], -torch.inf)
    kv = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=dt, device=k.device)
    for t in range(L):
        log_s_new = torch.logaddexp(log_s, d[..., t, :])
        kbar = (d[..., t, :] - log_s_new).exp() * (1 if log_decay is None else k[..., t, :])
        kv = (log_s - log_s_new).exp()[..., :, None] * kv + kbar[..., :, None].to(dt) * v[..., t, None, :]
        log_s = log_s_new
    ot = torch.result_type(q, kv)
    return torch.einsum("...ti,...ij->...tj", q.to(ot), kv.to(ot))


def _signed_log(x):
    """``x = exp(lp) - exp(ln)``: log of the positive and of the negative part; 0 maps to log(tiny) (finite)."""
    tiny = torch.finfo(x.dtype).tiny
    return x.clamp_min(tiny).log(), (-x).clamp_min(tiny).log()


def _additive_parallel(q, k, v, log_decay):
    """The cumulative form in the log domain: ``kv_t = sum_{s<=t} exp(d_s - log s_t) m_s v_s^T``.

    ``log s_t = logcumsumexp(d)_t``; the numerator ``sum_{s<=t} exp(d_s) m_s v_s^T`` is a cumulative
    sum of signed terms, taken as two log-cumulative-sums (positive and negative parts), so no
    ``exp(+-50)`` is ever formed: every exponent is ``<= 0`` up to ``log|m v|``.
    """
    d = k if log_decay is None else log_decay
    log_s = torch.logcumsumexp(d, dim=-2)                                   # (..., L, dk)
    mult = torch.ones_like(k) if log_decay is None else k
    vr = torch.view_as_real(v) if v.is_complex() else v[..., None]          # (..., L, dv, c)
    prod = mult[..., :, None, None] * vr[..., None, :, :]                  # (..., L, dk, dv, c)
    lp, ln = _signed_log(prod)
    base = d[..., :, None, None]
    num_p = torch.logcumsumexp(base + lp, dim=-4)                           # cumulative over L
    num_n = torch.logcumsumexp(base + ln, dim=-4)
    den = log_s[..., :, None, None]
    kv = (num_p - den).exp() - (num_n - den).exp()                          # (..., L, dk, dv, c)
    kv = torch.view_as_complex(kv.contiguous()) if v.is_complex() else kv[..., 0]
    return _qdot(q, kv)


def _additive_parallel_noncausal(q, k, v, log_decay):
    """Eq. 8: ``kv = softmax_t(k)^T V`` per channel, ``O = Q kv``: one pass, two matrix products."""
    d = k if log_decay is None else log_decay
    w = torch.softmax(d, dim=-2)
    if log_decay is not None:
        w = w * k
    dt = _out_dtype(k, v)
    kv = torch.einsum("...ti,...tj->...ij", w.to(dt), v)
    ot = torch.result_type(q, kv)
    return torch.einsum("...ti,...ij->...tj", q.to(ot), kv.to(ot))


def _additive_chunked(q, k, v, log_decay, chunk=16):
    """Chunkwise eq. 7: inside a chunk the per-channel weights ``exp(d_s - log s_t)`` are a small
    ``(C, C, dk)`` tensor; across chunks the normalised state ``S_c = kv_{end of c}`` follows
    ``S_c = exp(log s_{e(c-1)} - log s_{e(c)}) S_{c-1} + sum_{s in c} exp(d_s - log s_{e(c)}) m_s v_s^T``.
    Every exponent is ``<= 0``. The ``(C, C, dk)`` weights make the cost ``O(L C dk)`` in memory traffic:
    small chunks (16) are fastest on a CPU.
    """
    L = k.shape[-2]
    d = k if log_decay is None else log_decay
    mult = torch.ones_like(k) if log_decay is None else k
    dt = _out_dtype(k, v)
    C = min(chunk, L)
    log_s = torch.logcumsumexp(d, dim=-2)
    pad = (-L) % C
    # the padded tail (only in the last chunk, never read as a state) repeats the last log s_t
    log_s_padded = torch.cat([log_s, log_s[..., -1:, :].expand(*log_s.shape[:-2], pad, log_s.shape[-1])], dim=-2)
    lc = log_s_padded.reshape(*log_s.shape[:-2], -1, C, log_s.shape[-1])                # (..., n, C, dk)
    dc, mc = _pad_to_chunks(d, C), _pad_to_chunks(mult, C)
    qc, vc = _pad_to_chunks(q, C), _pad_to_chunks(v, C)
    n = dc.shape[-3]
    # intra-chunk: W[t, s, i] = exp(d_s - log s_t) m_s  (s <= t)
    causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()[..., None]   # [t, s, 1]
    expo = dc[..., None, :, :] - lc[..., :, None, :]                                   # (..., n, C_t, C_s, dk)
    W = torch.where(causal, expo, torch.full((), -torch.inf, dtype=expo.dtype, device=expo.device)).exp()
    W = W * mc[..., None, :, :]
    at = torch.result_type(q, W)
    A = torch.einsum("...tsi,...ti->...ts", W.to(at), qc.to(at))                      # (..., n, C, C)
    ot = torch.result_type(A, vc)
    intra = A.to(ot) @ vc.to(ot)                                                       # (..., n, C, dv)
    if n > 1:
        # the last real position of each chunk (the padded tail of the last chunk is never read as a state)
        l_end = lc[..., :, -1, :]                                                      # (..., n, dk)
        local = torch.einsum("...si,...sj->...ij", ((dc - l_end[..., None, :]).exp() * mc).to(dt), vc.to(dt))
        # log s at the end of the previous chunk; -inf before the first chunk (no state there)
        l_prev = torch.cat([torch.full_like(l_end[..., :1, :], -torch.inf), l_end[..., :-1, :]], dim=-2)
        a = (l_prev - l_end).exp()                                                     # (..., n, dk)
        S = _shift_states(_chunk_scan(a, local))                                      # state before chunk c
        g = (l_prev[..., None, :] - lc).exp()                                          # exp(log s_{e(c-1)} - log s_t)
        it = torch.result_type(q, S)
        inter = torch.einsum("...ti,...ij->...tj", (qc * g).to(it), S.to(it))
        intra = intra + inter.to(intra.dtype)
    out = intra.reshape(*intra.shape[:-3], n * C, intra.shape[-1])
    return out[..., :L, :]
