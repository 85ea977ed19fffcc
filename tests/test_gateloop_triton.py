"""GateLoop's Triton kernels (chunked algorithm, forward and backward) in the CPU interpreter, and
their ahead-of-time compilation for sm_80 / sm_90."""
import pytest
import torch
from conftest import check

from seqlab.ops.gateloop import gateloop
from test_gateloop import make_inputs, reference, to64

pytest.importorskip("triton")


@pytest.mark.parametrize("L,dk,dv,kind", [(1, 1, 1, "complex"), (7, 3, 5, "complex"), (37, 2, 3, "real"),
                                          (40, 4, 2, "real_negative"), (50, 17, 3, "complex")])
def test_forward_matches_float64_recurrence(L, dk, dv, kind):
    q, k, v, a = make_inputs(2, 2, L, dk, dv, complex_=kind == "complex", negative=kind == "real_negative")
    ref, _ = reference(q, k, v, a)
    y = gateloop(q, k, v, a, mode="triton")
    assert y.dtype == (torch.complex64 if kind == "complex" else torch.float32)
    check(y, ref, 1e-5, f"triton forward L={L} {kind}")


@pytest.mark.parametrize("gates", ["near_zero", "near_one", "big_keys"])
def test_forward_extreme_gates(gates):
    kw = {"near_zero": dict(mag=(1e-30, 1e-3)), "near_one": dict(mag=(1 - 1e-6, 1.0)),
          "big_keys": dict(key_scale=50.0)}[gates]
    q, k, v, a = make_inputs(1, 2, 33, 2, 2, **kw)
    ref, _ = reference(q, k, v, a)
    check(gateloop(q, k, v, a, mode="triton"), ref, 1e-5, f"triton {gates}")


@pytest.mark.parametrize("kind", ["complex", "real"])
def test_backward_with_state_matches_float64_recurrence(kind):
    q, k, v, a = make_inputs(1, 2, 37, 3, 2, complex_=kind == "complex")
    h0 = torch.randn(1, 2, 3, 2, dtype=q.dtype)
    w = torch.randn(1, 2, 37, 2, dtype=torch.float64)
    w_S = torch.randn(1, 2, 3, 2, dtype=torch.float64)

    def run(inputs, mode):
        inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
        y, S = gateloop(*inputs[:4], h0=inputs[4], mode=mode, return_state=True)
        loss = (y.real.double() * w).sum() + (S.real.double() * w_S).sum()
        if y.is_complex():
            loss = loss + (y.imag.double() * w.flip(-2)).sum() + (S.imag.double() * w_S).sum()
        loss.backward()
        return y, S, [t.grad for t in inputs]

    y_ref, S_ref, ref = run([to64(t) for t in (q, k, v, a, h0)], "recurrent")
    y, S, out = run([q, k, v, a, h0], "triton")
    check(y, y_ref, 1e-5, f"triton y with h0 ({kind})")
    check(S, S_ref, 1e-5, f"triton final state ({kind})")
    for name, g, r in zip(["q", "k", "v", "a", "h0"], out, ref):
        check(g, r, 1e-5, f"triton grad {name} ({kind})")


@pytest.mark.parametrize("kernel,capability", [("gateloop_fwd_kernel", 80), ("gateloop_bwd_kernel", 90)])
def test_kernels_compile_for_gpu(kernel, capability):
    from seqlab.kernels.aot import compile_for

    names = "q_re q_im k_re k_im v_re v_im la ph".split()
    names += "h0_re h0_im y_re y_im sL_re sL_im".split() if "fwd" in kernel else \
        "h0_re h0_im g_re g_im gS_re gS_im dq_re dq_im dk_re dk_im dv_re dv_im dl_re dl_im dh0_re dh0_im st_re st_im".split()
    signature = {n: "*fp32" for n in names}
    signature.update(L="i32", DK="i32", DV="i32", C="constexpr", BK="constexpr", BV="constexpr")
    out = compile_for("seqlab.ops.gateloop.triton", kernel, signature, {"C": 16, "BK": 16, "BV": 16}, capability=capability)
    assert "ptx" in out["asm"] and out["ptx_chars"] > 1000
