"""Linear attention with decay: additive (LightNet) and multiplicative, causal and non-causal.

Paper 003 ("You Only Scan Once", LightNet). Notation: ``q, k: (..., L, dk)``, ``v: (..., L, dv)``,
any leading batch/head dimensions; every channel ``i`` of the key has its own decay.

Linear attention with decay (§2, eq. 2)::

    kv_t = lambda_t * kv_{t-1} + k_t v_t^T,     o_t^T = q_t^T kv_t,        0 < lambda_t <= 1

Theorem 3.1: any such recurrence ``y_t = a_t y_{t-1} + x_t`` is ``y_t = sum_{s<=t} c_ts x_s`` with
``c_ts = g_s / g_t``. Proposition 3.2 names the two ways to keep ``0 <= a_t <= 1`` with ``delta_t >= 0``:

- multiplicative: ``log g_t = log g_{t-1} + delta_t``  ->  ``a_t = exp(-delta_t)`` (depends on x_t only);
- additive:       ``g_t = g_{t-1} + delta_t``          ->  ``a_t = g_{t-1} / g_t`` (depends on all of x_1..x_t).

LightNet (eq. 7) takes the additive kind with ``delta_t = exp(k_t)``, the decay shared with the key::

    s_t = s_{t-1} + exp(k_t),   kbar_t = exp(k_t) / s_t,
    kv_t = diag(1 - kbar_t) kv_{t-1} + kbar_t v_t^T,      o_t^T = q_t^T kv_t

Unrolled, ``kv_t = sum_{s<=t} softmax_{s<=t}(k)_s v_s^T`` per channel: a *causal softmax over the
sequence*. Non-causal (eq. 8) the denominator becomes the whole sum ``s = sum_t exp(k_t)``: one
pass over the data (the "1 scan"). The multiplicative kind has no such form: non-causal it needs a
forward and a backward scan (the "2 scan" of §3.1, Fig. 2).

Functions:

- :func:`decay_attention` - the op, in modes ``recurrent`` (the eq. 7 / eq. 2 loop, log-domain),
  ``parallel`` (cumulative log-domain form / scan), ``chunked`` (intra-chunk matrices + inter-chunk
  state), ``numba`` and ``triton`` (causal: GateLoop's compiled loop and Triton kernels).
- :func:`decay_attention_reference` - float64 loops written exactly as the paper writes them.
- :func:`decay_coefficients` - the ``c_ts`` matrix of Theorem 3.1 for either kind of Prop. 3.2.

Extension used by LightNet's "no share" ablation and by MD-LRPE (Appendix A.2): for ``additive``,
``log_decay`` may be given; then ``delta_t = exp(log_decay_t)`` are the importance scores and ``k_t``
multiplies ``kbar_t`` in the state update: ``kv_t = diag(1 - kbar_t) kv_{t-1} + (kbar_t * k_t) v_t^T``.
With ``log_decay=None`` the decay is shared with the key (eq. 7): ``log_decay = k`` and the multiplier is 1.

Files: ``reference.py`` (eq. 2, 7, 8 as float64 loops), ``coefficients.py`` (Theorem 3.1, Prop. 3.2),
``additive.py`` and ``multiplicative.py`` (the torch forms), ``on_gateloop.py`` (the causal decays as
GateLoop's recurrence, run by its Numba loop), ``numba.py`` (additive decay's transitions, compiled),
``triton.py`` (the causal decays' ``log a`` for GateLoop's Triton kernels), ``_common.py`` (checks and chunk helpers).
"""
from __future__ import annotations

import torch

from seqlab.ops._checks import (
    at_least_float32,
    check_finite,
    check_finite_inputs,
    check_mode,
    has_values,
    host_checks,
    traceable_mode,
)
from seqlab.ops._checks import CHECK_VALUES
from seqlab.ops.decay._common import DECAY_KINDS, _check_inputs, _out_dtype
from seqlab.ops.decay.additive import (
    _additive_chunked,
    _additive_parallel,
    _additive_parallel_noncausal,
    _additive_recurrent,
    _additive_recurrent_noncausal,
)
from seqlab.ops.decay.coefficients import decay_coefficients
from seqlab.ops.decay.multiplicative import _multiplicative_causal, _multiplicative_recurrent, _none_noncausal
from seqlab.ops.decay.on_gateloop import _causal_on_gateloop, gateloop_form
from seqlab.ops.decay.reference import decay_attention_reference
from seqlab.ops.decay.state import causal_step, causal_with_state, check_state, empty_state

__all__ = ["decay_attention", "decay_attention_reference", "decay_coefficients", "gateloop_form", "DECAY_KINDS",
           "DECAY_MODES"]




DECAY_MODES = ("auto", "recurrent", "parallel", "chunked", "numba", "triton")


def _pick_mode(mode, decay, causal, q, v):
    """``auto``: non-causal additive / none are matrix products (``parallel``); multiplicative is chunked;
    causal decays run on GateLoop's Numba loop on a CPU and on its Triton kernels on CUDA (without either: the
    plain loop up to ~100 tokens on a CPU, measured, longer ones chunked)."""
    if mode != "auto":
        return mode
    if not causal:
        return "chunked" if decay == "multiplicative" else "parallel"
    from seqlab.kernels import fast_backend

    backend = fast_backend(q.device)
    if backend is not None:
        return backend
    return "recurrent" if q.shape[-2] <= 96 and q.device.type == "cpu" else "chunked"


def _flip(t):
    return None if t is None else t.flip(-2)


def decay_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, decay: str = "additive",
                    log_decay: torch.Tensor | None = None, causal: bool = True, mode: str = "auto", h0=None,
                    return_state: bool = False):
    """LightNet attention before its norm and gate: ``(..., L, dk), (..., L, dk), (..., L, dv) -> (..., L, dv)``.

    ``decay``:

    - ``"additive"`` (LightNet): causal eq. 7, non-causal eq. 8 (one pass). ``log_decay=None`` shares the
      decay with the key (``delta = exp(k)``); a given ``log_decay`` supplies ``delta = exp(log_decay)``
      and ``k`` then multiplies ``kbar`` (see the module docstring);
    - ``"multiplicative"``: eq. 2 with ``lambda_t = exp(-log_decay_t)`` (``log_decay >= 0`` required), shaped
      like ``k`` (one decay per channel) or ``(..., L, 1)`` (one per head, as Lightning Attention); non-causal is the forward scan plus the backward scan of §3.1 (the diagonal counted by both);
    - ``"none"``: plain linear attention (``lambda_t = 1``); non-causal is the right product ``Q (K^T V)``.

    ``mode``: ``"recurrent"`` (the loops, log-domain), ``"parallel"`` (additive: cumulative log-domain
    form; multiplicative: one ``linear_scan`` over the states; non-causal additive/none: matrix products),
    ``"chunked"`` (intra-chunk matrices, inter-chunk states), ``"numba"`` (causal: GateLoop's compiled loop
    on the recurrence of :func:`gateloop_form`), ``"triton"`` (causal: GateLoop's chunked Triton kernels, fed
    ``log a``), ``"auto"`` (causal: ``numba`` on a CPU, ``triton`` on CUDA; non-causal: ``parallel``,
    ``chunked`` for multiplicative). ``q`` and ``v`` may be complex;
    ``k`` and ``log_decay`` are real. All modes are stable for keys of +-50 (exponents are differences
    of log-sums, never a raw ``exp(k)``).

    ``h0`` / ``return_state`` (causal, every mode; see ``seqlab/ops/decay/state.py``): start from the state
    ``h0`` and return ``(o, state)``, so that a sequence read in parts gives the output of reading it whole.
    The state of additive decay is the pair ``(kv (..., dk, dv), log_s (..., dk))``: the normalised running
    sum and the log of the running normaliser (``-inf`` before the first token); of multiplicative decay
    and ``"none"``, ``kv (..., dk, dv)``. Non-causal attention has no state (``NotImplementedError``).

    Values are checked as ``seqlab.ops.gateloop`` checks them: on the host off the GPU (errors naming the
    argument and index), on a GPU by one device-side assertion with no synchronisation, unless
    ``SEQLAB_CHECK_VALUES=1``.
    """
    q, k, v, log_decay = _check_inputs(q, k, v, decay, log_decay)
    check_mode("decay_attention", mode, DECAY_MODES)
    if h0 is not None or return_state:
        return _decay_with_state(q, k, v, decay, log_decay, causal, mode, h0, return_state)
    if host_checks(q):
        _check_values(q, k, v, decay, log_decay)
    mode = traceable_mode(_pick_mode(mode, decay, causal, q, v), "chunked", q, k, v, log_decay)
    out_dtype = _out_dtype(q, v)
    if q.shape[-2] == 0:  # no tokens: the empty output of every mode
        return v.new_zeros(v.shape, dtype=out_dtype)
    q, k, v, log_decay = map(at_least_float32, (q, k, v, log_decay))  # half precision is computed in float32
    if mode == "numba":
        if not causal:
            raise NotImplementedError("decay_attention(mode='numba') runs the causal decays on GateLoop's loop; "
                                      "got causal=False. Use mode='parallel' or 'chunked' (one or two scans)")
        out = _causal_on_gateloop(q, k, v, decay, log_decay, "numba")
    elif mode == "triton":
        if not causal:
            raise NotImplementedError("decay_attention(mode='triton') runs the causal decays on GateLoop's Triton "
                                      "kernels; got causal=False. Use mode='parallel' or 'chunked' (one or two scans)")
        from seqlab.ops.decay.triton import decay_triton

        out, _ = decay_triton(q, k, v, decay, log_decay)
    elif decay == "additive":
        if causal:
            fn = {"recurrent": _additive_recurrent, "parallel": _additive_parallel, "chunked": _additive_chunked}[mode]
        else:
            fn = {"recurrent": _additive_recurrent_noncausal, "parallel": _additive_parallel_noncausal,
                  "chunked": _additive_parallel_noncausal}[mode]
        out = fn(q, k, v, log_decay)
    elif decay == "none" and not causal:
        out = _none_noncausal(q, k, v) if mode != "recurrent" else (
            _multiplicative_recurrent(q, k, v, None) + _flip(_multiplicative_recurrent(*map(_flip, (q, k, v)), None))
            - torch.einsum("...ti,...ti,...tj->...tj", *(t.to(_out_dtype(q, v)) for t in (q, k)), v.to(_out_dtype(q, v))))
    else:
        ld = log_decay if decay == "multiplicative" else None
        out = _multiplicative_causal(q, k, v, ld, mode)
        if not causal:   # "2 scan": o_t = forward o_t + backward o_t (§3.1)
            out = out + _flip(_multiplicative_causal(_flip(q), _flip(k), _flip(v), _flip(ld), mode))
    return _checked_output(out, decay, log_decay).to(out_dtype)


def _check_values(q, k, v, decay, log_decay, h0=None):
    """Finite inputs (named with the index of the first bad value) and, for multiplicative decay,
    ``log_decay >= 0``; each reads values on the host."""
    check_finite_inputs("decay_attention", q=q, k=k, v=v, log_decay=log_decay)
    if h0 is not None:
        check_finite_inputs("decay_attention", h0_kv=h0[0] if decay == "additive" else h0)
    if decay == "multiplicative" and has_values(log_decay) and (log_decay < 0).any():
        raise ValueError(f"log_decay: multiplicative decay needs log_decay >= 0 (lambda = exp(-log_decay) <= 1), "
                         f"got min {float(log_decay.min()):.3g}")


def _checked_output(out, decay, log_decay):
    """``out`` after its check: on the host (``FloatingPointError``), or on a GPU without the debug switch
    ``SEQLAB_CHECK_VALUES=1`` one device-side assertion, with no synchronisation, that ``out`` is finite and,
    for multiplicative decay, ``log_decay >= 0`` (a non-finite input shows in ``out``: NaN and inf propagate
    through every ``log a`` and key, ``0 * inf`` is NaN)."""
    if host_checks(out):
        return check_finite("decay_attention", out)
    ok = torch.isfinite(torch.view_as_real(out) if out.is_complex() else out).all()
    if decay == "multiplicative":
        ok = ok & (log_decay >= 0).all()
    torch._assert_async(ok, "decay_attention: a non-finite input or output, or log_decay < 0 (device-side check); "
                            f"rerun with {CHECK_VALUES}=1 to have the argument and index named")
    return out


def _decay_with_state(q, k, v, decay, log_decay, causal, mode, h0, return_state):
    """Causal ``decay_attention`` from ``h0`` / returning its final state (``seqlab/ops/decay/state.py``)."""
    if not causal:
        raise NotImplementedError(f"decay_attention(causal=False, mode={mode!r}): non-causal attention reads the "
                                  f"whole sequence at once and has no state to start from or return "
                                  f"(h0, return_state are for causal=True)")
    if h0 is not None:
        check_state(h0, k, v, decay)
    if host_checks(q):
        _check_values(q, k, v, decay, log_decay, h0)
    mode = traceable_mode(_pick_mode(mode, decay, True, q, v), "chunked", q, k, v, log_decay)
    out_dtype = _out_dtype(q, v)
    if q.shape[-2] == 0:  # no tokens: the empty output, the state unchanged
        state = h0 if h0 is not None else empty_state(q, k, v, decay, out_dtype)
        out = v.new_zeros(v.shape, dtype=out_dtype)
    else:
        q, k, v, log_decay = map(at_least_float32, (q, k, v, log_decay))
        # one token from a state (decoding): eq. 7 / eq. 2 once, written out; every mode computes it alike
        run = causal_step if q.shape[-2] == 1 and h0 is not None else causal_with_state
        out, state = run(q, k, v, decay, log_decay, mode, h0)
        out = _checked_output(out, decay, log_decay).to(out_dtype)
    return (out, state) if return_state else out
