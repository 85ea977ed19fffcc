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
    def _additive_transitions_forward(d, kbar, a):  # pragma: no cover - compiled
        """LightNet eq. 7's transitions, one pass: ``kbar_t = exp(d_t) / s_t``, ``a_t = 1 - kbar_t = s_{t-1} / s_t``,
        ``s_t = sum_{r<=t} exp(d_r)``, kept in float64 relative to the running maximum ``m_t`` of ``d`` (the
        online softmax normaliser: no exponent is positive, any key is safe). d, kbar, a: (N, L, D)."""
        N, L, D = d.shape
        for n in prange(N):
            m = np.full(D, -np.inf, dtype=d.dtype)  # the running maximum, in d's precision
            s = np.zeros(D)                          # the sum relative to it, float64
            for t in range(L):
                for j in range(D):
                    x = d[n, t, j]
                    if x > m[j]:                   # a new maximum: rescale the sum to it (rare after the start)
                        s_prev = s[j] * np.exp(np.float64(m[j]) - np.float64(x))
                        m[j] = x
                        e = 1.0
                    else:                          # exp(x - m) <= 1 in d's precision (expf for float32 d)
                        s_prev = s[j]
                        e = np.float64(np.exp(x - m[j]))
                    total = s_prev + e
                    inv = 1.0 / total
                    kbar[n, t, j] = e * inv
                    a[n, t, j] = s_prev * inv
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
    gradient with respect to ``d``. Used by ``seqlab.ops.decay`` (additive decay on GateLoop's loop)."""
    require_numba("decay_attention", d)
    use_threads()
    if grad is None:
        x = d.contiguous()
        flat = x.reshape(-1, *x.shape[-2:])
        kbar, a = torch.empty_like(flat), torch.empty_like(flat)
        if flat.numel():
            _additive_transitions_forward(as_numpy(flat), kbar.numpy(), a.numpy())
        return kbar.reshape(d.shape), a.reshape(d.shape)
    kbar, a, g = (t.contiguous().reshape(-1, *t.shape[-2:]) for t in grad)
    gd = torch.empty_like(kbar)
    if gd.numel():
        _additive_transitions_backward(as_numpy(kbar), as_numpy(a), as_numpy(g.to(kbar.dtype)), gd.numpy())
    return gd.reshape(d.shape)
