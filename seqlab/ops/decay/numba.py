"""The transitions of LightNet's additive decay (eq. 7) compiled for the CPU by Numba, forward and backward:
what ``decay_attention`` feeds GateLoop's loop (``seqlab.ops.decay.gateloop_form``)."""
from __future__ import annotations

import numpy as np
import torch

from seqlab.kernels.numba import HAVE_NUMBA, as_numpy, require_numba, use_threads

__all__ = ["additive_transitions", "row_extremes"]

if HAVE_NUMBA:
    from numba import prange

    from seqlab.kernels.numba import jit

    @jit
    def _row_extremes(d, hi, lo):  # pragma: no cover - compiled
        """The largest and the smallest ``d_t`` of every row and channel, one pass: d: (N, L, D) with L >= 1;
        hi, lo: (N, D). A contiguous loop over the channels (vectorised), where torch's ``amax(-2)`` walks a
        narrow strided axis (10x slower at D = 16)."""
        N, L, D = d.shape
        for n in prange(N):
            hi_n = hi[n]
            lo_n = lo[n]
            for j in range(D):
                hi_n[j] = d[n, 0, j]
                lo_n[j] = d[n, 0, j]
            for t in range(1, L):
                d_t = d[n, t]
                for j in range(D):
                    x = d_t[j]
                    if x > hi_n[j]:
                        hi_n[j] = x
                    if x < lo_n[j]:
                        lo_n[j] = x

    @jit
    def _additive_transitions_forward(e, kbar, a):  # pragma: no cover - compiled
        """LightNet eq. 7's transitions from ``e_t = exp(d_t - max d)`` (float64, in (0, 1]), one pass:
        ``s_t = sum_{r<=t} e_r``, ``kbar_t = e_t / s_t``, ``a_t = 1 - kbar_t = s_{t-1} / s_t``. e, kbar, a:
        (N, L, D); the sums in float64, a contiguous loop over the channels (vectorised)."""
        N, L, D = e.shape
        for n in prange(N):
            s = np.zeros(D)
            for t in range(L):
                e_t = e[n, t]
                kbar_t = kbar[n, t]
                a_t = a[n, t]
                for j in range(D):
                    s_prev = s[j]
                    total = s_prev + e_t[j]
                    inv = 1.0 / total
                    kbar_t[j] = e_t[j] * inv
                    a_t[j] = s_prev * inv
                    s[j] = total

    @jit
    def _additive_transitions_backward(kbar, a, g_kbar, g_a, gd):  # pragma: no cover - compiled
        """``dL/dd_r = kbar_r (g_r - Q_r)`` with ``Q_r = g_r kbar_r + a_{r+1} Q_{r+1}`` (a reverse recurrence,
        float64), ``g = dL/dkbar - dL/da`` (formed here, not by a torch pass of its own). kbar, a, g_kbar, g_a,
        gd: (N, L, D)."""
        N, L, D = kbar.shape
        for n in prange(N):
            Q = np.zeros(D)
            for s in range(L):
                t = L - 1 - s
                for j in range(D):
                    after = a[n, t + 1, j] * Q[j] if t + 1 < L else 0.0
                    g = np.float64(g_kbar[n, t, j]) - np.float64(g_a[n, t, j])
                    q = g * kbar[n, t, j] + after
                    Q[j] = q
                    gd[n, t, j] = kbar[n, t, j] * (g - q)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``(..., L, D)`` as ``(N, L, D)``, contiguous."""
    return t.contiguous().reshape(-1, *t.shape[-2:])


def row_extremes(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(d.amax(-2), d.amin(-2))`` of a CPU tensor ``(..., L, D)`` with ``L >= 1``, by one compiled pass."""
    require_numba("decay_attention", d)
    use_threads()
    x = _rows(d.detach())
    hi = torch.empty(x.shape[0], x.shape[-1], dtype=d.dtype)
    lo = torch.empty_like(hi)
    if x.numel():
        _row_extremes(as_numpy(x), hi.numpy(), lo.numpy())
    shape = (*d.shape[:-2], d.shape[-1])
    return hi.reshape(shape), lo.reshape(shape)


def additive_transitions(d: torch.Tensor, grad=None, *, peak: torch.Tensor | None = None):
    """The kernels above on CPU tensors ``(..., L, D)``: ``(kbar, a)``, or with ``grad = (kbar, a, dL/dkbar,
    dL/da)`` the gradient with respect to ``d``. Used by ``seqlab.ops.decay`` (additive decay on GateLoop's
    loop), which keeps the spread of ``d`` along a sequence within float64's range (``exp(d - max d)`` > 0).
    ``peak``: ``d.amax(-2)`` when the caller has it already (:func:`row_extremes`)."""
    require_numba("decay_attention", d)
    use_threads()
    if grad is None:
        if peak is None:
            peak = d.detach().amax(-2)
        x = d.detach().to(torch.float64, memory_format=torch.contiguous_format, copy=True)
        x.sub_(peak.to(torch.float64)[..., None, :]).exp_()          # exp(d_t - m) in (0, 1], vectorised, in place
        e = x.reshape(-1, *d.shape[-2:])
        kbar, a = torch.empty(e.shape, dtype=d.dtype), torch.empty(e.shape, dtype=d.dtype)
        if e.numel():
            _additive_transitions_forward(as_numpy(e), kbar.numpy(), a.numpy())
        return kbar.reshape(d.shape), a.reshape(d.shape)
    kbar, a, g_kbar, g_a = (_rows(t) for t in grad)
    gd = torch.empty_like(kbar)
    if gd.numel():
        _additive_transitions_backward(as_numpy(kbar), as_numpy(a), as_numpy(g_kbar.to(kbar.dtype)),
                                       as_numpy(g_a.to(kbar.dtype)), gd.numpy())
    return gd.reshape(d.shape)
