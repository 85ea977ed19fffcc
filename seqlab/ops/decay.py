"""Linear attention with decay: additive (LightNet) and multiplicative, causal and non-causal.

Paper 003 ("You Only Scan Once", LightNet). Notation: ``q, k: (..., L, dk)``, ``v: (..., L, dv)``,
any leading batch/head dimensions; every channel ``i`` of the key has its own decay.

Linear attention with decay (§2, eq. 2)::

    kv_t = lambda_t * kv_{t-1} + k_t v_t^T,     o_t^T = q_t^T kv_t,        0 < lambda_t <= 1

Theorem 3.1: any such recurrence ``y_t = a_t y_{t-1} + x_t`` is ``y_t = sum_{s<=t} c_ts x_s`` with
``c_ts = g_s / g_t``. Proposition 3.2 names the two ways to keep ``0 <= a_t <= 1`` with ``delta_t >= 0``:

- multiplicative: ``log g_t = log g_{t-1} + delta_t``  ->  ``a_t = exp(-delta_t)`` (depends on x_t only);
- additive:       ``g_t = g_{t-1} + delta_t``          ->  ``a_t = g_{t-1} / g_t`` (depends on all of x_1..x_t).

LightNet (eq. 7) takes the additive kind with ``delta_t = exp(k_t)``, the decay shared with the key::

    s_t = s_{t-1} + exp(k_t),   kbar_t = exp(k_t) / s_t,
    kv_t = diag(1 - kbar_t) kv_{t-1} + kbar_t v_t^T,      o_t^T = q_t^T kv_t

Unrolled, ``kv_t = sum_{s<=t} softmax_{s<=t}(k)_s v_s^T`` per channel: a *causal softmax over the
sequence*. Non-causal (eq. 8) the denominator becomes the whole sum ``s = sum_t exp(k_t)``: one
pass over the data (the "1 scan"). The multiplicative kind has no such form: non-causal it needs a
forward and a backward scan (the "2 scan" of §3.1, Fig. 2).

Functions:

- :func:`decay_attention` - the op, in modes ``recurrent`` (the eq. 7 / eq. 2 loop, log-domain),
  ``parallel`` (cumulative log-domain form / scan), ``chunked`` (intra-chunk matrices + inter-chunk
  state), ``triton`` (additive causal, ``seqlab.kernels.decay``).
- :func:`decay_attention_reference` - float64 loops written exactly as the paper writes them.
- :func:`decay_coefficients` - the ``c_ts`` matrix of Theorem 3.1 for either kind of Prop. 3.2.

Extension used by LightNet's "no share" ablation and by MD-LRPE (Appendix A.2): for ``additive``,
``log_decay`` may be given; then ``delta_t = exp(log_decay_t)`` are the importance scores and ``k_t``
multiplies ``kbar_t`` in the state update: ``kv_t = diag(1 - kbar_t) kv_{t-1} + (kbar_t * k_t) v_t^T``.
With ``log_decay=None`` the decay is shared with the key (eq. 7): ``log_decay = k`` and the multiplier is 1.
"""
from __future__ import annotations

import torch

from seqlab.ops._checks import (at_least_float32, check_finite, check_finite_inputs, check_mode, check_tensor, describe, has_values,
                                traceable_mode)

__all__ = ["decay_attention", "decay_attention_reference", "decay_coefficients", "gateloop_form", "DECAY_KINDS",
           "DECAY_MODES"]

DECAY_KINDS = ("additive", "multiplicative", "none")
DECAY_MODES = ("auto", "recurrent", "parallel", "chunked", "numba", "triton")


# ----------------------------------------------------------------------------------------------
# Theorem 3.1 and Proposition 3.2: the coefficients c_ts
# ----------------------------------------------------------------------------------------------

def decay_coefficients(delta: torch.Tensor, kind: str, causal: bool = True) -> torch.Tensor:
    """The ``c_ts`` matrix ``(..., L, L)`` of Theorem 3.1 for ``delta: (..., L)``, ``delta >= 0``.

    ``y_t = a_t y_{t-1} + x_t`` equals ``y = C x`` with ``C[t, s] = c_ts = g_s / g_t`` (s <= t), where
    (Prop. 3.2) ``g_t = g_{t-1} + delta_t`` (``additive``, ``a_t = g_{t-1}/g_t``) or
    ``log g_t = log g_{t-1} + delta_t`` (``multiplicative``, ``a_t = exp(-delta_t)``).

    Non-causal (``causal=False``):

    - ``additive``: the denominator becomes ``Delta = g_n = sum_s delta_s`` (§3.2), so every row is the
      last row of the causal matrix, ``c_ts = g_s / g_n``: one scan, whose final state every position reads;
    - ``multiplicative``: the forward scan plus the backward scan ``y'_t = a_t y'_{t+1} + x_t`` (§3.1):
      ``c_ts = prod_{r=t}^{s-1} a_r`` above the diagonal; both scans include ``x_t``, so ``c_tt = 2``.
    """
    check_tensor("delta", delta, min_ndim=1)
    if delta.is_complex():
        raise TypeError(f"delta: expected a real tensor (Prop. 3.2 needs delta >= 0), got {describe(delta)}")
    if kind not in ("additive", "multiplicative"):
        raise ValueError(f"kind: expected 'additive' or 'multiplicative', got {kind!r}")
    if (delta < 0).any():
        raise ValueError(f"delta: Proposition 3.2 needs delta_t >= 0, got min {float(delta.min()):.3g}")
    L = delta.shape[-1]
    s_le_t = torch.ones(L, L, dtype=torch.bool, device=delta.device).tril()          # [t, s]: s <= t
    if kind == "additive":
        g = delta.cumsum(-1)                                                         # g_t = sum_{r<=t} delta_r
        if (g[..., :1] <= 0).any():
            raise ValueError("delta: additive decay needs delta_1 > 0 (g_1 = delta_1 is a denominator)")
        if not causal:
            return (g[..., None, :] / g[..., -1:, None]).expand(*g.shape, L).clone()   # c_ts = g_s / g_n
        ratio = g[..., None, :] / g[..., :, None]                                   # [t, s] = g_s / g_t
        return torch.where(s_le_t, ratio, torch.zeros((), dtype=g.dtype, device=g.device))
    G = delta.cumsum(-1)                                                             # log g_t
    diff = G[..., None, :] - G[..., :, None]                                         # [t, s] = log g_s - log g_t
    forward = torch.where(s_le_t, diff, torch.full((), -torch.inf, dtype=G.dtype, device=G.device)).exp()
    if causal:
        return forward
    # backward scan: c_ts = prod_{r=t}^{s-1} exp(-delta_r) = exp(-(G_{s-1} - G_{t-1})) for s >= t
    Gm1 = G - delta                                                                  # G_{t-1}
    back = torch.where(s_le_t.T, (Gm1[..., :, None] - Gm1[..., None, :]), torch.full((), -torch.inf, dtype=G.dtype,
                                                                                     device=G.device)).exp()
    return forward + back


# ----------------------------------------------------------------------------------------------
# The float64 references: loops exactly as the paper writes them
# ----------------------------------------------------------------------------------------------

def _additive_loop_reference(q, k, v, log_decay):
    """Eq. 7 literally: ``s_t = s_{t-1} + exp(k_t)``, ``kbar_t = exp(k_t)/s_t``, ``kv_t = diag(1-kbar_t) kv_{t-1} + kbar_t v_t^T``."""
    d = k if log_decay is None else log_decay
    mult = torch.ones_like(k) if log_decay is None else k
    s = torch.zeros_like(d[..., 0, :])
    kv = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=torch.result_type(k, v))
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
    kv = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=torch.result_type(k, v))
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


# ----------------------------------------------------------------------------------------------
# Input checks
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# Additive decay (LightNet eq. 7 / eq. 8)
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# Multiplicative decay (eq. 2) and no decay
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# The causal decays as one recurrence: GateLoop's S_t = diag(a_t) S_{t-1} + k_t v_t^T, y_t = q_t S_t
# ----------------------------------------------------------------------------------------------

def gateloop_form(k, decay, log_decay):
    """``(key, a)`` such that causal ``decay_attention(q, k, v) == gateloop(q, key, v, a)``.

    - additive (eq. 7, Theorem 3.1 with ``g_t = s_t``): ``kv_t = diag(1 - kbar_t) kv_{t-1} + kbar_t v_t^T``
      with ``1 - kbar_t = s_{t-1} / s_t = exp(z_{t-1} - z_t)`` and ``kbar_t = exp(d_t - z_t)``, where
      ``z = log s = logcumsumexp(d)`` (``d = k``, or ``log_decay``; ``k`` then multiplies ``kbar``). Every
      exponent is ``<= 0``: keys of +-80 are safe. ``a_1 = exp(-inf) = 0`` (no state before the first token);
    - multiplicative (eq. 2): ``a_t = lambda_t = exp(-log_decay_t)``, the key unchanged;
    - none: ``a_t = 1``.
    """
    if decay == "additive":
        d = k if log_decay is None else log_decay
        key, a = _additive_transitions(d)
        return (key if log_decay is None else key * k), a
    if decay == "multiplicative":
        return k, torch.exp(-log_decay).expand(k.shape)
    return k, torch.ones_like(k)


# Past this spread of log-decays along a sequence, exp(d - max d) can underflow in float64 (e^-745).
_FLOAT64_SPREAD = 700.0


def _additive_transitions(d):
    """``(kbar_t, a_t) = (exp(d_t) / s_t, s_{t-1} / s_t)`` with ``s_t = sum_{r<=t} exp(d_r)`` (eq. 7), so that
    ``a_t = 1 - kbar_t``: ratios of sums of exponentials, in which a constant shift of ``d`` cancels.

    On a CPU one compiled pass (``seqlab.kernels.compiled.additive_transitions``) keeps ``s`` in float64
    relative to the running maximum of ``d`` (any key is safe). Elsewhere ``s`` is a float64 cumulative sum
    of ``exp(d - max d)`` (terms in ``(0, 1]``), or, should the spread of ``d`` along a sequence pass ~700
    (float64's range), the log domain: ``z = logcumsumexp(d)``, ``kbar_t = exp(d_t - z_t)``,
    ``a_t = exp(z_{t-1} - z_t)``. The backward of the first two is written out (:class:`_AdditiveTransitions`).
    """
    if not _compiled_transitions(d):
        with torch.no_grad():
            spread_ok = not has_values(d) or d.numel() == 0 or \
                float((d.amax(-2) - d.amin(-2)).max()) <= _FLOAT64_SPREAD
        if not spread_ok:
            z = torch.logcumsumexp(d, dim=-2)                                      # log s_t
            z_prev = torch.cat([torch.full_like(z[..., :1, :], -torch.inf), z[..., :-1, :]], dim=-2)
            return torch.exp(d - z), torch.exp(z_prev - z)
    return _AdditiveTransitions.apply(d)


def _compiled_transitions(d) -> bool:
    if d.device.type != "cpu" or not has_values(d):
        return False
    from seqlab.kernels.compiled import HAVE_NUMBA

    return HAVE_NUMBA


class _AdditiveTransitions(torch.autograd.Function):
    """``(kbar, a)`` of :func:`_additive_transitions`, forward and backward. The output depends on ``kbar``
    alone (``a = 1 - kbar``); with ``g = dL/dkbar - dL/da`` and ``s_r / s_t = prod_{u=r+1..t} a_u``:

        dL/dd_r = kbar_r (g_r - Q_r),    Q_r = g_r kbar_r + a_{r+1} Q_{r+1}           (a reverse scan)
    """

    @staticmethod
    def forward(ctx, d):
        if _compiled_transitions(d):
            from seqlab.kernels.compiled import additive_transitions

            kbar, a = additive_transitions(d)
        else:
            x = d.double()
            e = torch.exp(x - x.amax(-2, keepdim=True))                           # exp(d_t - m) in (0, 1]
            s = e.cumsum(-2)                                                       # s_t exp(-m) >= e_1 > 0
            s_prev = torch.cat([torch.zeros_like(s[..., :1, :]), s[..., :-1, :]], dim=-2)
            kbar, a = (e / s).to(d.dtype), (s_prev / s).to(d.dtype)
        ctx.save_for_backward(kbar, a)
        return kbar, a

    @staticmethod
    def backward(ctx, g_kbar, g_a):
        kbar, a = ctx.saved_tensors
        g = g_kbar - g_a
        if _compiled_transitions(kbar):
            from seqlab.kernels.compiled import additive_transitions

            return additive_transitions(kbar, grad=(kbar, a, g))
        from seqlab.ops.scan import linear_scan

        a_next = torch.cat([a[..., 1:, :], torch.zeros_like(a[..., :1, :])], dim=-2)   # a_{r+1}, 0 after the end
        Q = linear_scan(a_next, g * kbar, reverse=True)
        return kbar * (g - Q)


def _causal_on_gateloop(q, k, v, decay, log_decay, mode):
    """The causal decays run by GateLoop's fast forms (``mode``: ``"numba"``, or a GateLoop torch mode)."""
    from seqlab.ops.gateloop import gateloop

    key, a = gateloop_form(k, decay, log_decay)
    *lead, L, dk = k.shape
    rows = lambda t: t.reshape(1, -1, L, t.shape[-1])  # noqa: E731  every leading index a head: (1, N, L, d)
    y = gateloop(rows(q), rows(key), rows(v), rows(a), mode=mode)
    return y.reshape(*lead, L, v.shape[-1])


# ----------------------------------------------------------------------------------------------
# The op
# ----------------------------------------------------------------------------------------------

def _pick_mode(mode, decay, causal, q, v):
    """``auto``: non-causal additive / none are matrix products (``parallel``); multiplicative is chunked;
    causal decays on a CPU run on GateLoop's Numba loop (without Numba: the plain loop up to ~100 tokens,
    measured, longer ones chunked); on CUDA chunked."""
    if mode != "auto":
        return mode
    if not causal:
        return "chunked" if decay == "multiplicative" else "parallel"
    if q.device.type == "cpu":
        from seqlab.kernels.compiled import HAVE_NUMBA

        if HAVE_NUMBA:
            return "numba"
        return "recurrent" if q.shape[-2] <= 96 else "chunked"
    return "chunked"


def _flip(t):
    return None if t is None else t.flip(-2)


def decay_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, decay: str = "additive",
                    log_decay: torch.Tensor | None = None, causal: bool = True, mode: str = "auto") -> torch.Tensor:
    """LightNet attention before its norm and gate: ``(..., L, dk), (..., L, dk), (..., L, dv) -> (..., L, dv)``.

    ``decay``:

    - ``"additive"`` (LightNet): causal eq. 7, non-causal eq. 8 (one pass). ``log_decay=None`` shares the
      decay with the key (``delta = exp(k)``); a given ``log_decay`` supplies ``delta = exp(log_decay)``
      and ``k`` then multiplies ``kbar`` (see the module docstring);
    - ``"multiplicative"``: eq. 2 with ``lambda_t = exp(-log_decay_t)`` (``log_decay >= 0`` required), shaped
      like ``k`` (one decay per channel) or ``(..., L, 1)`` (one per head, as Lightning Attention); non-causal is the forward scan plus the backward scan of §3.1 (the diagonal counted by both);
    - ``"none"``: plain linear attention (``lambda_t = 1``); non-causal is the right product ``Q (K^T V)``.

    ``mode``: ``"recurrent"`` (the loops, log-domain), ``"parallel"`` (additive: cumulative log-domain
    form; multiplicative: one ``linear_scan`` over the states; non-causal additive/none: matrix products),
    ``"chunked"`` (intra-chunk matrices, inter-chunk states), ``"numba"`` (causal: GateLoop's compiled loop
    on the recurrence of :func:`gateloop_form`), ``"triton"`` (additive, causal, real inputs),
    ``"auto"`` (causal: ``numba`` on a CPU, ``chunked`` on CUDA; non-causal: ``parallel``, ``chunked`` for
    multiplicative). ``q`` and ``v`` may be complex (not in Triton);
    ``k`` and ``log_decay`` are real. All modes are stable for keys of +-50 (exponents are differences
    of log-sums, never a raw ``exp(k)``).
    """
    q, k, v, log_decay = _check_inputs(q, k, v, decay, log_decay)
    check_mode("decay_attention", mode, DECAY_MODES)
    check_finite_inputs("decay_attention", q=q, k=k, v=v, log_decay=log_decay)
    if decay == "multiplicative" and has_values(log_decay) and (log_decay < 0).any():
        raise ValueError(f"log_decay: multiplicative decay needs log_decay >= 0 (lambda = exp(-log_decay) <= 1), "
                         f"got min {float(log_decay.min()):.3g}")
    mode = traceable_mode(_pick_mode(mode, decay, causal, q, v), "chunked", q, k, v, log_decay)
    out_dtype = _out_dtype(q, v)
    if q.shape[-2] == 0:  # no tokens: the empty output of every mode
        return v.new_zeros(v.shape, dtype=out_dtype)
    q, k, v, log_decay = map(at_least_float32, (q, k, v, log_decay))  # half precision is computed in float32
    if mode == "numba":
        if not causal:
            raise NotImplementedError(f"decay_attention(mode='numba') runs the causal decays on GateLoop's loop; "
                                      f"got causal=False. Use mode='parallel' or 'chunked' (one or two scans)")
        out = _causal_on_gateloop(q, k, v, decay, log_decay, "numba")
    elif mode == "triton":
        if decay != "additive" or not causal:
            raise NotImplementedError(f"decay_attention(mode='triton') implements additive causal decay (eq. 7); "
                                      f"got decay={decay!r}, causal={causal}. Use mode='chunked' or 'parallel'.")
        from seqlab.kernels.decay import additive_decay_triton

        out = additive_decay_triton(q, k, v, log_decay)
    elif decay == "additive":
        if causal:
            fn = {"recurrent": _additive_recurrent, "parallel": _additive_parallel, "chunked": _additive_chunked}[mode]
        else:
            fn = {"recurrent": _additive_recurrent_noncausal, "parallel": _additive_parallel_noncausal,
                  "chunked": _additive_parallel_noncausal}[mode]
        out = fn(q, k, v, log_decay)
    elif decay == "none" and not causal:
        out = _none_noncausal(q, k, v) if mode != "recurrent" else (
            _multiplicative_recurrent(q, k, v, None) + _flip(_multiplicative_recurrent(*map(_flip, (q, k, v)), None))
            - torch.einsum("...ti,...ti,...tj->...tj", *(t.to(_out_dtype(q, v)) for t in (q, k)), v.to(_out_dtype(q, v))))
    else:
        ld = log_decay if decay == "multiplicative" else None
        out = _multiplicative_causal(q, k, v, ld, mode)
        if not causal:   # "2 scan": o_t = forward o_t + backward o_t (§3.1)
            out = out + _flip(_multiplicative_causal(_flip(q), _flip(k), _flip(v), _flip(ld), mode))
    return check_finite("decay_attention", out).to(out_dtype)
