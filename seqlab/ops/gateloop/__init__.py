"""GateLoop (Katsch 2023, paper 004): fully data-controlled linear recurrence, in every mode.

The operator (eq. 7-8, one head; ``k_n^T v_n`` is an outer product, no conjugation)::

    S_n = diag(a_n) S_{n-1} + k_n^T v_n          S_n: (dk, dv), a_n, q_n, k_n: (dk,), v_n: (dv,)
    y_n = q_n S_n                                y_n: (dv,)

with the transition on the key side. Paper 004 prints eq. 7 as ``h_n = h_{n-1} a_n + k_n^T v_n``, the
transition on the value side; for ``d_h > 1`` only the key side makes the surrogate attention of eq. 14-15
hold (the decay rides on the query-key product), so seqlab adopts it, as GLA does. At the paper's
``d_h = 1`` the two are the same recurrence (lesson 05 checks both).

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
- ``"numba"``: eq. 7-8 as one loop compiled for the CPU by Numba (``numba.py``),
  forward and backward (the reverse recurrence, from states saved every 64 steps): every input read
  once, every output written once, no ``L x dk x dv`` stack.
- ``"triton"``: the chunked algorithm as Triton kernels (forward and backward), ``triton.py``; heads of
  ``dk * dv <= 16`` (the paper's max-headed ``d_h = 1`` above all) on the Triton scan instead, eq. 7 being an
  elementwise recurrence of the state's entries (``y = q . scan(a, k . v)`` at ``d_h = 1``).
- ``"auto"``: ``"triton"`` on a CUDA device, ``"numba"`` on CPU (see ``benchmarks/gateloop.py``).
  Without Numba: the associative form run by the scan engine for tiny states (``dk * dv <= 4``, as
  in the paper's max-headed ``dk = dv = 1`` models), ``"chunked"`` for bigger ones.

On a GPU the op reads no value on the host (each read would wait for the GPU): the shape, dtype and device
checks stay, and the value checks become one device-side assertion (``torch._assert_async``) that ``y`` and
``S_L`` are finite and ``|a| <= 1``, so NaN and inf never pass silently; a failure shows as CUDA's
"device-side assert triggered". The debug switch ``SEQLAB_CHECK_VALUES=1`` brings back the host checks and
their named errors (the argument and index of the first bad value), and the exact gradient at transitions
that are exactly 0 for the chunked kernels (see :func:`_exact_gradient_at_zero_transitions`). On a CPU the op
checks on the host as always.

Also :func:`gateloop_attention_matrix` (the masked surrogate attention matrix ``(B, H, L, L)``,
eq. 21 without ``V``) and :func:`gateloop_softmax` (eq. 22-23).

Files: ``recurrent.py`` (eq. 7-8, the float64 reference), ``associative.py`` (eq. 12-13),
``attention.py`` (eq. 14-21, stable and naive), ``chunked.py``, ``numba.py``, ``triton.py``,
``_logs.py`` (the log-domain relative decays the attention and chunked forms share).
"""
from __future__ import annotations

import functools
import math

import torch

from seqlab.ops._checks import (
    check_finite,
    check_finite_inputs,
    check_mode,
    check_same_device,
    check_shape,
    check_tensor,
    has_values,
    host_checks,
    traceable_mode,
)
from seqlab.ops._checks import CHECK_VALUES
from seqlab.ops.gateloop.associative import _associative
from seqlab.ops.gateloop.attention import _attention, _attention_matrix_stable, _attention_naive
from seqlab.ops.gateloop.chunked import _chunked
from seqlab.ops.gateloop.recurrent import _recurrent

__all__ = ["gateloop", "gateloop_softmax", "gateloop_attention_matrix", "GATELOOP_MODES"]


GATELOOP_MODES = ("auto", "recurrent", "associative", "chunked", "attention", "attention_naive", "numba", "triton")


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


def _assert_values_async(y, S, a):
    """The GPU path's value check, without a synchronisation: one device-side assertion that ``y`` and ``S_L``
    are finite and ``|a| <= 1``. A non-finite input cannot hide from it: NaN and inf propagate through eq. 7-8
    (``0 * inf`` is NaN), into ``y`` at its own step or into ``S_L``. A failed assertion stops the CUDA context
    at its next synchronisation ("device-side assert triggered"); run again with ``SEQLAB_CHECK_VALUES=1`` to
    have the argument and the index of the first bad value named."""
    ok = torch.isfinite(_real_view(y)).all() & torch.isfinite(_real_view(S)).all()
    ok = ok & (a.abs() <= 1.0 + 1e-6).all()
    torch._assert_async(ok, "gateloop: a non-finite input or output, or |a| > 1 (device-side check); "
                            f"rerun with {CHECK_VALUES}=1 to have the argument and index named")


_AUTO_SCAN_STATE = 4


_AUTO_SCAN_ELEMENTS = 1 << 24


def _pick_auto(q, v) -> str:
    from seqlab.kernels import fast_backend

    backend = fast_backend(q.device)
    if backend is not None:
        return backend
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    small = dk * dv <= _AUTO_SCAN_STATE and B * H * L * dk * dv <= _AUTO_SCAN_ELEMENTS
    return "scan" if small else "chunked"


def gateloop(q, k, v, a, *, h0=None, mode: str = "auto", return_state: bool = False, chunk_size: int = 64,
             precision: str = "ieee"):
    """GateLoop (eq. 7-8, key side): ``S_n = diag(a_n) S_{n-1} + k_n^T v_n``, ``y_n = q_n S_n``.

    Args:
        q, k, a: ``(B, H, L, dk)`` queries (output gates), keys (input gates), state transitions
            (``|a| <= 1``); real or complex.
        v: ``(B, H, L, dv)`` values.
        h0: optional initial state ``S_0``, ``(B, H, dk, dv)``.
        mode: one of ``GATELOOP_MODES`` (see the module docstring); all compute the same function.
        return_state: also return the final state ``S_L`` ``(B, H, dk, dv)``.
        chunk_size: longest chunk of ``"chunked"`` (the Triton kernels use their own, ``triton.CHUNK``).
        precision: the Triton kernels' chunk products (``mode="triton"``, and ``"auto"`` on CUDA): ``"ieee"``
            (full float32, the default), ``"tf32x3"``, ``"tf32"`` or ``"bf16"`` (``triton.PRECISIONS``); float64
            inputs take only ``"ieee"``. The other modes always compute at their dtype's full precision.

    Returns ``y`` ``(B, H, L, dv)`` (complex if any input is), or ``(y, S_L)``.
    Raises ``FloatingPointError`` for a non-finite input (named with its index) or result (``"attention_naive"``
    past underflow), ``ValueError`` for ``|a| > 1``; on a GPU a device-side assertion instead, unless
    ``SEQLAB_CHECK_VALUES=1`` (module docstring).
    """
    mode = check_mode("gateloop", mode, GATELOOP_MODES)
    _check_inputs(q, k, v, a, h0, check_values=False)
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    if precision != "ieee":
        from seqlab.ops.gateloop.triton import PRECISIONS

        if precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    if mode == "auto":
        mode = _pick_auto(q, v)
    mode = traceable_mode(mode, "chunked", q, k, v, a, h0)
    out_dtype, dtype = _out_dtype(q, k, v, a, h0), _work_dtype(q, k, v, a, h0)
    if mode == "numba":
        y, S = _run_numba(q, k, v, a, h0, dtype)
    else:
        host = host_checks(q)
        if host:
            _check_values(q, k, v, a, h0)
        q, k, v, a = (t.to(dtype) for t in (q, k, v, a))
        h0 = None if h0 is None else h0.to(dtype)
        form = _FORMS[mode] if mode != "triton" else functools.partial(_triton, precision=precision)
        if host and _log_domain(mode, q, v):
            y, S = _exact_gradient_at_zero_transitions(form, q, k, v, a, h0, chunk_size)
        else:
            y, S = form(q, k, v, a, h0, chunk_size)
        if host:
            _check_output(mode, y)
        else:
            _assert_values_async(y, S, a)
    y, S = y.to(out_dtype), S.to(out_dtype)
    return (y, S) if return_state else y


def _check_output(mode, y):
    """A finite output, or ``FloatingPointError`` (with the reason for ``"attention_naive"``)."""
    if mode == "attention_naive" and has_values(y) and not torch.isfinite(_real_view(y)).all():
        raise FloatingPointError(
            "gateloop(mode='attention_naive'): the cumulative product Pi(A) of eq. 16 underflowed, so "
            "Kbar = K . Pi^-1 (eq. 19) is infinite and the output is NaN (the risk of Fig. 3); "
            "use mode='attention' (stable relative decays) or 'chunked'")
    check_finite(f"gateloop(mode={mode!r})", _real_view(y))


def _real_view(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def _run_numba(q, k, v, a, h0, dtype):
    """The Numba loop: real inputs stay real; ``|a|`` and the output are checked inside the kernel, and only
    when it raises are the inputs searched for the non-finite value to name."""
    from seqlab.ops.gateloop.numba import gateloop_numba

    try:
        return gateloop_numba(q, k, v, a, h0, dtype=dtype)
    except (ValueError, FloatingPointError):
        check_finite_inputs("gateloop", q=q, k=k, v=v, a=a, h0=h0)
        raise


def _triton(q, k, v, a, h0, chunk_size, precision="ieee"):
    from seqlab.ops.gateloop.triton import gateloop_triton

    return gateloop_triton(q, k, v, a, h0=h0, return_state=True, precision=precision)


_FORMS = {
    "scan": lambda q, k, v, a, h0, C: _associative(q, k, v, a, h0, scan_mode="auto"),  # auto without Numba
    "recurrent": lambda q, k, v, a, h0, C: _recurrent(q, k, v, a, h0),
    "associative": lambda q, k, v, a, h0, C: _associative(q, k, v, a, h0),
    "attention": lambda q, k, v, a, h0, C: _attention(q, k, v, a, h0),
    "attention_naive": lambda q, k, v, a, h0, C: _attention_naive(q, k, v, a, h0),
    "chunked": _chunked,
    "triton": _triton,
}


_LOG_DOMAIN_MODES = ("chunked", "attention", "triton")


def _log_domain(mode, q, v) -> bool:
    """Whether ``mode`` computes in ``log a`` for these heads (Triton runs small heads on the scan, which does not)."""
    if mode == "triton":
        from seqlab.ops.gateloop.triton import runs_on_scan

        return not runs_on_scan(q.shape[-1], v.shape[-1])
    return mode in _LOG_DOMAIN_MODES


def _exact_gradient_at_zero_transitions(form, q, k, v, a, h0, chunk_size):
    """``form``'s output, with the gradient with respect to ``a`` at entries where ``a == 0`` exactly taken
    from the associative scan (eq. 12-13).

    ``S_n`` is linear in each ``a_j``: ``dL/da_j = sum_e conj(S_{j-1})[:, e] dS_j[:, e]`` stays finite and
    nonzero at ``a_j = 0``, but a log-domain form sees ``dL/da_j = conj(1/a_j) dL/dlog a_j`` and, with ``log 0``
    clamped, returns 0 there. Where there are such entries and ``a`` needs a gradient, a zero-valued term
    ``y_ref - y_ref.detach()`` adds the scan's gradient at exactly those entries; it costs the scan's
    ``L x dk x dv`` states, and only then. Finding out whether there are such entries reads ``a`` on the host:
    on a GPU (without ``SEQLAB_CHECK_VALUES=1``) this is skipped, and the chunked kernels' gradient at an exact 0
    is 0 (a sigmoid's magnitude is exactly 0 only where its own gradient is too).
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
