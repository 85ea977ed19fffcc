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


def test_triton_several_channel_blocks(monkeypatch):
    """D = 20 over blocks of 8 channels: three programs per row, the last one masked."""
    from seqlab.ops.scan.triton import TritonLinearScan
    import seqlab.ops.scan.triton as ks

    a, x, h0 = _inputs("complex", 2, 33, 20, False, True)
    monkeypatch.setattr(ks, "block_d", lambda B, D: 8)
    ins = [_f32(t).requires_grad_() for t in (a, x, h0)]
    out = TritonLinearScan.apply(*ins, False)
    out.abs().square().sum().backward()
    refs = [t.clone().requires_grad_() for t in (a, x, h0)]
    ref = linear_scan_reference(*refs)
    ref.abs().square().sum().backward()
    check(out, ref, TOL, "h")
    for name, o, r in zip(["a", "x", "h0"], ins, refs):
        check(o.grad, r.grad, TOL, f"d{name}")


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 16 steps and 64 channels: L in {15, 16, 17, 100} and D in {17, 130} cross tile edges in time
    and in channels at interpreter speed (the GPU tiles are larger; the kernel's code is the same)."""
    import seqlab.ops.scan.triton as ks

    monkeypatch.setattr(ks, "block_t", lambda BD: 16)
    monkeypatch.setattr(ks, "block_d", lambda B, D: 64)


# (kind, L, D, reverse, with_h0, a's shape: "full", "batch" broadcast (1, L, D) or "time" invariant (D,))
TILE_EDGES = [
    ("real", 1, 130, False, False, "full"), ("complex", 1, 17, False, True, "full"),
    ("complex", 15, 17, True, True, "full"), ("real_a_complex_x", 16, 1, False, True, "time"),
    ("real", 16, 130, True, True, "time"), ("real", 17, 17, True, True, "batch"),
    ("complex", 17, 130, False, False, "time"), ("real", 100, 17, False, True, "full"),
    ("complex", 100, 1, True, True, "batch"), ("real_a_complex_x", 100, 130, True, False, "batch"),
]


@pytest.mark.parametrize("kind, L, D, reverse, with_h0, a_shape", TILE_EDGES, ids=str)
def test_triton_tiles_match_float64_loop_across_tile_edges(small_tiles, kind, L, D, reverse, with_h0, a_shape):
    """h, ∂a, ∂x, ∂h0 against the float64 loop, with gates near 0 and near 1 and a reset (see ``_inputs``)."""
    a, x, h0 = _inputs(kind, 2, L, D, a_shape == "time", with_h0)
    if a_shape == "batch":
        a = a[:1]
    g = _f32(torch.randn(x.shape, dtype=x.dtype)).to(x.dtype)

    def run(mode, cast):
        ins = [None if t is None else cast(t).detach().requires_grad_() for t in (a, x, h0)]
        out = linear_scan(ins[0], ins[1], ins[2], reverse=reverse, mode=mode)
        (out * cast(g).conj()).real.sum().backward()
        return [out] + [t.grad for t in ins if t is not None]

    ref = run("sequential", lambda t: t)
    got = run("triton", _f32)
    for name, o, r in zip(["h", "da", "dx", "dh0"], got, ref):
        check(o, r, TOL, f"tiled triton {name}")


def test_triton_gradcheck_float64_across_a_tile_edge(small_tiles):
    """Finite differences through two tiles (L = 17 over tiles of 16), both directions."""
    for kind, reverse in (("real", False), ("complex", True)):
        a, x, h0 = _inputs(kind, 1, 17, 3, False, True)
        a = (a * 0.9).requires_grad_()
        x, h0 = x.requires_grad_(), h0.requires_grad_()
        assert torch.autograd.gradcheck(lambda a_, x_, h_: linear_scan(a_, x_, h_, reverse=reverse, mode="triton"),
                                         (a, x, h0), eps=1e-6, atol=1e-7, fast_mode=True)


def test_triton_launch_plan_fills_an_h100_and_moves_each_element_once():
    """B = 8, D = 256, L = 16,384 (float32): at least one program per SM of an H100, at most L / BT tiles
    scanned one after another by a program, 12 bytes per element forward (a, x in; h out) and 20 backward
    (a, h, g in; ∂x, ∂a out). The plan is what the launches use; no GPU needed."""
    from seqlab.ops.scan.triton import launch_plan

    B, L, D = 8, 16384, 256
    for backward, most_bytes in ((False, 12), (True, 20)):
        plan = launch_plan(B, L, D, backward=backward)
        assert plan["programs"] >= 132, plan
        assert plan["grid"][1] * plan["BD"] >= D and plan["BT"] >= 16, plan
        assert plan["serial_steps"] <= L / plan["BT"], plan
        assert plan["bytes_per_element"] <= most_bytes, plan
    assert launch_plan(B, L, D, complex_=True)["bytes_per_element"] == 24  # two planes each


def test_triton_block_d_rule():
    """Wide blocks where the batch fills the GPU, narrow ones (down to 8 channels) where it does not; never
    wider than D needs."""
    from seqlab.ops.scan.triton import block_d

    assert block_d(1024, 256) == 128
    assert block_d(8, 256) == 8
    assert block_d(64, 256) == 64  # 64 rows * 4 blocks = 256 programs; 128 wide would give 128 < 132
    assert block_d(4, 1) == 1 and block_d(4, 5) == 8


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
               "BT": "constexpr", "BD": "constexpr", "COMPLEX_A": "constexpr", "COMPLEX_X": "constexpr", "HAS_H0": "constexpr",
               "REVERSE": "constexpr", "STATE_FP64": "constexpr"}
_CONST = {"BT": 16, "BD": 128, "COMPLEX_A": True, "COMPLEX_X": True, "HAS_H0": True, "REVERSE": False, "STATE_FP64": False}


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
