"""CPU kernels: the recurrences as plain loops, compiled to machine code by Numba.

Reached through ``ops.linear_scan(..., mode="compiled")`` and ``ops.gateloop(..., mode="compiled")``
(and ``mode="auto"`` on CPU). A Python loop over time pays the interpreter on every step; the
vectorised torch modes (``blocked``, ``chunked``) avoid that by moving the data two or three times.
A compiled loop does neither: it reads every input once and writes every output once, so a scan costs
about what one fused elementwise pass over the same bytes costs (``benchmarks/scan.py``).

The loops are the recurrences exactly as the papers write them (no reassociation, no fused
multiply-add: ``fastmath`` is off), so in float32 they round like the step-by-step torch loop.
They run in parallel over independent sequences (batch rows, blocks of channels, heads), on as
many threads as ``torch.get_num_threads()`` allows; each sequence is computed by one thread, so the
result does not depend on the thread count.

Numba is a dependency of seqlab; if it cannot be imported (an unsupported platform), ``HAVE_NUMBA``
is ``False``, ``mode="auto"`` uses the torch modes and ``mode="compiled"`` raises
:class:`CompiledUnavailable` saying why.
"""
from __future__ import annotations

import math

import numpy as np
import torch

try:  # pragma: no cover - exercised on platforms without numba wheels
    import numba
    from numba import prange

    HAVE_NUMBA = True
    _IMPORT_ERROR = ""
except Exception as exc:  # noqa: BLE001 - any import failure means "no compiled mode"
    HAVE_NUMBA = False
    _IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

__all__ = ["HAVE_NUMBA", "CompiledUnavailable", "require_compiled", "scan_forward", "gateloop_compiled"]

# Sequences (rows x channel blocks) handed to one thread at a time: a block of at least this many
# contiguous channels keeps whole cache lines per row; narrower rows are interleaved in groups instead
# (independent chains side by side, so a step does not wait for the latency of the previous one).
_MIN_BLOCK = 64
_INTERLEAVE = 16


class CompiledUnavailable(RuntimeError):
    """``mode="compiled"`` was asked for where the Numba kernels cannot run."""


def require_compiled(op: str, *tensors: torch.Tensor) -> None:
    """Raise a clear error if ``op``'s compiled mode cannot run on these tensors."""
    if not HAVE_NUMBA:
        raise CompiledUnavailable(f"{op}(mode='compiled') needs numba, which failed to import ({_IMPORT_ERROR}); "
                                  "use mode='auto' (the torch modes)")
    for t in tensors:
        if t is not None and t.device.type != "cpu":
            raise CompiledUnavailable(f"{op}(mode='compiled') runs on CPU tensors; got a tensor on {t.device} "
                                      "(use mode='auto', which picks the Triton kernel on CUDA)")


def _np(t: torch.Tensor):
    """A contiguous NumPy view (or copy) of a CPU tensor, lazy conjugation and negation resolved."""
    return t.detach().resolve_conj().resolve_neg().contiguous().numpy()


def _use_threads() -> int:
    n = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    return n


if HAVE_NUMBA:
    _jit = numba.njit(parallel=True, cache=True, fastmath=False, nogil=True)

    @_jit
    def _scan_kernel(a, x, h0, reverse, rows_per_task, blocks, out):  # pragma: no cover - compiled
        """``out[b, t] = a[b, t] * out[b, t-1] + x[b, t]`` (``t`` descending when ``reverse``).

        x, out: (B, L, D); a: (Ba, La, D) with Ba in {1, B}, La in {1, L} (1: time-invariant);
        h0: (Bh, D) with Bh in {1, B} (zeros when there is no initial state).
        One task: ``rows_per_task`` rows x one block of D / ``blocks`` channels, all L steps.
        """
        B, L, D = x.shape
        width = (D + blocks - 1) // blocks
        groups = (B + rows_per_task - 1) // rows_per_task
        for task in prange(groups * blocks):
            r0 = (task // blocks) * rows_per_task
            r1 = min(B, r0 + rows_per_task)
            d0 = (task % blocks) * width
            d1 = min(D, d0 + width)
            h = np.empty((r1 - r0, d1 - d0), dtype=out.dtype)
            for r in range(r0, r1):
                for d in range(d0, d1):
                    h[r - r0, d - d0] = h0[r if h0.shape[0] > 1 else 0, d]
            n = d1 - d0
            for s in range(L):
                t = L - 1 - s if reverse else s
                ta = t if a.shape[1] > 1 else 0
                for r in range(r0, r1):
                    # 1-D rows: contiguous inner loops, which LLVM vectorises
                    a_row = a[r if a.shape[0] > 1 else 0, ta, d0:d1]
                    x_row = x[r, t, d0:d1]
                    o_row = out[r, t, d0:d1]
                    h_row = h[r - r0]
                    for d in range(n):
                        v = a_row[d] * h_row[d] + x_row[d]
                        h_row[d] = v
                        o_row[d] = v
        return out

    @_jit
    def _gateloop_forward_kernel(q, k, v, a, h0, chunk, y, final, checkpoints):  # pragma: no cover - compiled
        """GateLoop eq. 7-8 step by step, ``G`` heads side by side.

        q, k, a: (N, L, dk); v, y: (N, L, dv); h0, final: (N or 1, dk, dv) / (N, dk, dv);
        checkpoints: (N, ceil(L / chunk), dk, dv) gets the state entering every chunk (for the
        backward pass), or has a leading 0 when no backward pass will run.
            S_n = diag(a_n) S_{n-1} + k_n^T v_n,    y_n = q_n S_n
        """
        N, L, dk = q.shape
        dv = v.shape[2]
        G = max(1, min(N, _INTERLEAVE // (dk * dv)))
        save = checkpoints.shape[0] > 0
        for grp in prange((N + G - 1) // G):
            n0 = grp * G
            n1 = min(N, n0 + G)
            S = np.empty((n1 - n0, dk, dv), dtype=y.dtype)
            for n in range(n0, n1):
                S[n - n0] = h0[n if h0.shape[0] > 1 else 0]
            acc = np.empty(dv, dtype=y.dtype)
            for t in range(L):
                for n in range(n0, n1):
                    Sn = S[n - n0]
                    if save and t % chunk == 0:
                        checkpoints[n, t // chunk] = Sn
                    acc[:] = 0
                    for i in range(dk):
                        ai = a[n, t, i]
                        ki = k[n, t, i]
                        qi = q[n, t, i]
                        for j in range(dv):
                            s_ij = ai * Sn[i, j] + ki * v[n, t, j]      # eq. 7
                            Sn[i, j] = s_ij
                            acc[j] += qi * s_ij                          # eq. 8
                    for j in range(dv):
                        y[n, t, j] = acc[j]
            for n in range(n0, n1):
                final[n] = S[n - n0]

    @_jit
    def _gateloop_backward_kernel(q, k, v, a, checkpoints, chunk, gy, gS,
                                  dq, dk_, dv_, da, dh0):  # pragma: no cover - compiled
        """The reverse recurrence of eq. 7-8 (PyTorch's conjugate convention for complex inputs).

        With ``G_n = dLoss/dS_n`` (all paths): ``G_n = conj(q_n)^T gy_n + diag(conj(a_{n+1})) G_{n+1}``,
        ``G_{L+1} = gS`` (the final state's gradient), and
            dq_n = gy_n S_n^H,  da_n = rowsum(G_n . conj(S_{n-1})),  dk_n = G_n conj(v_n)^T,
            dv_n = conj(k_n) G_n,  dh0 = diag(conj(a_1)) G_1.
        The states ``S_{n-1}, S_n`` of a chunk are recomputed from its checkpoint (same operations as
        the forward pass, so the same bits) into a buffer of ``chunk + 1`` states.
        """
        N, L, dk = q.shape
        dv = v.shape[2]
        nC = (L + chunk - 1) // chunk
        for n in prange(N):
            G = gS[n].copy()
            buf = np.empty((chunk + 1, dk, dv), dtype=gS.dtype)
            for c in range(nC - 1, -1, -1):
                t0 = c * chunk
                t1 = min(L, t0 + chunk)
                buf[0] = checkpoints[n, c]
                for t in range(t0, t1):
                    for i in range(dk):
                        for j in range(dv):
                            buf[t - t0 + 1, i, j] = a[n, t, i] * buf[t - t0, i, j] + k[n, t, i] * v[n, t, j]
                for t in range(t1 - 1, t0 - 1, -1):
                    S_t = buf[t - t0 + 1]
                    S_prev = buf[t - t0]
                    for j in range(dv):
                        dv_[n, t, j] = 0
                    for i in range(dk):
                        cq = np.conj(q[n, t, i])
                        ck = np.conj(k[n, t, i])
                        sq = q[n, t, i] * 0
                        sa = sq
                        sk = sq
                        for j in range(dv):
                            g = G[i, j] + cq * gy[n, t, j]              # G_t
                            G[i, j] = g
                            sq += gy[n, t, j] * np.conj(S_t[i, j])
                            sa += g * np.conj(S_prev[i, j])
                            sk += g * np.conj(v[n, t, j])
                            dv_[n, t, j] += ck * g
                        dq[n, t, i] = sq
                        da[n, t, i] = sa
                        dk_[n, t, i] = sk
                        ca = np.conj(a[n, t, i])
                        for j in range(dv):
                            G[i, j] = ca * G[i, j]                      # on to G_{t-1}'s share
            dh0[n] = G


def _tasks(B: int, D: int, threads: int) -> tuple[int, int]:
    """(rows per task, channel blocks per row) for the scan kernel on ``threads`` threads."""
    if D < _MIN_BLOCK:
        rows = max(1, min(_INTERLEAVE // max(D, 1), math.ceil(B / threads)))
        return rows, 1
    blocks = max(1, min(D // _MIN_BLOCK, math.ceil(2 * threads / B)))
    return 1, blocks


def scan_forward(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None, reverse: bool) -> torch.Tensor:
    """The compiled loop for ``seqlab.ops.linear_scan``'s canonical layout (no autograd here).

    x: (B, L, D) real or complex; a: (Ba, La, D) with Ba in {1, B}, La in {1, L}, real or complex
    (a real ``a`` with a complex ``x`` decays real and imaginary parts alike); h0: (Bh, D) or None.
    """
    require_compiled("linear_scan", a, x, h0)
    B, L, D = x.shape
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    h0 = torch.zeros(1, D, dtype=x.dtype) if h0 is None else h0.to(x.dtype)
    rows, blocks = _tasks(B, D, _use_threads())
    _scan_kernel(_np(a), _np(x), _np(h0), bool(reverse), rows, blocks, out.numpy())
    return out


# Steps between the states saved by the forward pass for the backward pass (memory: L / chunk states).
_GATELOOP_CHUNK = 64


class _GateLoopCompiled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, a, h0):
        N, L, dk = q.shape
        dv = v.shape[-1]
        need_grad = any(ctx.needs_input_grad)
        y = torch.empty(N, L, dv, dtype=q.dtype)
        final = torch.empty(N, dk, dv, dtype=q.dtype)
        n_ckpt = (L + _GATELOOP_CHUNK - 1) // _GATELOOP_CHUNK if need_grad else 0
        ckpt = torch.empty((N if need_grad else 0), n_ckpt, dk, dv, dtype=q.dtype)
        start = torch.zeros(1, dk, dv, dtype=q.dtype) if h0 is None else h0
        _use_threads()
        _gateloop_forward_kernel(_np(q), _np(k), _np(v), _np(a), _np(start), _GATELOOP_CHUNK,
                                 y.numpy(), final.numpy(), ckpt.numpy())
        if need_grad:
            ctx.save_for_backward(q, k, v, a, ckpt)
            ctx.has_h0 = h0 is not None
        return y, final

    @staticmethod
    def backward(ctx, gy, gS):
        q, k, v, a, ckpt = ctx.saved_tensors
        N, L, dk = q.shape
        dv = v.shape[-1]
        gy = torch.zeros(N, L, dv, dtype=q.dtype) if gy is None else gy
        gS = torch.zeros(N, dk, dv, dtype=q.dtype) if gS is None else gS
        dq, dk_, da = (torch.empty_like(q) for _ in range(3))
        dv_ = torch.empty_like(v)
        dh0 = torch.empty(N, dk, dv, dtype=q.dtype)
        _use_threads()
        _gateloop_backward_kernel(_np(q), _np(k), _np(v), _np(a), _np(ckpt), _GATELOOP_CHUNK,
                                  _np(gy.to(q.dtype)), _np(gS.to(q.dtype)),
                                  dq.numpy(), dk_.numpy(), dv_.numpy(), da.numpy(), dh0.numpy())
        return dq, dk_, dv_, da, (dh0 if ctx.has_h0 else None)


def gateloop_compiled(q, k, v, a, h0=None):
    """GateLoop eq. 7-8 as one compiled loop, forward and backward: ``(y, S_L)``.

    q, k, a: (B, H, L, dk), v: (B, H, L, dv), h0: (B, H, dk, dv) or None, all of one dtype
    (``seqlab.ops.gateloop`` promotes them). The backward pass keeps one state per 64 steps.
    """
    require_compiled("gateloop", q, k, v, a, h0)
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    fold = lambda t: t.reshape(B * H, *t.shape[2:])  # noqa: E731
    h0f = None if h0 is None else fold(h0.expand(B, H, dk, dv))
    if L == 0:
        final = h0f if h0f is not None else q.new_zeros(B * H, dk, dv)
        return q.new_zeros(B, H, 0, dv), final.reshape(B, H, dk, dv)
    y, final = _GateLoopCompiled.apply(fold(q), fold(k), fold(v), fold(a), h0f)
    return y.reshape(B, H, L, dv), final.reshape(B, H, dk, dv)
