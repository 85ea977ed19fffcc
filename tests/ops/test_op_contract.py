"""The contract every op keeps in every mode: the dtype policy, shape-only tracing on the
``meta`` device, non-finite inputs named by argument and index, empty sequences. Parametrised over each
op's own tuple of modes, so a mode added later is covered without editing this file."""
import re

import pytest
import torch
from helpers import check

from seqlab.kernels import HAVE_TRITON
from seqlab.ops import (DECAY_MODES, DELTA_MODES, GATELOOP_MODES, RELATION_MODES, SCAN_MODES, decay_attention,
                        delta_rule, gateloop, linear_scan, relation)


def _scan_inputs(L, dtype, device="cpu"):
    # a time-invariant a (D,): every mode takes it, "doubling" (the log2(L) algorithm) only it
    a = (torch.rand(5, device=device) * 0.9 + 0.05).to(dtype)
    return {"a": a, "x": torch.randn(2, L, 5, dtype=dtype, device=device)}


def _gateloop_inputs(L, dtype, device="cpu"):
    q, k, v = (torch.randn(1, 2, L, 3, dtype=dtype, device=device) for _ in range(3))
    a = (torch.rand(1, 2, L, 3, device=device) * 0.9 + 0.05).to(dtype)
    return {"q": q, "k": k, "v": v, "a": a}


def _decay_inputs(L, dtype, device="cpu"):
    return {name: torch.randn(2, L, 4, dtype=dtype, device=device) for name in ("q", "k", "v")}


def _delta_inputs(L, dtype, device="cpu"):
    # keys L2-normalised as the models use them, beta in [0, 1], g = log alpha <= 0
    q, v = (torch.randn(1, 2, L, 3, dtype=dtype, device=device) for _ in range(2))
    k = torch.nn.functional.normalize(torch.randn(1, 2, L, 3, device=device), dim=-1).to(dtype)
    beta = torch.rand(1, 2, L, device=device).to(dtype)
    g = torch.log(torch.rand(1, 2, L, device=device) * 0.9 + 0.05).to(dtype)
    return {"q": q, "k": k, "v": v, "beta": beta, "g": g}


def _relation_inputs(L, dtype, device="cpu"):
    return {name: torch.randn(2, L, 6, dtype=dtype, device=device) for name in ("p", "q")}


OPS = {
    "linear_scan": (SCAN_MODES, _scan_inputs, lambda mode, **kw: linear_scan(**kw, mode=mode)),
    "gateloop": (GATELOOP_MODES, _gateloop_inputs, lambda mode, **kw: gateloop(**kw, mode=mode)),
    "decay_attention": (DECAY_MODES, _decay_inputs, lambda mode, **kw: decay_attention(**kw, mode=mode)),
    "relation": (RELATION_MODES, _relation_inputs, lambda mode, **kw: relation(**kw, mode=mode)),
    "delta_rule": (DELTA_MODES, _delta_inputs, lambda mode, **kw: delta_rule(**kw, mode=mode)),
}
CASES = [(op, mode) for op, (modes, _, _) in OPS.items() for mode in modes]
REFERENCE = {"linear_scan": "sequential", "gateloop": "recurrent", "decay_attention": "recurrent",
             "relation": "quadratic", "delta_rule": "recurrent"}


def _skip_without_triton(mode):
    if mode == "triton" and not HAVE_TRITON:
        pytest.skip("Triton is not installed")
    if mode == "fla":
        pytest.skip("fla's kernels take CUDA tensors only (the contract runs on CPU tensors); "
                    "tests/ops/test_delta.py checks mode='fla' on CUDA where fla is installed")


@pytest.mark.parametrize("op,mode", CASES)
def test_meta_tensors_trace_shapes(op, mode):
    """Value checks skip meta tensors: every mode returns the output's shape and dtype without values."""
    _, make, call = OPS[op]
    inputs = make(8, torch.float32, device="meta")
    out = call(mode, **inputs)
    ref = call(REFERENCE[op], **make(8, torch.float32))
    assert out.is_meta and out.shape == ref.shape and out.dtype == ref.dtype


@pytest.mark.parametrize("op,mode", CASES)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_input_is_named_with_its_index(op, mode, bad):
    _skip_without_triton(mode)
    _, make, call = OPS[op]
    inputs = make(9, torch.float32)
    for name in inputs:
        broken = dict(inputs)
        t = broken[name].clone()
        index = tuple(int(torch.randint(0, n, ())) for n in t.shape)
        t[index] = bad
        broken[name] = t
        with pytest.raises(FloatingPointError, match=rf"{name} holds a non-finite value .* at index "
                                                     rf"{re.escape(str(index))}"):
            call(mode, **broken)


@pytest.mark.parametrize("op,mode", CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_policy(op, mode, dtype):
    """The output has the input's dtype; float64 is computed in float64 (matches the float64 reference to
    1e-12), lower precisions in at least float32 (to the float32 tolerances of the op tests)."""
    _skip_without_triton(mode)
    _, make, call = OPS[op]
    inputs = make(37, torch.float64)
    ref = call(REFERENCE[op], **inputs)
    low = {name: t.to(dtype) for name, t in inputs.items()}
    out = call(mode, **low)
    assert out.dtype == dtype, f"{op}(mode={mode!r}) returned {out.dtype} for {dtype} inputs"
    ref_low = call(REFERENCE[op], **{name: t.double() for name, t in low.items()})
    tol = {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 1e-2)
    check(out.double(), ref_low if dtype != torch.float64 else ref, tol, f"{op}(mode={mode!r}) in {dtype}")


@pytest.mark.parametrize("op,mode", CASES)
def test_empty_sequence(op, mode):
    """L = 0 gives the empty ``(..., 0, d)`` output in every mode."""
    _skip_without_triton(mode)
    _, make, call = OPS[op]
    ref = call(REFERENCE[op], **make(3, torch.float32))
    out = call(mode, **make(0, torch.float32))
    assert out.shape == ref.shape[:-2] + (0,) + ref.shape[-1:] and out.dtype == ref.dtype


@pytest.mark.parametrize("mode", [m for m in GATELOOP_MODES if m != "attention_naive"])
@pytest.mark.parametrize("kind", ["real", "complex"])
def test_gateloop_gradient_at_exact_zero_transitions(mode, kind):
    """``S_n`` is linear in each ``a_j``, so ``dL/da_j`` is finite and nonzero at ``a_j = 0`` (a full reset);
    the log-domain modes must not lose it. (attention_naive divides by prod a: it raises there, by design.)"""
    _skip_without_triton(mode)
    dtype = torch.complex128 if kind == "complex" else torch.float64
    q, k, v = (torch.randn(2, 2, 21, 3, dtype=dtype) for _ in range(3))
    a = torch.rand(2, 2, 21, 3, dtype=torch.float64) * 0.8 + 0.1
    a = a.to(dtype) * (torch.exp(1j * torch.rand_like(a)) if kind == "complex" else 1)
    zeros = [(0, 0, 4, 1), (0, 0, 5, 1), (1, 1, 0, 2), (1, 0, 20, 0), (0, 1, 13, 0)]
    for index in zeros:
        a[index] = 0
    h0 = torch.randn(2, 2, 3, 3, dtype=dtype)
    w = torch.randn(2, 2, 21, 3, dtype=dtype)

    def grads(mode):
        inputs = [t.clone().requires_grad_(True) for t in (q, k, v, a, h0)]
        y, S = gateloop(*inputs[:4], h0=inputs[4], mode=mode, return_state=True)
        loss = (y * w).real.sum() + S.abs().square().sum()
        loss.backward()
        return [t.grad for t in inputs]

    ref = grads("recurrent")
    out = grads(mode)
    tol = 1e-5 if mode == "triton" else 1e-10
    for name, g, r in zip("q k v a h0".split(), out, ref):
        check(g, r, tol, f"gateloop(mode={mode!r}) d{name} with exact zeros in a")
    for index in zeros:
        assert ref[3][index] != 0
        assert abs(out[3][index] - ref[3][index]) <= tol * abs(ref[3][index]) + 1e-12, f"da at {index}"


@pytest.mark.parametrize("op", ["linear_scan", "gateloop"])
def test_an_unknown_mode_is_refused_naming_the_modes(op):
    _, make, call = OPS[op]
    with pytest.raises(ValueError, match=r"mode must be one of \(.*'numba'.*\), got 'compiled'"):
        call("compiled", **make(9, torch.float32))


def test_below_prints_the_bound_never_the_digits_and_refuses_a_value_above_it():
    from seqlab.ops import below

    assert below(2.7e-16, 1e-12) == below(0.0, 1e-12) == "below 1e-12"     # the same text on every machine
    assert below(1.8e-07, 1e-5) == "below 1e-05"
    with pytest.raises(AssertionError, match="is not below 1e-12"):
        below(3e-12, 1e-12)
    with pytest.raises(AssertionError, match="nan"):
        below(float("nan"), 1e-12)
