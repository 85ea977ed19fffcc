"""CPU kernels: the recurrences as plain loops, compiled to machine code by Numba.

Reached through ``ops.linear_scan(..., mode="numba")`` and ``ops.gateloop(..., mode="numba")``
(and ``mode="auto"`` on CPU). A Python loop over time pays the interpreter on every step; the
vectorised torch modes (``blocked``, ``chunked``) avoid that by moving the data two or three times.
A compiled loop does neither: it reads every input once and writes every output once, so a scan costs
about what one fused elementwise pass over the same bytes costs (``benchmarks/scan.py``).

The loops are the recurrences exactly as the papers write them (no reassociation, no fused
multiply-add: ``fastmath`` is off), so in float32 they round like a step-by-step loop (on real inputs
the scan equals ``linear_scan(mode="sequential")`` to the bit; GateLoop's heads-last, tiled and
per-head kernels agree to the bit, up to the sign of a zero; both are tested). One kernel needs what Numba cannot say:
GateLoop with a row per head vectorises across heads by transposing 8 x 8 tiles in registers, and
the shuffles that do it are written in LLVM IR (``_ir_transpose8``, through ``numba.extending.intrinsic``).
They run in parallel over independent sequences (batch rows, blocks of channels, heads), on as
many threads as ``torch.get_num_threads()`` allows; each sequence is computed by one thread, so the
result does not depend on the thread count.

Numba is a dependency of seqlab; if it cannot be imported (an unsupported platform), ``HAVE_NUMBA``
is ``False``, ``mode="auto"`` uses the torch modes and ``mode="numba"`` raises
:class:`CompiledUnavailable` saying why.
"""
from __future__ import annotations

import math

import numpy as np
import torch

try:  # pragma: no cover - exercised on platforms without numba wheels
    import numba
    from llvmlite import ir
    from numba import prange, types
    from numba.extending import intrinsic

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
# GateLoop with dk = dv = 1: heads run side by side, each this many steps behind the previous one.
_HEADS = 4
_SKEW = 37
# |a| above 1 + 1e-6 is refused (the torch modes' bound), compared as |a|^2.
_MAX_ABS2 = (1.0 + 1e-6) ** 2
# The same bound for float32 |a|^2: the largest float32 not above it, so that the comparison in float32
# accepts exactly the values the float64 comparison accepts.
_MAX_ABS2_F32 = float(np.nextafter(np.float32(_MAX_ABS2), np.float32(0))
                      if float(np.float32(_MAX_ABS2)) > _MAX_ABS2 else np.float32(_MAX_ABS2))
# The tiled GateLoop kernel: lane j of 8 runs this many steps ahead of lane 0 (64 bytes of a float32 row).
_TILE_SKEW = 16


class CompiledUnavailable(RuntimeError):
    """``mode="numba"`` was asked for where the Numba kernels cannot run."""


def require_compiled(op: str, *tensors: torch.Tensor) -> None:
    """Raise a clear error if ``op``'s compiled mode cannot run on these tensors."""
    if not HAVE_NUMBA:
        raise CompiledUnavailable(f"{op}(mode='numba') needs numba, which failed to import ({_IMPORT_ERROR}); "
                                  "use mode='auto' (the torch modes)")
    for t in tensors:
        if t is not None and t.device.type != "cpu":
            raise CompiledUnavailable(f"{op}(mode='numba') runs on CPU tensors; got a tensor on {t.device} "
                                      "(use mode='auto', which picks the Triton kernel on CUDA)")


def _np(t: torch.Tensor):
    """A contiguous NumPy view (or copy) of a CPU tensor, lazy conjugation and negation resolved."""
    if t.is_contiguous() and not (t.is_conj() or t.is_neg()):
        return t.detach().numpy()                          # the common case, in a third of the time
    return t.detach().resolve_conj().resolve_neg().contiguous().numpy()


def _use_threads() -> int:
    n = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != n:   # (setting it costs more than asking)
        numba.set_num_threads(n)
    return n


if HAVE_NUMBA:
    _jit = numba.njit(parallel=True, cache=True, fastmath=False, nogil=True)

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
            bad_a |= not (a[t].real * a[t].real + a[t].imag * a[t].imag <= _MAX_ABS2)
        out[0] = 1.0 if bad_y else 0.0
        out[1] = 1.0 if bad_a else 0.0

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
    def _gateloop_forward_kernel(q, k, v, a, h0, chunk, y, final, checkpoints, stats):  # pragma: no cover
        """GateLoop eq. 7-8 step by step, one head per task.

        q, k, a: (N, L, dk); v, y: (N, L, dv); h0: (N or 1, dk, dv); final: (N, dk, dv);
        checkpoints: (N, ceil(L / chunk), dk, dv) gets the state entering every chunk (for the backward
        pass), or is empty when no backward pass will run; stats: (N, 2), see :func:`_row_stats`.
            S_n = diag(a_n) S_{n-1} + k_n^T v_n,    y_n = q_n S_n
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

    # ------------------------------------------------------------ dk = dv = 1, one row per head, 8 heads at once
    # A head's row is contiguous in time, so eight heads' values at one step lie a row apart, and a
    # vector instruction cannot load them. The tiled kernel loads an 8 x 8 tile (8 heads x 8 steps) as
    # eight row vectors, transposes it in registers (24 shuffles: Numba has no shuffles, so they are
    # written in LLVM IR below), runs the 8 steps with each instruction updating all 8 heads, and
    # transposes the outputs back. The arithmetic is the scalar kernel's, less the terms its complex
    # arithmetic adds for a real operand (+ 0i after k v, 0 * Im s in q s), which can only change the
    # sign of a zero: the results are equal, bit for bit, as values.

    _F32X8 = ir.VectorType(ir.FloatType(), 8)

    def _ir_mask(*lanes):
        return ir.Constant(ir.VectorType(ir.IntType(32), len(lanes)), list(lanes))

    def _ir_transpose8(b, rows):
        """The 8 x 8 transpose of eight ``<8 x float>`` rows: three rounds of two-source shuffles
        (32-bit pairs, 64-bit pairs, 128-bit halves), which x86 lowers to unpck / shufps / perm2f128."""
        pairs = []
        for i in range(0, 8, 2):
            pairs.append(b.shuffle_vector(rows[i], rows[i + 1], _ir_mask(0, 8, 1, 9, 4, 12, 5, 13)))
            pairs.append(b.shuffle_vector(rows[i], rows[i + 1], _ir_mask(2, 10, 3, 11, 6, 14, 7, 15)))
        quads = []
        for i in (0, 4):
            for j in (0, 1):
                lo, hi = pairs[i + j], pairs[i + 2 + j]
                quads.append(b.shuffle_vector(lo, hi, _ir_mask(0, 1, 8, 9, 4, 5, 12, 13)))
                quads.append(b.shuffle_vector(lo, hi, _ir_mask(2, 3, 10, 11, 6, 7, 14, 15)))
        cols = [None] * 8
        for c in range(4):
            cols[c] = b.shuffle_vector(quads[c], quads[4 + c], _ir_mask(0, 1, 2, 3, 8, 9, 10, 11))
            cols[c + 4] = b.shuffle_vector(quads[c], quads[4 + c], _ir_mask(4, 5, 6, 7, 12, 13, 14, 15))
        return cols

    def _ir_vec_ptr(b, data, offset):
        return b.bitcast(b.gep(data, [offset]), _F32X8.as_pointer())

    def _ir_load_rows(b, data, start, stride):
        """Eight ``<8 x float>`` loads at ``data[start + r * stride]``, r < 8 (unaligned)."""
        rows = []
        for r in range(8):
            load = b.load(_ir_vec_ptr(b, data, b.add(start, b.mul(stride, ir.Constant(stride.type, r)))))
            load.align = 4
            rows.append(load)
        return rows

    def _ir_store_rows(b, data, start, stride, rows):
        for r, vec in enumerate(rows):
            store = b.store(vec, _ir_vec_ptr(b, data, b.add(start, b.mul(stride, ir.Constant(stride.type, r)))))
            store.align = 4

    def _ir_load8(b, data, offset):
        load = b.load(_ir_vec_ptr(b, data, ir.Constant(ir.IntType(64), offset)))
        load.align = 4
        return load

    def _ir_store8(b, data, offset, vec):
        b.store(vec, _ir_vec_ptr(b, data, ir.Constant(ir.IntType(64), offset))).align = 4

    @intrinsic
    def _gateloop_tile8(typingctx, q, k, v, a, y, start, stride, state, flags):
        """Eight steps of eight heads: ``q, k, v`` float32 and ``a, y`` complex64 seen as float32 (re, im
        interleaved), all 1-D; head ``j``'s steps start at ``start + j * stride`` (in ``a``, ``y``: twice
        that); ``state`` = [Re s (8), Im s (8)] in and out; ``flags`` = [|a| > 1 (8), y not finite (8)],
        raised (set to 1) and never lowered."""
        sig = types.void(q, k, v, a, y, start, stride, state, flags)

        def codegen(context, b, signature, args):
            qd, kd, vd, ad, yd, sd, fd = (context.make_array(signature.args[i])(context, b, args[i]).data
                                          for i in (0, 1, 2, 3, 4, 7, 8))
            start, stride = args[5], args[6]
            two, eight = ir.Constant(start.type, 2), ir.Constant(start.type, 8)
            q8 = _ir_transpose8(b, _ir_load_rows(b, qd, start, stride))        # q8[u]: the 8 heads' q at step u
            kv8 = _ir_transpose8(b, [b.fmul(kr, vr) for kr, vr in             # k v, formed before the transpose
                                     zip(_ir_load_rows(b, kd, start, stride), _ir_load_rows(b, vd, start, stride))])
            a_start, a_stride = b.mul(start, two), b.mul(stride, two)
            a16 = (_ir_transpose8(b, _ir_load_rows(b, ad, a_start, a_stride))                  # Re a_u, Im a_u for
                   + _ir_transpose8(b, _ir_load_rows(b, ad, b.add(a_start, eight), a_stride)))  # u < 4, then u >= 4
            sr, si = _ir_load8(b, sd, 0), _ir_load8(b, sd, 8)
            zero = ir.Constant(_F32X8, [0.0] * 8)
            limit = ir.Constant(_F32X8, [float(_MAX_ABS2_F32)] * 8)
            bad_a = b.fcmp_unordered(">", zero, zero)                        # all false
            bad_y = bad_a
            y16 = []
            for u in range(8):
                ar, ai = a16[2 * u], a16[2 * u + 1]
                # eq. 7, s <- a s + k v, rounded as numba's complex arithmetic rounds it: (ar sr - ai si) + kv, ar si + ai sr
                sr, si = (b.fadd(b.fsub(b.fmul(ar, sr), b.fmul(ai, si)), kv8[u]),
                          b.fadd(b.fmul(ar, si), b.fmul(ai, sr)))
                yr, yi = b.fmul(q8[u], sr), b.fmul(q8[u], si)                # eq. 8
                y16 += [yr, yi]
                bad_a = b.or_(bad_a, b.fcmp_unordered(">", b.fadd(b.fmul(ar, ar), b.fmul(ai, ai)), limit))
                bad_y = b.or_(bad_y, b.or_(b.fcmp_unordered("!=", b.fsub(yr, yr), zero),
                                           b.fcmp_unordered("!=", b.fsub(yi, yi), zero)))
            _ir_store8(b, sd, 0, sr)
            _ir_store8(b, sd, 8, si)
            one = ir.Constant(_F32X8, [1.0] * 8)
            _ir_store8(b, fd, 0, b.select(bad_a, one, _ir_load8(b, fd, 0)))
            _ir_store8(b, fd, 8, b.select(bad_y, one, _ir_load8(b, fd, 8)))
            _ir_store_rows(b, yd, a_start, a_stride, _ir_transpose8(b, y16[:8]))
            _ir_store_rows(b, yd, b.add(a_start, eight), a_stride, _ir_transpose8(b, y16[8:]))
            return context.get_dummy_value()

        return sig, codegen

    @numba.njit(cache=True, nogil=True, inline="always")
    def _step_real(ar, ai, kv, sr, si):  # pragma: no cover - compiled
        """One step of eq. 7 in real arithmetic, the operations of :func:`_gateloop_tile8`."""
        return (ar * sr - ai * si) + kv, ar * si + ai * sr

    @numba.njit(cache=True, nogil=True)
    def _tiled_lane_steps(q, k, v, a, y, n, t0, t1, lane, state, flags, chunk, checkpoints):  # pragma: no cover
        """Steps ``t0 <= t < t1`` of head ``n`` (lane ``lane`` of its group) one at a time, as the tile does them."""
        save = checkpoints.shape[0] > 0
        sr, si = state[lane], state[8 + lane]
        for t in range(t0, t1):
            if save and t % chunk == 0:
                checkpoints[n, t // chunk] = complex(sr, si)
            ar, ai = a[n, 2 * t], a[n, 2 * t + 1]
            sr, si = _step_real(ar, ai, k[n, t] * v[n, t], sr, si)
            yr, yi = q[n, t] * sr, q[n, t] * si
            y[n, 2 * t], y[n, 2 * t + 1] = yr, yi
            if not (ar * ar + ai * ai <= _MAX_ABS2_F32):
                flags[lane] = 1.0
            if (yr - yr != 0.0) or (yi - yi != 0.0):
                flags[8 + lane] = 1.0
        state[lane], state[8 + lane] = sr, si

    @_jit
    def _gateloop_tiled_kernel(q, k, v, a, h0, chunk, y, final, checkpoints, stats):  # pragma: no cover
        """The scalar kernel's job for float32 ``q, k, v`` and complex64 ``a``, eight heads per vector.

        q, k, v: (N, L) float32; a, y: (N, 2L) float32 (complex64 seen as re, im pairs); h0: (N or 1,)
        complex64; final: (N,); checkpoints: (N, ceil(L / chunk)) or empty; stats: (N, 2). Rows past the
        last multiple of 8 go to the scalar kernel (the caller's job).

        Lane ``j`` of a group runs ``_TILE_SKEW * j`` steps ahead of lane 0: rows of power-of-two
        length lie a multiple of 4 KiB apart, and eight loads from the same offset in eight rows would
        compete for one set of the L1 cache (and 4K-alias with the stores of ``y``). Each lane does its
        first ``_TILE_SKEW * j`` and its last few steps alone (:func:`_tiled_lane_steps`).
        """
        N, L = q.shape
        qf, kf, vf, af, yf = q.ravel(), k.ravel(), v.ravel(), a.ravel(), y.ravel()
        skew = _TILE_SKEW
        span = 7 * skew                                   # lane 7's lead
        tiles = (L - span) // 8 if L > span else 0        # 8-step tiles every lane runs
        for g in prange(N // 8):
            n0 = 8 * g
            state = np.empty(16, dtype=np.float32)
            flags = np.zeros(16, dtype=np.float32)
            for j in range(8):
                s0 = h0[0] if h0.shape[0] == 1 else h0[n0 + j]
                state[j], state[8 + j] = s0.real, s0.imag
                _tiled_lane_steps(q, k, v, a, y, n0 + j, 0, min(L, skew * j), j, state, flags, chunk, checkpoints)
            for i in range(tiles):
                t0 = 8 * i                                    # lane j is at step t0 + skew * j
                if checkpoints.shape[0] > 0:
                    for j in range(8):
                        t = t0 + skew * j
                        if t % chunk == 0:
                            checkpoints[n0 + j, t // chunk] = complex(state[j], state[8 + j])
                _gateloop_tile8(qf, kf, vf, af, yf, n0 * L + t0, L + skew, state, flags)
            for j in range(8):
                _tiled_lane_steps(q, k, v, a, y, n0 + j, max(min(L, skew * j), skew * j + 8 * tiles), L, j,
                                  state, flags, chunk, checkpoints)
                final[n0 + j] = complex(state[j], state[8 + j])
                stats[n0 + j, 0] = flags[8 + j]
                stats[n0 + j, 1] = flags[j]

    @_jit
    def _gateloop_scalar_kernel(q, k, v, a, h0, chunk, y, final, checkpoints, stats):  # pragma: no cover
        """The same for ``dk = dv = 1`` (the paper's max-headed models): q, k, v, a, y: (N, L), h0: (N or 1,),
        final: (N,), checkpoints: (N, ceil(L / chunk)) or empty, stats: (N, 2).

        One step is a handful of flops, so a single head waits on the latency of the complex
        multiply-add ``s <- a s + k v``. Four heads run side by side instead, each ``_SKEW`` steps behind
        the previous one: with power-of-two ``L`` the heads' rows lie a multiple of 4 KiB apart, and
        the CPU would otherwise mistake their loads for stores to the same address ("4K aliasing").
        """
        N, L = q.shape
        save = checkpoints.shape[0] > 0
        for grp in prange((N + _HEADS - 1) // _HEADS):
            n0 = grp * _HEADS
            m = min(N, n0 + _HEADS) - n0
            s = final[n0:n0 + m]              # the running states live in the output's slots
            for g in range(m):
                s[g] = h0[0] if h0.shape[0] == 1 else h0[n0 + g]
            for t in range(L + (_HEADS - 1) * _SKEW):
                for g in range(_HEADS):           # a constant trip count: unrolled
                    tt = t - g * _SKEW
                    if tt >= 0 and tt < L and g < m:
                        n = n0 + g
                        if save and tt % chunk == 0:
                            checkpoints[n, tt // chunk] = s[g]
                        h = a[n, tt] * s[g] + k[n, tt] * v[n, tt]     # eq. 7
                        s[g] = h
                        y[n, tt] = q[n, tt] * h                         # eq. 8
            for n in range(n0, n0 + m):
                _row_stats(y[n], a[n], stats[n])

    @_jit
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
                    bad_a |= not (at.real * at.real + at.imag * at.imag <= _MAX_ABS2)
                    h = at * s[n] + k_t[n] * v_t[n]           # eq. 7, every head at once
                    s[n] = h
                    yt = q_t[n] * h                             # eq. 8
                    y_t[n] = yt
                    d = yt - yt
                    bad_y |= (d.real != 0.0) | (d.imag != 0.0)
            stats[b, 0] = 1.0 if bad_y else 0.0
            stats[b, 1] = 1.0 if bad_a else 0.0

    @_jit
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

    @_jit
    def _gateloop_backward_kernel(q, k, v, a, checkpoints, chunk, gy, gS,
                                  dq, dk_, dv_, da, dh0):  # pragma: no cover - compiled
        """The reverse recurrence of eq. 7-8 (PyTorch's conjugate convention for complex inputs).

        With ``G_n = dLoss/dS_n`` (all paths): ``G_n = conj(q_n)^T gy_n + diag(conj(a_{n+1})) G_{n+1}``,
        ``G_{L+1} = gS`` (the final state's gradient), and
            dq_n = gy_n S_n^H,  da_n = rowsum(G_n . conj(S_{n-1})),  dk_n = G_n conj(v_n)^T,
            dv_n = conj(k_n) G_n,  dh0 = diag(conj(a_1)) G_1.
        The states ``S_{n-1}, S_n`` of a chunk are recomputed from its checkpoint (the forward pass's
        operations, so the same bits) into a buffer of ``chunk + 1`` states. The gradients are
        accumulated in the output arrays, which have the dtype of the computation.
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
                for i in range(dk):
                    for j in range(dv):
                        buf[0, i, j] = checkpoints[n, c, i, j]
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
                        dq[n, t, i] = 0
                        da[n, t, i] = 0
                        dk_[n, t, i] = 0
                        for j in range(dv):
                            g = G[i, j] + cq * gy[n, t, j]              # G_t
                            G[i, j] = g
                            dq[n, t, i] += gy[n, t, j] * np.conj(S_t[i, j])
                            da[n, t, i] += g * np.conj(S_prev[i, j])
                            dk_[n, t, i] += g * np.conj(v[n, t, j])
                            dv_[n, t, j] += ck * g
                        ca = np.conj(a[n, t, i])
                        for j in range(dv):
                            G[i, j] = ca * G[i, j]                      # G_t's share of G_{t-1}


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


def _tiles_apply(q, k, v, a, work) -> bool:
    """The tiled kernel's case: float32 ``q, k, v`` and a complex64 ``a`` (what the GateLoop layer makes)."""
    return (work == torch.complex64 and a.dtype == torch.complex64
            and all(t.dtype == torch.float32 for t in (q, k, v)))


def _run_max_headed(q, k, v, a, h0, y, final, ckpt, stats) -> None:
    """``dk = dv = 1``, one row per head: rows in groups of 8 to the tiled kernel where it applies,
    the others to the scalar kernel. q, k, v, a: (N, L, 1); the outputs as in :func:`_run_forward`."""
    N, L = q.shape[:2]
    ins = [_np(t).reshape(N, L) for t in (q, k, v, a)]       # (N, L, 1) -> (N, L), reshaped by NumPy (cheaper)
    outs = [y.numpy().reshape(N, L), final.numpy().reshape(N), ckpt.numpy().reshape(ckpt.shape[:2]), stats]
    h0 = _np(h0).reshape(-1)
    tiled = 8 * (N // 8) if _tiles_apply(q, k, v, a, y.dtype) else 0
    rows = lambda arr, sl: arr[sl] if arr.shape[0] > 1 else arr  # noqa: E731  h0 may be one shared row; ckpt empty
    if tiled:
        head = slice(0, tiled)
        pairs = lambda arr: arr[head].view(np.float32)  # noqa: E731  complex64 (n, L) as float32 (n, 2L)
        _gateloop_tiled_kernel(*(t[head] for t in ins[:3]), pairs(ins[3]), rows(h0, head), _GATELOOP_CHUNK,
                               pairs(outs[0]), *(rows(o, head) for o in outs[1:]))
    if tiled < N:
        rest = slice(tiled, N)
        _gateloop_scalar_kernel(*(t[rest] for t in ins), rows(h0, rest), _GATELOOP_CHUNK,
                                *(rows(o, rest) for o in outs))


def _run_forward(q, k, v, a, h0, save: bool, heads_last: bool):
    """Run a forward kernel: ``(y, final, checkpoints)`` in the dtype of ``h0`` (the computation's).

    Layouts: ``(N, L, dk)`` / ``(N, L, dv)`` heads first (N = B * H), or with ``heads_last`` the
    ``dk = dv = 1`` case as ``(B, L, H)``.
    """
    n_ckpt = (q.shape[1] + _GATELOOP_CHUNK - 1) // _GATELOOP_CHUNK
    work = h0.dtype
    _use_threads()
    if heads_last:
        B, L, H = q.shape
        y, final = torch.empty(B, L, H, dtype=work), torch.empty(B, H, dtype=work)
        ckpt = torch.empty((B if save else 0), n_ckpt, H, dtype=work)
        stats = np.empty((B, 2))
        _gateloop_heads_last_kernel(_np(q), _np(k), _np(v), _np(a), _np(h0), _GATELOOP_CHUNK,
                                    y.numpy(), final.numpy(), ckpt.numpy(), stats)
        _check_stats(stats, a)
        return y, final, ckpt
    N, L, dk = q.shape
    dv = v.shape[-1]
    y, final = torch.empty(N, L, dv, dtype=work), torch.empty(N, dk, dv, dtype=work)
    ckpt = torch.empty((N if save else 0), n_ckpt, dk, dv, dtype=work)
    stats = np.empty((N, 2))
    if dk == 1 and dv == 1:
        _run_max_headed(q, k, v, a, h0, y, final, ckpt, stats)
    else:
        _gateloop_forward_kernel(_np(q), _np(k), _np(v), _np(a), _np(h0), _GATELOOP_CHUNK,
                                 y.numpy(), final.numpy(), ckpt.numpy(), stats)
    _check_stats(stats, a)
    return y, final, ckpt


class _GateLoopCompiled(torch.autograd.Function):
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
        _use_threads()
        kernel(_np(q), _np(k), _np(v), _np(a), _np(ckpt), _GATELOOP_CHUNK, _np(gy), _np(gS),
               dq.numpy(), dk_.numpy(), dv_.numpy(), da.numpy(), dh0.numpy())
        like = lambda g, t: (g if t.is_complex() else g.real).to(t.dtype)  # noqa: E731  a real input's gradient is real
        return (None, None, None, like(dq, q), like(dk_, k), like(dv_, v), like(da, a),
                dh0 if ctx.has_h0 else None)


def _forward_only(work, heads_last, has_h0, q, k, v, a, h0):
    """:class:`_GateLoopCompiled` without autograd (no input needs a gradient): no states are saved."""
    return _run_forward(q, k, v, a, h0, False, heads_last)[:2]


def _is_heads_last(t: torch.Tensor) -> bool:
    """A ``(B, H, L, 1)`` view of a contiguous ``(B, L, H)`` tensor (what the GateLoop layer passes)."""
    return t.shape[-1] == 1 and t.transpose(1, 2).is_contiguous()


def gateloop_compiled(q, k, v, a, h0=None, *, dtype: torch.dtype | None = None):
    """GateLoop eq. 7-8 as one compiled loop, forward and backward: ``(y, S_L)`` in ``dtype``.

    q, k, a: (B, H, L, dk), v: (B, H, L, dv), h0: (B, H, dk, dv) or None. ``dtype`` is the dtype of the
    computation (``seqlab.ops.gateloop`` passes the promotion of the inputs); real inputs stay real in
    the kernel, which mixes them with complex ones, so nothing is copied to complex first. The
    magnitude check of ``a`` and the finiteness check of ``y`` are made inside the kernel. The
    backward pass keeps one state per 64 steps and recomputes the rest.

    With ``dk = dv = 1`` and inputs laid out ``(B, L, H)`` in memory (the GateLoop layer's projections,
    viewed as ``(B, H, L, 1)``), the heads are updated side by side with vector instructions and ``y``
    comes back as the same kind of view; otherwise every head is a row of its own (with ``dk = dv = 1``,
    float32 q, k, v and a complex64 a, eight rows at a time through the tiled kernel).
    """
    require_compiled("gateloop", q, k, v, a, h0)
    work = dtype or torch.promote_types(torch.promote_types(q.dtype, k.dtype), torch.promote_types(v.dtype, a.dtype))
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    if L == 0:
        final = torch.zeros(B, H, dk, dv, dtype=work) if h0 is None else h0.to(work).expand(B, H, dk, dv)
        return torch.zeros(B, H, 0, dv, dtype=work), final
    ins = [_as_kernel_input(t, work) for t in (q, k, v, a)]
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, a, h0))
    run = _GateLoopCompiled.apply if grad else _forward_only
    if dk == 1 and dv == 1 and all(_is_heads_last(t) for t in ins):
        lay = lambda t: t.transpose(1, 2).reshape(B, L, H)  # noqa: E731  a view: (B, L, H)
        start = torch.zeros(1, H, dtype=work) if h0 is None else h0.to(work).expand(B, H, 1, 1).reshape(B, H)
        y, final = run(work, True, h0 is not None, *map(lay, ins), start)
        return y.transpose(1, 2).unsqueeze(-1), final.reshape(B, H, 1, 1)
    fold = lambda t: t.reshape(B * H, *t.shape[2:])  # noqa: E731
    start = torch.zeros(1, dk, dv, dtype=work) if h0 is None else fold(h0.to(work).expand(B, H, dk, dv))
    y, final = run(work, False, h0 is not None, *map(fold, ins), start)
    return y.reshape(B, H, L, dv), final.reshape(B, H, dk, dv)
