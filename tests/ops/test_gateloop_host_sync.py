"""GateLoop's GPU path, and the scan's, read no value on the host: no ``.item()``, no ``if tensor``, no ``.tolist()``.

On CUDA every such read waits for the whole queue of kernels before it (a host synchronisation). The tests
run the op's GPU branch on the CPU: the device check is faked (``seqlab.ops._checks.on_gpu``) and the kernels
run in Triton's interpreter, which stands in for the GPU (its own reads of the tensors are not counted).
Values are still checked there, by one device-side assertion, and the debug switch ``SEQLAB_CHECK_VALUES=1``
brings back the host checks with their named errors.
"""
import contextlib
import importlib
import sys

import pytest
import torch
from helpers import check

from seqlab.ops.decay import decay_attention, decay_attention_reference
from seqlab.ops.gateloop import gateloop
from test_gateloop import make_inputs, to64

pytest.importorskip("triton")
gateloop_module = importlib.import_module("seqlab.ops.gateloop")   # the package, not its function
checks_module = importlib.import_module("seqlab.ops._checks")      # where the op asks whether it is on a GPU

# Tensor methods that read values on the host (a synchronisation on CUDA)
HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "__complex__", "cpu", "numpy",
              "nonzero")


@pytest.fixture
def gpu_branch(monkeypatch):
    """The op believes its tensors live on a GPU; the debug switch is off."""
    monkeypatch.setattr(checks_module, "on_gpu", lambda t: True)
    monkeypatch.delenv(gateloop_module.CHECK_VALUES, raising=False)


def _called_by_interpreter() -> bool:
    """Whether Triton's code is on the stack: the interpreter copying tensors for a launch, as a GPU would not."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("triton"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def host_reads():
    """The names of the host-reading Tensor methods called inside the block (the interpreter's calls excepted)."""
    calls, originals = [], {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def counting(name, original):
        def method(self, *args, **kwargs):
            if not _called_by_interpreter():
                calls.append(name)
            return original(self, *args, **kwargs)
        return method

    try:
        for name, original in originals.items():
            setattr(torch.Tensor, name, counting(name, original))
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def _inputs(H, L, dk, dv, kind):
    q, k, v, a = make_inputs(1, H, L, dk, dv, complex_=kind == "complex", negative=kind == "real_negative")
    a[0, H - 1, L // 2, 0] = 0.0                     # an exact reset: a data-dependent branch if any
    h0 = torch.randn(1, H, dk, dv, dtype=q.dtype)
    return q, k, v, a, h0


@pytest.mark.parametrize("H,L,dk,dv,kind", [(2, 29, 1, 1, "complex"),        # the paper's d_h = 1: on the scan
                                            (2, 29, 2, 3, "real_negative"),  # on the scan, real a of either sign
                                            (1, 9, 5, 4, "real_negative")])  # the chunked kernels, signs folded
def test_gpu_branch_reads_no_value_on_the_host(gpu_branch, H, L, dk, dv, kind):
    """Forward and backward, with h0 and the final state: zero host reads, and the float64 recurrence's values."""
    inputs = [t.clone().requires_grad_() for t in _inputs(H, L, dk, dv, kind)]
    weights = [torch.randn(1, H, n, dv, dtype=to64(inputs[0]).dtype) for n in (L, dk)]   # for y and S_L
    with host_reads() as reads:
        y, S = gateloop(*inputs[:4], h0=inputs[4], mode="triton", return_state=True)
        loss = sum((t * w.to(t.dtype).conj()).real.sum() for t, w in zip((y, S), weights))
        loss.backward()
    assert reads == [], f"host reads on the GPU path: {reads}"
    ref = [to64(t).requires_grad_() for t in inputs]
    y_ref, S_ref = gateloop(*ref[:4], h0=ref[4], mode="recurrent", return_state=True)
    sum((t * w.conj()).real.sum() for t, w in zip((y_ref, S_ref), weights)).backward()
    check(y, y_ref, 1e-5, f"GPU branch y, {dk}x{dv} {kind}")
    check(S, S_ref, 1e-5, f"GPU branch final state, {dk}x{dv} {kind}")
    for name, t, r in zip(("q", "k", "v", "a", "h0"), inputs, ref):
        if name == "a" and dk * dv > 16:      # the chunked kernels' log-domain gradient is 0 at the exact reset
            keep = to64(t.detach()) != 0
            check(t.grad[keep], r.grad[keep], 1e-5, f"GPU branch grad a (a != 0), {dk}x{dv} {kind}")
            assert (t.grad[~keep] == 0).all() and (r.grad[~keep] != 0).all()   # as documented; the CPU: below
            continue
        check(t.grad, r.grad, 1e-5, f"GPU branch grad {name}, {dk}x{dv} {kind}")


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # the interpreter's numpy meeting the NaN
@pytest.mark.parametrize("H,dk,dv,cases", [(2, 1, 1, ("q", "k", "v", "a", "h0")), (1, 5, 4, ("k", "h0"))])
def test_gpu_branch_never_passes_nan_or_inf_silently(gpu_branch, H, dk, dv, cases):
    """A NaN or inf in any input fails the device-side assertion, on the scan and through the chunked kernels:
    in ``a`` by ``|a| <= 1``, in the others by what it makes of ``y`` or ``S_L``; and so does ``|a| > 1``."""
    q, k, v, a, h0 = _inputs(H, 5, dk, dv, "complex")
    bad_values = {"q": ((0, H - 1, 3, 0), float("inf")), "k": ((0, 0, 4, 0), float("nan")),
                  "v": ((0, H - 1, 2, 0), float("inf")), "a": ((0, 0, 0, 0), float("nan")),
                  "h0": ((0, H - 1, 0, 0), float("nan"))}
    for case in cases:
        index, bad = bad_values[case]
        inputs = dict(q=q, k=k, v=v, a=a, h0=h0 if case == "h0" else None)
        inputs[case] = inputs[case].clone()
        inputs[case][index] = bad
        with pytest.raises(RuntimeError, match="device-side check"):
            gateloop(inputs["q"], inputs["k"], inputs["v"], inputs["a"], h0=inputs["h0"], mode="triton")
    outside = a.clone()
    outside[0, H - 1, 2, 0] = 1.01j
    with pytest.raises(RuntimeError, match=r"\|a\| > 1"):
        gateloop(q, k, v, outside, mode="triton")


@pytest.mark.parametrize("decay,with_state", [("additive", False), ("multiplicative", True)])
def test_decays_gpu_branch_reads_no_value_on_the_host(gpu_branch, decay, with_state):
    """LightNet's causal decays on GateLoop's Triton path (their log a, a state in and out): zero host reads,
    the float64 loops' values, and a NaN input fails the device-side assertion."""
    q, k, v = (torch.randn(2, 17, d) for d in (3, 3, 4))
    kw = dict(log_decay=torch.rand(2, 17, 3)) if decay == "multiplicative" else {}
    state = dict(h0=torch.randn(2, 3, 4), return_state=True) if with_state else {}
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with host_reads() as reads:
        out = decay_attention(*leaves, decay=decay, mode="triton", **kw, **state)
        out = out[0] if with_state else out
        out.sum().backward()
    assert reads == [], f"host reads on the GPU path: {reads}"
    if not with_state:
        check(out, decay_attention_reference(*(to64(t) for t in (q, k, v)), decay=decay), 1e-5, f"{decay} decay")
    k[1, 5, 2] = float("nan")
    with pytest.raises(RuntimeError, match="device-side check"):
        decay_attention(q, k, v, decay=decay, mode="triton", **kw, **state)


def test_chunked_heads_off_the_gpu_keep_the_exact_gradient_at_exact_resets():
    """Off the GPU the op may read a: where a = 0 exactly, the chunked kernels' log-domain gradient (0) is
    replaced by the exact one, dL/da_j = <S_{j-1}, dS_j> (the associative scan's)."""
    q, k, v, a, h0 = _inputs(1, 9, 5, 4, "complex")
    a[0, 0, 0, 1] = a[0, 0, 6, 3] = 0.0
    weights = [torch.randn(1, 1, n, 4, dtype=torch.complex128) for n in (9, 5)]
    grads = []
    for mode, inputs in (("triton", (q, k, v, a, h0)), ("recurrent", [to64(t) for t in (q, k, v, a, h0)])):
        leaves = [t.clone().requires_grad_() for t in inputs]
        y, S = gateloop(*leaves[:4], h0=leaves[4], mode=mode, return_state=True)
        sum((t * w.to(t.dtype).conj()).real.sum() for t, w in zip((y, S), weights)).backward()
        grads.append(leaves[3].grad)
    check(grads[0], grads[1], 1e-5, "grad a with exact resets, chunked kernels off the GPU")
    assert grads[0][0, 0, 0, 1] != 0 and grads[0][0, 0, 6, 3] != 0


def test_debug_switch_brings_back_the_named_errors(gpu_branch, monkeypatch):
    q, k, v, a, _ = _inputs(2, 5, 1, 1, "complex")
    monkeypatch.setenv(gateloop_module.CHECK_VALUES, "1")
    bad = a.clone()
    bad[0, 1, 3, 0] = float("nan")
    with pytest.raises(FloatingPointError, match=r"a holds a non-finite value .* at index \(0, 1, 3, 0\)"):
        gateloop(q, k, v, bad, mode="triton")
    bad[0, 1, 3, 0] = 1.01j
    with pytest.raises(ValueError, match="a: state transitions need magnitudes"):
        gateloop(q, k, v, bad, mode="triton")
    with host_reads() as reads:
        gateloop(q, k, v, a, mode="triton")
    assert reads, "the debug switch reads values on the host"


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")  # the interpreter
@pytest.mark.parametrize("kind", ["real", "complex"])
def test_scan_gpu_branch_reads_no_value_on_the_host(gpu_branch, monkeypatch, kind):
    """``linear_scan(mode="triton")`` forward and backward: zero host reads and the float64 loop's values; a NaN
    input or an overflowing state fails the device-side assertion, and ``SEQLAB_CHECK_VALUES=1`` names it."""
    from seqlab.ops import linear_scan, linear_scan_reference

    dtype = torch.complex64 if kind == "complex" else torch.float32
    a = torch.rand(2, 37, 5) * 0.5 + 0.4
    a = torch.polar(a, torch.rand_like(a)) if kind == "complex" else a
    x, h0 = torch.randn(2, 37, 5, dtype=dtype), torch.randn(2, 5, dtype=dtype)
    leaves = [t.clone().requires_grad_() for t in (a, x, h0)]
    with host_reads() as reads:
        h = linear_scan(*leaves, mode="triton")
        torch.view_as_real(h).sum().backward() if h.is_complex() else h.sum().backward()
    assert reads == [], f"host reads on the GPU path: {reads}"
    check(h, linear_scan_reference(*(to64(t) for t in (a, x, h0))), 1e-5, f"scan GPU branch {kind}")
    bad = x.clone()
    bad[1, 20, 3] = float("nan")
    with pytest.raises(RuntimeError, match="device-side check"):
        linear_scan(a, bad, mode="triton")
    with pytest.raises(RuntimeError, match="device-side check"):          # |a| > 1 grows the state past float32
        linear_scan(torch.full((1, 300, 2), 2.0), torch.ones(1, 300, 2), mode="triton")
    monkeypatch.setenv(gateloop_module.CHECK_VALUES, "1")
    with pytest.raises(FloatingPointError, match="x"):
        linear_scan(a, bad, mode="triton")
