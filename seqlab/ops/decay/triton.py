"""Triton kernels for LightNet's additive decay, causal (paper 003 eq. 7), forward and backward.

One program per (batch x head) walks the sequence and keeps the ``dk x dv`` state in registers::

    log s_t = logaddexp(log s_{t-1}, d_t)                (s_t = s_{t-1} + exp(d_t), in the log domain)
    kbar_t  = exp(d_t - log s_t),  1 - kbar_t = exp(log s_{t-1} - log s_t)
    kv_t    = diag(1 - kbar_t) kv_{t-1} + (kbar_t * m_t) v_t^T,        o_t = kv_t^T q_t

``d`` is the log-importance (the key itself when shared, eq. 7) and ``m`` the key multiplier (1 when
shared). The forward saves ``log s_t``; the backward runs the recurrence forward once more for
``dq_t = kv_t do_t`` and then backward for the rest (derivation in :func:`additive_decay_bwd_kernel`).
Reached through ``seqlab.ops.decay_attention(..., mode="triton")``.
"""
from __future__ import annotations

import torch

from seqlab.kernels import HAVE_TRITON, require_triton

__all__ = ["additive_decay_triton"]

if HAVE_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def additive_decay_fwd_kernel(q_ptr, m_ptr, d_ptr, v_ptr, o_ptr, lse_ptr, L, DK, DV,
                                  SHARED: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr):
        bh = tl.program_id(0)                                            # one (batch, head) per program
        offs_k = tl.arange(0, BLOCK_K)                                   # (BK,)
        offs_v = tl.arange(0, BLOCK_V)                                   # (BV,)
        mk = offs_k < DK
        mv = offs_v < DV
        base_k = bh * L * DK
        base_v = bh * L * DV
        acc = q_ptr.dtype.element_ty
        kv = tl.zeros((BLOCK_K, BLOCK_V), dtype=acc)                     # state kv_t            (BK, BV)
        lse = tl.full((BLOCK_K,), float("-inf"), dtype=acc)              # log s_t               (BK,)
        for t in range(L):
            d_t = tl.load(d_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)          # (BK,)
            q_t = tl.load(q_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)          # (BK,)
            v_t = tl.load(v_ptr + base_v + t * DV + offs_v, mask=mv, other=0.0)          # (BV,)
            top = tl.maximum(lse, d_t)
            lse_new = top + tl.log(tl.exp(lse - top) + tl.exp(d_t - top))               # logaddexp
            keep = tl.exp(lse - lse_new)                                                 # 1 - kbar_t  (BK,)
            kbar = tl.exp(d_t - lse_new)                                                 # kbar_t      (BK,)
            if not SHARED:
                kbar = kbar * tl.load(m_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)
            kv = keep[:, None] * kv + kbar[:, None] * v_t[None, :]                       # eq. 7       (BK, BV)
            o_t = tl.sum(kv * q_t[:, None], axis=0)                                      # kv_t^T q_t  (BV,)
            tl.store(o_ptr + base_v + t * DV + offs_v, o_t, mask=mv)
            tl.store(lse_ptr + base_k + t * DK + offs_k, lse_new, mask=mk)
            lse = lse_new

    @triton.jit
    def additive_decay_bwd_kernel(q_ptr, m_ptr, d_ptr, v_ptr, do_ptr, lse_ptr, dq_ptr, dm_ptr, dd_ptr, dv_ptr,
                                  L, DK, DV, SHARED: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr):
        """With ``b_s = exp(d_s - log s_s)``, ``a_t = exp(log s_{t-1} - log s_t)`` and
        ``dkv_s = sum_{t>=s} (prod_{r=s+1}^t a_r) q_t do_t^T`` (a reverse recurrence):

        - ``dq_t = kv_t do_t``;
        - ``dv_s = dkv_s^T (b_s * m_s)``;     ``dm_s = b_s * (dkv_s v_s)``;
        - ``dd_s = b_s * (m_s * (dkv_s v_s) - r_s)``, ``r_s = sum_{t>=s} (prod a) q_t * dq_t`` (softmax
          derivative: ``d log s_t / d d_s = b_s prod_{r=s+1}^t a_r``).
        """
        bh = tl.program_id(0)
        offs_k = tl.arange(0, BLOCK_K)
        offs_v = tl.arange(0, BLOCK_V)
        mk = offs_k < DK
        mv = offs_v < DV
        base_k = bh * L * DK
        base_v = bh * L * DV
        acc = q_ptr.dtype.element_ty
        # pass 1, forward: kv_t again (from the saved log s_t), dq_t = kv_t do_t
        kv = tl.zeros((BLOCK_K, BLOCK_V), dtype=acc)                                     # (BK, BV)
        lse_prev = tl.full((BLOCK_K,), float("-inf"), dtype=acc)
        for t in range(L):
            lse_t = tl.load(lse_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)       # (BK,)
            d_t = tl.load(d_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)
            v_t = tl.load(v_ptr + base_v + t * DV + offs_v, mask=mv, other=0.0)          # (BV,)
            do_t = tl.load(do_ptr + base_v + t * DV + offs_v, mask=mv, other=0.0)        # (BV,)
            kbar = tl.exp(d_t - lse_t)
            if not SHARED:
                kbar = kbar * tl.load(m_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)
            kv = tl.exp(lse_prev - lse_t)[:, None] * kv + kbar[:, None] * v_t[None, :]
            dq_t = tl.sum(kv * do_t[None, :], axis=1)                                    # (BK,)
            tl.store(dq_ptr + base_k + t * DK + offs_k, dq_t, mask=mk)
            lse_prev = lse_t
        tl.debug_barrier()                                                               # dq visible to pass 2
        # pass 2, backward: dkv_s and r_s
        dkv = tl.zeros((BLOCK_K, BLOCK_V), dtype=acc)                                    # (BK, BV)
        r = tl.zeros((BLOCK_K,), dtype=acc)                                              # (BK,)
        lse_after = tl.load(lse_ptr + base_k + (L - 1) * DK + offs_k, mask=mk, other=0.0)   # log s_{t+1}
        for i in range(L):
            t = L - 1 - i
            lse_t = tl.load(lse_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)
            a_next = tl.exp(lse_t - lse_after)                                           # a_{t+1}  (BK,)
            q_t = tl.load(q_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)
            d_t = tl.load(d_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)
            dq_t = tl.load(dq_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)
            v_t = tl.load(v_ptr + base_v + t * DV + offs_v, mask=mv, other=0.0)
            do_t = tl.load(do_ptr + base_v + t * DV + offs_v, mask=mv, other=0.0)
            dkv = a_next[:, None] * dkv + q_t[:, None] * do_t[None, :]                   # (BK, BV)
            r = a_next * r + q_t * dq_t                                                  # (BK,)
            b_t = tl.exp(d_t - lse_t)                                                    # (BK,)
            u = tl.sum(dkv * v_t[None, :], axis=1)                                       # dkv_t v_t   (BK,)
            if SHARED:
                w = b_t
                dd_t = b_t * (u - r)
            else:
                m_t = tl.load(m_ptr + base_k + t * DK + offs_k, mask=mk, other=0.0)
                w = b_t * m_t
                dd_t = b_t * (m_t * u - r)
                tl.store(dm_ptr + base_k + t * DK + offs_k, b_t * u, mask=mk)
            dv_t = tl.sum(dkv * w[:, None], axis=0)                                      # (BV,)
            tl.store(dd_ptr + base_k + t * DK + offs_k, dd_t, mask=mk)
            tl.store(dv_ptr + base_v + t * DV + offs_v, dv_t, mask=mv)
            lse_after = lse_t



def _blocks(dk: int, dv: int) -> tuple[int, int]:
    import triton

    return max(16, triton.next_power_of_2(dk)), max(16, triton.next_power_of_2(dv))


class _AdditiveDecay(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, m, d, v, shared: bool):
        *lead, L, dk = q.shape
        dv = v.shape[-1]
        q_, m_, d_, v_ = (t.reshape(-1, L, t.shape[-1]).contiguous() for t in (q, m, d, v))
        BH = q_.shape[0]
        o = torch.empty(BH, L, dv, dtype=q.dtype, device=q.device)
        lse = torch.empty(BH, L, dk, dtype=q.dtype, device=q.device)
        BK, BV = _blocks(dk, dv)
        if BH and L:
            additive_decay_fwd_kernel[(BH,)](q_, m_, d_, v_, o, lse, L, dk, dv, SHARED=shared, BLOCK_K=BK, BLOCK_V=BV)
        ctx.save_for_backward(q_, m_, d_, v_, lse)
        ctx.shared, ctx.shapes = shared, (q.shape, v.shape)
        return o.reshape(*lead, L, dv)

    @staticmethod
    def backward(ctx, do):
        q_, m_, d_, v_, lse = ctx.saved_tensors
        qshape, vshape = ctx.shapes
        BH, L, dk = q_.shape
        dv = v_.shape[-1]
        do_ = do.reshape(BH, L, dv).contiguous().to(q_.dtype)
        dq, dd, dm = torch.empty_like(q_), torch.empty_like(q_), torch.zeros_like(q_)
        dvv = torch.empty_like(v_)
        BK, BV = _blocks(dk, dv)
        if BH and L:
            additive_decay_bwd_kernel[(BH,)](q_, m_, d_, v_, do_, lse, dq, dm, dd, dvv, L, dk, dv,
                                             SHARED=ctx.shared, BLOCK_K=BK, BLOCK_V=BV)
        dm_out = None if ctx.shared else dm.reshape(qshape)
        return dq.reshape(qshape), dm_out, dd.reshape(qshape), dvv.reshape(vshape), None


def additive_decay_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor | None = None):
    """Causal additive decay (eq. 7) by the Triton kernels; ``log_decay=None`` shares the decay with the key.

    Real inputs only (Triton has no complex dtype). Half precision is computed in float32.
    """
    require_triton("decay_attention", q, k, v)
    for name, t in (("q", q), ("k", k), ("v", v), ("log_decay", log_decay)):
        if t is not None and t.is_complex():
            raise TypeError(f"{name}: decay_attention(mode='triton') takes real tensors (Triton has no complex "
                            f"dtype), got dtype {t.dtype}; use mode='chunked' for complex q, v")
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    shared = log_decay is None
    d = k if shared else log_decay
    out = _AdditiveDecay.apply(q.to(dtype), k.to(dtype), d.to(dtype), v.to(dtype), shared)
    return out.to(torch.result_type(q, v))
