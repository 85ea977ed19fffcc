"""GateLoop's chunked algorithm as Triton kernels, tiled over the key and value dimensions
(``gateloop(..., mode="triton")``, and the causal decays and linear attention on CUDA).

Triton has no complex dtype: every complex tensor travels as a real and an imaginary plane, and
the transitions as a ``log|a|`` plane and (only when some ``a`` is not real and positive) the planes of
their phasors' products from each chunk's start, ``P_n = prod_{j<=n} a_j / |a_j|``, taken in torch: a
phase between steps ``m`` and ``n`` is ``P_n conj(P_m)``, so no sine or cosine runs in a kernel. When ``q, k, v``,
``h0`` and ``a`` are all real and every ``a`` is positive (the causal decays, linear attention, real GateLoop), the
kernels run on the real planes alone (``CPLX=False``): no imaginary plane is read or written and every product is one
real ``tl.dot`` instead of four. The sequence is cut into chunks of ``C`` steps (16, or 64 on tensor cores: see
the blocks below); ``n, m, j`` index steps inside a chunk. Per chunk (the ``"chunked"`` mode of
``seqlab.ops.gateloop``, eq. 7-9 restarted at the chunk):

    D[n, m] = sum_{m < j <= n} log a_j        segment sums, summed afresh for every m: exact to rounding
                                              (never a difference of two large cumulative sums)
    g_n     = sum_{j <= n} log a_j            decay from the chunk's start,   E_m = sum_{j > m} log a_j  to its end
    A[n, m] = sum_d q_nd k_md exp(D[n, m, d])     n >= m, the intra-chunk surrogate attention (eq. 21)
    y_n     = sum_m A[n, m] v_m + (q_n . exp(g_n)) S_in
    S_out   = diag(exp(g_last)) S_in + sum_m (k_m . exp(E_m))^T v_m

The work is split as flash-linear-attention splits its chunked kernels, so that no program holds more
than one ``(BK, BV)`` tile of a state and one ``(C, BK)`` / ``(C, BV)`` tile of each input. Every kernel's programs
lie on grid axis 0 (tiles fastest, then chunks, then heads: no axis-1/2 limit of 65,535 chunks), and each tile's
offset is taken from the head index in int64 (no wrap past 2^31 elements), the offsets inside the tile in int32:

- :func:`chunk_states_kernel` - one program per (batch*head, key tile, value tile) walks the chunks and
  writes the state entering each chunk (``S_in``), then ``S_L``;
- :func:`chunk_attention_kernel` - one program per (batch*head, chunk): ``A`` of the chunk, summed over
  the key tiles, built a column ``m`` at a time from the segment sums ``D[:, m]``;
- :func:`chunk_output_kernel` - one program per (batch*head, chunk, value tile): ``y = A v + (q . exp(g)) S_in``,
  the second term summed over the key tiles;
- backward (PyTorch's conjugate convention, ``G_n = dL/dy_n``, ``P = G v^H`` a ``C x C`` matrix):
  :func:`chunk_adjoint_kernel` walks the chunks backwards from ``dL/dS_L`` and writes the adjoint state
  leaving each chunk, ``dS_out``, then ``dL/dh0``; ``dS_in = (q . exp(g))^H G + diag(conj(exp(g_last))) dS_out``;
- :func:`chunk_dqk_kernel` - per (batch*head, chunk, key tile)::

    dq_n = sum_{m<=n} conj(k_m . exp(D[n, m])) P[n, m] + conj(exp(g_n)) . (G_n S_in^H)
    dk_m = sum_{n>=m} conj(q_n . exp(D[n, m])) P[n, m] + conj(exp(E_m)) . (conj(v_m) dS_out^T)

  and the transitions' gradient ``dL/dlog a_j``, every path through ``a_j`` summed directly: (1) pairs
  ``m < j <= n`` inside the chunk, (2) from the state entering the chunk to ``n >= j``, (3) from ``m < j``
  to the state leaving it, (4) from state to state (the telescoping identity
  ``sum_{n>=j} conj(q_n) dq_n - conj(k_n) dk_n`` is exact too, but cancels catastrophically in float32
  for strong decays);
- :func:`chunk_dv_kernel` - per (batch*head, chunk, value tile), from ``A`` as the forward stored it (saved for the
  backward: ``BH * L * C`` numbers a plane, at ``C = 16`` a quarter of ``q``'s bytes for heads of ``dk = 64``):
  ``dv_m = sum_{n>=m} conj(A[n, m]) G_n + conj(k_m . exp(E_m)) dS_out``. The backward recomputes the states
  ``S_in`` (``L / C`` of them, ``dk x dv`` each: at ``C = 16`` four times ``q``'s bytes for heads of 64).

Blocks and precision. Heads under 16 (the paper's ``dk = dv = 1``) take an elementwise path with tiles of their own
size, not padded to 16 (:func:`gateloop_blocks`). Heads of 16 and more multiply with ``tl.dot`` at the precision
``precision`` names (:data:`PRECISIONS`): ``"ieee"`` by default (full float32: TF32 would break the float32
tolerances, and the interpreter would not show it), ``"tf32x3"`` / ``"tf32"`` (``tl.dot``'s ``input_precision``, on
tensor cores) or ``"bf16"`` (bfloat16 operands, float32 sums); float64 stays float64 and ``"ieee"``. In full
precision a ``tl.dot`` is a loop of FMAs whose operands each thread holds in registers: chunks and tiles of 16 (at
tiles of 32 the backward's ``dq/dk`` kernel spills 6 KB, at 64 all but the attention kernel do). Every precision
runs chunks and tiles of 16. A path of chunks of 64 for real inputs at ``"tf32"`` / ``"bf16"`` (the MMA reads its
operands from shared memory; key / value tiles of 32 or 64 picked by ``triton.autotune``, :func:`gateloop_configs`)
is written and tested but off (:data:`TENSOR_CORE_CHUNKS`): the intra-chunk matrix ``A`` is built a column at a
time on the CUDA cores (``C`` iterations of ``(C, BK)`` work), so its cost per step grows as ``C``, which is what
flash-linear-attention's sub-chunks (factorised products between sub-chunks of 16, exact within the diagonal ones)
avoid (the timings that turned it off: ``benchmarks/results/README.md``). ``tests/ops/test_triton_spills.py``
compiles every configuration the kernels launch with for sm_80 and sm_90 and finds no spills.
"""
from __future__ import annotations

import functools
import os

import torch

from seqlab.kernels import require_triton
from seqlab.ops import _checks

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - Triton ships for Linux only
    triton = None

__all__ = ["subchunk_attention_warps", "subchunk_dqk_warps", "gateloop_triton", "gateloop_triton_log", "gateloop_scan", "runs_on_scan", "gateloop_blocks",
           "gateloop_warps", "gateloop_chunk", "gateloop_configs", "CHUNK", "CHUNK_TENSOR_CORES", "TENSOR_CORE_CHUNKS", "KERNELS",
           "PRECISIONS", "SCAN_STATE", "SUBCHUNK", "SUBCHUNKS", "SUBCHUNK_KERNELS", "on_subchunks"]

CHUNK = 16          # steps a chunk in full precision and on the elementwise path; also tl.dot's smallest side
CHUNK_TENSOR_CORES = 64     # steps a chunk on the tensor-core path (real inputs at tf32, bf16), when it is on
TENSOR_CORE_CHUNKS = False  # that path: off, slower than chunks of 16 (module docstring)
KERNELS = ("chunk_states_kernel", "chunk_attention_kernel", "chunk_output_kernel", "chunk_adjoint_kernel",
           "chunk_dqk_kernel",
           "chunk_dv_kernel")
# Chunks of CHUNK_TENSOR_CORES cut into sub-chunks of SUBCHUNK (lesson 06, section 5): the off-diagonal sub-chunk
# blocks of A as tl.dot products of factors referred to the sub-chunks' boundaries, the diagonal ones exact. Every tile
# has SUBCHUNK rows, so it runs at every precision, real and complex. Off by default until timed on a GPU.
SUBCHUNK = 16
SUBCHUNKS = False
SUBCHUNK_KERNELS = ("subchunk_states_kernel", "subchunk_attention_kernel", "subchunk_output_kernel",
                    "subchunk_adjoint_kernel", "subchunk_boundary_kernel", "subchunk_dv_kernel")
# and chunk_dqk_kernel, run with the sub-chunks as its chunks (C = SUBCHUNK) on the states subchunk_boundary_kernel forms
PRECISIONS = ("ieee", "tf32x3", "tf32", "bf16")   # the chunk products' precision: see _mm
_INTERPRETER = os.environ.get("TRITON_INTERPRET", "0") == "1"    # seqlab.kernels sets it where there is no GPU
# What a helper returns in the imaginary slot on the real path (CPLX=False): a constant the compiler drops, since
# no real-path code reads it. Not None: Triton 3.6 cannot return None from a @triton.jit function.
_NO_PLANE = tl.constexpr(0.0) if triton is not None else None


if triton is not None:
    # Triton 3.7's CPU interpreter turns a tl.dot of bfloat16 tiles into one of their bit patterns (values ~1e10):
    # under it, "bf16" rounds the operands to bfloat16 and multiplies them in float32, the same numbers
    _INTERPRETED = tl.constexpr(_INTERPRETER)

    @triton.jit
    def _mm(a, b, DOT: tl.constexpr, PREC: tl.constexpr):
        """``a @ b`` for (M, K) and (K, N) tiles: ``tl.dot`` at precision ``PREC``, or elementwise for small tiles.

        ``PREC`` is ``tl.dot``'s ``input_precision`` (``"ieee"``, ``"tf32x3"``, ``"tf32"``), or ``"bf16"``: operands
        rounded to bfloat16, products accumulated in float32.

        The elementwise form sums a (K, M, N) product over its first axis. Written as the textbook
        ``sum(a[:, :, None] * b[None, :, :], axis=1)`` it is turned by Triton's combiner into a ``tt.dot``, which
        Triton 3.6 gets wrong on a GPU at a side of 1; ``tests/ops/test_triton_spills.py`` checks that no kernel of
        the small path holds a ``tt.dot``."""
        if DOT:
            if PREC == "bf16" and _INTERPRETED:     # the interpreter multiplies bf16 tiles as their raw bits
                return tl.dot(a.to(tl.bfloat16).to(tl.float32), b.to(tl.bfloat16).to(tl.float32),
                              input_precision="ieee")
            elif PREC == "bf16":
                return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), out_dtype=tl.float32)
            else:
                return tl.dot(a, b, input_precision=PREC)
        else:
            return tl.sum(tl.trans(a)[:, :, None] * b[:, None, :], axis=0)

    @triton.jit
    def _cmm(a_re, a_im, b_re, b_im, DOT: tl.constexpr, PREC: tl.constexpr, CPLX: tl.constexpr):
        """``a @ b``: complex on real and imaginary planes (4 products), or real (1 product; imaginary part None).
        The complex products are :func:`_mm`'s, written out (in the interpreter each call of a jitted function
        costs milliseconds)."""
        if not CPLX:
            return _mm(a_re, b_re, DOT, PREC), _NO_PLANE
        elif not DOT:
            a_re, a_im = tl.trans(a_re)[:, :, None], tl.trans(a_im)[:, :, None]
            b_re, b_im = b_re[:, None, :], b_im[:, None, :]
            return (tl.sum(a_re * b_re, axis=0) - tl.sum(a_im * b_im, axis=0),
                    tl.sum(a_re * b_im, axis=0) + tl.sum(a_im * b_re, axis=0))
        elif PREC == "bf16" and _INTERPRETED:
            a_re, a_im = a_re.to(tl.bfloat16).to(tl.float32), a_im.to(tl.bfloat16).to(tl.float32)
            b_re, b_im = b_re.to(tl.bfloat16).to(tl.float32), b_im.to(tl.bfloat16).to(tl.float32)
            return (tl.dot(a_re, b_re, input_precision="ieee") - tl.dot(a_im, b_im, input_precision="ieee"),
                    tl.dot(a_re, b_im, input_precision="ieee") + tl.dot(a_im, b_re, input_precision="ieee"))
        elif PREC == "bf16":
            a_re, a_im = a_re.to(tl.bfloat16), a_im.to(tl.bfloat16)
            b_re, b_im = b_re.to(tl.bfloat16), b_im.to(tl.bfloat16)
            return (tl.dot(a_re, b_re, out_dtype=tl.float32) - tl.dot(a_im, b_im, out_dtype=tl.float32),
                    tl.dot(a_re, b_im, out_dtype=tl.float32) + tl.dot(a_im, b_re, out_dtype=tl.float32))
        else:
            return (tl.dot(a_re, b_re, input_precision=PREC) - tl.dot(a_im, b_im, input_precision=PREC),
                    tl.dot(a_re, b_im, input_precision=PREC) + tl.dot(a_im, b_re, input_precision=PREC))

    @triton.jit
    def _cmul(a_re, a_im, b_re, b_im, CPLX: tl.constexpr):
        """Elementwise ``a * b`` (real when not ``CPLX``: imaginary parts None)."""
        if CPLX:
            return a_re * b_re - a_im * b_im, a_re * b_im + a_im * b_re
        else:
            return a_re * b_re, _NO_PLANE

    @triton.jit
    def _cmulc(a_re, a_im, b_re, b_im, CPLX: tl.constexpr):
        """Elementwise ``conj(a) * b``."""
        if CPLX:
            return a_re * b_re + a_im * b_im, a_re * b_im - a_im * b_re
        else:
            return a_re * b_re, _NO_PLANE

    @triton.jit
    def _conj(re, im, TRANS: tl.constexpr, CPLX: tl.constexpr):
        """``conj(x)``, or its conjugate transpose ``x^H`` (``TRANS``)."""
        if TRANS:
            re = tl.trans(re)
        if CPLX:
            if TRANS:
                im = tl.trans(im)
            return re, -im
        else:
            return re, _NO_PLANE

    @triton.jit
    def _trans(re, im, CPLX: tl.constexpr):
        """``x^T``."""
        if CPLX:
            return tl.trans(re), tl.trans(im)
        else:
            return tl.trans(re), _NO_PLANE

    @triton.jit
    def _decay(log_mag, p_re, p_im, PHASE: tl.constexpr, CPLX: tl.constexpr):
        """``exp(log_mag) * p`` as (re, im): a decay from its summed ``log|a|`` and its product of phasors
        ``p = prod a / |a|`` (``PHASE=False``: every ``a`` real and positive, ``p = 1``; a zero imaginary part in
        complex arithmetic, none in real)."""
        r = tl.exp(log_mag)
        if PHASE:
            return r * p_re, r * p_im
        elif CPLX:
            return r, tl.zeros_like(r)
        else:
            return r, _NO_PLANE

    @triton.jit
    def _transitions(la, ph_re, ph_im, bh, row0, L, NT, offs_c, offs_k, DK, C: tl.constexpr, PHASE: tl.constexpr):
        """One tile's ``log|a|`` (C, BK) of the chunk from row ``row0`` of head ``bh``, 0 past L (``a = 1``), and its
        phasors' products from the chunk's start ``P_n = prod_{j<=n} a_j / |a_j|`` (C, BK; laid out over the
        ``NT * C`` padded rows)."""
        mask = (offs_c[:, None] < L - row0) & (offs_k[None, :] < DK)
        p = offs_c[:, None] * DK + offs_k[None, :]
        lam = tl.load(la + (bh * L + row0) * DK + p, mask=mask, other=0.0)
        if PHASE:
            mask_p = (offs_c[:, None] < C) & (offs_k[None, :] < DK)
            start = (bh * NT * C + row0) * DK
            return (lam, tl.load(ph_re + start + p, mask=mask_p, other=1.0),
                    tl.load(ph_im + start + p, mask=mask_p, other=0.0))
        else:
            return lam, lam, lam          # phasors unused

    @triton.jit
    def _program(n_tiles, NT):
        """This program's (tile, chunk, batch*head): grid axis 0 runs over the tiles fastest, then the chunks, then
        the heads (``NT = 1``: the kernels that walk the chunks), so that no axis meets the 65,535 limit of axes 1
        and 2; the head index in int64, so that offsets past 2^31 elements do not wrap."""
        pid = tl.program_id(0)
        rest = pid // n_tiles
        return pid % n_tiles, rest % NT, (rest // NT).to(tl.int64)

    @triton.jit
    def _tile(re_ptr, im_ptr, bh, row0, L, offs_c, offs, D, CPLX: tl.constexpr):
        """A (C, B) tile of head ``bh``'s (L, D) plane pair from row ``row0``: rows past L and columns past D read 0
        (real inputs: the real plane only, the imaginary part None). The offset of the tile's first row is an
        int64 (``bh`` is), the offsets inside it int32."""
        start = (bh * L + row0) * D
        mask = (offs_c[:, None] < L - row0) & (offs[None, :] < D)
        p = offs_c[:, None] * D + offs[None, :]
        if CPLX:
            return (tl.load(re_ptr + start + p, mask=mask, other=0.0),
                    tl.load(im_ptr + start + p, mask=mask, other=0.0))
        else:
            return tl.load(re_ptr + start + p, mask=mask, other=0.0), _NO_PLANE

    @triton.jit
    def _store_tile(re_ptr, im_ptr, bh, row0, L, offs_c, offs, D, x_re, x_im, CPLX: tl.constexpr):
        """Store a (C, B) tile pair into head ``bh``'s (L, D) plane pair from row ``row0`` (rows past L, columns
        past D left alone): the inverse of :func:`_tile`."""
        start = (bh * L + row0) * D
        mask = (offs_c[:, None] < L - row0) & (offs[None, :] < D)
        p = offs_c[:, None] * D + offs[None, :]
        tl.store(re_ptr + start + p, x_re, mask=mask)
        if CPLX:
            tl.store(im_ptr + start + p, x_im, mask=mask)

    @triton.jit
    def _state_tile(re_ptr, im_ptr, base, offs_k, offs_v, DK, DV, CPLX: tl.constexpr):
        """A (BK, BV) tile of a (DK, DV) state at ``base``: its offsets within the state, mask and values."""
        p = offs_k[:, None] * DV + offs_v[None, :]
        mask = (offs_k[:, None] < DK) & (offs_v[None, :] < DV)
        re = tl.load(re_ptr + base + p, mask=mask, other=0.0)
        if CPLX:
            return p, mask, re, tl.load(im_ptr + base + p, mask=mask, other=0.0)
        else:
            return p, mask, re, _NO_PLANE

    @triton.jit
    def _from_start(la, ph_re, ph_im, bh, row0, L, NT, offs_c, offs_k, DK, C: tl.constexpr, PHASE: tl.constexpr,
                    CPLX: tl.constexpr):
        """One tile's ``log|a|`` and phasor products ``P`` (C, BK), its decays from the chunk's start ``exp(g_n)``
        (C, BK) and through the whole chunk ``exp(g_last)`` (BK,)."""
        lam, p_re, p_im = _transitions(la, ph_re, ph_im, bh, row0, L, NT, offs_c, offs_k, DK, C, PHASE)
        g = tl.cumsum(lam, axis=0)
        e_re, e_im = _decay(g, p_re, p_im, PHASE, CPLX)
        if PHASE:
            last = offs_c[:, None] == C - 1                                            # P_last
            t_re, t_im = _decay(tl.sum(lam, axis=0), tl.sum(tl.where(last, p_re, 0.0), axis=0),
                                tl.sum(tl.where(last, p_im, 0.0), axis=0), PHASE, CPLX)
        else:
            t_re, t_im = _decay(tl.sum(lam, axis=0), None, None, PHASE, CPLX)
        return lam, p_re, p_im, e_re, e_im, t_re, t_im

    @triton.jit
    def _to_end(la, bh, row0, L, offs_c, offs_k, DK, p_re, p_im, C: tl.constexpr, PHASE: tl.constexpr,
                CPLX: tl.constexpr):
        """Decays to the chunk's end, ``exp(E_m) = prod_{m < j < C} a_j`` (C, BK): a reverse cumulative sum of the
        next rows' ``log|a|`` (loaded shifted by one, so that nothing is subtracted), and ``P_last conj(P_m)``."""
        nxt = offs_c[:, None] + 1                           # the row after (a = 1 past the chunk or L)
        mask = (nxt < C) & (nxt < L - row0) & (offs_k[None, :] < DK)
        E = tl.cumsum(tl.load(la + (bh * L + row0) * DK + nxt * DK + offs_k[None, :], mask=mask, other=0.0),
                      axis=0, reverse=True)
        if PHASE:
            last = offs_c[:, None] == C - 1
            last_re = tl.sum(tl.where(last, p_re, 0.0), axis=0)[None, :]
            last_im = tl.sum(tl.where(last, p_im, 0.0), axis=0)[None, :]
            return _decay(E, last_re * p_re + last_im * p_im, last_im * p_re - last_re * p_im, PHASE, CPLX)
        else:
            return _decay(E, None, None, PHASE, CPLX)

    @triton.jit
    def _chunk_matrix(re_ptr, im_ptr, chunk, offs_c, C: tl.constexpr, CPLX: tl.constexpr):
        """Chunk ``chunk``'s (C, C) matrix of a (BH * NT, C, C) plane pair."""
        p = chunk * C * C + offs_c[:, None] * C + offs_c[None, :]
        if CPLX:
            return tl.load(re_ptr + p), tl.load(im_ptr + p)
        else:
            return tl.load(re_ptr + p), _NO_PLANE

    @triton.jit
    def _intra_attention(q_re, q_im, k_re, k_im, lam, p_re, p_im, offs_c, C: tl.constexpr, PHASE: tl.constexpr,
                         CPLX: tl.constexpr):
        """This key tile's share of ``A[n, m] = sum_d q_nd k_md exp(D[n, m, d])`` (C, C), built a column at a time.

        Column ``m`` takes ``exp(D[n, m])`` for every n (C, BK), zero for n < m: the magnitude from the segment sums
        ``sum_{m<j<=n} log|a_j|``, summed afresh (a difference of cumulative sums would lose digits after a
        near-reset), the phase as ``P_n conj(P_m)``, products of unit phasors, which lose none. (Written inline here
        and in :func:`chunk_dqk_kernel`: in the interpreter each call of a jitted function costs milliseconds.)"""
        A_re = tl.zeros((C, C), dtype=q_re.dtype)
        if CPLX:
            A_im = tl.zeros((C, C), dtype=q_re.dtype)
        for m in range(C):
            at_m = offs_c[:, None] == m
            here = offs_c[None, :] == m
            D = tl.cumsum(tl.where(offs_c[:, None] > m, lam, 0.0), axis=0)             # D[:, m]  (C, BK)
            w_re = tl.where(offs_c[:, None] >= m, tl.exp(D), 0.0)                      # exp(D[:, m])
            if PHASE:
                pm_re = tl.sum(tl.where(at_m, p_re, 0.0), axis=0)[None, :]             # P_m
                pm_im = tl.sum(tl.where(at_m, p_im, 0.0), axis=0)[None, :]
                w_re, w_im = w_re * (p_re * pm_re + p_im * pm_im), w_re * (p_im * pm_re - p_re * pm_im)
            elif CPLX:
                w_im = tl.zeros_like(w_re)
            km_re = tl.sum(tl.where(at_m, k_re, 0.0), axis=0)[None, :]    # k_m  (1, BK)
            if CPLX:
                km_im = tl.sum(tl.where(at_m, k_im, 0.0), axis=0)[None, :]
                x_re = km_re * w_re - km_im * w_im                        # k_m . exp(D[:, m])
                x_im = km_re * w_im + km_im * w_re
                col_re = tl.sum(q_re * x_re - q_im * x_im, axis=1)        # (C,)
                col_im = tl.sum(q_re * x_im + q_im * x_re, axis=1)
                A_re += tl.where(here, col_re[:, None], 0.0)
                A_im += tl.where(here, col_im[:, None], 0.0)
            else:
                A_re += tl.where(here, tl.sum(q_re * (km_re * w_re), axis=1)[:, None], 0.0)
        if CPLX:
            return A_re, A_im
        else:
            return A_re, _NO_PLANE

    @triton.jit
    def chunk_states_kernel(k_re, k_im, v_re, v_im, la, ph_re, ph_im, h0_re, h0_im, hs_re, hs_im, sL_re, sL_im,
                            L, DK, DV, NT,
                            C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, DOT: tl.constexpr,
                            PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """``S_in`` of every chunk into ``hs`` (BH, NT, DK, DV) and ``S_L`` into ``sL``;
        grid (BH * key tiles * value tiles,)."""
        kv, only_chunk, bh = _program(tl.cdiv(DK, BK) * tl.cdiv(DV, BV), 1)
        offs_c = tl.arange(0, C)
        offs_k = (kv // tl.cdiv(DV, BV)) * BK + tl.arange(0, BK)
        offs_v = (kv % tl.cdiv(DV, BV)) * BV + tl.arange(0, BV)
        p_s, m_s, S_re, S_im = _state_tile(h0_re, h0_im, bh * DK * DV, offs_k, offs_v, DK, DV, CPLX)  # S_0 (BK, BV)
        for c in range(NT):
            tl.store(hs_re + (bh * NT + c) * DK * DV + p_s, S_re, mask=m_s)
            if CPLX:
                tl.store(hs_im + (bh * NT + c) * DK * DV + p_s, S_im, mask=m_s)
            row0 = c * C
            kr, ki = _tile(k_re, k_im, bh, row0, L, offs_c, offs_k, DK, CPLX)       # (C, BK)
            vr, vi = _tile(v_re, v_im, bh, row0, L, offs_c, offs_v, DV, CPLX)       # (C, BV)
            lam, p_re, p_im, e_re, e_im, t_re, t_im = _from_start(
                la, ph_re, ph_im, bh, row0, L, NT, offs_c, offs_k, DK, C, PHASE, CPLX)
            E_re, E_im = _to_end(la, bh, row0, L, offs_c, offs_k, DK, p_re, p_im, C, PHASE, CPLX)
            ke_re, ke_im = _cmul(kr, ki, E_re, E_im, CPLX)                           # k_m . exp(E_m)
            kt_re, kt_im = _trans(ke_re, ke_im, CPLX)
            nr, ni = _cmm(kt_re, kt_im, vr, vi, DOT, PREC, CPLX)                           # (BK, BV)
            if CPLX:
                S_re, S_im = (t_re[:, None] * S_re - t_im[:, None] * S_im + nr,
                              t_re[:, None] * S_im + t_im[:, None] * S_re + ni)
            else:
                S_re = t_re[:, None] * S_re + nr
        tl.store(sL_re + bh * DK * DV + p_s, S_re, mask=m_s)
        if CPLX:
            tl.store(sL_im + bh * DK * DV + p_s, S_im, mask=m_s)

    @triton.jit
    def chunk_attention_kernel(q_re, q_im, k_re, k_im, la, ph_re, ph_im, A_re, A_im,
                               L, DK, NT, C: tl.constexpr, BK: tl.constexpr, PHASE: tl.constexpr,
                               CPLX: tl.constexpr):
        """The intra-chunk attention ``A`` (C, C) of one chunk, summed over the key tiles, into ``A`` (BH, NT, C, C);
        grid (BH * NT,)."""
        only_tile, c, bh = _program(1, NT)
        offs_c = tl.arange(0, C)
        row0 = c * C
        acc_re = tl.zeros((C, C), dtype=q_re.dtype.element_ty)
        if CPLX:
            acc_im = tl.zeros((C, C), dtype=q_re.dtype.element_ty)
        for kt in range(tl.cdiv(DK, BK)):
            offs_k = kt * BK + tl.arange(0, BK)
            qr, qi = _tile(q_re, q_im, bh, row0, L, offs_c, offs_k, DK, CPLX)
            kr, ki = _tile(k_re, k_im, bh, row0, L, offs_c, offs_k, DK, CPLX)
            lam, p_re, p_im, _, _, _, _ = _from_start(
                la, ph_re, ph_im, bh, row0, L, NT, offs_c, offs_k, DK, C, PHASE, CPLX)
            a_re, a_im = _intra_attention(qr, qi, kr, ki, lam, p_re, p_im, offs_c, C, PHASE, CPLX)
            acc_re += a_re
            if CPLX:
                acc_im += a_im
        p = (bh * NT + c) * C * C + offs_c[:, None] * C + offs_c[None, :]
        tl.store(A_re + p, acc_re)
        if CPLX:
            tl.store(A_im + p, acc_im)

    @triton.jit
    def chunk_output_kernel(q_re, q_im, v_re, v_im, la, ph_re, ph_im, hs_re, hs_im, A_re, A_im, y_re, y_im,
                            L, DK, DV, NT,
                            C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, DOT: tl.constexpr,
                            PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """``y`` of one chunk and value tile; grid (BH * NT * value tiles,)."""
        vt, c, bh = _program(tl.cdiv(DV, BV), NT)
        offs_c = tl.arange(0, C)
        offs_v = vt * BV + tl.arange(0, BV)
        row0 = c * C
        state = (bh * NT + c) * DK * DV
        vr, vi = _tile(v_re, v_im, bh, row0, L, offs_c, offs_v, DV, CPLX)
        a_re, a_im = _chunk_matrix(A_re, A_im, bh * NT + c, offs_c, C, CPLX)
        yr, yi = _cmm(a_re, a_im, vr, vi, DOT, PREC, CPLX)                                      # A v  (C, BV)
        for kt in range(tl.cdiv(DK, BK)):
            offs_k = kt * BK + tl.arange(0, BK)
            qr, qi = _tile(q_re, q_im, bh, row0, L, offs_c, offs_k, DK, CPLX)
            lam, p_re, p_im, e_re, e_im, t_re, t_im = _from_start(
                la, ph_re, ph_im, bh, row0, L, NT, offs_c, offs_k, DK, C, PHASE, CPLX)
            _, _, S_re, S_im = _state_tile(hs_re, hs_im, state, offs_k, offs_v, DK, DV, CPLX)
            qe_re, qe_im = _cmul(qr, qi, e_re, e_im, CPLX)                                # q . exp(g)
            ur, ui = _cmm(qe_re, qe_im, S_re, S_im, DOT, PREC, CPLX)                            # (q . exp(g)) S_in
            yr += ur
            if CPLX:
                yi += ui
        _store_tile(y_re, y_im, bh, row0, L, offs_c, offs_v, DV, yr, yi, CPLX)

    @triton.jit
    def chunk_adjoint_kernel(q_re, q_im, la, ph_re, ph_im, g_re, g_im, gS_re, gS_im, dhs_re, dhs_im, dh0_re, dh0_im,
                             L, DK, DV, NT,
                             C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, DOT: tl.constexpr,
                             PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """``dS_out`` of every chunk into ``dhs`` (from ``dL/dS_L``, backwards) and ``dL/dh0``;
        grid (BH * key tiles * value tiles,)."""
        kv, only_chunk, bh = _program(tl.cdiv(DK, BK) * tl.cdiv(DV, BV), 1)
        offs_c = tl.arange(0, C)
        offs_k = (kv // tl.cdiv(DV, BV)) * BK + tl.arange(0, BK)
        offs_v = (kv % tl.cdiv(DV, BV)) * BV + tl.arange(0, BV)
        p_s, m_s, dS_re, dS_im = _state_tile(gS_re, gS_im, bh * DK * DV, offs_k, offs_v, DK, DV, CPLX)
        for i in range(NT):
            c = NT - 1 - i
            tl.store(dhs_re + (bh * NT + c) * DK * DV + p_s, dS_re, mask=m_s)
            if CPLX:
                tl.store(dhs_im + (bh * NT + c) * DK * DV + p_s, dS_im, mask=m_s)
            row0 = c * C
            qr, qi = _tile(q_re, q_im, bh, row0, L, offs_c, offs_k, DK, CPLX)
            gr, gi = _tile(g_re, g_im, bh, row0, L, offs_c, offs_v, DV, CPLX)     # G = dL/dy  (C, BV)
            lam, p_re, p_im, e_re, e_im, t_re, t_im = _from_start(
                la, ph_re, ph_im, bh, row0, L, NT, offs_c, offs_k, DK, C, PHASE, CPLX)
            qe_re, qe_im = _cmul(qr, qi, e_re, e_im, CPLX)
            qh_re, qh_im = _conj(qe_re, qe_im, True, CPLX)
            ar, ai = _cmm(qh_re, qh_im, gr, gi, DOT, PREC, CPLX)                         # (q . exp(g))^H G
            if CPLX:
                dS_re, dS_im = (t_re[:, None] * dS_re + t_im[:, None] * dS_im + ar,
                                t_re[:, None] * dS_im - t_im[:, None] * dS_re + ai)
            else:
                dS_re = t_re[:, None] * dS_re + ar
        tl.store(dh0_re + bh * DK * DV + p_s, dS_re, mask=m_s)
        if CPLX:
            tl.store(dh0_im + bh * DK * DV + p_s, dS_im, mask=m_s)

    @triton.jit
    def chunk_dqk_kernel(q_re, q_im, k_re, k_im, v_re, v_im, la, ph_re, ph_im, g_re, g_im, hs_re, hs_im, dhs_re, dhs_im,
                         dq_re, dq_im, dk_re, dk_im, dl_re, dl_im,
                         L, DK, DV, NT,
                         C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, DOT: tl.constexpr,
                         PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """``dq``, ``dk`` and ``dL/dlog a`` of one chunk and key tile; grid (BH * NT * key tiles,)."""
        kt, c, bh = _program(tl.cdiv(DK, BK), NT)
        offs_c = tl.arange(0, C)
        offs_k = kt * BK + tl.arange(0, BK)
        row0 = c * C
        state = (bh * NT + c) * DK * DV
        zero_ck = tl.zeros((C, BK), dtype=q_re.dtype.element_ty)
        P_re = tl.zeros((C, C), dtype=q_re.dtype.element_ty)      # P = G v^H
        GS_re = zero_ck                                            # G S_in^H           (C, BK)
        W_re = zero_ck                                             # conj(v) dS_out^T   (C, BK)
        o_re = tl.zeros((BK,), dtype=q_re.dtype.element_ty)        # sum_e dS_out conj(S_in)
        if CPLX:
            P_im = tl.zeros((C, C), dtype=q_re.dtype.element_ty)
            GS_im, W_im = zero_ck, zero_ck
            o_im = tl.zeros((BK,), dtype=q_re.dtype.element_ty)
        for vt in range(tl.cdiv(DV, BV)):
            offs_v = vt * BV + tl.arange(0, BV)
            vr, vi = _tile(v_re, v_im, bh, row0, L, offs_c, offs_v, DV, CPLX)     # (C, BV)
            gr, gi = _tile(g_re, g_im, bh, row0, L, offs_c, offs_v, DV, CPLX)
            _, _, S_re, S_im = _state_tile(hs_re, hs_im, state, offs_k, offs_v, DK, DV, CPLX)      # (BK, BV)
            _, _, dS_re, dS_im = _state_tile(dhs_re, dhs_im, state, offs_k, offs_v, DK, DV, CPLX)
            vh_re, vh_im = _conj(vr, vi, True, CPLX)
            Sh_re, Sh_im = _conj(S_re, S_im, True, CPLX)
            vc_re, vc_im = _conj(vr, vi, False, CPLX)
            dSt_re, dSt_im = _trans(dS_re, dS_im, CPLX)
            pr, pi = _cmm(gr, gi, vh_re, vh_im, DOT, PREC, CPLX)
            hr, hi = _cmm(gr, gi, Sh_re, Sh_im, DOT, PREC, CPLX)
            wr, wi = _cmm(vc_re, vc_im, dSt_re, dSt_im, DOT, PREC, CPLX)
            or_, oi = _cmulc(S_re, S_im, dS_re, dS_im, CPLX)
            P_re += pr
            GS_re += hr
            W_re += wr
            o_re += tl.sum(or_, axis=1)
            if CPLX:
                P_im += pi
                GS_im += hi
                W_im += wi
                o_im += tl.sum(oi, axis=1)
        if not CPLX:
            P_im, GS_im, W_im, o_im = None, None, None, None
        qr, qi = _tile(q_re, q_im, bh, row0, L, offs_c, offs_k, DK, CPLX)                 # (C, BK)
        kr, ki = _tile(k_re, k_im, bh, row0, L, offs_c, offs_k, DK, CPLX)
        lam, p_re, p_im, e_re, e_im, t_re, t_im = _from_start(
                la, ph_re, ph_im, bh, row0, L, NT, offs_c, offs_k, DK, C, PHASE, CPLX)
        E_re, E_im = _to_end(la, bh, row0, L, offs_c, offs_k, DK, p_re, p_im, C, PHASE, CPLX)
        # the state parts: dq = conj(exp(g)) . (G S_in^H), dk = conj(exp(E)) . W
        dqr, dqi = _cmulc(e_re, e_im, GS_re, GS_im, CPLX)
        dkr, dki = _cmulc(E_re, E_im, W_re, W_im, CPLX)
        # dlog a_j, path (2): sum_{n >= j} conj(q_n . exp(g_n)) . (G_n S_in^H)
        qe_re, qe_im = _cmul(qr, qi, e_re, e_im, CPLX)
        s_re, s_im = _cmulc(qe_re, qe_im, GS_re, GS_im, CPLX)
        # path (4): conj(exp(g_last)) . sum_e dS_out conj(S_in), the same for every j
        u_re, u_im = _cmulc(t_re, t_im, o_re, o_im, CPLX)
        dlr = tl.cumsum(s_re, axis=0, reverse=True) + u_re[None, :]
        if CPLX:
            dli = tl.cumsum(s_im, axis=0, reverse=True) + u_im[None, :]
        # path (3) needs V_m = conj(k_m . exp(E_m)) . W_m, summed over m < j
        ke_re, ke_im = _cmul(kr, ki, E_re, E_im, CPLX)
        V_re, V_im = _cmulc(ke_re, ke_im, W_re, W_im, CPLX)
        for m in range(C):
            col_m = offs_c[None, :] == m
            here = offs_c[:, None] == m
            after = offs_c[:, None] > m
            w_re = tl.where(offs_c[:, None] >= m, tl.exp(tl.cumsum(tl.where(after, lam, 0.0), axis=0)), 0.0)
            if PHASE:                                                                # exp(D[:, m])  (C, BK), as in
                pw_re = tl.sum(tl.where(here, p_re, 0.0), axis=0)[None, :]           # _intra_attention
                pw_im = tl.sum(tl.where(here, p_im, 0.0), axis=0)[None, :]
                w_re, w_im = w_re * (p_re * pw_re + p_im * pw_im), w_re * (p_im * pw_re - p_re * pw_im)
            elif CPLX:
                w_im = tl.zeros_like(w_re)
            pm_re = tl.sum(tl.where(col_m, P_re, 0.0), axis=1)[:, None]              # P[:, m]  (C, 1)
            km_re = tl.sum(tl.where(here, kr, 0.0), axis=0)[None, :]                 # k_m  (1, BK)
            if CPLX:
                pm_im = tl.sum(tl.where(col_m, P_im, 0.0), axis=1)[:, None]
                km_im = tl.sum(tl.where(here, ki, 0.0), axis=0)[None, :]
                # dq_n += conj(k_m . exp(D[n, m])) P[n, m]
                x_re = km_re * w_re - km_im * w_im
                x_im = km_re * w_im + km_im * w_re
                dqr += x_re * pm_re + x_im * pm_im
                dqi += x_re * pm_im - x_im * pm_re
                # dk_m += sum_n conj(q_n . exp(D[n, m])) P[n, m]
                y_re = qr * w_re - qi * w_im
                y_im = qr * w_im + qi * w_re
                dkr += tl.where(here, tl.sum(y_re * pm_re + y_im * pm_im, axis=0)[None, :], 0.0)
                dki += tl.where(here, tl.sum(y_re * pm_im - y_im * pm_re, axis=0)[None, :], 0.0)
                # path (1): T_n = conj(q_n k_m exp(D[n, m])) P[n, m]; dlog a_j += sum_{n >= j} T_n for j > m
                z_re = y_re * km_re - y_im * km_im
                z_im = y_re * km_im + y_im * km_re
                # path (3): dlog a_j += V_m for j > m
                dlr += tl.where(after, tl.cumsum(z_re * pm_re + z_im * pm_im, axis=0, reverse=True)
                                + tl.sum(tl.where(here, V_re, 0.0), axis=0)[None, :], 0.0)
                dli += tl.where(after, tl.cumsum(z_re * pm_im - z_im * pm_re, axis=0, reverse=True)
                                + tl.sum(tl.where(here, V_im, 0.0), axis=0)[None, :], 0.0)
            else:
                dqr += km_re * w_re * pm_re                                          # dq_n += k_m exp(D[n, m]) P[n, m]
                yp = qr * w_re * pm_re                                               # q_n exp(D[n, m]) P[n, m]
                dkr += tl.where(here, tl.sum(yp, axis=0)[None, :], 0.0)
                # paths (1) and (3), as above
                dlr += tl.where(after, tl.cumsum(yp * km_re, axis=0, reverse=True)
                                + tl.sum(tl.where(here, V_re, 0.0), axis=0)[None, :], 0.0)
        if not CPLX:
            dli = None
        _store_tile(dq_re, dq_im, bh, row0, L, offs_c, offs_k, DK, dqr, dqi, CPLX)
        _store_tile(dk_re, dk_im, bh, row0, L, offs_c, offs_k, DK, dkr, dki, CPLX)
        _store_tile(dl_re, dl_im, bh, row0, L, offs_c, offs_k, DK, dlr, dli, CPLX)

    @triton.jit
    def chunk_dv_kernel(k_re, k_im, la, ph_re, ph_im, g_re, g_im, dhs_re, dhs_im, A_re, A_im, dv_re, dv_im,
                        L, DK, DV, NT,
                        C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, DOT: tl.constexpr,
                        PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """``dv`` of one chunk and value tile; grid (BH * NT * value tiles,)."""
        vt, c, bh = _program(tl.cdiv(DV, BV), NT)
        offs_c = tl.arange(0, C)
        offs_v = vt * BV + tl.arange(0, BV)
        row0 = c * C
        gr, gi = _tile(g_re, g_im, bh, row0, L, offs_c, offs_v, DV, CPLX)
        a_re, a_im = _chunk_matrix(A_re, A_im, bh * NT + c, offs_c, C, CPLX)
        ah_re, ah_im = _conj(a_re, a_im, True, CPLX)
        xr, xi = _cmm(ah_re, ah_im, gr, gi, DOT, PREC, CPLX)                                  # A^H G  (C, BV)
        for kt in range(tl.cdiv(DK, BK)):
            offs_k = kt * BK + tl.arange(0, BK)
            kr, ki = _tile(k_re, k_im, bh, row0, L, offs_c, offs_k, DK, CPLX)
            _, p_re, p_im = _transitions(la, ph_re, ph_im, bh, row0, L, NT, offs_c, offs_k, DK, C, PHASE)
            E_re, E_im = _to_end(la, bh, row0, L, offs_c, offs_k, DK, p_re, p_im, C, PHASE, CPLX)
            _, _, dS_re, dS_im = _state_tile(dhs_re, dhs_im, (bh * NT + c) * DK * DV, offs_k, offs_v, DK, DV, CPLX)
            ke_re, ke_im = _cmul(kr, ki, E_re, E_im, CPLX)
            kc_re, kc_im = _conj(ke_re, ke_im, False, CPLX)
            ur, ui = _cmm(kc_re, kc_im, dS_re, dS_im, DOT, PREC, CPLX)                       # conj(k . exp(E)) dS_out
            xr += ur
            if CPLX:
                xi += ui
        _store_tile(dv_re, dv_im, bh, row0, L, offs_c, offs_v, DV, xr, xi, CPLX)

    # ---- Chunks of C = 64 cut into sub-chunks of S = 16 (the boundary-referenced form of lesson 06, section 5) ----
    # Rows r = c*C + I*S + s: chunk c, sub-chunk I, step s. The phasors' products run from each sub-chunk's start
    # (Q_n, laid out over NSUB = NT * C/S sub-chunks of S); every decay between two sub-chunks is carried as its
    # summed log|a| and its product of the sub-chunks' last phasors Q_last (:func:`_across`).

    @triton.jit
    def _across(la, ph_re, ph_im, bh, c0, first, last, L, NSUB, offs_s, offs_k, DK, S: tl.constexpr,
                BK: tl.constexpr, PHASE: tl.constexpr):
        """The decay through sub-chunks ``first .. last-1`` of the chunk that starts at row ``c0``:
        ``sum log|a|`` (BK,) and the phasor ``prod Q_last`` (BK,) as (re, im): every ``a`` between two sub-chunk
        boundaries, summed afresh (no difference of cumulative sums), ``<= 0``."""
        mag = tl.zeros((BK,), dtype=la.dtype.element_ty)
        p_re = tl.full((BK,), 1.0, dtype=la.dtype.element_ty)
        p_im = tl.zeros((BK,), dtype=la.dtype.element_ty)
        for K in range(first, last):
            lam, q_re, q_im = _transitions(la, ph_re, ph_im, bh, c0 + K * S, L, NSUB, offs_s, offs_k, DK, S, PHASE)
            mag += tl.sum(lam, axis=0)
            if PHASE:
                last_row = offs_s[:, None] == S - 1
                l_re = tl.sum(tl.where(last_row, q_re, 0.0), axis=0)
                l_im = tl.sum(tl.where(last_row, q_im, 0.0), axis=0)
                p_re, p_im = p_re * l_re - p_im * l_im, p_re * l_im + p_im * l_re
        return mag, p_re, p_im

    @triton.jit
    def _scaled(x_re, x_im, mag, p_re, p_im, CONJ: tl.constexpr, PHASE: tl.constexpr, CPLX: tl.constexpr):
        """A (S, BK) tile times the per-channel decay ``exp(mag) p`` (BK,), or its conjugate (``CONJ``)."""
        r = tl.exp(mag)[None, :]
        if PHASE:
            pr = r * p_re[None, :]
            pi = r * p_im[None, :]
            if CONJ:
                pi = -pi
            return x_re * pr - x_im * pi, x_re * pi + x_im * pr
        elif CPLX:
            return x_re * r, x_im * r
        else:
            return x_re * r, _NO_PLANE

    @triton.jit
    def _state_scaled(s_re, s_im, mag, p_re, p_im, CONJ: tl.constexpr, PHASE: tl.constexpr, CPLX: tl.constexpr):
        """``diag(exp(mag) p) S`` for a (BK, BV) state tile (``CONJ``: ``diag(conj(exp(mag) p)) S``)."""
        r = tl.exp(mag)[:, None]
        if PHASE:
            pr = r * p_re[:, None]
            pi = r * p_im[:, None]
            if CONJ:
                pi = -pi
            return s_re * pr - s_im * pi, s_re * pi + s_im * pr
        elif CPLX:
            return s_re * r, s_im * r
        else:
            return s_re * r, _NO_PLANE

    @triton.jit
    def _last_phasor(q_re, q_im, offs_s, S: tl.constexpr, PHASE: tl.constexpr):
        """``Q_last`` (BK,) of a sub-chunk's phasor tile (only read when ``PHASE``)."""
        if PHASE:
            last_row = offs_s[:, None] == S - 1
            return tl.sum(tl.where(last_row, q_re, 0.0), axis=0), tl.sum(tl.where(last_row, q_im, 0.0), axis=0)
        else:
            return q_re, q_im

    @triton.jit
    def _block(re_ptr, im_ptr, chunk, I, J, offs_s, C: tl.constexpr, S: tl.constexpr, CPLX: tl.constexpr):
        """Block (I, J) (S, S) of chunk ``chunk``'s (C, C) matrix in a (BH * NT, C, C) plane pair, and its offsets."""
        p = chunk * C * C + (I * S + offs_s[:, None]) * C + J * S + offs_s[None, :]
        if CPLX:
            return p, tl.load(re_ptr + p), tl.load(im_ptr + p)
        else:
            return p, tl.load(re_ptr + p), _NO_PLANE

    @triton.jit
    def subchunk_states_kernel(k_re, k_im, v_re, v_im, la, ph_re, ph_im, h0_re, h0_im, hs_re, hs_im, sL_re, sL_im,
                               L, DK, DV, NT,
                               C: tl.constexpr, S: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                               DOT: tl.constexpr, PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """``S_in`` of every chunk of C into ``hs`` (BH, NT, DK, DV) and ``S_L`` into ``sL``, walking the sub-chunks:
        ``S <- diag(exp(sum_J log a) Q_last) S + (k . exp(E) Q_last conj(Q))^T v`` per sub-chunk J (eq. 7 over S
        steps, every exponent a sum of ``log|a| <= 0`` inside one sub-chunk); grid (BH * key tiles * value tiles,)."""
        kv, only_chunk, bh = _program(tl.cdiv(DK, BK) * tl.cdiv(DV, BV), 1)
        NSUB = NT * (C // S)
        offs_s = tl.arange(0, S)
        offs_k = (kv // tl.cdiv(DV, BV)) * BK + tl.arange(0, BK)
        offs_v = (kv % tl.cdiv(DV, BV)) * BV + tl.arange(0, BV)
        p_s, m_s, S_re, S_im = _state_tile(h0_re, h0_im, bh * DK * DV, offs_k, offs_v, DK, DV, CPLX)  # S_0 (BK, BV)
        for j in range(NSUB):
            first = m_s & (j % (C // S) == 0)                                           # a chunk starts here
            tl.store(hs_re + (bh * NT + j // (C // S)) * DK * DV + p_s, S_re, mask=first)
            if CPLX:
                tl.store(hs_im + (bh * NT + j // (C // S)) * DK * DV + p_s, S_im, mask=first)
            row0 = j * S
            kr, ki = _tile(k_re, k_im, bh, row0, L, offs_s, offs_k, DK, CPLX)       # (S, BK)
            vr, vi = _tile(v_re, v_im, bh, row0, L, offs_s, offs_v, DV, CPLX)       # (S, BV)
            lam, p_re, p_im, e_re, e_im, t_re, t_im = _from_start(
                la, ph_re, ph_im, bh, row0, L, NSUB, offs_s, offs_k, DK, S, PHASE, CPLX)
            E_re, E_im = _to_end(la, bh, row0, L, offs_s, offs_k, DK, p_re, p_im, S, PHASE, CPLX)
            ke_re, ke_im = _cmul(kr, ki, E_re, E_im, CPLX)                           # k_m . exp(E_m)
            kt_re, kt_im = _trans(ke_re, ke_im, CPLX)
            nr, ni = _cmm(kt_re, kt_im, vr, vi, DOT, PREC, CPLX)                     # (BK, BV)
            if CPLX:
                S_re, S_im = (t_re[:, None] * S_re - t_im[:, None] * S_im + nr,
                              t_re[:, None] * S_im + t_im[:, None] * S_re + ni)
            else:
                S_re = t_re[:, None] * S_re + nr
        tl.store(sL_re + bh * DK * DV + p_s, S_re, mask=m_s)
        if CPLX:
            tl.store(sL_im + bh * DK * DV + p_s, S_im, mask=m_s)

    @triton.jit
    def subchunk_attention_kernel(q_re, q_im, k_re, k_im, la, ph_re, ph_im, A_re, A_im, L, DK, NT,
                                  C: tl.constexpr, S: tl.constexpr, BK: tl.constexpr, DOT: tl.constexpr,
                                  PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """Block (I, J) (S, S) of a chunk's intra-chunk attention ``A`` (C, C), summed over the key tiles;
        grid (BH * NT * (C/S)^2,). With the query n in sub-chunk I and the key m in sub-chunk J:

        - J < I: ``D[n, m] = gl_I[n] + mid + el_J[m]``, the decay from I's start to n (``gl``, at most S steps),
          through the sub-chunks between (``mid``) and from m to J's end (``el``, at most S steps), so
          ``A[I, J] = (q_I . exp(gl_I) Q) (k_J . exp(el_J + mid) Q_last conj(Q) P_mid)^T``: one ``tl.dot`` of factors
          whose exponents are all ``<= 0`` (nothing can overflow, at any gate);
        - J = I: the exact column-by-column sum of ``q_nd k_md exp(D[n, m, d])`` over the pairs of one sub-chunk
          (:func:`_intra_attention`: segment sums masked before the exponential, never a ratio of factors);
        - J > I: zero (causal)."""
        ij, c, bh = _program((C // S) * (C // S), NT)
        I = ij // (C // S)
        J = ij % (C // S)
        NSUB = NT * (C // S)
        offs_s = tl.arange(0, S)
        rI = c * C + I * S
        rJ = c * C + J * S
        acc_re = tl.zeros((S, S), dtype=q_re.dtype.element_ty)
        acc_im = tl.zeros((S, S), dtype=q_re.dtype.element_ty)
        if J < I:
            for kt in range(tl.cdiv(DK, BK)):
                offs_k = kt * BK + tl.arange(0, BK)
                qr, qi = _tile(q_re, q_im, bh, rI, L, offs_s, offs_k, DK, CPLX)                  # (S, BK)
                kr, ki = _tile(k_re, k_im, bh, rJ, L, offs_s, offs_k, DK, CPLX)
                lam_i, pi_re, pi_im, e_re, e_im, ti_re, ti_im = _from_start(
                    la, ph_re, ph_im, bh, rI, L, NSUB, offs_s, offs_k, DK, S, PHASE, CPLX)      # exp(gl_I) Q_n
                lam_j, pj_re, pj_im = _transitions(la, ph_re, ph_im, bh, rJ, L, NSUB, offs_s, offs_k, DK, S, PHASE)
                f_re, f_im = _to_end(la, bh, rJ, L, offs_s, offs_k, DK, pj_re, pj_im, S, PHASE, CPLX)  # exp(el_J)
                mid, m_re, m_im = _across(la, ph_re, ph_im, bh, c * C, J + 1, I, L, NSUB, offs_s, offs_k, DK,
                                          S, BK, PHASE)
                f_re, f_im = _scaled(f_re, f_im, mid, m_re, m_im, False, PHASE, CPLX)
                qf_re, qf_im = _cmul(qr, qi, e_re, e_im, CPLX)
                kf_re, kf_im = _cmul(kr, ki, f_re, f_im, CPLX)
                kt_re, kt_im = _trans(kf_re, kf_im, CPLX)
                a_re, a_im = _cmm(qf_re, qf_im, kt_re, kt_im, DOT, PREC, CPLX)                   # (S, S)
                acc_re += a_re
                if CPLX:
                    acc_im += a_im
        elif J == I:
            for kt in range(tl.cdiv(DK, BK)):
                offs_k = kt * BK + tl.arange(0, BK)
                qr, qi = _tile(q_re, q_im, bh, rI, L, offs_s, offs_k, DK, CPLX)
                kr, ki = _tile(k_re, k_im, bh, rI, L, offs_s, offs_k, DK, CPLX)
                lam, p_re, p_im = _transitions(la, ph_re, ph_im, bh, rI, L, NSUB, offs_s, offs_k, DK, S, PHASE)
                a_re, a_im = _intra_attention(qr, qi, kr, ki, lam, p_re, p_im, offs_s, S, PHASE, CPLX)
                acc_re += a_re
                if CPLX:
                    acc_im += a_im
        p = (bh * NT + c) * C * C + (I * S + offs_s[:, None]) * C + J * S + offs_s[None, :]
        tl.store(A_re + p, acc_re)
        if CPLX:
            tl.store(A_im + p, acc_im)

    @triton.jit
    def subchunk_output_kernel(q_re, q_im, v_re, v_im, la, ph_re, ph_im, hs_re, hs_im, A_re, A_im, y_re, y_im,
                               L, DK, DV, NT,
                               C: tl.constexpr, S: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                               DOT: tl.constexpr, PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """``y`` of one sub-chunk I and value tile: ``sum_{J <= I} A[I, J] v_J + (q . exp(g)) S_in``, with ``g`` from
        the chunk's start (``exp`` of the sub-chunks before I times ``exp(gl_I)``: sums of ``log|a| <= 0``);
        grid (BH * NT * C/S * value tiles,)."""
        t, c, bh = _program((C // S) * tl.cdiv(DV, BV), NT)
        I = t // tl.cdiv(DV, BV)
        NSUB = NT * (C // S)
        offs_s = tl.arange(0, S)
        offs_v = (t % tl.cdiv(DV, BV)) * BV + tl.arange(0, BV)
        rI = c * C + I * S
        state = (bh * NT + c) * DK * DV
        yr = tl.zeros((S, BV), dtype=q_re.dtype.element_ty)
        yi = tl.zeros((S, BV), dtype=q_re.dtype.element_ty)
        for J in range(I + 1):
            p_a, a_re, a_im = _block(A_re, A_im, bh * NT + c, I, J, offs_s, C, S, CPLX)
            vr, vi = _tile(v_re, v_im, bh, c * C + J * S, L, offs_s, offs_v, DV, CPLX)         # (S, BV)
            ur, ui = _cmm(a_re, a_im, vr, vi, DOT, PREC, CPLX)                                    # A[I, J] v_J
            yr += ur
            if CPLX:
                yi += ui
        for kt in range(tl.cdiv(DK, BK)):
            offs_k = kt * BK + tl.arange(0, BK)
            qr, qi = _tile(q_re, q_im, bh, rI, L, offs_s, offs_k, DK, CPLX)
            lam, p_re, p_im, e_re, e_im, t_re, t_im = _from_start(la, ph_re, ph_im, bh, rI, L, NSUB, offs_s, offs_k,
                                                                  DK, S, PHASE, CPLX)
            pre, m_re, m_im = _across(la, ph_re, ph_im, bh, c * C, 0, I, L, NSUB, offs_s, offs_k, DK, S, BK, PHASE)
            e_re, e_im = _scaled(e_re, e_im, pre, m_re, m_im, False, PHASE, CPLX)                # exp(g) from c*C
            p_st, m_st, S_re, S_im = _state_tile(hs_re, hs_im, state, offs_k, offs_v, DK, DV, CPLX)
            qe_re, qe_im = _cmul(qr, qi, e_re, e_im, CPLX)
            ur, ui = _cmm(qe_re, qe_im, S_re, S_im, DOT, PREC, CPLX)                             # (q . exp(g)) S_in
            yr += ur
            if CPLX:
                yi += ui
        _store_tile(y_re, y_im, bh, rI, L, offs_s, offs_v, DV, yr, yi, CPLX)

    @triton.jit
    def subchunk_adjoint_kernel(q_re, q_im, la, ph_re, ph_im, g_re, g_im, gS_re, gS_im, dhs_re, dhs_im, dh0_re,
                                dh0_im, L, DK, DV, NT,
                                C: tl.constexpr, S: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                                DOT: tl.constexpr, PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """``dS_out`` of every chunk of C into ``dhs`` (from ``dL/dS_L``, backwards, a sub-chunk at a time:
        ``dS <- (q . exp(gl) Q)^H G + diag(conj(exp(sum log a) Q_last)) dS``) and ``dL/dh0``;
        grid (BH * key tiles * value tiles,)."""
        kv, only_chunk, bh = _program(tl.cdiv(DK, BK) * tl.cdiv(DV, BV), 1)
        NSUB = NT * (C // S)
        offs_s = tl.arange(0, S)
        offs_k = (kv // tl.cdiv(DV, BV)) * BK + tl.arange(0, BK)
        offs_v = (kv % tl.cdiv(DV, BV)) * BV + tl.arange(0, BV)
        p_s, m_s, dS_re, dS_im = _state_tile(gS_re, gS_im, bh * DK * DV, offs_k, offs_v, DK, DV, CPLX)
        for i in range(NSUB):
            j = NSUB - 1 - i
            last = m_s & (j % (C // S) == C // S - 1)                                  # a chunk ends here
            tl.store(dhs_re + (bh * NT + j // (C // S)) * DK * DV + p_s, dS_re, mask=last)
            if CPLX:
                tl.store(dhs_im + (bh * NT + j // (C // S)) * DK * DV + p_s, dS_im, mask=last)
            row0 = j * S
            qr, qi = _tile(q_re, q_im, bh, row0, L, offs_s, offs_k, DK, CPLX)
            gr, gi = _tile(g_re, g_im, bh, row0, L, offs_s, offs_v, DV, CPLX)     # G = dL/dy  (S, BV)
            lam, p_re, p_im, e_re, e_im, t_re, t_im = _from_start(
                la, ph_re, ph_im, bh, row0, L, NSUB, offs_s, offs_k, DK, S, PHASE, CPLX)
            qe_re, qe_im = _cmul(qr, qi, e_re, e_im, CPLX)
            qh_re, qh_im = _conj(qe_re, qe_im, True, CPLX)
            ar, ai = _cmm(qh_re, qh_im, gr, gi, DOT, PREC, CPLX)                     # (q . exp(gl))^H G
            if CPLX:
                dS_re, dS_im = (t_re[:, None] * dS_re + t_im[:, None] * dS_im + ar,
                                t_re[:, None] * dS_im - t_im[:, None] * dS_re + ai)
            else:
                dS_re = t_re[:, None] * dS_re + ar
        tl.store(dh0_re + bh * DK * DV + p_s, dS_re, mask=m_s)
        if CPLX:
            tl.store(dh0_im + bh * DK * DV + p_s, dS_im, mask=m_s)

    @triton.jit
    def subchunk_boundary_kernel(q_re, q_im, k_re, k_im, v_re, v_im, la, ph_re, ph_im, g_re, g_im, hs_re, hs_im,
                                 dhs_re, dhs_im, hk_re, hk_im, dhk_re, dhk_im,
                                 L, DK, DV, NT,
                                 C: tl.constexpr, S: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                                 DOT: tl.constexpr, PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """For the backward: the state entering sub-chunk K and the adjoint leaving it, ``S_K`` and ``dS_K`` into
        ``hk``, ``dhk`` (BH, NT * C/S, DK, DV), formed from the chunk's ``S_in`` and ``dS_out`` with the other
        sub-chunks as ``tl.dot`` s of boundary-referenced factors (every exponent ``<= 0``)::

            S_K  = diag(exp(g_<K) P_<K) S_in + sum_{J<K} (k_J . exp(el_J + mid) Q_last conj(Q) P_mid)^T v_J
            dS_K = diag(conj(exp(g_>K) P_>K)) dS_out + sum_{I>K} (q_I . exp(gl_I + mid) Q P_mid)^H G_I

        (``g_<K``: the sub-chunks before K, ``g_>K`` those after it, ``mid`` those between J and K or K and I,
        carried as a summed ``log|a|`` and a phasor). Then :func:`chunk_dqk_kernel` runs on the sub-chunks as its
        chunks: the diagonal blocks exact and the transitions' gradient summed over every path directly.
        Grid (BH * NT * C/S * key tiles * value tiles,)."""
        t, c, bh = _program((C // S) * tl.cdiv(DK, BK) * tl.cdiv(DV, BV), NT)
        K = t // (tl.cdiv(DK, BK) * tl.cdiv(DV, BV))
        kv = t % (tl.cdiv(DK, BK) * tl.cdiv(DV, BV))
        NSUB = NT * (C // S)
        offs_s = tl.arange(0, S)
        offs_k = (kv // tl.cdiv(DV, BV)) * BK + tl.arange(0, BK)
        offs_v = (kv % tl.cdiv(DV, BV)) * BV + tl.arange(0, BV)
        state = (bh * NT + c) * DK * DV
        # S_K: the keys of the sub-chunks J = K-1 .. 0, the decay between J and K carried as (mid, P_mid)
        Sk_re = tl.zeros((BK, BV), dtype=k_re.dtype.element_ty)
        Sk_im = tl.zeros((BK, BV), dtype=k_re.dtype.element_ty)
        mid = tl.zeros((BK,), dtype=k_re.dtype.element_ty)
        c_re = tl.full((BK,), 1.0, dtype=k_re.dtype.element_ty)
        c_im = tl.zeros((BK,), dtype=k_re.dtype.element_ty)
        for i in range(K):
            rJ = c * C + (K - 1 - i) * S
            kr, ki = _tile(k_re, k_im, bh, rJ, L, offs_s, offs_k, DK, CPLX)
            vr, vi = _tile(v_re, v_im, bh, rJ, L, offs_s, offs_v, DV, CPLX)
            lam, pj_re, pj_im = _transitions(la, ph_re, ph_im, bh, rJ, L, NSUB, offs_s, offs_k, DK, S, PHASE)
            f_re, f_im = _to_end(la, bh, rJ, L, offs_s, offs_k, DK, pj_re, pj_im, S, PHASE, CPLX)  # exp(el_J)
            f_re, f_im = _scaled(f_re, f_im, mid, c_re, c_im, False, PHASE, CPLX)                # ... exp(mid)
            kf_re, kf_im = _cmul(kr, ki, f_re, f_im, CPLX)
            kt_re, kt_im = _trans(kf_re, kf_im, CPLX)
            nr, ni = _cmm(kt_re, kt_im, vr, vi, DOT, PREC, CPLX)                                 # (BK, BV)
            Sk_re += nr
            if CPLX:
                Sk_im += ni
            mid += tl.sum(lam, axis=0)
            if PHASE:
                l_re, l_im = _last_phasor(pj_re, pj_im, offs_s, S, PHASE)
                c_re, c_im = c_re * l_re - c_im * l_im, c_re * l_im + c_im * l_re
        p_s, m_s, S_re, S_im = _state_tile(hs_re, hs_im, state, offs_k, offs_v, DK, DV, CPLX)       # S_in
        s_re, s_im = _state_scaled(S_re, S_im, mid, c_re, c_im, False, PHASE, CPLX)
        sub = (bh * NSUB + c * (C // S) + K) * DK * DV
        tl.store(hk_re + sub + p_s, Sk_re + s_re, mask=m_s)
        if CPLX:
            tl.store(hk_im + sub + p_s, Sk_im + s_im, mask=m_s)
        # dS_K: the queries of the sub-chunks I = K+1 .. C/S-1, the decay between K and I carried likewise
        dSk_re = tl.zeros((BK, BV), dtype=k_re.dtype.element_ty)
        dSk_im = tl.zeros((BK, BV), dtype=k_re.dtype.element_ty)
        mid = tl.zeros((BK,), dtype=k_re.dtype.element_ty)
        c_re = tl.full((BK,), 1.0, dtype=k_re.dtype.element_ty)
        c_im = tl.zeros((BK,), dtype=k_re.dtype.element_ty)
        for I in range(K + 1, C // S):
            rI = c * C + I * S
            qr, qi = _tile(q_re, q_im, bh, rI, L, offs_s, offs_k, DK, CPLX)
            gr, gi = _tile(g_re, g_im, bh, rI, L, offs_s, offs_v, DV, CPLX)
            lam, pi_re, pi_im, e_re, e_im, ti_re, ti_im = _from_start(
                la, ph_re, ph_im, bh, rI, L, NSUB, offs_s, offs_k, DK, S, PHASE, CPLX)          # exp(gl_I) Q
            e_re, e_im = _scaled(e_re, e_im, mid, c_re, c_im, False, PHASE, CPLX)                # ... exp(mid)
            qe_re, qe_im = _cmul(qr, qi, e_re, e_im, CPLX)
            qh_re, qh_im = _conj(qe_re, qe_im, True, CPLX)
            ar, ai = _cmm(qh_re, qh_im, gr, gi, DOT, PREC, CPLX)                                 # (BK, BV)
            dSk_re += ar
            if CPLX:
                dSk_im += ai
            mid += tl.sum(lam, axis=0)
            if PHASE:
                l_re, l_im = _last_phasor(pi_re, pi_im, offs_s, S, PHASE)
                c_re, c_im = c_re * l_re - c_im * l_im, c_re * l_im + c_im * l_re
        p_d, m_d, dS_re, dS_im = _state_tile(dhs_re, dhs_im, state, offs_k, offs_v, DK, DV, CPLX)   # dS_out
        s_re, s_im = _state_scaled(dS_re, dS_im, mid, c_re, c_im, True, PHASE, CPLX)
        tl.store(dhk_re + sub + p_s, dSk_re + s_re, mask=m_s)
        if CPLX:
            tl.store(dhk_im + sub + p_s, dSk_im + s_im, mask=m_s)

    @triton.jit
    def subchunk_dv_kernel(k_re, k_im, la, ph_re, ph_im, g_re, g_im, dhs_re, dhs_im, A_re, A_im, dv_re, dv_im,
                           L, DK, DV, NT,
                           C: tl.constexpr, S: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                           DOT: tl.constexpr, PHASE: tl.constexpr, CPLX: tl.constexpr, PREC: tl.constexpr):
        """``dv`` of one sub-chunk K and value tile: ``sum_{I >= K} A[I, K]^H G_I + conj(k . exp(E)) dS_out``, with
        ``E`` to the chunk's end (``el_K`` plus the sub-chunks after K); grid (BH * NT * C/S * value tiles,)."""
        t, c, bh = _program((C // S) * tl.cdiv(DV, BV), NT)
        K = t // tl.cdiv(DV, BV)
        NSUB = NT * (C // S)
        offs_s = tl.arange(0, S)
        offs_v = (t % tl.cdiv(DV, BV)) * BV + tl.arange(0, BV)
        row0 = c * C + K * S
        xr = tl.zeros((S, BV), dtype=g_re.dtype.element_ty)
        xi = tl.zeros((S, BV), dtype=g_re.dtype.element_ty)
        for I in range(K, C // S):
            p_a, a_re, a_im = _block(A_re, A_im, bh * NT + c, I, K, offs_s, C, S, CPLX)
            ah_re, ah_im = _conj(a_re, a_im, True, CPLX)
            gr, gi = _tile(g_re, g_im, bh, c * C + I * S, L, offs_s, offs_v, DV, CPLX)
            ur, ui = _cmm(ah_re, ah_im, gr, gi, DOT, PREC, CPLX)                                # A[I, K]^H G_I
            xr += ur
            if CPLX:
                xi += ui
        for kt in range(tl.cdiv(DK, BK)):
            offs_k = kt * BK + tl.arange(0, BK)
            kr, ki = _tile(k_re, k_im, bh, row0, L, offs_s, offs_k, DK, CPLX)
            lam, p_re, p_im = _transitions(la, ph_re, ph_im, bh, row0, L, NSUB, offs_s, offs_k, DK, S, PHASE)
            E_re, E_im = _to_end(la, bh, row0, L, offs_s, offs_k, DK, p_re, p_im, S, PHASE, CPLX)
            post, m_re, m_im = _across(la, ph_re, ph_im, bh, c * C, K + 1, C // S, L, NSUB, offs_s, offs_k, DK,
                                       S, BK, PHASE)
            E_re, E_im = _scaled(E_re, E_im, post, m_re, m_im, False, PHASE, CPLX)
            p_st, m_st, dS_re, dS_im = _state_tile(dhs_re, dhs_im, (bh * NT + c) * DK * DV, offs_k, offs_v, DK, DV,
                                                   CPLX)
            ke_re, ke_im = _cmul(kr, ki, E_re, E_im, CPLX)
            kc_re, kc_im = _conj(ke_re, ke_im, False, CPLX)
            ur, ui = _cmm(kc_re, kc_im, dS_re, dS_im, DOT, PREC, CPLX)                          # conj(k . exp(E)) dS_out
            xr += ur
            if CPLX:
                xi += ui
        _store_tile(dv_re, dv_im, bh, row0, L, offs_s, offs_v, DV, xr, xi, CPLX)


def gateloop_blocks(dk: int, dv: int) -> tuple[int, int, bool]:
    """``(BK, BV, DOT)``: the tiles ``auto`` runs a head of ``dk x dv`` with.

    Heads of 16 and more: tiles of 16 and ``tl.dot``. In full float32 precision ``tl.dot`` is a loop of
    FMAs whose operands every thread holds in registers; ``ptxas -v`` finds the backward kernel spilling
    at tiles of 32 and the forward ones at 64, and none at 16 (``tests/ops/test_triton_spills.py``). A side
    under 16 (the paper's ``dk = dv = 1``): the elementwise path, with tiles of that side's own size.
    """
    def np2(n):
        return 1 << max(0, int(n) - 1).bit_length()

    if min(dk, dv) >= CHUNK:
        return CHUNK, CHUNK, True
    return min(CHUNK, np2(dk)), min(CHUNK, np2(dv)), False


def gateloop_warps(kernel: str, dot: bool, precision: str = "ieee", cplx: bool = True) -> int:
    """The warps ``kernel`` launches with at chunks and tiles of 16: 8 for :func:`chunk_dv_kernel` when it multiplies
    with ``tl.dot``; for :func:`chunk_dqk_kernel` with ``tl.dot``, :func:`subchunk_dqk_warps` (the same kernel at the
    same chunks and tiles as on the sub-chunks: 8 for complex inputs at ``"tf32"`` / ``"bf16"``, which spill 8-12
    bytes at 4 warps on sm_80); else Triton's default 4. At 4 warps Triton 3.7 (the version torch 2.13 requires)
    compiles the dv kernel for sm_90 with 4-8 bytes of spills, at 8 none; the output kernel, at 8 warps, spills 8
    bytes on sm_90 at ``"tf32x3"`` and none at 4 (``tests/ops/test_triton_spills.py`` compiles every kernel with the
    warps given here, at every precision, real and complex). Complex inputs at ``"tf32x3"`` take the dv kernel at 4:
    at 8, with real transitions, it spills 8-12 bytes on sm_90 (Triton 3.6 / 3.7), at 4 none on sm_80 or sm_90."""
    if dot and kernel == "chunk_dqk_kernel":
        return subchunk_dqk_warps(precision, cplx)
    if dot and kernel == "chunk_dv_kernel":
        return 4 if cplx and precision == "tf32x3" else 8
    return 4


def _on_tensor_cores(dk: int, dv: int, precision: str, cplx: bool) -> bool:
    """Whether a head runs in chunks of :data:`CHUNK_TENSOR_CORES` with key / value tiles of 32-64: real inputs
    (one product a tile) of heads of 16 and more at precision ``"tf32"`` or ``"bf16"``, whose MMAs read their
    operands from shared memory. Everything else keeps chunks and tiles of 16: a full-precision ``tl.dot`` is a
    loop of FMAs over operands held in registers (tiles of 32 spill); ``"tf32x3"`` (three MMAs and the operands'
    split) spills at chunks of 64 in four kernels, and complex inputs (four products a tile) in the adjoint kernel
    (``ptxas -v``, sm_90, Triton 3.7). Only while :data:`TENSOR_CORE_CHUNKS` is on: it is off by default."""
    return TENSOR_CORE_CHUNKS and not cplx and precision in ("tf32", "bf16") and min(dk, dv) >= CHUNK


def on_subchunks(dk: int, dv: int) -> bool:
    """Whether a head runs in chunks of :data:`CHUNK_TENSOR_CORES` cut into sub-chunks of :data:`SUBCHUNK`
    (:data:`SUBCHUNK_KERNELS`): heads of 16 and more (``tl.dot``), at every precision, real or complex, while
    :data:`SUBCHUNKS` is on (it takes precedence over :data:`TENSOR_CORE_CHUNKS`)."""
    return SUBCHUNKS and min(dk, dv) >= CHUNK


def gateloop_chunk(dk: int, dv: int, precision: str = "ieee", cplx: bool = True) -> int:
    """The steps a chunk: :data:`CHUNK_TENSOR_CORES` on sub-chunks (:func:`on_subchunks`) or on tensor cores (see
    ``_on_tensor_cores``), else :data:`CHUNK`."""
    if on_subchunks(dk, dv) or _on_tensor_cores(dk, dv, precision, cplx):
        return CHUNK_TENSOR_CORES
    return CHUNK


# On tensor cores (chunks of 64): (BK, BV, warps) a kernel may run with, every one without spills for sm_80 and
# sm_90 at "tf32" and "bf16" (ptxas -v, Triton 3.7.1 and 3.6.0). Tiles of 64 spill in the kernels that hold a state tile and
# more (states, adjoint, dq/dk, dv: 8-372 bytes on sm_80), 16 warps cap a thread at 128 registers (spills too),
# the output kernel's tiles of 32 want 4 warps (4-12 bytes at 8 on sm_80), and the dq/dk kernel, which holds the
# most (C, BK) tiles, takes key tiles of 16 and loops over value tiles of 16 (16-20 bytes at value tiles of 32 on
# sm_80; key tiles of 32 use 255 registers and spill 12 bytes at bf16 on sm_80 under Triton 3.6).
_TENSOR_CORE_CONFIGS = {
    "chunk_states_kernel": ((32, 32, 8),),
    "chunk_attention_kernel": ((32, None, 8), (64, None, 8)),
    "chunk_output_kernel": ((32, 32, 4), (64, 64, 8)),
    "chunk_adjoint_kernel": ((32, 32, 8),),
    "chunk_dqk_kernel": ((16, 16, 8),),
    "chunk_dv_kernel": ((32, 32, 8),),
}


# The sub-chunk kernels' warps (tiles of 16 rows, key / value tiles of 16): none spills for sm_80 or sm_90 at any
# precision, real or complex (ptxas -v: tests/ops/test_triton_spills.py).
_SUBCHUNK_WARPS = {
    "subchunk_states_kernel": 4,
    "subchunk_attention_kernel": 4,       # 8 with complex transitions at bf16: subchunk_attention_warps
    "subchunk_output_kernel": 4,
    "subchunk_adjoint_kernel": 4,
    "subchunk_boundary_kernel": 4,
    "subchunk_dv_kernel": 8,
}


def subchunk_attention_warps(precision: str, phase: bool) -> int:
    """The warps :func:`subchunk_attention_kernel` runs with: 4, or 8 for complex transitions (phasors) at ``"bf16"``,
    which spill 12-24 bytes at 4 warps on sm_90 (Triton 3.6 and 3.7), while at 8 warps Triton 3.6 spills 4-24 bytes in
    three other kinds and precisions (``ptxas -v``)."""
    return 8 if phase and precision == "bf16" else 4


def subchunk_dqk_warps(precision: str, cplx: bool) -> int:
    """The warps :func:`chunk_dqk_kernel` runs with on the sub-chunks (its chunks of 16, at every precision): 4, or
    8 for complex inputs at ``"tf32"`` / ``"bf16"``, which spill 8-12 bytes at 4 warps on sm_80 where every other
    kind and precision spills none (and real ``"ieee"`` spills 4 bytes at 8 warps on sm_90; ``ptxas -v``,
    Triton 3.7)."""
    return 8 if cplx and precision in ("tf32", "bf16") else 4


def gateloop_configs(kernel: str, dk: int, dv: int, precision: str = "ieee", cplx: bool = True) -> list[dict]:
    """The launch configurations ``kernel`` may run with on a head of ``dk x dv``: dicts of ``BK``, ``BV`` (none for
    :func:`chunk_attention_kernel`, which has no value tile) and ``num_warps``. On tensor cores (chunks of 64), key /
    value tiles of 32 and 64 (``_TENSOR_CORE_CONFIGS``; 64 only for heads of more than 32), among which
    ``triton.autotune`` picks by timing them where there are several (the first alone under the interpreter); else
    one: :func:`gateloop_blocks` at :func:`gateloop_warps`. ``tests/ops/test_triton_spills.py`` compiles every one of
    them for sm_80 and sm_90 and finds no spills."""
    if kernel in SUBCHUNK_KERNELS:
        configs = [dict(BK=SUBCHUNK, BV=SUBCHUNK, num_warps=_SUBCHUNK_WARPS[kernel])]
    elif _on_tensor_cores(dk, dv, precision, cplx):
        configs = [dict(BK=bk, BV=bv, num_warps=w) for bk, bv, w in _TENSOR_CORE_CONFIGS[kernel]
                   if bk <= max(32, dk, dv)]
    else:
        BK, BV, DOT = gateloop_blocks(dk, dv)
        configs = [dict(BK=BK, BV=BV, num_warps=gateloop_warps(kernel, DOT, precision, cplx))]
    if kernel in ("chunk_attention_kernel", "subchunk_attention_kernel"):
        configs = [dict(BK=c["BK"], num_warps=c["num_warps"]) for c in configs]
    return configs


def _real_dtype(dtype: torch.dtype) -> torch.dtype:
    """The kernels' precision: float64 for float64 / complex128 work, else float32 (never lower, never less)."""
    return torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32


def _planes(t: torch.Tensor, real: torch.dtype):
    """A real or complex tensor as (real plane, imaginary plane) in ``real``."""
    t = t.to(torch.complex128 if real == torch.float64 else torch.complex64)
    return t.real.contiguous(), t.imag.contiguous()


def _phasor_products(ph: torch.Tensor, NT: int, C: int = CHUNK):
    """``P_n = prod_{j <= n in its chunk} exp(i ph_j)`` ``(BH, NT * C, DK)`` as (re, im) planes: the phases'
    products from each chunk's start, by ``cumprod`` over unit phasors (padded with 1 to whole chunks). The
    kernels take every phase they need from these as ``P_n conj(P_m)``: no sine or cosine runs on the GPU
    (whose slow path for large arguments needs local memory), and unit phasors lose no digits in products."""
    BH, L, DK = ph.shape
    u = torch.polar(torch.ones_like(ph), ph)
    u = torch.cat([u, u.new_ones(BH, NT * C - L, DK)], dim=1).reshape(BH, NT, C, DK)
    P = torch.cumprod(u, dim=2).reshape(BH, NT * C, DK)
    return P.real.contiguous(), P.imag.contiguous()


def _check_precision(precision, real: torch.dtype) -> None:
    """``precision`` is one of :data:`PRECISIONS`, and ``"ieee"`` for float64 work."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if real == torch.float64 and precision != "ieee":
        raise ValueError(f"precision={precision!r} is for float32 work: float64 / complex128 inputs always "
                         "multiply in full float64 precision ('ieee')")


@functools.lru_cache(maxsize=None)
def _autotuned(kernel: str, configs: tuple):
    """``kernel`` under ``triton.autotune`` over ``configs`` (tuples of ``(name, value)`` pairs), timed once per head
    size, input kind and precision. The kernels only write their outputs, so the timing runs change nothing."""
    tuned = [triton.Config({k: v for k, v in c if k != "num_warps"}, num_warps=dict(c)["num_warps"])
             for c in configs]
    return triton.autotune(configs=tuned, key=["DK", "DV", "PHASE", "CPLX", "PREC"])(globals()[kernel])


class _Launch:
    """One head layout's kernel launches: sizes, blocks, and the transitions ``la = log|a|`` with their
    phasors ``(cos arg a, sin arg a)`` (none when every ``a`` is real and positive)."""

    def __init__(self, BH, L, DK, DV, la, ph, cplx, precision, sub=None):
        self.BH, self.L, self.DK, self.DV = BH, L, DK, DV
        self.cplx = cplx or ph is not None        # complex arithmetic; real inputs run on real planes only
        self.precision = precision
        self.sub = on_subchunks(DK, DV) if sub is None else sub       # chunks of 64 by sub-chunks of 16
        self.C = CHUNK_TENSOR_CORES if self.sub else gateloop_chunk(DK, DV, precision, self.cplx)
        self.NT = triton.cdiv(L, self.C)
        self.NS = self.C // SUBCHUNK if self.sub else 1               # sub-chunks a chunk
        self.DOT = gateloop_blocks(DK, DV)[2]
        self.phase = ph is not None
        # the phasors' products from each chunk's start, or on sub-chunks from each sub-chunk's start
        P = _phasor_products(ph, self.NT * self.NS, self.C // self.NS) if self.phase else None
        self.a = (la, *P) if self.phase else (la, la, la)   # unread if not
        self.sizes = (L, DK, DV, self.NT)
        self.consts = dict(C=self.C, DOT=self.DOT, PHASE=self.phase, CPLX=self.cplx, PREC=precision)
        if self.sub:
            self.consts["S"] = SUBCHUNK

    def kernel(self, name: str) -> str:
        """The kernel that does ``name``'s work (``"states"``, ...) on this head's path."""
        return f"subchunk_{name}_kernel" if self.sub else f"chunk_{name}_kernel"

    def planes(self, t, real):
        """``t`` as the kernels read it: (real plane, imaginary plane), or (real, real) on the real path, whose
        kernels never read the second."""
        if self.cplx:
            return _planes(t, real)
        t = t.to(real).contiguous()
        return t, t

    def empty(self, like, *shape):
        """An output's planes: two, or one on the real path (whose kernels never write a second)."""
        re = like.new_empty(*shape)
        return [re, like.new_empty(*shape) if self.cplx else re]

    def out(self, planes):
        """A result's planes as one tensor: complex, or the real plane on the real path."""
        return torch.complex(*planes) if self.cplx else planes[0]

    def launch(self, kernel: str, programs, *args, **consts):
        """Launch ``kernel`` over ``BH * programs(blocks)`` programs (all on grid axis 0: see ``_program``) at its one
        configuration, or at the one ``triton.autotune`` picks among :func:`gateloop_configs` (the first under the
        interpreter, so that tests stay fast and deterministic)."""
        configs = gateloop_configs(kernel, self.DK, self.DV, self.precision, self.cplx)
        grid = lambda meta: (self.BH * programs(meta),)        # noqa: E731
        if len(configs) == 1 or _INTERPRETER:
            blocks = dict(configs[0])
            warps = blocks.pop("num_warps")
            globals()[kernel][grid](*args, **consts, **blocks, num_warps=warps)
        else:
            _autotuned(kernel, tuple(tuple(c.items()) for c in configs))[grid](*args, **consts)

    def key_tiles(self, meta):
        return triton.cdiv(self.DK, meta["BK"])

    def value_tiles(self, meta):
        return triton.cdiv(self.DV, meta["BV"])

    def states(self, k, v, h0):
        """:func:`chunk_states_kernel`: the states entering every chunk ``(BH, NT, DK, DV)`` and ``S_L``."""
        hs = self.empty(k[0], self.BH, self.NT, self.DK, self.DV)
        sL = self.empty(k[0], self.BH, self.DK, self.DV)
        self.launch(self.kernel("states"), lambda m: self.key_tiles(m) * self.value_tiles(m),
                    *k, *v, *self.a, *h0, *hs, *sL, *self.sizes, **self.consts)
        return hs, sL

    def attention(self, q, k):
        """:func:`chunk_attention_kernel`: every chunk's intra-chunk attention ``A`` ``(BH, NT, C, C)``."""
        A = self.empty(q[0], self.BH, self.NT, self.C, self.C)
        if self.sub:            # a program per block (I, J) of sub-chunks
            subchunk_attention_kernel[(self.BH * self.NT * self.NS * self.NS,)](
                *q, *k, *self.a, *A, self.L, self.DK, self.NT, **self.consts, BK=SUBCHUNK,
                num_warps=subchunk_attention_warps(self.precision, self.phase))
        else:
            self.launch("chunk_attention_kernel", lambda m: self.NT, *q, *k, *self.a, *A, self.L, self.DK, self.NT,
                        C=self.C, PHASE=self.phase, CPLX=self.cplx)
        return A


class _GateLoopTriton(torch.autograd.Function):
    """Inputs: complex (or real) ``q, k, v, h0`` (BH, L, d), the real ``la = log|a|`` and ``ph = arg a``
    (``None``: every ``a`` real and positive)."""

    @staticmethod
    def forward(ctx, q, k, v, la, ph, h0, precision):
        BH, L, DK = q.shape
        real = la.dtype
        cplx = any(t.is_complex() for t in (q, k, v, h0))
        run = _Launch(BH, L, DK, v.shape[-1], la.contiguous(), None if ph is None else ph.contiguous(), cplx,
                      precision)
        qp, kp, vp, h0p = (run.planes(t, real) for t in (q, k, v, h0))
        hs, sL = run.states(kp, vp, h0p)
        A = run.attention(qp, kp)
        y = run.empty(qp[0], BH, L, run.DV)
        run.launch(run.kernel("output"), lambda m: run.NT * run.NS * run.value_tiles(m),
                   *qp, *vp, *run.a, *hs, *A, *y, *run.sizes, **run.consts)
        # la and its phasor products, and A for the backward (BH * L * C values a plane: at C = 16 a quarter of
        # q's bytes for heads of dk = 64 on the real path, half on the complex one)
        ctx.save_for_backward(*qp, *kp, *vp, *h0p, *run.a, *A)
        ctx.phase, ctx.cplx, ctx.precision, ctx.sub = run.phase, run.cplx, precision, run.sub
        ctx.complex_inputs = (q.is_complex(), k.is_complex(), v.is_complex(), h0.is_complex())
        return run.out(y), run.out(sL)

    @staticmethod
    def backward(ctx, grad_y, grad_S):
        q_re, q_im, k_re, k_im, v_re, v_im, h0_re, h0_im, la, cos_ph, sin_ph, A_re, A_im = ctx.saved_tensors
        q, k, v, h0 = (q_re, q_im), (k_re, k_im), (v_re, v_im), (h0_re, h0_im)
        BH, L, DK = q_re.shape
        run = _Launch(BH, L, DK, v_re.shape[-1], la, None, ctx.cplx, ctx.precision, ctx.sub)
        run.a, run.phase, run.consts["PHASE"] = (la, cos_ph, sin_ph), ctx.phase, ctx.phase
        G = run.planes(grad_y, la.dtype)
        gS = run.planes(grad_S if grad_S is not None else torch.zeros_like(h0_re), la.dtype)
        hs, _ = run.states(k, v, h0)
        dhs = run.empty(hs[0], *hs[0].shape)
        dh0 = run.empty(h0_re, *h0_re.shape)
        run.launch(run.kernel("adjoint"), lambda m: run.key_tiles(m) * run.value_tiles(m),
                   *q, *run.a, *G, *gS, *dhs, *dh0, *run.sizes, **run.consts)
        dq, dk, dl = (run.empty(q_re, *q_re.shape) for _ in range(3))
        if run.sub:
            # the state entering and the adjoint leaving every sub-chunk, then chunk_dqk_kernel on the sub-chunks
            NSUB = run.NT * run.NS
            hk = run.empty(hs[0], BH, NSUB, DK, run.DV)
            dhk = run.empty(hs[0], BH, NSUB, DK, run.DV)
            run.launch("subchunk_boundary_kernel", lambda m: run.NT * run.NS * run.key_tiles(m) * run.value_tiles(m),
                       *q, *k, *v, *run.a, *G, *hs, *dhs, *hk, *dhk, *run.sizes, **run.consts)
            consts = {name: value for name, value in run.consts.items() if name != "S"}
            blocks = gateloop_configs("chunk_dqk_kernel", DK, run.DV, "ieee", False)[0]   # tiles of 16
            blocks.pop("num_warps")
            warps = subchunk_dqk_warps(ctx.precision, run.cplx)
            chunk_dqk_kernel[(BH * NSUB * triton.cdiv(DK, blocks["BK"]),)](
                *q, *k, *v, *run.a, *G, *hk, *dhk, *dq, *dk, *dl, L, DK, run.DV, NSUB,
                **{**consts, "C": SUBCHUNK}, **blocks, num_warps=warps)
        else:
            run.launch("chunk_dqk_kernel", lambda m: run.NT * run.key_tiles(m),
                       *q, *k, *v, *run.a, *G, *hs, *dhs, *dq, *dk, *dl, *run.sizes, **run.consts)
        dv = run.empty(v_re, *v_re.shape)
        run.launch(run.kernel("dv"), lambda m: run.NT * run.NS * run.value_tiles(m),
                   *k, *run.a, *G, *dhs, A_re, A_im, *dv, *run.sizes, **run.consts)
        grads = [run.out(pair) if is_c else pair[0]               # a real input gets the real part
                 for pair, is_c in zip((dq, dk, dv, dh0), ctx.complex_inputs)]
        # d log a = d log|a| + i d arg a: the real plane goes to log|a|, the imaginary one to the phase
        return (*grads[:3], dl[0], dl[1] if ctx.phase else None, grads[3], None)


def gateloop_triton_log(q, k, v, log_a, phase=None, *, h0=None, return_state=False, precision="ieee"):
    """GateLoop's recurrence with transitions given by their logarithm: ``a = exp(log_a + i phase)``
    (``phase=None``: real positive ``a``). The causal decays and linear attention call this on CUDA: their
    ``log a`` (e.g. ``z_{t-1} - z_t`` of additive decay) never passes through an ``a`` that could underflow
    in the chunked kernels. Heads of ``dk * dv <= SCAN_STATE`` run on the scan instead
    (:func:`gateloop_scan`), with ``a = exp(log_a)``: there an ``a`` that underflows to 0 is an exact reset.

    Shapes as :func:`seqlab.ops.gateloop.gateloop`; ``log_a`` is real, ``<= 0``, shaped like ``k``
    (``-inf`` is a full reset). Returns ``(y, S_L)`` (``S_L`` is ``None`` unless ``return_state``), in the
    dtype of ``q`` promoted with the other inputs. Reads no value on the host.

    ``precision``: the chunk products' ``tl.dot`` precision, one of :data:`PRECISIONS`: ``"ieee"`` (full
    float32, the default), ``"tf32x3"`` (three TF32 products, about float32's accuracy on tensor cores), ``"tf32"``
    (one, 10-bit mantissas) or ``"bf16"`` (bfloat16 operands, float32 sums). float64 work is always ``"ieee"``; the scan
    route runs no ``tl.dot``.
    """
    require_triton("gateloop", q, k, v, log_a)
    B, H, L, DK = q.shape
    DV = v.shape[-1]
    out_dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    real = _real_dtype(out_dtype)
    _check_precision(precision, real)
    if runs_on_scan(DK, DV):
        a = log_a.to(real).exp()
        a = a if phase is None else torch.polar(a, phase.to(real).expand_as(a))
        y, S = gateloop_scan(q, k, v, a, h0=h0)
    else:
        y, S = _chunked_kernels(q, k, v, log_a, phase, h0, real, precision)
    if not out_dtype.is_complex:
        y, S = y.real, S.real
    return y.to(out_dtype), (S.to(out_dtype) if return_state else None)


def _chunked_kernels(q, k, v, log_a, phase, h0, real, precision):
    """``(y, S_L)`` by the chunked kernels (complex, or real on the real path), the heads flattened to ``B * H`` rows."""
    B, H, L, DK = q.shape
    DV = v.shape[-1]
    # -inf (a = 0) becomes a finite floor: exp of any sum of them is 0, and no inf - inf can arise
    la = log_a.to(real).clamp_min(torch.finfo(real).min / (4 * CHUNK_TENSOR_CORES))
    ph = None if phase is None else phase.to(real).expand_as(la)
    flat = lambda t: None if t is None else t.reshape(B * H, L, t.shape[-1])    # noqa: E731
    state0 = h0.reshape(B * H, DK, DV) if h0 is not None else torch.zeros(B * H, DK, DV, device=q.device, dtype=real)
    y, S = _GateLoopTriton.apply(flat(q), flat(k), flat(v), flat(la), flat(ph), state0, precision)
    return y.reshape(B, H, L, DV), S.reshape(B, H, DK, DV)


def gateloop_triton(q, k, v, a, *, h0=None, return_state=False, precision="ieee"):
    """``gateloop`` by the Triton kernels; inputs already checked and promoted by ``seqlab.ops.gateloop``.

    Heads of ``dk * dv <= SCAN_STATE`` run on the scan (:func:`gateloop_scan`, exact for any ``a``), bigger
    ones on the chunked kernels. These compute in float64 for float64 / complex128 inputs and in float32
    otherwise; ``|a| = 0`` is taken as the smallest positive float (its exact gradient is added by
    ``seqlab.ops.gateloop`` where it may read values), and a real ``a`` of either sign runs as ``|a|`` with
    its signs folded into ``q`` and ``k`` (:func:`_fold_signs`): the kernels' real path, whatever the values.
    ``precision``: the chunk products' ``tl.dot`` precision (see :func:`gateloop_triton_log`). Reads no value
    on the host. Returns ``(y, S_L)`` (``S_L`` is ``None`` unless ``return_state``).
    """
    require_triton("gateloop", q, k, v, a)
    real = _real_dtype(torch.promote_types(q.dtype, a.dtype))
    _check_precision(precision, real)
    if runs_on_scan(q.shape[-1], v.shape[-1]):
        y, S = gateloop_scan(q, k, v, a, h0=h0)
        return y.to(q.dtype), (S.to(q.dtype) if return_state else None)
    if a.is_complex():
        la, ph = _LogPolar.apply(a, real)       # log|a| and arg a, with a gradient finite for tiny |a|
        y, S = gateloop_triton_log(q, k, v, la, ph, h0=h0, return_state=return_state, precision=precision)
    else:
        la = a.abs().to(real).clamp_min(torch.finfo(real).tiny).log()   # log|a|
        q, k, sign_L = _fold_signs(q, k, a)
        y, S = gateloop_triton_log(q, k, v, la, h0=h0, return_state=return_state, precision=precision)
        S = None if S is None else sign_L[..., None] * S
    return y.to(q.dtype), (S.to(q.dtype) if S is not None else None)


class _LogPolar(torch.autograd.Function):
    """A complex ``a`` as ``(log|a|, arg a)`` in ``real``: ``log|a|`` with ``|a|`` raised to the smallest positive float
    (an exact 0 is a full reset), ``arg a`` as ``torch.angle`` (0 at ``a = 0``); the same values as those expressions.

    The backward is that of ``log a = log|a| + i arg a`` (holomorphic): ``grad_a = (g_log + i g_arg) / conj(a)``.
    torch's own ``angle`` backward divides by ``|a|^2``, which underflows to 0 in complex64 once ``|a|`` is below
    about 1e-19 (NaN gradients where the true one is of order 1); here ``1 / conj(a) = (a / |a|) / |a|``: the unit
    phasor, then one division by ``|a|`` (``torch.abs`` of a complex is a scaled hypot: no square is formed), finite
    whenever the gradient is. As the expressions above: ``g_log`` counts only where ``|a|`` is at least the floor
    (``clamp_min``'s gradient), and ``a = 0`` gets 0 (``seqlab.ops.gateloop`` adds the exact gradient there where
    it may read values)."""

    @staticmethod
    def forward(ctx, a, real):
        ctx.save_for_backward(a)
        ctx.real = real
        return a.abs().to(real).clamp_min(torch.finfo(real).tiny).log(), torch.angle(a).to(real)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_log, g_arg):
        (a,) = ctx.saved_tensors
        mag = a.abs()
        g_log = torch.zeros_like(mag) if g_log is None else torch.where(
            mag.to(ctx.real) >= torch.finfo(ctx.real).tiny, g_log, 0).to(mag.dtype)
        g_arg = torch.zeros_like(mag) if g_arg is None else g_arg.to(mag.dtype)
        zero = mag == 0
        safe = torch.where(zero, 1, mag)
        u_re, u_im = a.real / safe, a.imag / safe                   # a / |a|, on real planes: no complex division
        grad = torch.complex((g_log * u_re - g_arg * u_im) / safe,   # (g_log + i g_arg) (a / |a|) / |a|
                             (g_log * u_im + g_arg * u_re) / safe)   #   = (g_log + i g_arg) / conj(a)
        return torch.where(zero, 0, grad), None


def _fold_signs(q, k, a):
    """A real ``a`` of either sign as its magnitude: with ``sigma_n = prod_{j<=n} sign a_j`` (per key channel,
    ``+-1``), ``prod_{j=m+1..n} a_j = sigma_n sigma_m prod_{j=m+1..n} |a_j|``, so eq. 9 is the recurrence of
    ``|a|`` with queries ``q_n sigma_n`` and keys ``k_m sigma_m``, and ``S_L = diag(sigma_L) S'_L``. Returns
    ``(q sigma, k sigma, sigma_L)``: exact (products of +-1), with no value read to find out whether any ``a``
    is negative. The sign has no gradient; ``|a|`` carries ``a``'s."""
    sign = torch.where(a < 0, -1.0, 1.0).to(_real_dtype(q.dtype))
    sigma = _sign_products(sign, on_scan=_checks.on_gpu(sign)).to(q.dtype)   # (B, H, L, dk)
    sigma_L = sigma[..., -1, :] if sigma.shape[-2] else torch.ones_like(sigma[..., 0, :])
    return q * sigma, k * sigma, sigma_L


def _sign_products(sign, *, on_scan: bool):
    """``sigma_n = prod_{j<=n} sign_j`` along dim -2 of a real ``(..., L, dk)`` of +-1, exact in any order.
    ``on_scan`` (the CUDA path): the Triton scan ``h_n = sign_n h_{n-1}``, ``h_0 = 1``; torch's ``cumprod`` along a
    dimension that is not the last walks the ``L`` steps one after another in each of the ``B H dk`` columns, so at
    long ``L`` the GPU waits on that chain; the scan runs the columns in parallel."""
    if not on_scan or sign.shape[-2] == 0:
        return torch.cumprod(sign, dim=-2)
    from seqlab.ops.scan.triton import triton_linear_scan

    L, d = sign.shape[-2:]
    flat = sign.reshape(-1, L, d)
    ones = flat.new_ones(flat.shape[0], d)
    return triton_linear_scan(flat, torch.zeros_like(flat), ones).reshape(sign.shape)


SCAN_STATE = 16     # heads with dk * dv up to this run on the scan (gateloop_scan), bigger ones on the chunks


def runs_on_scan(dk: int, dv: int) -> bool:
    """Whether a head of ``dk x dv`` runs on the scan: its state is a few numbers, an elementwise recurrence
    that the chunked kernels' ``C x C`` attention and matrix products would only pad (the paper's own
    max-headed setting, ``d_h = 1``)."""
    return dk * dv <= SCAN_STATE


def gateloop_scan(q, k, v, a, *, h0=None):
    """GateLoop for small heads on the Triton scan (``seqlab.ops.scan``): ``(y, S_L)``.

    Eq. 7 is elementwise in the state: ``S_n[d, e] = a_n[d] S_{n-1}[d, e] + k_n[d] v_n[e]``, one scalar
    recurrence ``h_n = a_n h_{n-1} + x_n`` per entry (the pairs ``(a_n, k_n^T v_n)`` of eq. 12-13, with ``a``
    broadcast over ``e``); eq. 8 reads it, ``y_n[e] = sum_d q_n[d] S_n[d, e]``. At the paper's ``d_h = 1``
    (its max-headed variant, §3 below eq. 8; Appendix C: ``nr_heads`` 64 and 624, ``d_h`` 1) this is
    ``y = q . scan(a, k . v)``. Every head's ``dk * dv`` entries are channels of one scan, laid out heads-last,
    ``(B, L, H * dk * dv)``: the scan runs over ``B`` rows of ``H * dk * dv`` channels, and the layer's
    ``(B, L, H, d)`` projections need no copy. Exact for any ``a`` (0 included, gradient too), float32 or
    float64 state as the inputs; reads no value on the host.
    """
    from seqlab.ops.scan.triton import triton_linear_scan

    B, H, L, DK = q.shape
    DV = v.shape[-1]
    work = _promoted(q, k, v, a, h0)
    heads_last = lambda t: t.transpose(1, 2)                        # noqa: E731  (B, H, L, d) -> (B, L, H, d)
    x = heads_last(k).to(work)[..., :, None] * heads_last(v).to(work)[..., None, :]   # k_n^T v_n (B, L, H, dk, dv)
    gates = heads_last(a).to(_scan_gate_dtype(a, work))[..., :, None].expand(B, L, H, DK, DV)
    s0 = None if h0 is None else h0.to(work).reshape(B, H * DK * DV)
    h = triton_linear_scan(gates.reshape(B, L, H * DK * DV), x.reshape(B, L, H * DK * DV), s0)
    S = h.view(B, L, H, DK, DV)                                     # S_n, every step
    y = (heads_last(q).to(work)[..., :, None] * S).sum(-2)          # eq. 8: y_n = q_n S_n   (B, L, H, dv)
    if L:
        S_L = S[:, -1].reshape(B, H, DK, DV)
    else:
        S_L = s0.reshape(B, H, DK, DV) if s0 is not None else x.new_zeros(B, H, DK, DV)
    return y.transpose(1, 2), S_L


def _promoted(*tensors):
    """The scan's state dtype: complex if any input is, float64 for float64 inputs, else float32."""
    present = [t for t in tensors if t is not None]
    real = _real_dtype(present[0].dtype)
    for t in present[1:]:
        real = torch.promote_types(real, _real_dtype(t.dtype))
    if any(t.is_complex() for t in present):
        return torch.complex128 if real == torch.float64 else torch.complex64
    return real


def _scan_gate_dtype(a, work):
    """``a`` stays real when it is (a real decay of a complex state is one multiplication a plane)."""
    return work if a.is_complex() else _real_dtype(work)
