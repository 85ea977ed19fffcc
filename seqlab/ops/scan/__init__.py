"""The linear recurrence ``h_t = a_t ⊙ h_{t-1} + x_t``: the engine under LRNN/FST, LightNet and GateLoop.

Paper 002 §2.1 unrolls the linear RNN ``h_t = W h_{t-1} + W_in x_t`` into

    h_t = Λ^t h_0 + Σ_{i=0}^{t-1} Λ^i W̄_in x_{t-i}                   (paper 002 §2.1, last display)

once ``W = C Λ C^{-1}`` is diagonalised: every channel ``d`` is an independent scalar recurrence
``h_t = λ h_{t-1} + x_t`` with a complex ``λ``. Paper 003 (Theorem 3.1) and paper 004 (eq. 12-13)
let the decay depend on time, ``h_t = a_t h_{t-1} + x_t``. This folder computes that one recurrence,
along dim ``-2`` of ``x`` (``(..., L, D)``), in every equivalent way:

``sequential``
    The loop, written the way the recurrence reads. The reference (autograd through the loop).
``doubling``
    Algorithm 1 of paper 002 (from Yue et al. 2024): pad ``L`` to a power of two, then for
    ``i = 1..log2 L`` add ``Λ^{1..l/2}`` times the last state of each left half to its right half.
    Needs a time-invariant ``a`` (the powers ``Λ^k`` are shared by every position).
``associative``
    A parallel prefix scan with the associative operator of paper 004 eq. 13,
    ``(a1, x1) • (a2, x2) = (a1 a2, a2 x1 + x2)``: pairs are combined, the half-length problem is
    solved recursively, and the other half is filled in (``O(L)`` work, ``log2 L`` depth).
``blocked``
    A two-level chunked scan for CPUs: chunks of ``C`` steps are scanned side by side (a loop over
    ``C`` touching ``L/C`` chunks at once), their end states are carried across chunks by a short
    scan over ``L/C`` items, then each chunk is rescanned from its true initial state.
``numba``
    The loop itself, compiled for the CPU by Numba (``numba.py``): one pass that reads
    ``a`` and ``x`` once and writes ``h`` once, parallel over batch rows and blocks of channels.
``triton``
    Triton kernels (``triton.py``): each program scans ``(BT, BD)`` tiles of ``(a, x)`` down the time axis with
    the associative operator above and carries the last row into its next tile; parallel over batch and
    blocks of channels, and over chunks of time (reduce-then-scan: chunk pairs, a short scan over them, a
    rescan) where batch and channels alone are too few to fill the GPU.
``auto``
    The fastest correct mode for the device: ``triton`` on CUDA, ``numba`` on CPU (``blocked``
    where Numba is missing); see ``benchmarks/scan.py`` for the measurements behind this choice.

Every mode is differentiable. The fast modes share one backward, the reverse recurrence
(``g = ∂loss/∂h``, PyTorch's conjugate convention for complex tensors):

    ∂x_t = g_t + conj(a_{t+1}) ∂x_{t+1},    ∂a_t = ∂x_t · conj(h_{t-1}),    ∂h_0 = conj(a_1) ∂x_1

which is itself a linear scan run backwards in time, computed by the same mode.

Shapes and dtypes: ``x`` is ``(..., L, D)``, real or complex. ``a`` is either ``(D,)``
(time-invariant, like ``Λ``) or broadcastable to ``x``; a real ``a`` with a complex ``x`` is fine
(a real decay of a complex state); a complex ``a`` with a real ``x`` is refused (the state would be
complex: pass a complex ``x``). ``h0`` is ``(..., D)`` (the state before ``t = 1``; after ``t = L``
when ``reverse=True``, where ``h_t = a_t h_{t+1} + x_t``). ``bfloat16``/``float16`` inputs are
computed with a float32 state and returned in their dtype (their ``a``/``h0`` may be float32).

Files: ``reference.py`` (the loop, float64 ground truth), ``doubling.py``, ``associative.py``,
``blocked.py`` (the torch forms), ``numba.py`` (the compiled loop), ``triton.py`` (the GPU kernels),
``autograd.py`` (the shared backward), ``_common.py`` (helpers of the forms).
"""
from __future__ import annotations

import torch

from seqlab.ops._checks import (CHECK_VALUES, check_finite_inputs, check_mode, has_values, host_checks,
                                traceable_mode)
from seqlab.ops.scan._common import _LOW_PRECISION, _canonical, _check_inputs
from seqlab.ops.scan.autograd import _ScanFunction
from seqlab.ops.scan.blocked import scan_chunk_size
from seqlab.ops.scan.doubling import doubling_levels
from seqlab.ops.scan.reference import linear_scan_reference

__all__ = ["linear_scan", "linear_scan_reference", "doubling_levels", "SCAN_MODES", "scan_auto_mode", "scan_chunk_size"]


SCAN_MODES = ("auto", "sequential", "doubling", "associative", "blocked", "numba", "triton")


def scan_auto_mode(device: torch.device) -> str:
    """``auto``: the Triton kernel on CUDA, the Numba loop on CPU, else the blocked scan."""
    from seqlab.kernels import fast_backend

    return fast_backend(device) or "blocked"


def linear_scan(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None = None, *, reverse: bool = False,
                mode: str = "auto") -> torch.Tensor:
    r"""``h_t = a_t ⊙ h_{t-1} + x_t`` along dim ``-2`` (``reverse``: ``h_t = a_t ⊙ h_{t+1} + x_t``).

    Args:
        a: decays, ``(D,)`` (time-invariant, paper 002's ``Λ``) or broadcastable to ``x``; real or complex.
        x: inputs ``(..., L, D)``, real or complex (complex if ``a`` is).
        h0: state before the first step, broadcastable to ``(..., D)``; zero when ``None``.
        reverse: scan from ``t = L`` down to ``t = 1``.
        mode: one of ``SCAN_MODES`` (see the module docstring); ``doubling`` needs a time-invariant ``a``.
    Returns:
        ``h``, shaped and typed like ``x``.
    """
    mode = check_mode("linear_scan", mode, SCAN_MODES)
    _check_inputs(a, x, h0)
    if mode == "auto":
        mode = scan_auto_mode(x.device)
    mode = traceable_mode(mode, "blocked", a, x, h0)
    if x.shape[-2] == 0:
        return x.clone()
    if mode == "sequential":
        h = linear_scan_reference(a, x, h0, reverse=reverse)
        _check_finite_scan(h, reverse, a=a, x=x, h0=h0)
        return h
    out_dtype = x.dtype
    if h0 is not None and h0.is_complex() != x.is_complex():  # a real h0 for a complex x
        h0 = h0.to(x.dtype)
    a3, x3, h03 = _canonical(a, x, h0)
    if mode == "triton":
        from seqlab.ops.scan.triton import triton_linear_scan

        if x.dtype == torch.float16:  # the kernel reads bfloat16 itself; float16 goes in as float32
            a3, x3, h03 = (None if t is None else t.float() for t in (a3, x3, h03))
        h = triton_linear_scan(a3, x3, h03, reverse=reverse).to(out_dtype)
    else:
        if x.dtype in _LOW_PRECISION:  # float32 state for half-precision inputs
            a3, x3 = a3.float(), x3.float()
            h03 = None if h03 is None else h03.float()
        h = _ScanFunction.apply(a3, x3, h03, bool(reverse), mode).to(out_dtype)
    _check_finite_scan(h, reverse, a=a, x=x, h0=h0)
    return h.reshape(x.shape)


def _check_finite_scan(h, reverse, **inputs):
    """NaN or inf never passes silently, at the cost of reading one state per sequence: a non-finite
    ``h_t`` stays non-finite (``a * inf`` is inf or NaN, ``0 * inf`` is NaN), so every non-finite input
    and every overflow shows in the last state of the scan. The inputs are searched only then, to name
    the first bad value. On a GPU (``seqlab.ops._checks.host_checks``) the read becomes a device-side assertion,
    so the host never waits for the scan; ``SEQLAB_CHECK_VALUES=1`` brings back the named error."""
    last = h[..., 0, :] if reverse else h[..., -1, :]
    if not has_values(last):
        return
    if not host_checks(last):
        torch._assert_async(torch.isfinite(last).all(),
                            "linear_scan: a non-finite state (NaN or inf), from a non-finite input or an overflow "
                            f"(device-side check); rerun with {CHECK_VALUES}=1 to have the first bad value named")
        return
    if not torch.isfinite(last).all():
        check_finite_inputs("linear_scan", **inputs)
        raise FloatingPointError("linear_scan: produced non-finite values (NaN or inf) from finite inputs: "
                                 "the state overflowed (|a| > 1 grows it geometrically, or the dtype's range is "
                                 "too small for the sums)")
