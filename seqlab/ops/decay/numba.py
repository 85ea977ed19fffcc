"""The transitions of LightNet's additive decay (eq. 7) compiled for the CPU by Numba, forward and backward:
what ``decay_attention`` feeds GateLoop's loop (``seqlab.ops.decay.gateloop_form``)."""
from __future__ import annotations

import numpy as np
import torch

from seqlab.kernels.numba import HAVE_NUMBA, as_numpy, require_numba, use_threads

__all__ = ["additive_transitions"]

if HAVE_NUMBA:
    from numba import prange

    from seqlab.kernels.numba import jit

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
    def _additive_transitions_backward(kbar, a, g, gd):  # pragma: no cover - compiled
        """``dL/dd_r = kbar_r (g_r - Q_r)`` with ``Q_r = g_r kbar_r + a_{r+1} Q_{r+1}`` (a reverse recurrence,
        float64), ``g = dL/dkbar - dL/da``. kbar, a, g, gd: (N, L, D)."""
        N, L, D = kbar.shape
        for n in prange(N):
            Q = np.zeros(D)
            for s in range(L):
                t = L - 1 - s
                for j in range(D):
                    after = a[n, t + 1, j] * Q[j] if t + 1 < L else 0.0
                    q = np.float64(g[n, t, j]) * kbar[n, t, j] + after
                    Q[j] = q
                    gd[n, t, j] = kbar[n, t, j] * (g[n, t, j] - q)


def additive_transitions(d: torch.Tensor, grad: torch.Tensor | None = None):
    """The kernels above on CPU tensors ``(..., L, D)``: ``(kbar, a)``, or with ``grad = (kbar, a, g)`` the
    gradient with respect to ``d``. Used by ``seqlab.ops.decay`` (additive decay on GateLoop's loop), which
    keeps the spread of ``d`` along a sequence within float64's range (``exp(d - max d)`` > 0)."""
    require_numba("decay_attention", d)
    use_threads()
    if grad is None:
        x = d.double()
        e = torch.exp(x - x.amax(-2, keepdim=True)).reshape(-1, *d.shape[-2:])  # exp(d_t - m) in (0, 1], vectorised
        kbar, a = torch.empty(e.shape, dtype=d.dtype), torch.empty(e.shape, dtype=d.dtype)
        if e.numel():
            _additive_transitions_forward(as_numpy(e), kbar.numpy(), a.numpy())
        return kbar.reshape(d.shape), a.reshape(d.shape)
    kbar, a, g = (t.contiguous().reshape(-1, *t.shape[-2:]) for t in grad)
    gd = torch.empty_like(kbar)
    if gd.numel():
        _additive_transitions_backward(as_numpy(kbar), as_numpy(a), as_numpy(g.to(kbar.dtype)), gd.numpy())
    return gd.reshape(d.shape)
