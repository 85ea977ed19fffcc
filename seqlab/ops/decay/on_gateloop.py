"""The causal decays as one recurrence, GateLoop's ``S_t = diag(a_t) S_{t-1} + k_t v_t^T``, ``y_t = q_t S_t``
(Theorem 3.1 with ``g_t = s_t`` for additive decay), run by GateLoop's fast forms."""
from __future__ import annotations

import torch

from seqlab.ops._checks import has_values


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


_FLOAT64_SPREAD = 700.0


def _additive_transitions(d):
    """``(kbar_t, a_t) = (exp(d_t) / s_t, s_{t-1} / s_t)`` with ``s_t = sum_{r<=t} exp(d_r)`` (eq. 7), so that
    ``a_t = 1 - kbar_t``: ratios of sums of exponentials, in which a constant shift of ``d`` cancels.

    ``s`` is a float64 cumulative sum of ``exp(d - max d)`` (terms in ``(0, 1]``: any key is safe while the
    spread of ``d`` along a sequence stays within float64's range, ~700), taken on a CPU by compiled passes
    (``numba.py``: the extremes of ``d`` that give the spread and ``max d``, then the sums), elsewhere by
    ``cumsum``; the backward of both is written out (:class:`_AdditiveTransitions`).
    Past that spread the log domain takes over: ``z = logcumsumexp(d)``, ``kbar_t = exp(d_t - z_t)``,
    ``a_t = exp(z_{t-1} - z_t)``.
    """
    peak = None
    with torch.no_grad():
        if not has_values(d) or d.numel() == 0:
            spread_ok = True
        elif _compiled_transitions(d):
            from seqlab.ops.decay.numba import row_extremes

            peak, low = row_extremes(d)                    # one compiled pass; the peak is exp's shift below
            spread_ok = float((peak - low).max()) <= _FLOAT64_SPREAD
        else:
            spread_ok = float((d.amax(-2) - d.amin(-2)).max()) <= _FLOAT64_SPREAD
    if not spread_ok:
        z = torch.logcumsumexp(d, dim=-2)                                          # log s_t
        z_prev = torch.cat([torch.full_like(z[..., :1, :], -torch.inf), z[..., :-1, :]], dim=-2)
        return torch.exp(d - z), torch.exp(z_prev - z)
    return _AdditiveTransitions.apply(d, peak)


def _compiled_transitions(d) -> bool:
    if d.device.type != "cpu" or not has_values(d):
        return False
    from seqlab.kernels import numba as numba_backend

    return numba_backend.HAVE_NUMBA


class _AdditiveTransitions(torch.autograd.Function):
    """``(kbar, a)`` of :func:`_additive_transitions`, forward and backward. The output depends on ``kbar``
    alone (``a = 1 - kbar``); with ``g = dL/dkbar - dL/da`` and ``s_r / s_t = prod_{u=r+1..t} a_u``:

        dL/dd_r = kbar_r (g_r - Q_r),    Q_r = g_r kbar_r + a_{r+1} Q_{r+1}           (a reverse scan)
    """

    @staticmethod
    def forward(ctx, d, peak=None):
        if _compiled_transitions(d):
            from seqlab.ops.decay.numba import additive_transitions

            kbar, a = additive_transitions(d, peak=peak)
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
        if _compiled_transitions(kbar):
            from seqlab.ops.decay.numba import additive_transitions

            return additive_transitions(kbar, grad=(kbar, a, g_kbar, g_a)), None
        from seqlab.ops.scan import linear_scan

        g = g_kbar - g_a
        a_next = torch.cat([a[..., 1:, :], torch.zeros_like(a[..., :1, :])], dim=-2)   # a_{r+1}, 0 after the end
        Q = linear_scan(a_next, g * kbar, reverse=True)
        return kbar * (g - Q), None


def _causal_on_gateloop(q, k, v, decay, log_decay, mode):
    """The causal decays run by GateLoop's fast forms (``mode``: ``"numba"``, or a GateLoop torch mode)."""
    from seqlab.ops.gateloop import gateloop

    key, a = gateloop_form(k, decay, log_decay)
    *lead, L, dk = k.shape
    rows = lambda t: t.reshape(1, -1, L, t.shape[-1])  # noqa: E731  every leading index a head: (1, N, L, d)
    y = gateloop(rows(q), rows(key), rows(v), rows(a), mode=mode)
    return y.reshape(*lead, L, v.shape[-1])
