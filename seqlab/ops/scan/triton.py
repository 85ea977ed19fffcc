r"""Triton kernels for ``h_t = a_t h_{t-1} + x_t`` (``seqlab.ops.linear_scan(mode="triton")``).

**Tiles of time.** A program owns ``BD`` channels of one batch row and walks its stretch of the sequence in
tiles of ``BT`` steps. It loads a ``(BT, BD)`` tile of ``(a, x)`` and scans it down the rows with
``tl.associative_scan`` and GateLoop's operator (paper 004, eq. 13),
``(a1, x1) • (a2, x2) = (a1 a2, a2 x1 + x2)``: its prefixes (eq. 12) are, for every row, the product ``A`` of
the gates so far and the state ``X`` reached from zero. The state ``c`` carried in from the tile before enters as ``h = A c + X``, and the last row is carried
on. Steps past the stretch load the identity pair ``(1, 0)``, so the last row is the last valid state;
channels past ``D`` are masked. Every element of ``a`` and ``x`` is read once and every ``h`` written once.

**Two launch plans** (:func:`launch_plan`; no program ever waits for another). When ``B * cdiv(D, BD)``
programs fill the GPU (:func:`block_d` narrows ``BD`` to get there), each program walks all of ``L``: one
pass. When they cannot (a batch of one, as when a prompt is prefilled; few channels), the sequence is cut
into chunks of whole tiles and the scan runs in three launches, *reduce-then-scan*:

1. every (row, channel block, chunk) program reduces its chunk to one pair ``(A_c, X_c)`` (eq. 12 over the
   chunk: the product of its gates, its end state from zero);
2. one short scan over those pairs, ``H_c = A_c H_{c-1} + X_c`` from ``H_0 = h0`` (this same forward kernel,
   ``L`` = the number of chunks), gives the state each chunk starts from;
3. every chunk is rescanned from its start state, as in the one-pass plan.

``a`` and ``x`` are then read twice (20 bytes per float32 element instead of 12), in exchange for a program
per chunk, each walking ``chunk`` steps twice instead of all ``L``.

**Complex numbers.** Triton has no complex dtype, so a complex tensor is passed as two planes, its real and
imaginary parts (strided views of ``torch.view_as_real``: no copy), and the complex products are written out:

    (a_r + i a_i)(h_r + i h_i) = (a_r h_r - a_i h_i) + i (a_r h_i + a_i h_r)

**Backward.** The backward kernel has the same structure, reversed (``g = ∂loss/∂h``): its recurrence runs
opposite to the forward one, its gates are the forward gates shifted by one step and conjugated (zero at its
first step, where nothing is carried in), and ``∂a`` reads ``h`` shifted by one step, ``h0`` before the first:

    ∂x_t = g_t + conj(a_{t+1}) ∂x_{t+1},      ∂a_t = ∂x_t conj(h_{t-1})

It writes ``∂a`` for every ``(b, t, d)``; broadcast dimensions of ``a`` are summed in torch, and
``∂h0 = conj(a_1) ∂x_1``. Long sequences with few programs take the same three launches (chunk pairs of
``(conj(a_{t+1}), g_t)``, their short scan, the rescan).
"""
from __future__ import annotations

import torch

from seqlab.kernels import require_triton

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - Triton ships for Linux only
    triton = None

__all__ = ["triton_linear_scan", "linear_scan_fwd_kernel", "linear_scan_bwd_kernel", "linear_scan_chunk_kernel",
           "launch_plan", "block_d", "block_t", "chunk_tiles"]

if triton is not None:

    @triton.jit
    def _combine_real(a1, x1, a2, x2):
        # GateLoop eq. 13: (a1, x1) • (a2, x2) = (a1 a2, a2 x1 + x2), the earlier pair on the left
        return a1 * a2, a2 * x1 + x2

    @triton.jit
    def _combine_real_a_complex_x(a1, xr1, xi1, a2, xr2, xi2):
        # eq. 13 with a real a scaling both planes of a complex x
        return a1 * a2, a2 * xr1 + xr2, a2 * xi1 + xi2

    @triton.jit
    def _combine_complex(ar1, ai1, xr1, xi1, ar2, ai2, xr2, xi2):
        # eq. 13 in planes: a1 a2 and a2 x1 + x2 as complex products written out
        return (ar1 * ar2 - ai1 * ai2, ar1 * ai2 + ai1 * ar2,
                ar2 * xr1 - ai2 * xi1 + xr2, ar2 * xi1 + ai2 * xr1 + xi2)

    @triton.jit
    def _prefix_pairs(a_r, a_i, x_r, x_i, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr):
        """eq. 12 down the rows of a ``(BT, BD)`` tile: for every row the product ``A`` of the gates so far and
        the state ``X`` reached from zero (unused planes pass through)."""
        if COMPLEX_A:
            A_r, A_i, X_r, X_i = tl.associative_scan((a_r, a_i, x_r, x_i), 0, _combine_complex)
        elif COMPLEX_X:
            A_r, X_r, X_i = tl.associative_scan((a_r, x_r, x_i), 0, _combine_real_a_complex_x)
            A_i = A_r
        else:
            A_r, X_r = tl.associative_scan((a_r, x_r), 0, _combine_real)
            A_i = A_r
            X_i = X_r
        return A_r, A_i, X_r, X_i

    @triton.jit
    def _from_carry(A_r, A_i, X_r, X_i, c_r, c_i, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr):
        """``h = A c + X`` (BT, BD): the tile's prefix pairs applied to the state ``c`` (BD,) carried in."""
        if COMPLEX_A:
            h_r = A_r * c_r[None, :] - A_i * c_i[None, :] + X_r
            h_i = A_r * c_i[None, :] + A_i * c_r[None, :] + X_i
        elif COMPLEX_X:
            h_r = A_r * c_r[None, :] + X_r
            h_i = A_r * c_i[None, :] + X_i
        else:
            h_r = A_r * c_r[None, :] + X_r
            h_i = h_r
        return h_r, h_i

    @triton.jit
    def _last_row(h, rows, BT: tl.constexpr):
        """Row ``BT - 1`` of a ``(BT, BD)`` tile (BD,): what is carried into the next tile (rows past the
        stretch hold the identity pair, so the last row is the last valid one)."""
        return tl.sum(tl.where(rows[:, None] == BT - 1, h, 0.0), axis=0)

    @triton.jit
    def _tile_pair(A_r, A_i, X_r, X_i, rows, BT: tl.constexpr, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr):
        """The last row of a tile's prefix pairs (BD,): the whole tile's pair (unused planes pass through)."""
        T_r = _last_row(A_r, rows, BT)
        U_r = _last_row(X_r, rows, BT)
        T_i = T_r
        U_i = U_r
        if COMPLEX_A:
            T_i = _last_row(A_i, rows, BT)
        if COMPLEX_X:
            U_i = _last_row(X_i, rows, BT)
        return T_r, T_i, U_r, U_i

    @triton.jit
    def _fwd_pairs(a_re_ptr, a_im_ptr, x_re_ptr, x_im_ptr, a_base, x_base, stride_al, stride_xl, t, valid, mask_d,
                   COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr, STATE_FP64: tl.constexpr):
        """The pairs ``(a_t, x_t)`` (BT, BD) of the rows' times ``t`` (BT,); rows not ``valid`` are ``(1, 0)``."""
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        mask = valid[:, None] & mask_d[None, :]  # (BT, BD)
        a_off = a_base[None, :] + t.to(tl.int64)[:, None] * stride_al  # (BT, BD)
        x_off = x_base[None, :] + t.to(tl.int64)[:, None] * stride_xl
        a_r = tl.load(a_re_ptr + a_off, mask=mask, other=1.0).to(state_ty)
        x_r = tl.load(x_re_ptr + x_off, mask=mask, other=0.0).to(state_ty)
        a_i = a_r
        x_i = x_r
        if COMPLEX_A:
            a_i = tl.load(a_im_ptr + a_off, mask=mask, other=0.0).to(state_ty)
        if COMPLEX_X:
            x_i = tl.load(x_im_ptr + x_off, mask=mask, other=0.0).to(state_ty)
        return a_r, a_i, x_r, x_i

    @triton.jit
    def _bwd_pairs(a_re_ptr, a_im_ptr, g_re_ptr, g_im_ptr, a_base, x_base, stride_al, stride_xl, t, t_next, valid,
                   mask_d, L, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr, STATE_FP64: tl.constexpr):
        """The pairs ``(conj(a_{t_next}), g_t)`` (BT, BD) of ``∂x``'s recurrence: gate 0 where ``t_next`` is
        past the end of the sequence (nothing is carried into the first step), ``(1, 0)`` on rows not ``valid``."""
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        mask = valid[:, None] & mask_d[None, :]  # (BT, BD)
        next_mask = (valid & (t_next >= 0) & (t_next < L))[:, None] & mask_d[None, :]
        an_off = a_base[None, :] + t_next.to(tl.int64)[:, None] * stride_al  # (BT, BD) a_{t_next}
        g_off = x_base[None, :] + t.to(tl.int64)[:, None] * stride_xl
        an_r = tl.load(a_re_ptr + an_off, mask=next_mask, other=0.0).to(state_ty)
        an_r = tl.where(valid[:, None], an_r, 1.0)
        g_r = tl.load(g_re_ptr + g_off, mask=mask, other=0.0).to(state_ty)
        an_i = an_r
        g_i = g_r
        if COMPLEX_A:
            an_i = -tl.load(a_im_ptr + an_off, mask=next_mask, other=0.0).to(state_ty)  # conj
        if COMPLEX_X:
            g_i = tl.load(g_im_ptr + g_off, mask=mask, other=0.0).to(state_ty)
        return an_r, an_i, g_r, g_i

    @triton.jit
    def _start_state(c_re_ptr, c_im_ptr, c_off, mask_d, HAS_C: tl.constexpr, COMPLEX_X: tl.constexpr,
                     STATE_FP64: tl.constexpr, BD: tl.constexpr):
        """The state (BD,) a program starts from: loaded at ``c_off``, or zero."""
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        c_r = tl.zeros([BD], dtype=state_ty)
        c_i = tl.zeros([BD], dtype=state_ty)
        if HAS_C:
            c_r = tl.load(c_re_ptr + c_off, mask=mask_d, other=0.0).to(state_ty)
            if COMPLEX_X:
                c_i = tl.load(c_im_ptr + c_off, mask=mask_d, other=0.0).to(state_ty)
        return c_r, c_i

    @triton.jit
    def linear_scan_fwd_kernel(
        a_re_ptr, a_im_ptr, x_re_ptr, x_im_ptr, h0_re_ptr, h0_im_ptr, h_re_ptr, h_im_ptr,
        L, D, CHUNK,  # CHUNK: the steps one program scans (a multiple of BT; >= L in the one-pass plan)
        stride_ab, stride_al, stride_ad,  # a: (Ba, La, D); 0 where broadcast (time-invariant: stride_al = 0)
        stride_xb, stride_xl, stride_xd,  # x and h: (B, L, D)
        stride_h0b, stride_h0c, stride_h0d,  # h0: (B, chunks, D), the state each chunk starts from
        BT: tl.constexpr, BD: tl.constexpr, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr,
        HAS_H0: tl.constexpr, REVERSE: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        pid_b = tl.program_id(0).to(tl.int64)  # batch row
        pid_d = tl.program_id(1)  # block of channels
        pid_c = tl.program_id(2)  # chunk of time (0 in the one-pass plan)
        offs_d = pid_d * BD + tl.arange(0, BD)  # (BD,)
        mask_d = offs_d < D  # channels past D are masked
        rows = tl.arange(0, BT)  # (BT,) rows of a tile, in scan order
        # (BD,) the state carried from tile to tile, starting from this chunk's h0
        c_r, c_i = _start_state(h0_re_ptr, h0_im_ptr, pid_b * stride_h0b + pid_c * stride_h0c + offs_d * stride_h0d,
                                mask_d, HAS_H0, COMPLEX_X, STATE_FP64, BD)
        a_base = pid_b * stride_ab + offs_d * stride_ad  # (BD,)
        x_base = pid_b * stride_xb + offs_d * stride_xd  # (BD,)
        first = pid_c * CHUNK  # the chunk's steps, in scan order: first, ..., end - 1
        end = tl.minimum(first + CHUNK, L)
        for start in range(first, end, BT):
            step = start + rows  # (BT,) position in scan order
            if REVERSE:
                t = L - 1 - step  # (BT,) time index
            else:
                t = step
            valid = step < end  # (BT,)
            a_r, a_i, x_r, x_i = _fwd_pairs(a_re_ptr, a_im_ptr, x_re_ptr, x_im_ptr, a_base, x_base, stride_al,
                                            stride_xl, t, valid, mask_d, COMPLEX_A, COMPLEX_X, STATE_FP64)
            A_r, A_i, X_r, X_i = _prefix_pairs(a_r, a_i, x_r, x_i, COMPLEX_A, COMPLEX_X)  # (BT, BD) eq. 12
            h_r, h_i = _from_carry(A_r, A_i, X_r, X_i, c_r, c_i, COMPLEX_A, COMPLEX_X)  # h = A c + X
            x_off = x_base[None, :] + t.to(tl.int64)[:, None] * stride_xl  # (BT, BD)
            mask = valid[:, None] & mask_d[None, :]
            tl.store(h_re_ptr + x_off, h_r.to(h_re_ptr.dtype.element_ty), mask=mask)
            c_r = _last_row(h_r, rows, BT)
            if COMPLEX_X:
                tl.store(h_im_ptr + x_off, h_i.to(h_im_ptr.dtype.element_ty), mask=mask)
                c_i = _last_row(h_i, rows, BT)

    @triton.jit
    def linear_scan_chunk_kernel(
        a_re_ptr, a_im_ptr, x_re_ptr, x_im_ptr, ca_re_ptr, ca_im_ptr, cx_re_ptr, cx_im_ptr,
        L, D, CHUNK,  # CHUNK: the steps of a chunk (a multiple of BT)
        stride_ab, stride_al, stride_ad,  # a: (Ba, La, D), 0 where broadcast
        stride_xb, stride_xl, stride_xd,  # x (g when GRAD): (B, L, D)
        stride_cb, stride_cc, stride_cd,  # the chunks' pairs (A_c, X_c): (B, chunks, D) each
        BT: tl.constexpr, BD: tl.constexpr, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr,
        GRAD: tl.constexpr, REVERSE: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        """Step 1 of reduce-then-scan: chunk ``c``'s pair ``(A_c, X_c)``, eq. 12 over its steps: the product of
        its gates and the state it reaches from zero. ``GRAD``: the chunk of ``∂x``'s recurrence instead, whose
        pairs are ``(conj(a_{t_next}), g_t)`` in the backward kernel's order."""
        pid_b = tl.program_id(0).to(tl.int64)
        pid_d = tl.program_id(1)
        pid_c = tl.program_id(2)
        offs_d = pid_d * BD + tl.arange(0, BD)  # (BD,)
        mask_d = offs_d < D
        rows = tl.arange(0, BT)  # (BT,)
        state_ty = tl.float64 if STATE_FP64 else tl.float32
        P_r = tl.full([BD], 1.0, dtype=state_ty)  # (BD,) the chunk's pair so far, from the identity (1, 0)
        P_i = tl.zeros([BD], dtype=state_ty)
        S_r = tl.zeros([BD], dtype=state_ty)
        S_i = tl.zeros([BD], dtype=state_ty)
        a_base = pid_b * stride_ab + offs_d * stride_ad
        x_base = pid_b * stride_xb + offs_d * stride_xd
        first = pid_c * CHUNK
        end = tl.minimum(first + CHUNK, L)
        for start in range(first, end, BT):
            step = start + rows  # (BT,) in the order of the recurrence being summarised
            valid = step < end
            if GRAD:
                if REVERSE:
                    t = step
                    t_next = t - 1
                else:
                    t = L - 1 - step
                    t_next = t + 1
                a_r, a_i, x_r, x_i = _bwd_pairs(a_re_ptr, a_im_ptr, x_re_ptr, x_im_ptr, a_base, x_base, stride_al,
                                                stride_xl, t, t_next, valid, mask_d, L, COMPLEX_A, COMPLEX_X,
                                                STATE_FP64)
            else:
                if REVERSE:
                    t = L - 1 - step
                else:
                    t = step
                a_r, a_i, x_r, x_i = _fwd_pairs(a_re_ptr, a_im_ptr, x_re_ptr, x_im_ptr, a_base, x_base, stride_al,
                                                stride_xl, t, valid, mask_d, COMPLEX_A, COMPLEX_X, STATE_FP64)
            A_r, A_i, X_r, X_i = _prefix_pairs(a_r, a_i, x_r, x_i, COMPLEX_A, COMPLEX_X)
            T_r, T_i, U_r, U_i = _tile_pair(A_r, A_i, X_r, X_i, rows, BT, COMPLEX_A, COMPLEX_X)  # (BD,) (A, X)
            # the chunk so far • this tile's pair, eq. 13
            if COMPLEX_A:
                P_r, P_i, S_r, S_i = _combine_complex(P_r, P_i, S_r, S_i, T_r, T_i, U_r, U_i)
            elif COMPLEX_X:
                P_r, S_r, S_i = _combine_real_a_complex_x(P_r, S_r, S_i, T_r, U_r, U_i)
            else:
                P_r, S_r = _combine_real(P_r, S_r, T_r, U_r)
        c_off = pid_b * stride_cb + pid_c * stride_cc + offs_d * stride_cd  # (BD,)
        tl.store(ca_re_ptr + c_off, P_r, mask=mask_d)
        tl.store(cx_re_ptr + c_off, S_r, mask=mask_d)
        if COMPLEX_A:
            tl.store(ca_im_ptr + c_off, P_i, mask=mask_d)
        if COMPLEX_X:
            tl.store(cx_im_ptr + c_off, S_i, mask=mask_d)

    @triton.jit
    def linear_scan_bwd_kernel(
        a_re_ptr, a_im_ptr, h_re_ptr, h_im_ptr, h0_re_ptr, h0_im_ptr, g_re_ptr, g_im_ptr,
        dx_re_ptr, dx_im_ptr, da_re_ptr, da_im_ptr, c0_re_ptr, c0_im_ptr,
        L, D, CHUNK,  # CHUNK: the steps one program scans (a multiple of BT; >= L in the one-pass plan)
        stride_ab, stride_al, stride_ad,  # a: (Ba, La, D), 0 where broadcast
        stride_xb, stride_xl, stride_xd,  # h, g, dx: (B, L, D)
        stride_dab, stride_dal, stride_dad,  # da: (B, L, D) (a real ∂a beside complex planes of h has its own)
        stride_h0b, stride_h0d,  # h0: (B, D)
        stride_cb, stride_cc, stride_cd,  # c0: (B, chunks, D), the ∂x carried into each chunk
        BT: tl.constexpr, BD: tl.constexpr, COMPLEX_A: tl.constexpr, COMPLEX_X: tl.constexpr,
        HAS_H0: tl.constexpr, HAS_C0: tl.constexpr, REVERSE: tl.constexpr, STATE_FP64: tl.constexpr,
    ):
        pid_b = tl.program_id(0).to(tl.int64)
        pid_d = tl.program_id(1)
        pid_c = tl.program_id(2)
        offs_d = pid_d * BD + tl.arange(0, BD)  # (BD,)
        mask_d = offs_d < D
        rows = tl.arange(0, BT)  # (BT,) rows of a tile, in the order of the reverse recurrence
        # (BD,) carried ∂x of the step after the tile (zero past the end of the sequence)
        c_r, c_i = _start_state(c0_re_ptr, c0_im_ptr, pid_b * stride_cb + pid_c * stride_cc + offs_d * stride_cd,
                                mask_d, HAS_C0, COMPLEX_X, STATE_FP64, BD)
        # (BD,) the state before the first forward step
        h0_r, h0_i = _start_state(h0_re_ptr, h0_im_ptr, pid_b * stride_h0b + offs_d * stride_h0d, mask_d, HAS_H0,
                                  COMPLEX_X, STATE_FP64, BD)
        a_base = pid_b * stride_ab + offs_d * stride_ad
        x_base = pid_b * stride_xb + offs_d * stride_xd
        da_base = pid_b * stride_dab + offs_d * stride_dad
        first = pid_c * CHUNK
        end = tl.minimum(first + CHUNK, L)
        for start in range(first, end, BT):
            step = start + rows  # (BT,) walking opposite to the forward scan
            if REVERSE:
                t = step
                t_next = t - 1  # the forward step after t (a reverse scan goes down in t)
                t_prev = t + 1  # the forward step before t
            else:
                t = L - 1 - step
                t_next = t + 1
                t_prev = t - 1
            valid = step < end  # (BT,)
            # ∂x_t = conj(a_{t_next}) ∂x_{t_next} + g_t: the forward recurrence of the reversed sequence
            an_r, an_i, g_r, g_i = _bwd_pairs(a_re_ptr, a_im_ptr, g_re_ptr, g_im_ptr, a_base, x_base, stride_al,
                                              stride_xl, t, t_next, valid, mask_d, L, COMPLEX_A, COMPLEX_X, STATE_FP64)
            A_r, A_i, X_r, X_i = _prefix_pairs(an_r, an_i, g_r, g_i, COMPLEX_A, COMPLEX_X)
            d_r, d_i = _from_carry(A_r, A_i, X_r, X_i, c_r, c_i, COMPLEX_A, COMPLEX_X)  # (BT, BD) ∂x
            mask = valid[:, None] & mask_d[None, :]
            x_off = x_base[None, :] + t.to(tl.int64)[:, None] * stride_xl  # (BT, BD)
            tl.store(dx_re_ptr + x_off, d_r.to(dx_re_ptr.dtype.element_ty), mask=mask)
            # ∂a_t = ∂x_t conj(h_{t_prev}), h0 before the first forward step
            da_off = da_base[None, :] + t.to(tl.int64)[:, None] * stride_dal  # (BT, BD)
            has_prev = (t_prev >= 0) & (t_prev < L)  # (BT,)
            hp_off = x_base[None, :] + t_prev.to(tl.int64)[:, None] * stride_xl
            hp_mask = (valid & has_prev)[:, None] & mask_d[None, :]
            hp_r = tl.load(h_re_ptr + hp_off, mask=hp_mask, other=0.0).to(h0_r.dtype)
            hp_r = tl.where(has_prev[:, None], hp_r, h0_r[None, :])
            if COMPLEX_X:
                tl.store(dx_im_ptr + x_off, d_i.to(dx_im_ptr.dtype.element_ty), mask=mask)
                hp_i = tl.load(h_im_ptr + hp_off, mask=hp_mask, other=0.0).to(h0_r.dtype)
                hp_i = tl.where(has_prev[:, None], hp_i, h0_i[None, :])
                da_r = d_r * hp_r + d_i * hp_i  # Re(∂x conj(h)); the whole ∂a for a real a
                tl.store(da_re_ptr + da_off, da_r.to(da_re_ptr.dtype.element_ty), mask=mask)
                if COMPLEX_A:
                    da_i = d_i * hp_r - d_r * hp_i  # Im(∂x conj(h))
                    tl.store(da_im_ptr + da_off, da_i.to(da_im_ptr.dtype.element_ty), mask=mask)
                c_i = _last_row(d_i, rows, BT)
            else:
                tl.store(da_re_ptr + da_off, (d_r * hp_r).to(da_re_ptr.dtype.element_ty), mask=mask)
            c_r = _last_row(d_r, rows, BT)


_SUPPORTED = (torch.float32, torch.bfloat16, torch.float64, torch.complex64, torch.complex128)


def _planes(t: torch.Tensor):
    """``(real plane, imaginary plane, strides of one plane)``: a complex tensor's real and imaginary parts as
    strided views of its memory (no copy; strides counted in real elements); a real tensor is its own
    (unused) imaginary plane."""
    if t.is_complex():
        pairs = torch.view_as_real(t.resolve_conj())  # (..., 2)
        return pairs[..., 0], pairs[..., 1], pairs[..., 0].stride()
    return t, t, t.stride()


TARGET_PROGRAMS = 132  # an H100's SMs (an A100 has 108): at least one program per SM
MIN_BLOCK_D = 8  # 8 float32 channels = 32 bytes, one DRAM sector per row of a tile
MAX_BLOCK_D = 64  # 256 bytes of float32 a row
# elements of one (BT, BD) tile and plane: 4 a thread of 8 warps. A thread's registers, not the tile, set the limit:
# with 8 a thread (2048-element tiles of 8 warps) Triton 3.6's backward needs 253-255 registers and its chunk kernel
# spills on sm_90; 16 warps cap a thread at 128 registers, where its backward spills (tests/ops/test_triton_spills.py)
TILE_ELEMENTS = 1024
MAX_BLOCK_T = TILE_ELEMENTS // MIN_BLOCK_D
MIN_CHUNK_TILES = 4  # reduce-then-scan only where every chunk holds at least this many tiles


def block_d(B: int, D: int) -> int:
    """The channels one program owns: the widest power of two (up to ``MAX_BLOCK_D``, at most ``D``
    rounded up) that still gives ``B * cdiv(D, BD) >= TARGET_PROGRAMS`` programs, halved down to
    ``MIN_BLOCK_D`` when ``B`` and ``D`` are too small to fill the GPU."""
    bd = min(MAX_BLOCK_D, triton.next_power_of_2(D))
    while bd > MIN_BLOCK_D and B * triton.cdiv(D, bd) < TARGET_PROGRAMS:
        bd //= 2
    return bd


def block_t(BD: int, L: int) -> int:
    """The time steps of one tile: ``TILE_ELEMENTS / BD`` (so every tile holds the same registers and loads as
    much in flight), at most ``MAX_BLOCK_T`` and no more than ``L`` needs (rounded up to a power of two: a short
    sequence is not scanned through rows of padding), at least 16. Tests set it small, so that short
    sequences cross tile edges in the interpreter."""
    return max(16, min(MAX_BLOCK_T, TILE_ELEMENTS // BD, triton.next_power_of_2(L)))


def chunk_tiles(programs: int, tiles: int) -> int:
    """The tiles of time one program scans, given ``programs = B * cdiv(D, BD)`` and ``tiles = cdiv(L, BT)``:
    all of them (the one-pass plan) when the programs fill the GPU or the sequence is too short to cut into
    two chunks of ``MIN_CHUNK_TILES``; else as few as give ``TARGET_PROGRAMS`` programs with the chunks
    (reduce-then-scan), never under ``MIN_CHUNK_TILES``."""
    if programs >= TARGET_PROGRAMS or tiles < 2 * MIN_CHUNK_TILES:
        return tiles
    return max(MIN_CHUNK_TILES, tiles // triton.cdiv(TARGET_PROGRAMS, programs))


def launch_plan(B: int, L: int, D: int, *, itemsize: int = 4, complex_: bool = False,
                backward: bool = False) -> dict:
    """What the scan's launches do for ``x (B, L, D)``, without a GPU: the grid of the main kernel
    ``(B, cdiv(D, BD), chunks)``, its tile ``(BT, BD)`` and warps, the chunk of steps a program scans, the tiles
    scanned one after another on the critical path (``serial_steps``: one pass ``cdiv(L, BT)``; reduce-then-scan
    a chunk, the short scan over the chunks, a chunk again), and the bytes moved per element of ``x`` (planes
    of ``itemsize`` bytes; each element of each tensor read or written once per pass: forward ``a, x`` in and
    ``h`` out, backward ``a, h, g`` in and ``∂x, ∂a`` out; reduce-then-scan reads ``a`` and ``x`` (or ``g``)
    once more, plus the chunks' pairs in the state's precision). Complex tensors are read and written in
    place as two planes."""
    BD = block_d(B, D)
    BT = block_t(BD, L)
    columns = B * triton.cdiv(D, BD)
    tiles = triton.cdiv(L, BT)
    per_chunk = chunk_tiles(columns, tiles)
    chunks = triton.cdiv(tiles, per_chunk)
    planes = 2 if complex_ else 1
    passes = 5 if backward else 3  # tensors read or written once
    serial = tiles
    summary_bytes = 0
    if chunks > 1:
        passes += 2  # the chunk pairs read a and x (g) once more
        serial = 2 * per_chunk + triton.cdiv(chunks, BT)
        # pairs written (2), read by the short scan (2) with its start (1) and end (1) states, starts read (1)
        summary_bytes = 7 * B * (chunks + 1) * D * planes * max(itemsize, 4)
    bytes_per_element = (passes * planes * itemsize * B * L * D + summary_bytes) / (B * L * D)
    return dict(grid=(B, triton.cdiv(D, BD), chunks), programs=columns * chunks, BT=BT, BD=BD,
                chunk=per_chunk * BT, chunks=chunks, serial_steps=serial, bytes_per_element=bytes_per_element,
                num_warps=max(1, min(8, BT * BD // 128)))  # a warp per 128 elements: 4 a thread and plane


def _h0_planes(h0, like_re, like_im):
    """``h0``'s planes and plane strides; without ``h0`` any valid pointer (unread: ``HAS_H0=False``)."""
    return _planes(h0) if h0 is not None else (like_re, like_im, (0, 0))


def _a_strides(a, sa):
    """a's strides, 0 along its broadcast dimensions (a batch of one, a time-invariant ``a``)."""
    return sa[0] if a.shape[0] > 1 else 0, sa[1] if a.shape[1] > 1 else 0, sa[2]


def _chunk_pairs(B, chunks, D, dtype, device, complex_a, complex_x):
    """Planes ``(B, chunks + 1, D)`` of the chunks' pairs ``(A_c, X_c)`` (rows 1..chunks) and of the states
    ``H`` (row 0: the start, row c: the state after chunk c), in the state's precision."""
    def plane():
        return torch.empty(B, chunks + 1, D, dtype=dtype, device=device)

    A_r, X_r, H_r = plane(), plane(), plane()
    A_i = plane() if complex_a else A_r
    X_i, H_i = (plane(), plane()) if complex_x else (X_r, H_r)
    return A_r, A_i, X_r, X_i, H_r, H_i


def _chunk_starts(plan, a_planes, x_planes, sa, sx, L, D, start, flags, grad):
    """Steps 1 and 2 of reduce-then-scan: the chunks' pairs (``linear_scan_chunk_kernel``), then their short
    scan from ``start`` (``(re, im)`` planes ``(B, D)`` or ``None`` for zero) by the forward kernel. Returns
    the planes ``H (B, chunks + 1, D)`` whose row ``c`` is the state chunk ``c`` starts from."""
    B, chunks = plan["grid"][0], plan["chunks"]
    state = torch.float64 if flags["STATE_FP64"] else torch.float32
    A_r, A_i, X_r, X_i, H_r, H_i = _chunk_pairs(B, chunks, D, state, x_planes[0].device, flags["COMPLEX_A"],
                                                flags["COMPLEX_X"])
    sc = A_r.stride()
    warps = plan["num_warps"]
    linear_scan_chunk_kernel[plan["grid"]](
        *a_planes, *x_planes, A_r[:, 1:], A_i[:, 1:], X_r[:, 1:], X_i[:, 1:], L, D, plan["chunk"], *sa, *sx, *sc,
        BT=plan["BT"], BD=plan["BD"], GRAD=grad, num_warps=warps, **flags)
    if start is None:
        H_r[:, 0].zero_()
        H_i[:, 0].zero_()
    else:
        H_r[:, 0] = start[0]
        H_i[:, 0] = start[1]
    # H_c = A_c H_{c-1} + X_c over the chunks, in the order they were scanned
    linear_scan_fwd_kernel[plan["grid"][:2] + (1,)](
        A_r[:, 1:], A_i[:, 1:], X_r[:, 1:], X_i[:, 1:], H_r, H_i, H_r[:, 1:], H_i[:, 1:], chunks, D, chunks,
        *sc, *sc, sc[0], 0, sc[2], BT=plan["BT"], BD=plan["BD"], HAS_H0=True, num_warps=warps,
        **{**flags, "REVERSE": False})
    return H_r, H_i, sc


def _flags(a, x, reverse):
    return dict(COMPLEX_A=a.is_complex(), COMPLEX_X=x.is_complex(), REVERSE=bool(reverse),
                STATE_FP64=x.dtype in (torch.float64, torch.complex128))


def _launch_fwd(a, x, h0, reverse):
    B, L, D = x.shape
    a_re, a_im, sa = _planes(a)
    x_re, x_im, sx = _planes(x)
    h = torch.empty_like(x)
    h_re, h_im, sh = _planes(h)
    if sh != sx:
        raise RuntimeError("internal: x and h must share strides")
    h0_re, h0_im, sh0 = _h0_planes(h0, x_re, x_im)
    plan = launch_plan(B, L, D)
    flags = _flags(a, x, reverse)
    sa = _a_strides(a, sa)
    if plan["chunks"] > 1:  # reduce-then-scan: every chunk starts from its state in H
        start = None if h0 is None else (h0_re, h0_im)
        h0_re, h0_im, sc = _chunk_starts(plan, (a_re, a_im), (x_re, x_im), sa, sx, L, D, start, flags, grad=False)
        sh0 = sc
    else:  # one pass: every program starts from h0
        sh0 = (sh0[0] if h0 is not None and h0.shape[0] > 1 else 0, 0, sh0[1])
    linear_scan_fwd_kernel[plan["grid"]](
        a_re, a_im, x_re, x_im, h0_re, h0_im, h_re, h_im, L, D, plan["chunk"], *sa, *sx, *sh0,
        BT=plan["BT"], BD=plan["BD"], num_warps=plan["num_warps"], HAS_H0=h0 is not None or plan["chunks"] > 1,
        **flags)
    return h


def _launch_bwd(a, h, h0, g, reverse):
    B, L, D = h.shape
    a_re, a_im, sa = _planes(a)
    h_re, h_im, sx = _planes(h)
    g_re, g_im, sg = _planes(g)
    dx = torch.empty_like(h)
    dx_re, dx_im, sdx = _planes(dx)
    da = torch.empty(h.shape, dtype=a.dtype, device=h.device)  # ∂a in a's precision, for every (b, t, d)
    da_re, da_im, sda = _planes(da)
    if sg != sx or sdx != sx:
        raise RuntimeError("internal: g, ∂x and h must share strides")
    h0_re, h0_im, sh0 = _h0_planes(h0, h_re, h_im)
    sh0 = (sh0[0] if h0 is not None and h0.shape[0] > 1 else 0, sh0[1])
    plan = launch_plan(B, L, D, backward=True)
    flags = _flags(a, h, reverse)
    sa = _a_strides(a, sa)
    c0_re, c0_im, sc = dx_re, dx_im, (0, 0, 0)  # one pass: nothing carried in (unread)
    if plan["chunks"] > 1:  # reduce-then-scan: the ∂x carried into every chunk, in H
        c0_re, c0_im, sc = _chunk_starts(plan, (a_re, a_im), (g_re, g_im), sa, sx, L, D, None, flags, grad=True)
    linear_scan_bwd_kernel[plan["grid"]](
        a_re, a_im, h_re, h_im, h0_re, h0_im, g_re, g_im, dx_re, dx_im, da_re, da_im, c0_re, c0_im,
        L, D, plan["chunk"], *sa, *sx, *sda, *sh0, *sc,
        BT=plan["BT"], BD=plan["BD"], num_warps=plan["num_warps"], HAS_H0=h0 is not None,
        HAS_C0=plan["chunks"] > 1, **flags)
    return dx, da


def _sum_to(t: torch.Tensor, shape) -> torch.Tensor:
    dims = [i for i, (n, m) in enumerate(zip(shape, t.shape)) if n == 1 and m != 1]
    return t.sum(dim=dims, keepdim=True) if dims else t


class TritonLinearScan(torch.autograd.Function):
    """``h = scan(a, x, h0)`` by :func:`linear_scan_fwd_kernel`, gradients by :func:`linear_scan_bwd_kernel`."""

    @staticmethod
    def forward(ctx, a, x, h0, reverse):
        h = _launch_fwd(a, x, h0, reverse)
        ctx.save_for_backward(a, h, h0)
        ctx.reverse = reverse
        return h

    @staticmethod
    def backward(ctx, g):
        a, h, h0 = ctx.saved_tensors
        g = g.to(h.dtype).contiguous()
        dx, da_full = _launch_bwd(a, h, h0, g, ctx.reverse)
        da = _sum_to(da_full, a.shape).to(a.dtype) if ctx.needs_input_grad[0] else None
        dh0 = None
        if h0 is not None and ctx.needs_input_grad[2]:
            first = -1 if ctx.reverse else 0
            a_first = a[:, first] if a.shape[1] > 1 else a[:, 0]
            dh0 = _sum_to(a_first.conj() * dx[:, first], h0.shape)
            if not h0.is_complex() and dh0.is_complex():
                dh0 = dh0.real
            dh0 = dh0.to(h0.dtype)
        return da, dx, dh0, None


def triton_linear_scan(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None = None, *,
                       reverse: bool = False) -> torch.Tensor:
    """The Triton scan on the canonical layout: ``x (B, L, D)``, ``a (Ba, La, D)`` (``Ba in {1, B}``,
    ``La in {1, L}``), ``h0 (Bh, D)`` or ``None``. ``x`` in float32, bfloat16 (float32 state, output
    in bfloat16; ``a`` and ``h0`` in bfloat16 or float32), float64 or complex64/128; ``a`` real or
    complex of the same precision."""
    require_triton("linear_scan", a, x)
    if x.dtype not in _SUPPORTED:
        raise TypeError(f"linear_scan(mode='triton'): x dtype must be one of {_SUPPORTED}, got {x.dtype}")
    if a.is_complex() and not x.is_complex():
        raise TypeError(f"linear_scan(mode='triton'): a complex a ({a.dtype}) needs a complex x, got {x.dtype}")
    if x.shape[1] == 0:
        return x.clone()
    x, a = x.contiguous(), a.contiguous()
    h0 = None if h0 is None else h0.contiguous()
    return TritonLinearScan.apply(a, x, h0, bool(reverse))
