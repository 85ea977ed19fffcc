"""GateLoop's chunked algorithm as Triton kernels, forward and backward (``gateloop(..., mode="triton")``).

Triton has no complex dtype: every complex tensor travels as a real and an imaginary plane, and
the transitions as ``log|a|`` and ``arg a`` planes. One program handles one (batch, head) pair and
walks its sequence chunk by chunk (``C`` steps), holding the state ``S`` (``dk x dv``, complex) in
registers. Inside a chunk (the ``"chunked"`` mode of ``seqlab.ops.gateloop``):

    D[n, m, d] = sum_{m < j <= n} log a_{j,d}          segment sums, exact to rounding (no differences
                                                       of large cumulative sums), masked n < m -> 0 weight
    A[n, m]    = sum_d q_{n,d} k_{m,d} exp(D[n, m, d])  intra-chunk surrogate attention (eq. 21)
    y_n        = sum_m A[n, m] v_m + (q_n . exp(g_n)) S_in          g_n = sum_{j <= n in chunk} log a_j
    S_out      = diag(exp(g_last)) S_in + sum_m (k_m . exp(D[last, m]))^T v_m

Backward (PyTorch's conjugate convention, ``G_n = dL/dy_n``): with ``P = G v^H`` (``C x C``)

    dq_n = sum_{m<=n} conj(k_m . exp(D[n, m])) P[n, m] + conj(exp(g_n)) . (G_n S_in^H)
    dk_m = sum_{n>=m} conj(q_n . exp(D[n, m])) P[n, m] + conj(exp(D[last, m])) . (dS_out v_m^H)
    dv_m = sum_{n>=m} conj(A[n, m]) G_n + (k_m . exp(D[last, m]))^H dS_out
    dS_in = (q . exp(g))^H G + diag(conj(exp(g_last))) dS_out            (the adjoint state, backwards)

and the transitions' gradient ``dL/d log a_j`` sums every path through ``a_j`` directly: pairs
``m < j <= n`` inside the chunk, from the state entering the chunk to ``n >= j``, from ``m < j`` to the
state leaving it, and through the chunk from state to state (the telescoping identity
``sum_{n>=j} conj(q_n) dq_n - conj(k_n) dk_n`` is exact too, but cancels catastrophically in float32
for strong decays). The state starts from ``h0`` and ends in ``S_L``; the backward pass starts its
adjoint state from ``dL/dS_L`` and returns ``dL/dh0``.
"""
from __future__ import annotations

import torch

from seqlab.kernels import require_triton

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - Triton ships for Linux only
    triton = None

__all__ = ["gateloop_triton", "gateloop_fwd_kernel", "gateloop_bwd_kernel"]


if triton is not None:

    @triton.jit
    def _segment_sums(x, C: tl.constexpr):
        """``D[n, m, :] = sum_{m < j <= n} x[j, :]`` for a ``(C, K)`` block: a cumsum over j of the masked terms."""
        j = tl.arange(0, C)
        terms = tl.where(j[:, None, None] > j[None, :, None], x[:, None, :], 0.0)   # (C_j, C_m, K)
        return tl.cumsum(terms, axis=0)                                               # (C_n, C_m, K)

    @triton.jit
    def _row(x3, r, C: tl.constexpr):
        """Row ``r`` of a ``(C, C, K)`` block as ``(C, K)``."""
        n = tl.arange(0, C)
        return tl.sum(tl.where(n[:, None, None] == r, x3, 0.0), axis=0)

    @triton.jit
    def _chunk_decays(lam, phs, C: tl.constexpr):
        """Intra-chunk decays ``exp(D)`` (masked, re/im) ``(C, C, K)``, to-end decays ``exp(D[last])``
        ``(C, K)``, from-start decays ``exp(g)`` ``(C, K)`` and the through-chunk decay ``(K,)``."""
        n = tl.arange(0, C)
        d_mag = _segment_sums(lam, C)                                   # (C, C, K)
        d_ph = _segment_sums(phs, C)
        causal = n[:, None, None] >= n[None, :, None]                   # (C, C, 1)
        mag = tl.where(causal, tl.exp(tl.where(causal, d_mag, 0.0)), 0.0)
        dec_re = mag * tl.cos(d_ph)
        dec_im = mag * tl.sin(d_ph)
        end_mag = tl.exp(_row(d_mag, C - 1, C))                         # (C, K) prod_{j>m} a_j
        end_ph = _row(d_ph, C - 1, C)
        g = tl.cumsum(lam, axis=0)                                      # (C, K) from the chunk start
        gp = tl.cumsum(phs, axis=0)
        e_re = tl.exp(g) * tl.cos(gp)
        e_im = tl.exp(g) * tl.sin(gp)
        t_re = tl.sum(tl.where(n[:, None] == C - 1, e_re, 0.0), axis=0)   # (K,) prod over the chunk
        t_im = tl.sum(tl.where(n[:, None] == C - 1, e_im, 0.0), axis=0)
        return dec_re, dec_im, end_mag * tl.cos(end_ph), end_mag * tl.sin(end_ph), e_re, e_im, t_re, t_im

    @triton.jit
    def _load_chunk(q_re, q_im, k_re, k_im, v_re, v_im, la, ph, start, L, DK, DV, base_k, base_v,
                    offs_c, offs_k, offs_v):
        """One chunk's tiles from ``start``: masks, offsets, q, k (C, BK), v (C, BV), log|a| and arg a (C, BK).

        Rows past ``L`` read as q = k = v = 0 and log|a| = arg a = 0 (a = 1): they leave every state unchanged.
        """
        rows = start + offs_c                                           # (C,)
        mk = (rows[:, None] < L) & (offs_k[None, :] < DK)               # (C, BK)
        mv = (rows[:, None] < L) & (offs_v[None, :] < DV)               # (C, BV)
        pk = base_k + rows[:, None] * DK + offs_k[None, :]
        pv = base_v + rows[:, None] * DV + offs_v[None, :]
        qr = tl.load(q_re + pk, mask=mk, other=0.0)
        qi = tl.load(q_im + pk, mask=mk, other=0.0)
        kr = tl.load(k_re + pk, mask=mk, other=0.0)
        ki = tl.load(k_im + pk, mask=mk, other=0.0)
        vr = tl.load(v_re + pv, mask=mv, other=0.0)
        vi = tl.load(v_im + pv, mask=mv, other=0.0)
        lam = tl.load(la + pk, mask=mk, other=0.0)                      # log|a|
        phs = tl.load(ph + pk, mask=mk, other=0.0)                      # arg a
        return mk, mv, pk, pv, qr, qi, kr, ki, vr, vi, lam, phs

    @triton.jit
    def _mm(a_re, a_im, b_re, b_im):
        """Complex matrix product of (M, K) and (K, N) blocks, full fp32 precision (no TF32)."""
        re = tl.dot(a_re, b_re, input_precision="ieee") - tl.dot(a_im, b_im, input_precision="ieee")
        im = tl.dot(a_re, b_im, input_precision="ieee") + tl.dot(a_im, b_re, input_precision="ieee")
        return re, im

    @triton.jit
    def _sum_before(T, before, C: tl.constexpr, K: tl.constexpr):
        """``X[n, j, :] = sum_{m < j} T[n, m, :]`` for a ``(C, C, K)`` block, by one matrix product."""
        flat = tl.reshape(tl.permute(T, (0, 2, 1)), (C * K, C))         # (n*k, m)
        X = tl.dot(flat, tl.trans(before), input_precision="ieee")      # (n*k, j)
        return tl.permute(tl.reshape(X, (C, K, C)), (0, 2, 1))         # (n, j, k)

    @triton.jit
    def gateloop_fwd_kernel(q_re, q_im, k_re, k_im, v_re, v_im, la, ph, h0_re, h0_im, y_re, y_im, sL_re, sL_im,
                            L, DK, DV, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
        pid = tl.program_id(0)                                          # one (batch, head) pair
        offs_c = tl.arange(0, C)
        offs_k = tl.arange(0, BK)
        offs_v = tl.arange(0, BV)
        base_k = pid * L * DK
        base_v = pid * L * DV
        p_s = pid * DK * DV + offs_k[:, None] * DV + offs_v[None, :]    # (BK, BV) a state in memory
        m_s = (offs_k[:, None] < DK) & (offs_v[None, :] < DV)
        S_re = tl.load(h0_re + p_s, mask=m_s, other=0.0)                # state S (dk, dv), complex: S_0
        S_im = tl.load(h0_im + p_s, mask=m_s, other=0.0)
        for start in range(0, L, C):
            mk, mv, pk, pv, qr, qi, kr, ki, vr, vi, lam, phs = _load_chunk(
                q_re, q_im, k_re, k_im, v_re, v_im, la, ph, start, L, DK, DV, base_k, base_v, offs_c, offs_k, offs_v)
            dec_re, dec_im, end_re, end_im, e_re, e_im, t_re, t_im = _chunk_decays(lam, phs, C)
            # A[n, m] = sum_d q_nd k_md D_nmd                            (C, C) complex
            qk_re = qr[:, None, :] * kr[None, :, :] - qi[:, None, :] * ki[None, :, :]
            qk_im = qr[:, None, :] * ki[None, :, :] + qi[:, None, :] * kr[None, :, :]
            A_re = tl.sum(qk_re * dec_re - qk_im * dec_im, axis=2)
            A_im = tl.sum(qk_re * dec_im + qk_im * dec_re, axis=2)
            yr, yi = _mm(A_re, A_im, vr, vi)                            # intra-chunk  (C, BV)
            qe_re = qr * e_re - qi * e_im                               # q . exp(g)   (C, BK)
            qe_im = qr * e_im + qi * e_re
            ur, ui = _mm(qe_re, qe_im, S_re, S_im)                      # inter-chunk  (C, BV)
            tl.store(y_re + pv, yr + ur, mask=mv)
            tl.store(y_im + pv, yi + ui, mask=mv)
            # S_out = diag(prod a) S_in + (k . exp(D[last]))^T v
            ke_re = kr * end_re - ki * end_im                           # (C, BK)
            ke_im = kr * end_im + ki * end_re
            nr, ni = _mm(tl.trans(ke_re), tl.trans(ke_im), vr, vi)      # (BK, BV)
            S_re, S_im = t_re[:, None] * S_re - t_im[:, None] * S_im + nr, t_re[:, None] * S_im + t_im[:, None] * S_re + ni
        tl.store(sL_re + p_s, S_re, mask=m_s)                           # S_L
        tl.store(sL_im + p_s, S_im, mask=m_s)

    @triton.jit
    def gateloop_bwd_kernel(q_re, q_im, k_re, k_im, v_re, v_im, la, ph, h0_re, h0_im, g_re, g_im, gS_re, gS_im,
                            dq_re, dq_im, dk_re, dk_im, dv_re, dv_im, dl_re, dl_im, dh0_re, dh0_im, st_re, st_im,
                            L, DK, DV, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
        pid = tl.program_id(0)
        offs_c = tl.arange(0, C)
        offs_k = tl.arange(0, BK)
        offs_v = tl.arange(0, BV)
        base_k = pid * L * DK
        base_v = pid * L * DV
        n_chunks = tl.cdiv(L, C)
        p_state = offs_k[:, None] * BV + offs_v[None, :]                 # (BK, BV) offsets in a state
        p_s = pid * DK * DV + offs_k[:, None] * DV + offs_v[None, :]
        m_s = (offs_k[:, None] < DK) & (offs_v[None, :] < DV)
        # pass 1, forwards: states S_in again (kept in st_*), dq = intra + conj(exp(g)) . (G S_in^H)
        S_re = tl.load(h0_re + p_s, mask=m_s, other=0.0)
        S_im = tl.load(h0_im + p_s, mask=m_s, other=0.0)
        for start in range(0, L, C):
            mk, mv, pk, pv, qr, qi, kr, ki, vr, vi, lam, phs = _load_chunk(
                q_re, q_im, k_re, k_im, v_re, v_im, la, ph, start, L, DK, DV, base_k, base_v, offs_c, offs_k, offs_v)
            gr = tl.load(g_re + pv, mask=mv, other=0.0)                 # G = dL/dy    (C, BV)
            gi = tl.load(g_im + pv, mask=mv, other=0.0)
            dec_re, dec_im, end_re, end_im, e_re, e_im, t_re, t_im = _chunk_decays(lam, phs, C)
            # P = G v^H                                                  (C, C)
            P_re, P_im = _mm(gr, gi, tl.trans(vr), -tl.trans(vi))
            # conj(k_m D_nm) P_nm summed over m                          (C, BK)
            kd_re = kr[None, :, :] * dec_re - ki[None, :, :] * dec_im  # (C, C, BK) k_m D_nm
            kd_im = kr[None, :, :] * dec_im + ki[None, :, :] * dec_re
            dqr = tl.sum(kd_re * P_re[:, :, None] + kd_im * P_im[:, :, None], axis=1)
            dqi = tl.sum(kd_re * P_im[:, :, None] - kd_im * P_re[:, :, None], axis=1)
            hr, hi = _mm(gr, gi, tl.trans(S_re), -tl.trans(S_im))       # G S_in^H     (C, BK)
            dqr += e_re * hr + e_im * hi                                 # conj(exp(g)) . (G S^H)
            dqi += e_re * hi - e_im * hr
            tl.store(dq_re + pk, dqr, mask=mk)
            tl.store(dq_im + pk, dqi, mask=mk)
            p_st = (pid * n_chunks + start // C) * BK * BV + p_state
            tl.store(st_re + p_st, S_re)
            tl.store(st_im + p_st, S_im)
            ke_re = kr * end_re - ki * end_im
            ke_im = kr * end_im + ki * end_re
            nr, ni = _mm(tl.trans(ke_re), tl.trans(ke_im), vr, vi)
            S_re, S_im = t_re[:, None] * S_re - t_im[:, None] * S_im + nr, t_re[:, None] * S_im + t_im[:, None] * S_re + ni
        # pass 2, backwards: adjoint state dS (from dL/dS_L), dk and dv
        dS_re = tl.load(gS_re + p_s, mask=m_s, other=0.0)
        dS_im = tl.load(gS_im + p_s, mask=m_s, other=0.0)
        for idx in range(0, n_chunks):
            start = (n_chunks - 1 - idx) * C
            mk, mv, pk, pv, qr, qi, kr, ki, vr, vi, lam, phs = _load_chunk(
                q_re, q_im, k_re, k_im, v_re, v_im, la, ph, start, L, DK, DV, base_k, base_v, offs_c, offs_k, offs_v)
            gr = tl.load(g_re + pv, mask=mv, other=0.0)
            gi = tl.load(g_im + pv, mask=mv, other=0.0)
            dec_re, dec_im, end_re, end_im, e_re, e_im, t_re, t_im = _chunk_decays(lam, phs, C)
            P_re, P_im = _mm(gr, gi, tl.trans(vr), -tl.trans(vi))       # (C, C)
            # dk_m = sum_n conj(q_n D_nm) P_nm + conj(exp(D[last, m])) . (dS v_m^H)
            qd_re = qr[:, None, :] * dec_re - qi[:, None, :] * dec_im  # (C, C, BK) q_n D_nm
            qd_im = qr[:, None, :] * dec_im + qi[:, None, :] * dec_re
            dkr = tl.sum(qd_re * P_re[:, :, None] + qd_im * P_im[:, :, None], axis=0)
            dki = tl.sum(qd_re * P_im[:, :, None] - qd_im * P_re[:, :, None], axis=0)
            wr, wi = _mm(vr, -vi, tl.trans(dS_re), tl.trans(dS_im))     # conj(v) dS^T = (dS v^H)^T  (C, BK)
            dkr += end_re * wr + end_im * wi
            dki += end_re * wi - end_im * wr
            tl.store(dk_re + pk, dkr, mask=mk)
            tl.store(dk_im + pk, dki, mask=mk)
            # dv_m = sum_n conj(A_nm) G_n + (k_m . exp(D[last, m]))^H dS
            qk_re = qr[:, None, :] * kr[None, :, :] - qi[:, None, :] * ki[None, :, :]
            qk_im = qr[:, None, :] * ki[None, :, :] + qi[:, None, :] * kr[None, :, :]
            A_re = tl.sum(qk_re * dec_re - qk_im * dec_im, axis=2)    # (C, C)
            A_im = tl.sum(qk_re * dec_im + qk_im * dec_re, axis=2)
            dvr, dvi = _mm(tl.trans(A_re), -tl.trans(A_im), gr, gi)    # A^H G        (C, BV)
            ke_re = kr * end_re - ki * end_im
            ke_im = kr * end_im + ki * end_re
            xr, xi = _mm(ke_re, -ke_im, dS_re, dS_im)                   # conj(k . end) dS   (C, BV)
            tl.store(dv_re + pv, dvr + xr, mask=mv)
            tl.store(dv_im + pv, dvi + xi, mask=mv)
            # dL/dlog a_j: every path through a_j, summed directly (no telescoping differences)
            p_st = (pid * n_chunks + start // C) * BK * BV + p_state
            Si_re = tl.load(st_re + p_st)                               # S_in of this chunk  (BK, BV)
            Si_im = tl.load(st_im + p_st)
            n3 = offs_c[:, None, None]
            j3 = offs_c[None, :, None]
            # (1) pairs m < j <= n inside the chunk: conj(q_n k_m D_nm) P_nm
            qkd_re = qd_re * kr[None, :, :] - qd_im * ki[None, :, :]  # (C, C, BK)
            qkd_im = qd_re * ki[None, :, :] + qd_im * kr[None, :, :]
            T_re = qkd_re * P_re[:, :, None] + qkd_im * P_im[:, :, None]
            T_im = qkd_re * P_im[:, :, None] - qkd_im * P_re[:, :, None]
            # sum_{m < j} as a product with the strictly lower-triangular 0/1 matrix (an exclusive cumsum
            # by subtraction would cancel: the m >= j terms are O(1), the m < j ones carry a_j)
            before = (offs_c[None, :] < offs_c[:, None]).to(T_re.dtype)  # (C_j, C_m): m < j
            Tx_re = _sum_before(T_re, before, C, BK)                    # (C_n, C_j, BK)
            Tx_im = _sum_before(T_im, before, C, BK)
            gl_re = tl.sum(tl.where(n3 >= j3, Tx_re, 0.0), axis=0)     # sum_{n >= j} (C_j, BK)
            gl_im = tl.sum(tl.where(n3 >= j3, Tx_im, 0.0), axis=0)
            # (2) m before the chunk, n >= j inside it: conj(q_n exp(g_n)) . (G_n S_in^H)
            qe_re = qr * e_re - qi * e_im                               # q . exp(g)  (C, BK)
            qe_im = qr * e_im + qi * e_re
            hr, hi = _mm(gr, gi, tl.trans(Si_re), -tl.trans(Si_im))    # (C, BK)
            H_re = qe_re * hr + qe_im * hi
            H_im = qe_re * hi - qe_im * hr
            gl_re += tl.sum(tl.where(n3 >= j3, H_re[:, None, :], 0.0), axis=0)
            gl_im += tl.sum(tl.where(n3 >= j3, H_im[:, None, :], 0.0), axis=0)
            # (3) n after the chunk, m < j inside it: conj(k_m exp(D[last, m])) . (conj(v_m) dS_out^T)
            V_re = ke_re * wr + ke_im * wi                              # (C, BK)
            V_im = ke_re * wi - ke_im * wr
            gl_re += tl.dot(before, V_re, input_precision="ieee")       # sum_{m < j}
            gl_im += tl.dot(before, V_im, input_precision="ieee")
            # (4) n after, m before the chunk: conj(prod a) . sum_e dS_out conj(S_in)
            o_re = tl.sum(dS_re * Si_re + dS_im * Si_im, axis=1)        # (BK,)
            o_im = tl.sum(dS_im * Si_re - dS_re * Si_im, axis=1)
            gl_re += (t_re * o_re + t_im * o_im)[None, :]
            gl_im += (t_re * o_im - t_im * o_re)[None, :]
            tl.store(dl_re + pk, gl_re, mask=mk)
            tl.store(dl_im + pk, gl_im, mask=mk)
            # dS_in = (q . exp(g))^H G + diag(conj(prod a)) dS_out
            ar, ai = _mm(tl.trans(qe_re), -tl.trans(qe_im), gr, gi)    # (BK, BV)
            dS_re, dS_im = t_re[:, None] * dS_re + t_im[:, None] * dS_im + ar, t_re[:, None] * dS_im - t_im[:, None] * dS_re + ai
        tl.store(dh0_re + p_s, dS_re, mask=m_s)                         # dL/dS_0
        tl.store(dh0_im + p_s, dS_im, mask=m_s)



def _block(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def _real_dtype(dtype: torch.dtype) -> torch.dtype:
    """The kernels' precision: float64 for float64 / complex128 work, else float32 (never lower, never less)."""
    return torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32


def _planes(t: torch.Tensor, real: torch.dtype):
    """A real or complex tensor as (real plane, imaginary plane) in ``real``."""
    t = t.to(torch.complex128 if real == torch.float64 else torch.complex64)
    return t.real.contiguous(), t.imag.contiguous()


class _GateLoopTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, la, ph, h0, chunk):
        BH, L, DK = q.shape
        DV = v.shape[-1]
        real = la.dtype
        planes = [*_planes(q, real), *_planes(k, real), *_planes(v, real), la.contiguous(), ph.contiguous(),
                  *_planes(h0, real)]
        y_re = torch.empty(BH, L, DV, device=q.device, dtype=real)
        y_im = torch.empty_like(y_re)
        s_re = torch.empty(BH, DK, DV, device=q.device, dtype=real)
        s_im = torch.empty_like(s_re)
        gateloop_fwd_kernel[(BH,)](*planes, y_re, y_im, s_re, s_im, L, DK, DV, C=chunk, BK=_block(DK), BV=_block(DV))
        ctx.save_for_backward(*planes)
        ctx.chunk = chunk
        ctx.complex_inputs = (q.is_complex(), k.is_complex(), v.is_complex(), h0.is_complex())
        return torch.complex(y_re, y_im), torch.complex(s_re, s_im)

    @staticmethod
    def backward(ctx, grad_y, grad_S):
        planes = ctx.saved_tensors
        BH, L, DK = planes[0].shape
        DV = planes[4].shape[-1]
        real = planes[0].dtype
        g_re, g_im = _planes(grad_y, real)
        if grad_S is None:
            grad_S = torch.zeros(BH, DK, DV, device=g_re.device, dtype=real)
        gS = _planes(grad_S, real)
        outs = [torch.empty_like(planes[i]) for i in (0, 0, 2, 2, 4, 4, 0, 0, 8, 8)]
        C, BK, BV = ctx.chunk, _block(DK), _block(DV)
        n_chunks = triton.cdiv(L, C)
        states = [torch.empty(BH, n_chunks, BK, BV, device=g_re.device, dtype=real) for _ in range(2)]
        gateloop_bwd_kernel[(BH,)](*planes[:8], *planes[8:10], g_re, g_im, *gS, *outs, *states, L, DK, DV,
                                   C=C, BK=BK, BV=BV)
        grads = [torch.complex(outs[i], outs[i + 1]) if is_c else outs[i]     # a real input gets the real part
                 for i, is_c in zip((0, 2, 4, 8), ctx.complex_inputs)]
        dq, dk, dv, dh0 = grads
        # d log a = d log|a| + i d arg a: the real plane goes to log|a|, the imaginary one to the phase
        return dq, dk, dv, outs[6], outs[7], dh0, None


def gateloop_triton(q, k, v, a, *, h0=None, return_state=False, chunk_size: int = 16):
    """``gateloop`` by the Triton kernels; inputs already checked and promoted by ``seqlab.ops.gateloop``.

    The kernels compute in float64 for float64 / complex128 inputs and in float32 otherwise.
    Returns ``(y, S_L)`` (``S_L`` is ``None`` unless ``return_state``).
    """
    require_triton("gateloop", q, k, v, a)
    B, H, L, DK = q.shape
    DV = v.shape[-1]
    out_dtype = q.dtype
    real = _real_dtype(out_dtype)
    tiny = torch.finfo(real).tiny
    la = a.abs().to(real).clamp_min(tiny).log()                      # log|a|
    ph = torch.angle(a).to(real) if a.is_complex() else (a < 0).to(real) * torch.pi
    flat = lambda t: t.reshape(B * H, L, t.shape[-1])                # noqa: E731
    state0 = h0.reshape(B * H, DK, DV) if h0 is not None else torch.zeros(B * H, DK, DV, device=q.device, dtype=out_dtype)
    y, S = _GateLoopTriton.apply(flat(q), flat(k), flat(v), flat(la), flat(ph), state0, chunk_size)
    y, S = y.reshape(B, H, L, DV), S.reshape(B, H, DK, DV)
    if not out_dtype.is_complex:
        y, S = y.real, S.real
    return y.to(out_dtype), (S.to(out_dtype) if return_state else None)
