"""``gateloop(mode="numba")``: eq. 7-8 compiled for the CPU by Numba, forward and backward.

One loop per memory layout the layers pass, each next to the equations:

- a row per head, ``q, k, a: (B*H, L, dk)``, ``v: (B*H, L, dv)``: :func:`_gateloop_forward_kernel` and
  :func:`_gateloop_backward_kernel`;
- ``dk = dv = 1`` (the paper's max-headed models) with the heads side by side, ``(B, L, H)``, as the
  GateLoop layer's projections leave them: :func:`_gateloop_heads_last_kernel` and
  :func:`_gateloop_heads_last_backward`, where one contiguous loop over the heads vectorises.

The two agree to the bit (up to the sign of a zero; tested). The backward pass is the reverse
recurrence from states saved every 64 steps, each chunk's states recomputed from its checkpoint; the
magnitude check of ``a`` and the finiteness check of ``y`` are flags the kernels raise on their way
through the data.
"""
from __future__ import annotations

import numpy as np
import torch

from seqlab.kernels.numba import HAVE_NUMBA, MAX_ABS2, as_numpy, require_numba, use_threads

__all__ = ["gateloop_numba"]

if HAVE_NUMBA:
    import numba
    from numba import prange

    from seqlab.kernels.numba import jit, jit_exact, jit_reassoc

    @numba.njit(cache=True, nogil=True)
    def _row_stats(y, a, out):  # pragma: no cover - compiled
        """The checks of one head, after its loop over time: ``out = [y not finite, |a| > 1 or a not finite]``.

        ``y - y`` is 0 for a finite ``y`` and NaN otherwise, and ``NaN <= x`` is false: both checks are
        or-reductions of comparisons, which vectorise without reordering any float arithmetic. Kept
        apart from a loop over time that runs one head at a time, where they would add to every step.
        """
        bad_y = False
        for t in range(y.shape[0]):
            d = y[t] - y[t]
            bad_y |= (d.real != 0.0) | (d.imag != 0.0)
        bad_a = False
        for t in range(a.shape[0]):
            bad_a |= not (a[t].real * a[t].real + a[t].imag * a[t].imag <= MAX_ABS2)
        out[0] = 1.0 if bad_y else 0.0
        out[1] = 1.0 if bad_a else 0.0

    @jit
    def _gateloop_forward_kernel(q, k, v, a, h0, chunk, y, final, checkpoints, stats):  # pragma: no cover
        """GateLoop eq. 7-8 step by step, one head per task.

        q, k, a: (N, L, dk); v, y: (N, L, dv); h0: (N or 1, dk, dv); final: (N, dk, dv);
        checkpoints: (N, ceil(L / chunk), dk, dv) gets the state entering every chunk (for the backward
        pass), or is empty when no backward pass will run; stats: (N, 2), see :func:`_row_stats`.
            S_n = diag(a_n) S_{n-1} + k_n^T v_n,    y_n = q_n S_n      (the key side: see ``seqlab.ops.gateloop``)
        """
        N, L, dk = q.shape
        dv = v.shape[2]
        save = checkpoints.shape[0] > 0
        for n in prange(N):
            S = final[n]                      # the running state lives in the output's slot
            start = h0[0] if h0.shape[0] == 1 else h0[n]
            for i in range(dk):               # (explicit loops: an array expression in a prange body
                for j in range(dv):           # becomes a nested parallel loop)
                    S[i, j] = start[i, j]
            for t in range(L):
                if save and t % chunk == 0:
                    for i in range(dk):
                        for j in range(dv):
                            checkpoints[n, t // chunk, i, j] = S[i, j]
                row = y[n, t]
                for i in range(dk):
                    ai = a[n, t, i]
                    ki = k[n, t, i]
                    qi = q[n, t, i]
                    for j in range(dv):
                        s_ij = ai * S[i, j] + ki * v[n, t, j]          # eq. 7
                        S[i, j] = s_ij
                        if i == 0:
                            row[j] = qi * s_ij                          # eq. 8
                        else:
                            row[j] += qi * s_ij
            _row_stats(y[n].ravel(), a[n].ravel(), stats[n])

    @jit
    def _gateloop_heads_last_kernel(q, k, v, a, h0, chunk, y, final, checkpoints, stats):  # pragma: no cover
        """``dk = dv = 1`` with the heads side by side in memory, as the GateLoop layer's projections leave them.

        q, k, v, a, y: (B, L, H); h0: (B or 1, H); final: (B, H); checkpoints: (B, ceil(L / chunk), H)
        or empty; stats: (B, 2). Every step updates all H heads with one contiguous (vectorised) loop.
        """
        B, L, H = q.shape
        save = checkpoints.shape[0] > 0
        for b in prange(B):
            s = final[b]                      # the running states live in the output's slots
            start = h0[0] if h0.shape[0] == 1 else h0[b]
            for n in range(H):
                s[n] = start[n]
            bad_y = False                     # the checks of _row_stats, here vectorised with the step
            bad_a = False
            for t in range(L):
                if save and t % chunk == 0:
                    saved = checkpoints[b, t // chunk]
                    for n in range(H):
                        saved[n] = s[n]
                a_t = a[b, t]
                k_t = k[b, t]
                v_t = v[b, t]
                q_t = q[b, t]
                y_t = y[b, t]
                for n in range(H):
                    at = a_t[n]
                    bad_a |= not (at.real * at.real + at.imag * at.imag <= MAX_ABS2)
                    h = at * s[n] + k_t[n] * v_t[n]           # eq. 7, every head at once
                    s[n] = h
                    yt = q_t[n] * h                             # eq. 8
                    y_t[n] = yt
                    d = yt - yt
                    bad_y |= (d.real != 0.0) | (d.imag != 0.0)
            stats[b, 0] = 1.0 if bad_y else 0.0
            stats[b, 1] = 1.0 if bad_a else 0.0

    @jit
    def _gateloop_heads_last_backward(q, k, v, a, checkpoints, chunk, gy, gS,
                                      dq, dk_, dv_, da, dh0):  # pragma: no cover - compiled
        """The backward pass of :func:`_gateloop_heads_last_kernel`: the reverse recurrence of
        :func:`_gateloop_backward_kernel` with ``dk = dv = 1``, all heads of a step at once."""
        B, L, H = q.shape
        nC = (L + chunk - 1) // chunk
        for b in prange(B):
            G = dh0[b]                        # the running gradient lives in dh0's slot
            for n in range(H):
                G[n] = gS[b, n]
            buf = np.empty((chunk + 1, H), dtype=dh0.dtype)
            for c in range(nC - 1, -1, -1):
                t0 = c * chunk
                t1 = min(L, t0 + chunk)
                for n in range(H):
                    buf[0, n] = checkpoints[b, c, n]
                for t in range(t0, t1):
                    for n in range(H):
                        buf[t - t0 + 1, n] = a[b, t, n] * buf[t - t0, n] + k[b, t, n] * v[b, t, n]
                for t in range(t1 - 1, t0 - 1, -1):
                    for n in range(H):
                        g = G[n] + np.conj(q[b, t, n]) * gy[b, t, n]       # G_t
                        dq[b, t, n] = gy[b, t, n] * np.conj(buf[t - t0 + 1, n])
                        da[b, t, n] = g * np.conj(buf[t - t0, n])
                        dk_[b, t, n] = g * np.conj(v[b, t, n])
                        dv_[b, t, n] = g * np.conj(k[b, t, n])
                        G[n] = np.conj(a[b, t, n]) * g

    @jit_exact
    def _recompute_chunk(q, k, v, a, checkpoints, n, c, t0, t1, buf):  # pragma: no cover - compiled
        """The states ``S_{t0} .. S_{t1}`` of chunk ``c`` of row ``n`` into ``buf``, from its checkpoint, by the
        forward pass's operations (eq. 7): the same bits as the forward pass."""
        dk, dv = buf.shape[1], buf.shape[2]
        for i in range(dk):
            for j in range(dv):
                buf[0, i, j] = checkpoints[n, c, i, j]
        for t in range(t0, t1):
            for i in range(dk):
                for j in range(dv):
                    buf[t - t0 + 1, i, j] = a[n, t, i] * buf[t - t0, i, j] + k[n, t, i] * v[n, t, j]

    @jit_reassoc
    def _gateloop_backward_kernel(q, k, v, a, checkpoints, chunk, gy, gS,
                                  dq, dk_, dv_, da, dh0):  # pragma: no cover - compiled
        """The reverse recurrence of eq. 7-8 (PyTorch's conjugate convention for complex inputs).

        With ``G_n = dLoss/dS_n`` (all paths): ``G_n = conj(q_n)^T gy_n + diag(conj(a_{n+1})) G_{n+1}``,
        ``G_{L+1} = gS`` (the final state's gradient), and
            dq_n = gy_n S_n^H,  da_n = rowsum(G_n . conj(S_{n-1})),  dk_n = G_n conj(v_n)^T,
            dv_n = conj(k_n) G_n,  dh0 = diag(conj(a_1)) G_1.
        The states ``S_{n-1}, S_n`` of a chunk are recomputed from its checkpoint (the forward pass's
        operations, so the same bits: :func:`_recompute_chunk`, exact) into a buffer of ``chunk + 1`` states.
        The gradients are accumulated in the output arrays, which have the dtype of the computation. The row
        sums over ``j`` may be reordered (``jit_reassoc``), so that they vectorise: about twice as fast at
        ``dk = dv = 52``, the same sums up to float rounding.
        """
        N, L, dk = q.shape
        dv = v.shape[2]
        nC = (L + chunk - 1) // chunk
        for n in prange(N):
            G = dh0[n]                        # the running gradient lives in dh0's slot
            for i in range(dk):
                for j in range(dv):
                    G[i, j] = gS[n, i, j]
            buf = np.empty((chunk + 1, dk, dv), dtype=dh0.dtype)
            for c in range(nC - 1, -1, -1):
                t0 = c * chunk
                t1 = min(L, t0 + chunk)
                _recompute_chunk(q, k, v, a, checkpoints, n, c, t0, t1, buf)
                for t in range(t1 - 1, t0 - 1, -1):
                    S_t = buf[t - t0 + 1]
                    S_prev = buf[t - t0]
                    gy_t = gy[n, t]
                    v_t = v[n, t]
                    dv_t = dv_[n, t]
                    for j in range(dv):
                        dv_t[j] = 0
                    for i in range(dk):
                        cq = np.conj(q[n, t, i])
                        ck = np.conj(k[n, t, i])
                        ca = np.conj(a[n, t, i])
                        G_i = G[i]
                        S_i = S_t[i]
                        P_i = S_prev[i]
                        # the row sums in registers (one store per row, not one per term)
                        acc_q = dq.dtype.type(0)
                        acc_a = dq.dtype.type(0)
                        acc_k = dq.dtype.type(0)
                        for j in range(dv):
                            g = G_i[j] + cq * gy_t[j]                   # G_t
                            acc_q += gy_t[j] * np.conj(S_i[j])          # dq_t = gy_t S_t^H
                            acc_a += g * np.conj(P_i[j])                # da_t = rowsum(G_t . conj(S_{t-1}))
                            acc_k += g * np.conj(v_t[j])                # dk_t = G_t conj(v_t)^T
                            dv_t[j] += ck * g                           # dv_t = conj(k_t) G_t
                            G_i[j] = ca * g                             # G_t's share of G_{t-1}
                        dq[n, t, i] = acc_q
                        da[n, t, i] = acc_a
                        dk_[n, t, i] = acc_k


# Steps between the states saved by the forward pass for the backward pass (memory: L / chunk states).
_GATELOOP_CHUNK = 64


def _real_of(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)


def _as_kernel_input(t: torch.Tensor, work: torch.dtype) -> torch.Tensor:
    """``t`` in the precision of the computation, keeping real tensors real (the kernels mix them freely)."""
    dtype = work if t.is_complex() else _real_of(work)
    return t if t.dtype == dtype else t.to(dtype)


def _check_stats(stats: np.ndarray, a: torch.Tensor) -> None:
    """Raise the errors of ``seqlab.ops.gateloop`` from the kernels' per-head flags ``[y not finite, a bad]``.

    The kernels raise the flags on their way through the data, so the op makes no extra pass over
    ``a`` or ``y`` for its checks (``a`` is only read again here, to word the error).
    """
    if stats[:, 1].any():            # (N, 2), a NumPy array: a few microseconds less than torch
        biggest = float(a.detach().abs().max())
        raise ValueError(f"a: state transitions need magnitudes |a| in [0, 1] (eq. 25 uses a sigmoid "
                         f"magnitude), got max |a| = {biggest:.6g}")
    if stats[:, 0].any():
        raise FloatingPointError("gateloop(mode='numba'): produced non-finite values (NaN or inf); "
                                 "see the op's docstring for its valid range")


def _run_forward(q, k, v, a, h0, save: bool, heads_last: bool):
    """Run a forward kernel: ``(y, final, checkpoints)`` in the dtype of ``h0`` (the computation's).

    Layouts: ``(N, L, dk)`` / ``(N, L, dv)`` heads first (N = B * H), or with ``heads_last`` the
    ``dk = dv = 1`` case as ``(B, L, H)``.
    """
    n_ckpt = (q.shape[1] + _GATELOOP_CHUNK - 1) // _GATELOOP_CHUNK
    work = h0.dtype
    use_threads()
    if heads_last:
        B, L, H = q.shape
        y, final = torch.empty(B, L, H, dtype=work), torch.empty(B, H, dtype=work)
        ckpt = torch.empty((B if save else 0), n_ckpt, H, dtype=work)
        stats = np.empty((B, 2))
        _gateloop_heads_last_kernel(as_numpy(q), as_numpy(k), as_numpy(v), as_numpy(a), as_numpy(h0), _GATELOOP_CHUNK,
                                    y.numpy(), final.numpy(), ckpt.numpy(), stats)
        _check_stats(stats, a)
        return y, final, ckpt
    N, L, dk = q.shape
    dv = v.shape[-1]
    y, final = torch.empty(N, L, dv, dtype=work), torch.empty(N, dk, dv, dtype=work)
    ckpt = torch.empty((N if save else 0), n_ckpt, dk, dv, dtype=work)
    stats = np.empty((N, 2))
    _gateloop_forward_kernel(as_numpy(q), as_numpy(k), as_numpy(v), as_numpy(a), as_numpy(h0), _GATELOOP_CHUNK,
                             y.numpy(), final.numpy(), ckpt.numpy(), stats)
    _check_stats(stats, a)
    return y, final, ckpt


class _GateLoopNumba(torch.autograd.Function):
    """The compiled forward and backward kernels; ``h0`` is the start state (zeros when the caller gave none)."""

    @staticmethod
    def forward(ctx, work, heads_last, has_h0, q, k, v, a, h0):
        save = any(ctx.needs_input_grad)
        y, final, ckpt = _run_forward(q, k, v, a, h0, save, heads_last)
        if save:
            ctx.save_for_backward(q, k, v, a, ckpt)
            ctx.has_h0, ctx.work, ctx.heads_last, ctx.state_shape = has_h0, work, heads_last, final.shape
        return y, final

    @staticmethod
    def backward(ctx, gy, gS):
        q, k, v, a, ckpt = ctx.saved_tensors
        work = ctx.work
        y_shape = q.shape if ctx.heads_last else q.shape[:2] + v.shape[2:]
        gy = torch.zeros(y_shape, dtype=work) if gy is None else gy.to(work)
        gS = torch.zeros(ctx.state_shape, dtype=work) if gS is None else gS.to(work)
        dq, dk_, da = (torch.empty(q.shape, dtype=work) for _ in range(3))
        dv_ = torch.empty(v.shape, dtype=work)
        dh0 = torch.empty(ctx.state_shape, dtype=work)
        kernel = _gateloop_heads_last_backward if ctx.heads_last else _gateloop_backward_kernel
        use_threads()
        kernel(as_numpy(q), as_numpy(k), as_numpy(v), as_numpy(a), as_numpy(ckpt), _GATELOOP_CHUNK, as_numpy(gy), as_numpy(gS),
               dq.numpy(), dk_.numpy(), dv_.numpy(), da.numpy(), dh0.numpy())
        like = lambda g, t: (g if t.is_complex() else g.real).to(t.dtype)  # noqa: E731  a real input's gradient is real
        return (None, None, None, like(dq, q), like(dk_, k), like(dv_, v), like(da, a),
                dh0 if ctx.has_h0 else None)


def _forward_only(work, heads_last, has_h0, q, k, v, a, h0):
    """:class:`_GateLoopNumba` without autograd (no input needs a gradient): no states are saved."""
    return _run_forward(q, k, v, a, h0, False, heads_last)[:2]


def _is_heads_last(t: torch.Tensor) -> bool:
    """A ``(B, H, L, 1)`` view of a contiguous ``(B, L, H)`` tensor (what the GateLoop layer passes)."""
    return t.shape[-1] == 1 and t.transpose(1, 2).is_contiguous()


def gateloop_numba(q, k, v, a, h0=None, *, dtype: torch.dtype | None = None):
    """GateLoop eq. 7-8 as one compiled loop, forward and backward: ``(y, S_L)`` in ``dtype``.

    q, k, a: (B, H, L, dk), v: (B, H, L, dv), h0: (B, H, dk, dv) or None. ``dtype`` is the dtype of the
    computation (``seqlab.ops.gateloop`` passes the promotion of the inputs); real inputs stay real in
    the kernel, which mixes them with complex ones, so nothing is copied to complex first. The
    magnitude check of ``a`` and the finiteness check of ``y`` are made inside the kernel. The
    backward pass keeps one state per 64 steps and recomputes the rest.

    With ``dk = dv = 1`` and inputs laid out ``(B, L, H)`` in memory (the GateLoop layer's projections,
    viewed as ``(B, H, L, 1)``), the heads are updated side by side with vector instructions and ``y``
    comes back as the same kind of view; otherwise every head is a row of its own.
    """
    require_numba("gateloop", q, k, v, a, h0)
    work = dtype or torch.promote_types(torch.promote_types(q.dtype, k.dtype), torch.promote_types(v.dtype, a.dtype))
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    if L == 0:
        final = torch.zeros(B, H, dk, dv, dtype=work) if h0 is None else h0.to(work).expand(B, H, dk, dv)
        return torch.zeros(B, H, 0, dv, dtype=work), final
    ins = [_as_kernel_input(t, work) for t in (q, k, v, a)]
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, a, h0))
    run = _GateLoopNumba.apply if grad else _forward_only
    if dk == 1 and dv == 1 and all(_is_heads_last(t) for t in ins):
        lay = lambda t: t.transpose(1, 2).reshape(B, L, H)  # noqa: E731  a view: (B, L, H)
        start = torch.zeros(1, H, dtype=work) if h0 is None else h0.to(work).expand(B, H, 1, 1).reshape(B, H)
        y, final = run(work, True, h0 is not None, *map(lay, ins), start)
        return y.transpose(1, 2).unsqueeze(-1), final.reshape(B, H, 1, 1)
    fold = lambda t: t.reshape(B * H, *t.shape[2:])  # noqa: E731
    start = torch.zeros(1, dk, dv, dtype=work) if h0 is None else fold(h0.to(work).expand(B, H, dk, dv))
    y, final = run(work, False, h0 is not None, *map(fold, ins), start)
    return y.reshape(B, H, L, dv), final.reshape(B, H, dk, dv)
