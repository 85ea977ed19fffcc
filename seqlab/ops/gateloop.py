"""GateLoop (Katsch 2023, paper 004): fully data-controlled linear recurrence, in every mode.

The operator (eq. 7-8, one head; ``k_n^T v_n`` is an outer product, no conjugation)::

    S_n = diag(a_n) S_{n-1} + k_n^T v_n          S_n: (dk, dv), a_n, q_n, k_n: (dk,), v_n: (dv,)
    y_n = q_n S_n                                y_n: (dv,)

unrolled (eq. 9)::

    y_n = q_n sum_{m<=n} diag(prod_{j=m+1..n} a_j) k_m^T v_m

Shapes: ``q, k, a: (B, H, L, dk)``, ``v: (B, H, L, dv)``, ``h0: (B, H, dk, dv)``; real or complex
(the output is complex as soon as one input is). ``|a_n|`` must lie in [0, 1] (the paper's
(0, 1]; an exact 0 is a full reset, treated as the smallest positive float in the log-space modes).

Modes, all computing the same function:

- ``"recurrent"``: eq. 7-8 as a loop over time; O(L), the float64 reference of the tests.
- ``"associative"``: eq. 12-13, the parallel prefix scan of the pairs ``(a_n, k_n^T v_n)`` under
  ``(p1, p2) . (q1, q2) = (p1 q1, q1 p2 + q2)``, run by the scan engine ``seqlab.ops.linear_scan``;
  it holds the full ``L x dk x dv`` stack of states (the memory bottleneck the paper mentions).
- ``"attention"``: eq. 14-21, the surrogate attention ``Y = (Qbar Kbar^T . M) V``, computed stably:
  the entries ``prod_{j=m+1..n} a_j`` come from *differences* of cumulative log-magnitudes and
  phases (float64), masked to ``-inf`` above the diagonal *before* exponentiation, so nothing
  underflows and nothing is divided by a vanishing product. O(L^2).
- ``"attention_naive"``: eq. 16-21 literally, ``Qbar = Q . Pi(A)``, ``Kbar = K . Pi(A)^-1``. The
  cumulative product underflows (Fig. 3): once ``|Pi|`` leaves the float range ``Kbar`` is
  infinite and the op raises ``FloatingPointError`` (kept to show why the stable form exists).
- ``"chunked"``: the sequence is cut into chunks; inside a chunk the surrogate attention of eq. 18-21
  restarted at the chunk (``Qbar = q exp(g - r)``, ``Kbar = k exp(r - g)`` with float64 factors around
  the chunk's middle, the chunk length chosen so that no factor leaves the float range), between
  chunks the state ``S`` is passed on (``S_out = diag(prod a) S_in + sum_m diag(decay_m) k_m^T v_m``,
  a scan over chunks). If ``|a|`` is so small that even 4 steps would leave the range, the chunks use
  exact pairwise relative decays instead. Its gradient comes from the exact-decay form (see
  :func:`_chunked`). Working set ``L x chunk`` plus ``(L / chunk) x dk x dv``: no ``L x dk x dv`` stack.
- ``"numba"``: eq. 7-8 as one loop compiled for the CPU by Numba (``seqlab.kernels.compiled``),
  forward and backward (the reverse recurrence, from states saved every 64 steps): every input read
  once, every output written once, no ``L x dk x dv`` stack.
- ``"triton"``: the chunked algorithm as a Triton kernel (forward and backward), see
  ``seqlab.kernels.gateloop``.
- ``"auto"``: ``"triton"`` on a CUDA device, ``"numba"`` on CPU (see ``benchmarks/gateloop.py``).
  Without Numba: the associative form run by the scan engine for tiny states (``dk * dv <= 4``, as
  in the paper's max-headed ``dk = dv = 1`` models), ``"chunked"`` for bigger ones.

Also :func:`gateloop_attention_matrix` (the masked surrogate attention matrix ``(B, H, L, L)``,
eq. 21 without ``V``) and :func:`gateloop_softmax` (eq. 22-23).
"""
from __future__ import annotations

import math

import torch

from seqlab.ops._checks import (check_finite, check_finite_inputs, check_mode, check_same_device, check_shape,
                                check_tensor, has_values, traceable_mode)

__all__ = ["gateloop", "gateloop_softmax", "gateloop_attention_matrix", "GATELOOP_MODES"]

GATELOOP_MODES = ("auto", "recurrent", "associative", "chunked", "attention", "attention_naive", "numba", "triton")

# Largest number of elements of one (rows x cols x dk) decay block held at once (memory bound).
_BLOCK_ELEMENTS = 1 << 22


# ----------------------------------------------------------------------------- input checks


def _out_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """The dtype the op returns: the promotion of its inputs (complex if any input is)."""
    dtype = None
    for t in tensors:
        if t is not None:
            dtype = t.dtype if dtype is None else torch.promote_types(dtype, t.dtype)
    return dtype


def _work_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """The dtype the op computes in: the promotion of its inputs, half precision raised to float32."""
    dtype = _out_dtype(*tensors)
    if dtype in (torch.float16, torch.bfloat16):
        dtype = torch.float32
    if dtype == torch.complex32:
        dtype = torch.complex64
    return dtype


def _check_inputs(q, k, v, a, h0=None, *, need_v=True, check_values=True):
    """Shapes, devices and (unless ``check_values=False``) finite inputs and ``|a| <= 1``, with errors naming
    the argument."""
    check_tensor("q", q, ndim=4)
    B, H, L, dk = q.shape
    check_tensor("k", k, ndim=4)
    check_shape("k", k, (B, H, L, dk), "like q: (B, H, L, dk)")
    check_tensor("a", a, ndim=4)
    check_shape("a", a, (B, H, L, dk), "like q: (B, H, L, dk)")
    if need_v:
        check_tensor("v", v, ndim=4)
        check_shape("v", v, (B, H, L, None), "(B, H, L, dv) with q: (B, H, L, dk)")
    if h0 is not None:
        check_tensor("h0", h0, ndim=4)
        check_shape("h0", h0, (B, H, dk, v.shape[-1]), "(B, H, dk, dv), the state S_0")
    check_same_device(q=q, k=k, v=v, a=a, h0=h0)
    if check_values:
        _check_values(q, k, v, a, h0)


def _check_values(q, k, v, a, h0):
    """Finite inputs (the first bad value named by argument and index), then ``|a| <= 1``; skipped on ``meta``."""
    check_finite_inputs("gateloop", q=q, k=k, v=v, a=a, h0=h0)
    _check_magnitude(a)


def _check_magnitude(a):
    with torch.no_grad():
        if a.numel() and has_values(a):
            biggest = float(a.abs().max())
            if not math.isfinite(biggest) or biggest > 1.0 + 1e-6:
                raise ValueError(f"a: state transitions need magnitudes |a| in [0, 1] (eq. 25 uses a sigmoid "
                                 f"magnitude), got max |a| = {biggest:.6g} for a of shape {tuple(a.shape)}")


# ----------------------------------------------------------------------------- eq. 7-8: recurrent


def _recurrent(q, k, v, a, h0):
    """Eq. 7-8 step by step: ``S_n = diag(a_n) S_{n-1} + k_n^T v_n``, ``y_n = q_n S_n``."""
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    S = h0 if h0 is not None else torch.zeros(B, H, dk, dv, dtype=q.dtype, device=q.device)
    ys = []
    for n in range(L):
        S = a[:, :, n, :, None] * S + k[:, :, n, :, None] * v[:, :, n, None, :]   # eq. 7   (B, H, dk, dv)
        ys.append(torch.einsum("bhd,bhde->bhe", q[:, :, n], S))                   # eq. 8   (B, H, dv)
    y = torch.stack(ys, dim=2) if ys else q.new_zeros(B, H, 0, dv)
    return y, S


# ----------------------------------------------------------------------------- eq. 12-13: associative scan


def _associative(q, k, v, a, h0, scan_mode: str = "associative"):
    """Eq. 12-13: the prefix 'sum' of ``(a_n, k_n^T v_n)`` under the GateLoop operator.

    ``(a, kv) . (a', kv') = (a a', a' kv + kv')`` is exactly the first-order linear recurrence
    ``S_n = a_n S_{n-1} + x_n`` on the flattened ``dk * dv`` state, so the scan engine's
    time-varying parallel scan computes it (associativity: Appendix B). ``scan_mode`` picks the
    engine's algorithm: ``"associative"`` is the paper's parallel prefix scan; ``"auto"`` (used by
    ``mode="auto"``) the engine's fastest one for the device (a blocked two-level scan on CPU).
    """
    from seqlab.ops.scan import linear_scan

    B, H, L, dk = q.shape
    dv = v.shape[-1]
    # time at dim -2 and every (head, row, column) of the states side by side in the last dim
    x = (k[..., :, None] * v[..., None, :]).permute(0, 2, 1, 3, 4).reshape(B, L, H * dk * dv)   # leaves k_n^T v_n
    a_full = a[..., :, None].expand(B, H, L, dk, dv).permute(0, 2, 1, 3, 4).reshape(B, L, H * dk * dv)  # diag(a_n)
    s0 = None if h0 is None else h0.reshape(B, H * dk * dv)
    S = linear_scan(a_full, x, s0, mode=scan_mode)                          # all states S_1..S_L   (B, L, H*dk*dv)
    S = S.reshape(B, L, H, dk, dv).permute(0, 2, 1, 3, 4)                  # (B, H, L, dk, dv)
    y = (q[..., :, None] * S).sum(-2)                                         # eq. 8, y_n = q_n S_n
    final = S[:, :, -1] if L else (h0 if h0 is not None else q.new_zeros(B, H, dk, dv))
    return y, final


# ----------------------------------------------------------------------------- log-space relative decays


def _log_transitions(a: torch.Tensor):
    """``log a_n = log|a_n| + i arg(a_n)`` as float64 ``(log_magnitude, phase)``.

    For real ``a`` the phase is ``pi`` where ``a_n < 0``; the sign of a product is then carried by
    the parity of the number of negative factors (see :func:`_decay_from_logs`).
    """
    tiny = torch.finfo(a.real.dtype if a.is_complex() else a.dtype).tiny
    log_mag = a.abs().double().clamp_min(tiny).log()
    if a.is_complex():
        phase = torch.angle(a).double()
    else:
        phase = (a < 0).double() * math.pi
    return log_mag, phase


def _decay_from_logs(d_mag: torch.Tensor, d_phase: torch.Tensor, causal: torch.Tensor | None,
                     dtype: torch.dtype, complex_a: bool) -> torch.Tensor:
    """``prod_{j=m+1..n} a_j = exp(d_mag + i d_phase)`` from log differences, masked before ``exp``.

    ``d_mag``, ``d_phase``: float64 differences of cumulative sums (``<= 0`` real part where ``n >= m``).
    ``causal``: boolean mask broadcastable to them (True where ``n >= m``); the masked entries become
    ``exp(-inf) = 0`` and receive zero gradient: no overflow, no ``0 * inf``.
    """
    real = torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32
    if causal is not None:
        d_mag = d_mag.masked_fill(~causal, -math.inf)
        d_phase = d_phase.masked_fill(~causal, 0.0)
    mag = torch.exp(d_mag.to(real))
    if complex_a:
        ph = d_phase.to(real)
        return torch.complex(mag * torch.cos(ph), mag * torch.sin(ph))
    # real a: d_phase / pi counts the negative factors between m and n; odd count -> minus sign
    parity = torch.remainder(torch.round(d_phase / math.pi), 2.0).to(real)
    return mag * (1.0 - 2.0 * parity)


def _relative_decay(mag_rows, ph_rows, mag_cols, ph_cols, causal, dtype, complex_a):
    """``D[n, m, d] = prod_{j=m+1..n} a_{j,d}`` from cumulative logs at rows n and columns m."""
    d_mag = mag_rows[..., :, None, :] - mag_cols[..., None, :, :]     # (..., N, M, dk)
    d_ph = ph_rows[..., :, None, :] - ph_cols[..., None, :, :]        # (..., N, M, dk)
    mask = None if causal is None else causal[..., None]
    return _decay_from_logs(d_mag, d_ph, mask, dtype, complex_a)


def _cumulative_logs(a):
    log_mag, phase = _log_transitions(a)
    return log_mag.cumsum(-2), phase.cumsum(-2)


# ----------------------------------------------------------------------------- eq. 14-21: surrogate attention


def _attention_rows(q, k, a, rows: slice, c_mag, c_ph, dtype, complex_a):
    """Rows ``rows`` of the masked surrogate attention matrix ``(Qbar Kbar^T . M)`` (eq. 21), stably."""
    L = q.shape[-2]
    n = torch.arange(L, device=q.device)[rows]
    causal = n[:, None] >= torch.arange(L, device=q.device)[None, :]          # M, eq. 20   (N, L)
    decay = _relative_decay(c_mag[..., rows, :], c_ph[..., rows, :], c_mag, c_ph, causal, dtype, complex_a)
    # A[n, m] = sum_d q_{n,d} k_{m,d} prod_{j=m+1..n} a_{j,d}            (B, H, N, L)
    return torch.einsum("bhnd,bhmd,bhnmd->bhnm", q[..., rows, :], k, decay)


def _row_blocks(L: int, dk: int):
    step = max(1, _BLOCK_ELEMENTS // max(1, L * dk))
    return [slice(s, min(L, s + step)) for s in range(0, L, step)]


def _attention_matrix_stable(q, k, a, dtype):
    c_mag, c_ph = _cumulative_logs(a)
    complex_a = a.is_complex()
    L, dk = q.shape[-2], q.shape[-1]
    return torch.cat([_attention_rows(q, k, a, r, c_mag, c_ph, dtype, complex_a) for r in _row_blocks(L, dk)], dim=-2)


def _state_terms(q, k, v, a, h0, c_mag, c_ph, dtype):
    """What ``h0`` adds to the outputs, ``(q_n . prod_{j<=n} a_j) h0``, and the final state ``S_L``."""
    B, H, L, dk = q.shape
    complex_a = a.is_complex()
    zeros = torch.zeros_like(c_mag[..., :1, :])
    final_decay = _relative_decay(c_mag[..., -1:, :], c_ph[..., -1:, :], c_mag, c_ph, None, dtype, complex_a)[..., 0, :, :]
    final = torch.einsum("bhmd,bhme->bhde", k * final_decay, v)              # sum_m diag(prod_{j>m} a_j) k_m^T v_m
    y_h0 = None
    if h0 is not None:
        from_start = _decay_from_logs(c_mag - zeros, c_ph - zeros, None, dtype, complex_a)  # prod_{j<=n} a_j
        y_h0 = torch.einsum("bhnd,bhde->bhne", q * from_start, h0)
        final = final + from_start[..., -1, :, None] * h0
    return y_h0, final


def _attention(q, k, v, a, h0):
    """Eq. 14-21 computed stably, row block by row block (O(L^2) time, bounded memory)."""
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    if L == 0:
        return q.new_zeros(B, H, 0, dv), (h0 if h0 is not None else q.new_zeros(B, H, dk, dv))
    dtype = q.dtype
    c_mag, c_ph = _cumulative_logs(a)
    complex_a = a.is_complex()
    y = torch.cat([_attention_rows(q, k, a, r, c_mag, c_ph, dtype, complex_a) @ v for r in _row_blocks(L, dk)], dim=-2)
    y_h0, final = _state_terms(q, k, v, a, h0, c_mag, c_ph, dtype)
    return (y if y_h0 is None else y + y_h0), final


def _attention_naive(q, k, v, a, h0):
    """Eq. 16-21 literally: ``Pi = cumprod(A)``, ``Qbar = Q . Pi``, ``Kbar = K . Pi^-1``.

    ``Pi`` shrinks geometrically; once it leaves the float range ``Pi^-1`` is infinite and the
    product ``Qbar Kbar^T`` is ``0 * inf = NaN`` (Fig. 3). ``gateloop`` then raises.
    """
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    Pi = torch.cumprod(a, dim=-2)                                             # eq. 16   (B, H, L, dk)
    Q_bar = q * Pi                                                            # eq. 18
    K_bar = k / Pi                                                            # eq. 19
    M = torch.tril(torch.ones(L, L, dtype=torch.bool, device=q.device))      # eq. 20
    scores = (Q_bar @ K_bar.transpose(-1, -2)).masked_fill(~M, 0)             # Qbar Kbar^T . M
    y = scores @ v                                                            # eq. 21
    final = Pi[..., -1, :, None] * (K_bar.transpose(-1, -2) @ v) if L else q.new_zeros(B, H, dk, dv)
    if h0 is not None:
        y = y + Q_bar @ h0
        final = final + (Pi[..., -1, :, None] * h0 if L else h0)
    return y, final


# ----------------------------------------------------------------------------- chunked: attention inside, state between


def _pad_to_chunks(x, C, value):
    L = x.shape[-2]
    pad = (-L) % C
    if pad:
        x = torch.cat([x, x.new_full((*x.shape[:-2], pad, x.shape[-1]), value)], dim=-2)
    return x.reshape(*x.shape[:-2], x.shape[-2] // C, C, x.shape[-1])      # (B, H, nC, C, d)


# Within a chunk the factorised form multiplies exp(g_n) <= 1 by exp(-g_m) >= 1; both must stay inside
# the float range (float32: e^-87 .. e^88), so a chunk may span at most this much log-decay.
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


# ----------------------------------------------------------------------------- the public op


# "auto" on CPU: states of at most _AUTO_SCAN_STATE elements (GateLoop's max-headed dk = dv = 1) are
# scanned by the engine; bigger states (heads of dk = dv = 16 or 64) go chunked, which never stores the
# L x dk x dv stack and does its work in matrix products (measured in benchmarks/gateloop.py).
_AUTO_SCAN_STATE = 4
_AUTO_SCAN_ELEMENTS = 1 << 24


def _pick_auto(q, v) -> str:
    if q.device.type == "cuda":
        from seqlab import kernels

        if kernels.HAVE_TRITON and not kernels.interpreted():
            return "triton"
    if q.device.type == "cpu":
        from seqlab.kernels.compiled import HAVE_NUMBA

        if HAVE_NUMBA:
            return "numba"
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    small = dk * dv <= _AUTO_SCAN_STATE and B * H * L * dk * dv <= _AUTO_SCAN_ELEMENTS
    return "scan" if small else "chunked"


def gateloop(q, k, v, a, *, h0=None, mode: str = "auto", return_state: bool = False, chunk_size: int = 64):
    """GateLoop (eq. 7-8): ``S_n = diag(a_n) S_{n-1} + k_n^T v_n``, ``y_n = q_n S_n``.

    Args:
        q, k, a: ``(B, H, L, dk)`` queries (output gates), keys (input gates), state transitions
            (``|a| <= 1``); real or complex.
        v: ``(B, H, L, dv)`` values.
        h0: optional initial state ``S_0``, ``(B, H, dk, dv)``.
        mode: one of ``GATELOOP_MODES`` (see the module docstring); all compute the same function.
        return_state: also return the final state ``S_L`` ``(B, H, dk, dv)``.
        chunk_size: longest chunk of ``"chunked"`` (the Triton kernel uses chunks of 16).

    Returns ``y`` ``(B, H, L, dv)`` (complex if any input is), or ``(y, S_L)``.
    Raises ``FloatingPointError`` if the result is not finite (``"attention_naive"`` past underflow).
    """
    mode = check_mode("gateloop", mode, GATELOOP_MODES)
    _check_inputs(q, k, v, a, h0, check_values=False)
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    if mode == "auto":
        mode = _pick_auto(q, v)
    mode = traceable_mode(mode, "chunked", q, k, v, a, h0)
    out_dtype, dtype = _out_dtype(q, k, v, a, h0), _work_dtype(q, k, v, a, h0)
    if mode == "numba":
        y, S = _run_numba(q, k, v, a, h0, dtype)
    else:
        _check_values(q, k, v, a, h0)
        q, k, v, a = (t.to(dtype) for t in (q, k, v, a))
        h0 = None if h0 is None else h0.to(dtype)
        if mode in _LOG_DOMAIN_MODES:
            y, S = _exact_gradient_at_zero_transitions(_FORMS[mode], q, k, v, a, h0, chunk_size)
        else:
            y, S = _FORMS[mode](q, k, v, a, h0, chunk_size)
        if mode == "attention_naive" and has_values(y) and not torch.isfinite(_real_view(y)).all():
            raise FloatingPointError(
                "gateloop(mode='attention_naive'): the cumulative product Pi(A) of eq. 16 underflowed, so "
                "Kbar = K . Pi^-1 (eq. 19) is infinite and the output is NaN (the risk of Fig. 3); "
                "use mode='attention' (stable relative decays) or 'chunked'")
        check_finite(f"gateloop(mode={mode!r})", _real_view(y))
    y, S = y.to(out_dtype), S.to(out_dtype)
    return (y, S) if return_state else y


def _real_view(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def _run_numba(q, k, v, a, h0, dtype):
    """The Numba loop: real inputs stay real; ``|a|`` and the output are checked inside the kernel, and only
    when it raises are the inputs searched for the non-finite value to name."""
    from seqlab.kernels.compiled import gateloop_compiled

    try:
        return gateloop_compiled(q, k, v, a, h0, dtype=dtype)
    except (ValueError, FloatingPointError):
        check_finite_inputs("gateloop", q=q, k=k, v=v, a=a, h0=h0)
        raise


def _triton(q, k, v, a, h0, chunk_size):
    from seqlab.kernels.gateloop import gateloop_triton

    return gateloop_triton(q, k, v, a, h0=h0, return_state=True)


# Every form as f(q, k, v, a, h0, chunk_size) -> (y, S_L), inputs already checked and in the work dtype.
_FORMS = {
    "scan": lambda q, k, v, a, h0, C: _associative(q, k, v, a, h0, scan_mode="auto"),  # auto without Numba
    "recurrent": lambda q, k, v, a, h0, C: _recurrent(q, k, v, a, h0),
    "associative": lambda q, k, v, a, h0, C: _associative(q, k, v, a, h0),
    "attention": lambda q, k, v, a, h0, C: _attention(q, k, v, a, h0),
    "attention_naive": lambda q, k, v, a, h0, C: _attention_naive(q, k, v, a, h0),
    "chunked": _chunked,
    "triton": _triton,
}

# Forms that work with log|a| (clamped at the smallest float): at an exact a_n = 0 their gradient with
# respect to a_n is lost, so it is supplied by the exact recurrence (below).
_LOG_DOMAIN_MODES = ("chunked", "attention", "triton")


def _exact_gradient_at_zero_transitions(form, q, k, v, a, h0, chunk_size):
    """``form``'s output, with the gradient with respect to ``a`` at entries where ``a == 0`` exactly taken
    from the associative scan (eq. 12-13).

    ``S_n`` is linear in each ``a_j``: ``dL/da_j = sum_e conj(S_{j-1})[:, e] dS_j[:, e]`` stays finite and
    nonzero at ``a_j = 0``, but a log-domain form sees ``dL/da_j = conj(1/a_j) dL/dlog a_j`` and, with ``log 0``
    clamped, returns 0 there. Where there are such entries and ``a`` needs a gradient, a zero-valued term
    ``y_ref - y_ref.detach()`` adds the scan's gradient at exactly those entries; it costs the scan's
    ``L x dk x dv`` states, and only then.
    """
    zero = a == 0
    if h0 is None and zero.shape[-2]:  # S_0 = 0: the exact gradient at a_1 is <S_0, dS_1> = 0, which the form gives already
        zero[..., 0, :] = False
    if not (torch.is_grad_enabled() and a.requires_grad and has_values(a) and bool(zero.any())):
        return form(q, k, v, a, h0, chunk_size)
    y, S = form(q, k, v, torch.where(zero, a.detach(), a), h0, chunk_size)
    const = lambda t: None if t is None else t.detach()  # noqa: E731
    y_ref, S_ref = _associative(const(q), const(k), const(v), torch.where(zero, a, a.detach()), const(h0))
    return y + (y_ref - y_ref.detach()), S + (S_ref - S_ref.detach())


def gateloop_attention_matrix(q, k, a):
    """The masked surrogate attention matrix ``(Qbar Kbar^T) . M`` of eq. 21, ``(B, H, L, L)``.

    Entry ``[n, m] = sum_d q_{n,d} k_{m,d} prod_{j=m+1..n} a_{j,d}`` for ``n >= m``, else 0; so that
    ``gateloop(q, k, v, a) == gateloop_attention_matrix(q, k, a) @ v``. Computed stably.
    """
    _check_inputs(q, k, None, a, need_v=False)
    dtype = _work_dtype(q, k, a)
    A = _attention_matrix_stable(q.to(dtype), k.to(dtype), a.to(dtype), dtype)
    check_finite("gateloop_attention_matrix", _real_view(A))
    return A.to(_out_dtype(q, k, a))


def gateloop_softmax(q, k, v, a, *, scale: float = 1.0):
    """Eq. 22-23: ``Y = softmax(M_-inf(Qbar Kbar^T)) V``, the softmax generalisation.

    Softmax needs real scores: the real part of the (complex) surrogate scores is used, multiplied by
    ``scale``; entries above the diagonal are ``-inf`` (eq. 22) so softmax gives them weight 0.
    """
    _check_inputs(q, k, v, a)
    A = gateloop_attention_matrix(q, k, a)
    scores = (A.real if A.is_complex() else A) * scale
    L = scores.shape[-1]
    M = torch.tril(torch.ones(L, L, dtype=torch.bool, device=scores.device))
    weights = torch.softmax(scores.masked_fill(~M, -math.inf), dim=-1)     # eq. 22-23
    y = weights.to(_work_dtype(weights, v)) @ v.to(_work_dtype(weights, v))
    check_finite("gateloop_softmax", _real_view(y))
    return y.to(_out_dtype(q, k, v, a))
