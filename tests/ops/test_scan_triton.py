"""``linear_scan(mode="triton")`` in Triton's CPU interpreter (small shapes), and AOT compilation for sm_80/sm_90."""
import pytest
import torch
from helpers import check

from seqlab.kernels import HAVE_TRITON
from seqlab.ops import linear_scan, linear_scan_reference

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="Triton ships for Linux only")

TOL = 1e-5


def _f32(t):
    return None if t is None else t.to(torch.complex64 if t.is_complex() else torch.float32)


def _inputs(kind, B, L, D, time_invariant, with_h0):
    shape = (D,) if time_invariant else (B, L, D)
    mod = torch.rand(shape).double()
    mod[..., 0::3] = 1 - 1e-3 * mod[..., 0::3]  # |a| near 1
    mod[..., 1::3] = 1e-3 * mod[..., 1::3]  # |a| near 0
    if not time_invariant and L > 2:
        mod[:, L // 2] = 0  # reset
    a = torch.polar(mod, 6.28 * torch.rand(shape).double()) if kind == "complex" else mod
    dt = torch.float64 if kind == "real" else torch.complex128
    x = torch.randn(B, L, D).to(dt) if kind == "real" else torch.randn(B, L, D, dtype=torch.complex64).to(dt)
    h0 = torch.randn(B, D, dtype=torch.complex64 if kind != "real" else torch.float32).to(dt) if with_h0 else None
    a = _f32(a).to(a.dtype)  # float32-exact values (see tests/ops/test_scan.py)
    return a, x, h0


KINDS = ["real", "real_a_complex_x", "complex"]
SHORT = [(1, False, False, True), (2, True, True, False), (7, False, True, True), (64, True, False, True)]
CASES = [(k, c) for k in KINDS for c in SHORT] + [  # (kind, (L, time_invariant, reverse, with_h0))
    ("real", (128, False, False, False)), ("complex", (100, False, True, True)), ("real_a_complex_x", (65, True, True, True)),
]


@pytest.mark.parametrize("kind, case", CASES, ids=str)
def test_triton_forward_and_backward_match_float64_loop(kind, case):
    L, ti, reverse, with_h0 = case
    B, D = 2, 20  # D = 20 < BLOCK_D = 32: masked channels
    a, x, h0 = _inputs(kind, B, L, D, ti, with_h0)
    g = _f32(torch.randn(x.shape, dtype=x.dtype)).to(x.dtype)

    def run(mode, cast):
        ins = [None if t is None else cast(t).detach().requires_grad_() for t in (a, x, h0)]
        out = linear_scan(ins[0], ins[1], ins[2], reverse=reverse, mode=mode)
        (out * cast(g).conj()).real.sum().backward()
        return [out] + [t.grad for t in ins if t is not None]

    ref = run("sequential", lambda t: t)
    got = run("triton", _f32)
    for name, o, r in zip(["h", "da", "dx", "dh0"], got, ref):
        check(o, r, TOL, f"triton {name} {kind} {case}")


def test_triton_several_channel_blocks():
    """D = 20 over blocks of 8 channels: three programs per row, the last one masked."""
    from seqlab.ops.scan.triton import TritonLinearScan
    import seqlab.ops.scan.triton as ks

    a, x, h0 = _inputs("complex", 2, 33, 20, False, True)
    orig = ks.block_d
    ks.block_d = lambda D: 8
    try:
        ins = [_f32(t).requires_grad_() for t in (a, x, h0)]
        out = TritonLinearScan.apply(*ins, False)
        out.abs().square().sum().backward()
    finally:
        ks.block_d = orig
    refs = [t.clone().requires_grad_() for t in (a, x, h0)]
    ref = linear_scan_reference(*refs)
    ref.abs().square().sum().backward()
    check(out, ref, TOL, "h")
    for name, o, r in zip(["a", "x", "h0"], ins, refs):
        check(o.grad, r.grad, TOL, f"d{name}")


def test_triton_gradcheck_float64():
    """Finite differences against the backward kernel, in float64 (state in float64 too)."""
    for kind in ("real", "complex"):
        a, x, h0 = _inputs(kind, 1, 4, 2, False, True)
        a = (a * 0.9).requires_grad_()  # away from the |a| = 0 and 1 edges of finite differences
        x, h0 = x.requires_grad_(), h0.requires_grad_()
        assert torch.autograd.gradcheck(lambda a_, x_, h_: linear_scan(a_, x_, h_, mode="triton"), (a, x, h0),
                                         eps=1e-6, atol=1e-7, fast_mode=True)


def test_triton_bfloat16_inputs_keep_a_float32_state():
    a, x, _ = _inputs("real", 2, 128, 16, False, False)
    a = a.abs() * 0.5 + 0.5
    ab, xb = a.bfloat16(), x.bfloat16()
    ref = linear_scan_reference(ab.double(), xb.double())  # exact scan of the rounded inputs
    out = linear_scan(ab, xb, mode="triton")
    assert out.dtype == torch.bfloat16
    check(out, ref, 2 ** -8, "bf16 triton (one output rounding)")
    ab.requires_grad_()
    xb.requires_grad_()
    linear_scan(ab, xb, mode="triton").float().sum().backward()
    refs = [t.detach().double().requires_grad_() for t in (ab, xb)]
    linear_scan_reference(*refs).sum().backward()
    check(xb.grad, refs[1].grad, 2 ** -7, "bf16 dx")
    check(ab.grad, refs[0].grad, 2 ** -6, "bf16 da (uses the bf16-stored h)")


def test_triton_bfloat16_x_with_float32_decays():
    """Decays kept in float32 with a bfloat16 x: the kernel reads a in float32; blocked agrees."""
    a, x, _ = _inputs("real", 2, 64, 8, False, False)
    a = (a.abs() * 0.5 + 0.5).float()
    xb = x.bfloat16()
    ref = linear_scan_reference(a.double(), xb.double())
    for mode in ("triton", "blocked"):
        ins = [a.clone().requires_grad_(), xb.clone().requires_grad_()]
        out = linear_scan(*ins, mode=mode)
        assert out.dtype == torch.bfloat16
        check(out, ref, 2 ** -8, f"{mode} bf16 x, fp32 a")
        out.float().sum().backward()
        assert ins[0].grad.dtype == torch.float32 and ins[1].grad.dtype == torch.bfloat16


def test_triton_rejects_unsupported_dtype():
    """The kernel wrapper refuses float16 (the op hands it over as float32, see test_op_contract)."""
    from seqlab.ops.scan.triton import triton_linear_scan

    with pytest.raises(TypeError, match="dtype must be one of"):
        triton_linear_scan(torch.rand(1, 1, 4, dtype=torch.float16), torch.rand(2, 3, 4, dtype=torch.float16), None)


_SIG_COMMON = {"L": "i32", "D": "i32", "stride_ab": "i32", "stride_al": "i32", "stride_ad": "i32",
               "stride_xb": "i32", "stride_xl": "i32", "stride_xd": "i32", "stride_h0b": "i32", "stride_h0d": "i32",
               "BLOCK_D": "constexpr", "COMPLEX_A": "constexpr", "COMPLEX_X": "constexpr", "HAS_H0": "constexpr",
               "REVERSE": "constexpr", "STATE_FP64": "constexpr"}
_CONST = {"BLOCK_D": 128, "COMPLEX_A": True, "COMPLEX_X": True, "HAS_H0": True, "REVERSE": False, "STATE_FP64": False}


def _fwd_signature(io):
    ptrs = ["a_re_ptr", "a_im_ptr", "x_re_ptr", "x_im_ptr", "h0_re_ptr", "h0_im_ptr", "h_re_ptr", "h_im_ptr"]
    sig = {p: f"*{io}" for p in ptrs}
    sig.update(a_re_ptr="*fp32", a_im_ptr="*fp32")  # decays kept in float32 with a bf16 x
    return {**sig, **_SIG_COMMON}


def _bwd_signature(io):
    ptrs = ["a_re_ptr", "a_im_ptr", "h_re_ptr", "h_im_ptr", "h0_re_ptr", "h0_im_ptr", "g_re_ptr", "g_im_ptr",
            "dx_re_ptr", "dx_im_ptr", "da_re_ptr", "da_im_ptr"]
    return {**{p: f"*{io}" for p in ptrs}, **_SIG_COMMON}


class TestAOTForward:  # one class per kernel: pytest-xdist --dist loadscope runs the two on different workers
    @pytest.mark.parametrize("capability", [80, 90])
    def test_forward_kernel_compiles(self, capability):
        from seqlab.kernels.aot import compile_for

        # bf16 in/out with the float32 state, complex planes, h0: the widest branch of the kernel
        out = compile_for("seqlab.ops.scan.triton", "linear_scan_fwd_kernel", _fwd_signature("bf16"),
                          {**_CONST, "REVERSE": capability == 90}, capability=capability)
        assert "ptx" in out["asm"] and out["ptx_chars"] > 0


class TestAOTBackward:
    @pytest.mark.parametrize("capability", [80, 90])
    def test_backward_kernel_compiles(self, capability):
        from seqlab.kernels.aot import compile_for

        out = compile_for("seqlab.ops.scan.triton", "linear_scan_bwd_kernel", _bwd_signature("fp32"),
                          {**_CONST, "REVERSE": capability == 80}, capability=capability)
        assert "ptx" in out["asm"] and out["ptx_chars"] > 0
