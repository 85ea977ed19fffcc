"""The (gated) delta rule: DeltaNet (Yang et al., NeurIPS 2024, arXiv 2406.06484) and Gated DeltaNet (Yang, Kautz,
Hatamizadeh, ICLR 2025, arXiv 2412.06464), in every form.

The papers write the state ``S: (dv, dk)`` and read it with a column query::

    S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,      o_t = S_t q_t

seqlab keeps every state as ``(dk, dv)`` and reads it with a row query, as :func:`seqlab.ops.gateloop` does
(``S_n: (dk, dv)``, ``y_n = q_n S_n``); that state is the papers' transposed, and the same rule reads::

    S_t = alpha_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t,      y_t = q_t S_t

(``k_t^T v_t`` the ``(dk, dv)`` outer product of row vectors). ``alpha_t = 1`` is DeltaNet. Where every other op of
seqlab has a diagonal transition, this one is diagonal plus rank one, and it reads before it writes: with
``S' = alpha_t S_{t-1}``, the state's recall for the key ``k_t S'`` moves a fraction ``beta_t`` of the way to
``v_t`` (``S_t = S' + beta_t k_t^T (v_t - k_t S')``), so a unit key written with ``beta_t = 1`` recalls exactly
``v_t`` afterwards.

Shapes: ``q, k: (B, H, L, dk)``, ``v: (B, H, L, dv)``, ``beta: (B, H, L)`` (one write strength per head and step;
a trailing dimension of 1 is refused, not broadcast), ``g: (B, H, L)`` the log decay ``log alpha_t`` (one scalar
gate per head and step, as Gated DeltaNet; ``None`` for DeltaNet), ``h0: (B, H, dk, dv)``. Real tensors only.

Ranges (checked on the host; on a GPU by one device-side assertion unless ``SEQLAB_CHECK_VALUES=1``):
``beta`` in ``[0, 2]`` and ``g <= 0``. The papers' ``beta`` is a sigmoid, in ``(0, 1)``; for a unit key the
transition ``I - beta k^T k`` has eigenvalues 1 and ``1 - beta``, so it is non-expansive for every ``beta`` in
``[0, 2]``, and ``(1, 2]`` adds the negative eigenvalues that let the rule track state (fla's
``allow_neg_eigval``, ``beta = 2 sigmoid``). ``alpha = exp(g)`` lies in ``(0, 1]``; an exact reset
(``alpha = 0``, ``g = -inf``) is not a finite input, and a very negative ``g`` (``-30``) stands for it. Keys are
not normalised here: the models L2-normalise them, and every guarantee above assumes it. With an unnormalised key
the eigenvalue ``1 - beta |k|^2`` leaves ``[-1, 1]`` once ``beta |k|^2 > 2`` and the state can grow
exponentially (the output check then raises ``FloatingPointError`` when it overflows).

Modes, all computing the same function:

- ``"recurrent"``: the read-before-write form token by token (``recurrent.py``), O(L dk dv); the form of
  :func:`delta_rule_step`, decoding's one-token step.
- ``"chunked"``: the UT transform of every chunk at once, then one pass over chunk states (``chunked.py``); its
  within-chunk products are matrix products, its sequential part ``L / C`` steps.
- ``"fla"``: flash-linear-attention's fused chunked kernels (``fla.py``), where ``fla`` is installed, on CUDA
  tensors in bfloat16 / float16. fla computes with half-precision operands and float32 accumulation, the one
  exception to the dtype policy (half precision computed in float32), made explicit by this mode's name;
  float32 and float64 are refused with a ``TypeError`` naming the dtype. ``FlaUnavailable`` says why where
  fla or CUDA is missing.
- ``"auto"``: ``"chunked"`` on every device (on CPU its matrix products beat the token loop by an order of magnitude
  at ``dk = dv = 64``); fla's half-precision kernels run only by name, never behind ``"auto"``.

Also :func:`delta_rule_reference` (the papers' loop in float64, ``reference.py``), :func:`delta_rule_step` and
:func:`delta_rule_ut_matrix` (the unit lower triangular matrix the chunked form solves with, to look at and to
measure its conditioning).

dtype policy: the output has the inputs' (promoted) dtype; float16 / bfloat16 are computed in float32 (but see
``"fla"``), float32 in float32, float64 in float64.

Files: ``reference.py`` (the papers' recurrence, float64), ``recurrent.py`` (token loop and decode step),
``chunked.py`` (the UT transform, batched over chunks), ``fla.py`` (the optional fla kernels), ``_common.py``
(checks and dtypes).
"""
from __future__ import annotations

from seqlab.ops._checks import check_finite, check_mode, has_values, host_checks
from seqlab.ops.delta._common import (
    BETA_RANGE,
    assert_values_async,
    check_key_inputs,
    check_sequence_inputs,
    check_step_inputs,
    check_values,
    out_dtype,
    work_dtype,
    working,
)
from seqlab.ops.delta.chunked import _chunked, ut_matrix
from seqlab.ops.delta.fla import FlaUnavailable, _fla, require_fla
from seqlab.ops.delta.recurrent import _recurrent, _step
from seqlab.ops.delta.reference import delta_rule_reference

__all__ = ["delta_rule", "delta_rule_step", "delta_rule_reference", "delta_rule_ut_matrix", "DELTA_MODES",
           "DELTA_BETA_RANGE", "FlaUnavailable"]

DELTA_MODES = ("auto", "recurrent", "chunked", "fla")
DELTA_BETA_RANGE = BETA_RANGE


_FORMS = {
    "recurrent": lambda q, k, v, beta, g, h0, C: _recurrent(q, k, v, beta, g, h0),
    "chunked": _chunked,
    "fla": lambda q, k, v, beta, g, h0, C: _fla(q, k, v, beta, g, h0),
}


def _pick_mode(mode: str, q, dtype) -> str:
    """``"auto"`` -> ``"chunked"``: fla's kernels multiply in half precision, so they run only when asked for by
    name (``mode="fla"``), never behind ``"auto"`` (no mode drops precision silently); any mode on ``meta`` tensors
    (shapes only) traces through ``"chunked"``."""
    if not has_values(q):
        return "chunked" if mode in ("auto", "fla") else mode
    return "chunked" if mode == "auto" else mode


def _check_chunk_size(chunk_size) -> None:
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")


def delta_rule(q, k, v, beta, g=None, *, h0=None, mode: str = "auto", return_state: bool = False,
               chunk_size: int = 64):
    """The gated delta rule: ``S_t = alpha_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t``, ``y_t = q_t S_t``.

    Args:
        q, k: ``(B, H, L, dk)`` queries and keys (the models L2-normalise the keys; see the module docstring).
        v: ``(B, H, L, dv)`` values.
        beta: ``(B, H, L)`` write strengths in ``[0, 2]`` (the papers' sigmoid: ``[0, 1]``).
        g: ``(B, H, L)`` log decays ``log alpha_t <= 0`` (Gated DeltaNet), or ``None`` (DeltaNet, ``alpha = 1``).
        h0: optional initial state ``S_0``, ``(B, H, dk, dv)``.
        mode: one of ``DELTA_MODES``; all compute the same function.
        return_state: also return the final state ``S_L``, ``(B, H, dk, dv)``.
        chunk_size: the chunk length of ``"chunked"`` (fla uses its own, 64).

    Returns ``y`` ``(B, H, L, dv)``, or ``(y, S_L)``.
    Raises ``TypeError``/``ValueError`` naming the argument for bad dtypes, shapes or ranges,
    ``FloatingPointError`` naming the argument and index of a non-finite input (or for a non-finite result),
    ``FlaUnavailable`` for ``mode="fla"`` where fla or CUDA is missing.
    """
    mode = check_mode("delta_rule", mode, DELTA_MODES)
    check_sequence_inputs(q, k, v, beta, g, h0)
    _check_chunk_size(chunk_size)
    result_dtype = out_dtype(q, k, v, beta, g, h0)
    mode = _pick_mode(mode, q, result_dtype)
    dtype = result_dtype if mode == "fla" else working(result_dtype)
    if mode == "fla":
        require_fla(q, result_dtype)
    host = host_checks(q)
    if host:
        check_values("delta_rule", q=q, k=k, v=v, beta=beta, g=g, h0=h0)
    q, k, v, beta = (t.to(dtype) for t in (q, k, v, beta))
    g = None if g is None else g.to(dtype)
    h0 = None if h0 is None else h0.to(dtype)
    if mode == "fla" and q.shape[2] == 0:
        mode = "chunked"                          # nothing to launch a kernel for
    y, S = _FORMS[mode](q, k, v, beta, g, h0, chunk_size)
    if host:
        check_finite(f"delta_rule(mode={mode!r})", y)
        check_finite(f"delta_rule(mode={mode!r}) final state", S)
    else:
        assert_values_async("delta_rule", y, S, beta, g)
    y, S = y.to(result_dtype), S.to(result_dtype)
    return (y, S) if return_state else y


def delta_rule_step(q_t, k_t, v_t, beta_t, g_t=None, state=None):
    """One decoding step of the gated delta rule, O(dk dv): ``(y_t, S_t)`` from ``S_{t-1}``.

    ``q_t, k_t: (B, H, dk)``, ``v_t: (B, H, dv)``, ``beta_t, g_t: (B, H)`` (``g_t=None``: DeltaNet), ``state``:
    ``(B, H, dk, dv)`` or ``None`` (the zero state before the first token). Looping it over ``t`` gives
    ``delta_rule`` and its final state. ``y_t`` has the inputs' dtype; the returned state is kept in the working
    precision (float32 for half-precision inputs, float64 for float64), so that a long decode does not round
    the state to half precision at every token.
    """
    check_step_inputs(q_t, k_t, v_t, beta_t, g_t, state)
    result_dtype = out_dtype(q_t, k_t, v_t, beta_t, g_t)
    dtype = work_dtype(q_t, k_t, v_t, beta_t, g_t, state)
    host = host_checks(q_t)
    if host:
        check_values("delta_rule_step", q_t=q_t, k_t=k_t, v_t=v_t, beta_t=beta_t, g_t=g_t, state=state)
    q_t, k_t, v_t, beta_t = (t.to(dtype) for t in (q_t, k_t, v_t, beta_t))
    g_t = None if g_t is None else g_t.to(dtype)
    B, H, dk = q_t.shape
    S = q_t.new_zeros(B, H, dk, v_t.shape[-1]) if state is None else state.to(dtype)
    y_t, S = _step(q_t, k_t, v_t, beta_t, g_t, S)
    if host:
        check_finite("delta_rule_step", y_t)
    else:
        assert_values_async("delta_rule_step", y_t, S, beta_t, g_t)
    return y_t.to(result_dtype), S


def delta_rule_ut_matrix(k, beta, g=None, *, chunk_size: int = 64):
    """``I + tril(diag(beta) (K K^T . Gamma), -1)`` for every chunk, ``(B, H, nC, C, C)``, ``Gamma_ri =
    exp(G_r - G_i)`` the relative decays (1 without ``g``): the unit lower triangular matrix whose solve is the
    UT transform of the chunked form (``C = min(chunk_size, L)``, the last chunk zero-padded). For looking at it
    and measuring its conditioning; computed in the inputs' working precision."""
    _check_chunk_size(chunk_size)
    check_key_inputs(k, beta, g)
    dtype = work_dtype(k, beta, g)
    return ut_matrix(k.to(dtype), beta.to(dtype), None if g is None else g.to(dtype), chunk_size)
