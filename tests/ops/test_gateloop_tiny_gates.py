"""GateLoop's Triton kernels (chunks of 16, and chunks of 64 by sub-chunks of 16) with complex transitions of tiny
magnitude, ``|a|`` from 1e-30 to 1e-20, in the CPU interpreter: ``y``, ``S_L`` and the gradients of q, k, v, a and
h0 against the float64 recurrence (eq. 7-8), finite. ``a`` enters the kernels as ``(log|a|, arg a)``; the gradient of
``a`` is that of ``log a``, ``(g_log + i g_arg) / conj(a)`` (of order 1 here: ``S_n`` is linear in ``a_n``), where
torch's ``angle`` backward divides by ``|a|^2``, which underflows in complex64 below ``|a|`` of about 1e-19. Ordinary
transitions give the same forward, bit for bit, and the same gradients up to float rounding as that expression."""
import importlib

import pytest
import torch
from helpers import check

from seqlab.ops import relative_error
from seqlab.ops.gateloop import gateloop
from test_gateloop import make_inputs, to64

pytest.importorskip("triton")

gl = importlib.import_module("seqlab.ops.gateloop.triton")


def run(inputs, mode, w, w_S):
    """``y``, ``S_L`` and the gradients of a fixed real loss of both, by ``mode``."""
    inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
    y, S = gateloop(*inputs[:4], h0=inputs[4], mode=mode, return_state=True)
    loss = (y.real.double() * w).sum() + (S.real.double() * w_S).sum()
    loss = loss + (y.imag.double() * w.flip(-2)).sum() + (S.imag.double() * w_S.flip(-1)).sum()
    loss.backward()
    return y, S, [t.grad for t in inputs]


def tiny_inputs(L, dk, dv, dtype, mag=(1e-30, 1e-20), ordinary_half=False):
    q, k, v, a = make_inputs(1, 2, L, dk, dv, complex_=True, mag=mag)
    if ordinary_half:       # the second half of the key channels ordinary (|a| in [1e-3, 1]), the first tiny
        a[..., dk // 2:] = make_inputs(1, 2, L, dk, dv, complex_=True)[3][..., dk // 2:]
    h0 = torch.randn(1, 2, dk, dv, dtype=torch.complex64)
    return [t.to(dtype) for t in (q, k, v, a, h0)]


@pytest.fixture(params=[False, True], ids=["chunks", "subchunks"])
def path(request, monkeypatch):
    """The default path (chunks of 16) and the sub-chunk one (chunks of 64 by sub-chunks of 16, off by default)."""
    monkeypatch.setattr(gl, "SUBCHUNKS", request.param)
    return request.param


# The fast tier runs complex64, whose float32 planes are the ones that underflow; complex128 runs in the full run.
SLOW = pytest.mark.slow


@pytest.mark.parametrize("dtype", [torch.complex64, pytest.param(torch.complex128, marks=SLOW)],
                         ids=["complex64", "complex128"])
@pytest.mark.parametrize("L,dk,dv,ordinary_half", [(37, 3, 7, False), (19, 16, 16, True)])
def test_tiny_complex_gates_have_finite_gradients_matching_float64_recurrence(path, dtype, L, dk, dv, ordinary_half):
    torch.manual_seed(L + dk)
    inputs = tiny_inputs(L, dk, dv, dtype, ordinary_half=ordinary_half)
    assert inputs[3].abs().max() <= (1.0 if ordinary_half else 1e-20)
    w = torch.randn(1, 2, L, dv, dtype=torch.float64)
    w_S = torch.randn(1, 2, dk, dv, dtype=torch.float64)
    y_ref, S_ref, ref = run([to64(t) for t in inputs], "recurrent", w, w_S)
    y, S, out = run(inputs, "triton", w, w_S)
    what = f"|a| 1e-30..1e-20 {dtype} dk={dk} dv={dv} {'sub-chunks' if path else 'chunks'}"
    check(y, y_ref, 1e-5, f"{what}: y")
    check(S, S_ref, 1e-5, f"{what}: S_L")
    for name, g, r in zip(["q", "k", "v", "a", "h0"], out, ref):
        check(g, r, 1e-5, f"{what}: grad {name}")       # check asserts finite values first
    assert ref[3].abs().max() > 1e-2        # the gradient of a is of order 1, not a vanishing one


def _old_log_polar(a, real):
    """``(log|a|, arg a)`` as torch's own expressions (their backward divides by ``|a|^2``)."""
    return a.abs().to(real).clamp_min(torch.finfo(real).tiny).log(), torch.angle(a).to(real)


@pytest.mark.parametrize("dk,dv,dtype", [(3, 7, torch.complex64), pytest.param(3, 7, torch.complex128, marks=SLOW),
                                         pytest.param(16, 16, torch.complex64, marks=SLOW)],
                         ids=["3-7-complex64", "3-7-complex128", "16-16-complex64"])
def test_ordinary_gates_unchanged(path, dtype, dk, dv):
    """Ordinary complex gates (``|a|`` in [1e-3, 1], an exact 0 among them): the same ``log|a|`` and ``arg a`` and
    the same kernels' output bit for bit as torch's expressions, and the same gradients up to float rounding."""
    torch.manual_seed(dk)
    q, k, v, a, h0 = tiny_inputs(23, dk, dv, dtype, mag=(1e-3, 1.0))
    a[0, 1, 5, 0] = 0
    real = gl._real_dtype(dtype)
    w = torch.randn(1, 2, 23, dv, dtype=torch.float64)

    def forward(log_polar):
        inputs = [t.detach().clone().requires_grad_(True) for t in (q, k, v, a, h0)]
        la, ph = log_polar(inputs[3], real)
        y, S = gl.gateloop_triton_log(*inputs[:3], la, ph, h0=inputs[4], return_state=True)
        loss = (y.real.double() * w).sum() + (y.imag.double() * w.flip(-2)).sum() + S.real.double().sum()
        loss.backward()
        return (la, ph, y, S), [t.grad for t in inputs]

    new, new_grads = forward(gl._LogPolar.apply)
    old, old_grads = forward(_old_log_polar)
    for name, n, o in zip(["log|a|", "arg a", "y", "S_L"], new, old):
        assert torch.equal(n, o), f"{name} changed"
    eps = torch.finfo(real).eps
    for name, n, o in zip(["q", "k", "v", "a", "h0"], new_grads, old_grads):
        assert torch.isfinite(torch.view_as_real(n)).all(), f"grad {name}: non-finite"
        assert relative_error(n, o) < 16 * eps, f"grad {name}: {relative_error(n, o):.3e} from torch's expressions"
    assert new_grads[3][0, 1, 5, 0] == 0 == old_grads[3][0, 1, 5, 0]      # an exact 0: gradient 0, as before
