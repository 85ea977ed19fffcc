"""The chunked form: surrogate attention inside chunks, the state passed between them."""
from __future__ import annotations

import torch

from seqlab.ops._checks import has_values
from seqlab.ops.gateloop._logs import (
    _BLOCK_ELEMENTS,
    _decay_from_logs,
    _log_transitions,
    _pad_to_chunks,
    _relative_decay,
)

_FACTOR_LOG_RANGE = {torch.float32: 160.0, torch.float64: 1400.0}   # +-80 (+-700) around the chunk's middle


_MIN_FACTOR_CHUNK = 4


def _factorised_chunk(dtype, log_mag, chunk_size: int) -> int:
    """The chunk length for the factorised form: the largest power of two <= ``chunk_size`` whose chunks
    cannot span more than ``_FACTOR_LOG_RANGE`` of log-decay; 0 if that is below ``_MIN_FACTOR_CHUNK``."""
    real = torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32
    steepest = float(-log_mag.min()) if log_mag.numel() else 0.0
    C = chunk_size if steepest <= 0 else min(chunk_size, int(_FACTOR_LOG_RANGE[real] / steepest))
    C = 1 << (C.bit_length() - 1) if C >= 1 else 0
    return C if C >= min(_MIN_FACTOR_CHUNK, chunk_size) else 0


def _chunked(q, k, v, a, h0, chunk_size: int):
    """The ``"chunked"`` mode: the factorised chunks below when the decays allow, else exact relative decays.

    Its gradient is that of :func:`_chunked_exact`, recomputed in the backward pass: differentiating the
    factorised form would pass ``d log a`` through ``exp(g)`` and ``exp(-g)`` separately, whose
    contributions cancel and leave a float32 error of order ``eps / |a|`` (too much for ``|a| ~ 1e-3``).
    """
    if q.shape[-2] == 0 or not has_values(a):  # shape-only tracing needs no decay range
        return _chunked_exact(q, k, v, a, h0, chunk_size)
    log_mag, _ = _log_transitions(a.detach())
    C = _factorised_chunk(q.dtype, log_mag, max(1, min(chunk_size, q.shape[-2])))
    if C == 0:
        return _chunked_exact(q, k, v, a, h0, chunk_size)
    tensors = (q, k, v, a) + ((h0,) if h0 is not None else ())
    if not any(t.requires_grad for t in tensors) or not torch.is_grad_enabled():
        return _chunked_factorised(q, k, v, a, h0, C)
    return _ChunkedFunction.apply(C, chunk_size, *tensors)


class _ChunkedFunction(torch.autograd.Function):
    """Forward by :func:`_chunked_factorised`; backward by autograd through :func:`_chunked_exact`."""

    @staticmethod
    def forward(ctx, C, chunk_size, q, k, v, a, *h0):
        ctx.chunk_size = chunk_size
        ctx.save_for_backward(q, k, v, a, *h0)
        return _chunked_factorised(q, k, v, a, h0[0] if h0 else None, C)

    @staticmethod
    def backward(ctx, grad_y, grad_S):
        inputs = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
        with torch.enable_grad():
            y, S = _chunked_exact(*inputs[:4], inputs[4] if len(inputs) > 4 else None, ctx.chunk_size)
            outs, grads_out = [y], [grad_y]
            if grad_S is not None:
                outs.append(S)
                grads_out.append(grad_S)
            grads = torch.autograd.grad(outs, inputs, grads_out, allow_unused=True)
        return (None, None, *grads)


def _chunked_factorised(q, k, v, a, h0, C: int):
    """Chunks of length ``C``: surrogate attention inside (eq. 17-21 restarted in every chunk), states between.

    With local cumulative logs ``g_n = sum_{j in chunk, j<=n} log a_j`` (float64) and a per-chunk reference
    ``r = Re(g_last) / 2`` (the middle of the chunk's log-magnitude range, so both factors below stay
    within ``exp(+-range / 2)``):

      ``Qbar_n = q_n exp(g_n - r)``, ``Kbar_m = k_m exp(r - g_m)``            eq. 18-19 within the chunk
      intra:   ``y = (Qbar Kbar^T . M) V``                                   eq. 20-21
      inter:   ``y_n += (q_n exp(g_n)) S_in``
      state:   ``S_out = diag(exp(g_last)) S_in + diag(exp(g_last - r)) Kbar^T V``   a scan over chunks

    The factors are exponentiated in float64 (``exp(r - g) = 1 / exp(g - r)``) and rounded once. ``C`` is
    chosen (:func:`_factorised_chunk`) so that no factor leaves the float range: Fig. 3's underflow,
    confined to a chunk and kept inside the representable numbers.
    """
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    log_mag, phase = _log_transitions(a)
    dtype, complex_a = q.dtype, a.is_complex()
    qc, kc, vc = _pad_to_chunks(q, C, 0.0), _pad_to_chunks(k, C, 0.0), _pad_to_chunks(v, C, 0.0)  # (B, H, nC, C, d)
    g_mag = _pad_to_chunks(log_mag, C, 0.0).cumsum(-2)                      # (B, H, nC, C, dk) float64, <= 0
    g_ph = _pad_to_chunks(phase, C, 0.0).cumsum(-2)
    nC = qc.shape[2]
    ref = g_mag[..., -1:, :] / 2                                             # (B, H, nC, 1, dk)
    f = _decay_from_logs(g_mag - ref, g_ph, None, torch.float64, complex_a)   # exp(g_n - r), float64
    Q_bar = qc * f.to(dtype)                                                 # eq. 18 within the chunk
    K_bar = kc * f.reciprocal().to(dtype)                                    # eq. 19 within the chunk
    M = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()          # eq. 20
    scores = torch.where(M, Q_bar @ K_bar.transpose(-1, -2), torch.zeros((), dtype=dtype, device=q.device))
    y = scores @ vc                                                          # eq. 21, intra-chunk  (B, H, nC, C, dv)
    # state passing: S_out = diag(exp(g_last)) S_in + diag(exp(g_last - r)) Kbar^T V, a scan over chunks
    scale = torch.exp(ref)                                                   # exp(r) (real), float64
    through = (f[..., -1:, :] * scale).to(dtype)[..., 0, :]                  # exp(g_last)   (B, H, nC, dk)
    U = f[..., -1, :, None].to(dtype) * (K_bar.transpose(-1, -2) @ vc)      # (B, H, nC, dk, dv)
    S_after = _scan_chunk_states(through, U, h0)                             # state after each chunk
    S0 = h0 if h0 is not None else q.new_zeros(B, H, dk, dv)
    S_in = torch.cat([S0[:, :, None], S_after[:, :, :-1]], dim=2)            # state entering each chunk
    y = y + (qc * (f * scale).to(dtype)) @ S_in                              # inter-chunk: (q . exp(g_n)) S_in
    return y.reshape(B, H, nC * C, dv)[:, :, :L], S_after[:, :, -1]


def _scan_chunk_states(through, U, h0):
    """``S_c = diag(through_c) S_{c-1} + U_c`` over chunks (``S_0 = h0``), by the scan engine."""
    from seqlab.ops.scan import linear_scan

    B, H, nC, dk, dv = U.shape
    x = U.permute(0, 2, 1, 3, 4).reshape(B, nC, H * dk * dv)
    a_full = through[..., None].expand(B, H, nC, dk, dv).permute(0, 2, 1, 3, 4).reshape(B, nC, H * dk * dv)
    s0 = None if h0 is None else h0.reshape(B, H * dk * dv)
    S = linear_scan(a_full, x, s0)
    return S.reshape(B, nC, H, dk, dv).permute(0, 2, 1, 3, 4)


def _chunked_exact(q, k, v, a, h0, chunk_size: int):
    """Surrogate attention inside chunks of ``chunk_size`` (exact relative decays), states between.

    Per chunk c, with local cumulative logs ``g_n = sum_{j in chunk, j<=n} log a_j``:
      intra:   ``y_n += sum_{m<=n in chunk} (sum_d q_nd k_md exp(g_nd - g_md)) v_m``
      inter:   ``y_n += (q_n . exp(g_n)) S_in``
      state:   ``S_out = diag(exp(g_last)) S_in + sum_m diag(exp(g_last - g_m)) k_m^T v_m``
    """
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    dtype = q.dtype
    if L == 0:
        return q.new_zeros(B, H, 0, dv), (h0 if h0 is not None else q.new_zeros(B, H, dk, dv))
    C = max(1, min(chunk_size, L))
    complex_a = a.is_complex()
    log_mag, phase = _log_transitions(a)
    # padding: a = 1 (log 0) and q = k = v = 0 leave every state unchanged
    qc, kc, vc = _pad_to_chunks(q, C, 0.0), _pad_to_chunks(k, C, 0.0), _pad_to_chunks(v, C, 0.0)
    g_mag = _pad_to_chunks(log_mag, C, 0.0).cumsum(-2)                      # (B, H, nC, C, dk) float64
    g_ph = _pad_to_chunks(phase, C, 0.0).cumsum(-2)
    nC = qc.shape[2]
    causal = torch.tril(torch.ones(C, C, dtype=torch.bool, device=q.device))
    zeros = torch.zeros_like(g_mag[..., :1, :])

    # intra-chunk surrogate attention, a group of chunks at a time (bounded memory)
    group = max(1, _BLOCK_ELEMENTS // max(1, B * H * C * C * dk))
    y_parts, u_parts = [], []
    for s in range(0, nC, group):
        sl = slice(s, min(nC, s + group))
        gm, gp = g_mag[:, :, sl], g_ph[:, :, sl]
        decay = _relative_decay(gm, gp, gm, gp, causal, dtype, complex_a)   # (B, H, G, C, C, dk)
        scores = torch.einsum("bhgnd,bhgmd,bhgnmd->bhgnm", qc[:, :, sl], kc[:, :, sl], decay)
        y_parts.append(scores @ vc[:, :, sl])                                # (B, H, G, C, dv)
        to_end = _decay_from_logs(gm[..., -1:, :] - gm, gp[..., -1:, :] - gp, None, dtype, complex_a)
        u_parts.append(torch.einsum("bhgmd,bhgme->bhgde", kc[:, :, sl] * to_end, vc[:, :, sl]))  # chunk-local state
    y = torch.cat(y_parts, dim=2)                                            # (B, H, nC, C, dv)
    U = torch.cat(u_parts, dim=2)                                            # (B, H, nC, dk, dv)

    # state passing between chunks: S_in[c+1] = diag(prod_{chunk c} a) S_in[c] + U[c]
    from_start = _decay_from_logs(g_mag - zeros, g_ph - zeros, None, dtype, complex_a)  # (B, H, nC, C, dk)
    through = from_start[..., -1, :]                                         # (B, H, nC, dk)
    S = h0 if h0 is not None else q.new_zeros(B, H, dk, dv)
    S_in = []
    for c in range(nC):
        S_in.append(S)
        S = through[:, :, c, :, None] * S + U[:, :, c]
    S_in = torch.stack(S_in, dim=2)                                          # (B, H, nC, dk, dv)
    y = y + torch.einsum("bhgnd,bhgde->bhgne", qc * from_start, S_in)         # inter-chunk part
    return y.reshape(B, H, nC * C, dv)[:, :, :L], S
