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


# at the tiles the launch plan picks for them, one tile each (the tile-edge cases below pin small tiles instead)
CASES = [  # (kind, (L, time_invariant, reverse, with_h0))
    ("complex", (1, False, False, True)), ("complex", (64, True, False, True)), ("complex", (100, False, True, True)),
    ("real", (128, False, False, False)), ("real_a_complex_x", (65, True, True, True)),
]


@pytest.mark.parametrize("kind, case", CASES, ids=str)
def test_triton_forward_and_backward_match_float64_loop(kind, case):
    L, ti, reverse, with_h0 = case
    B, D = 2, 20  # D = 20 over the plan's blocks of 8 channels: three programs per row, the last one masked
    a, x, h0 = _inputs(kind, B, L, D, ti, with_h0)
    _check_against_float64_loop(a, x, h0, reverse, f"{kind} {case}")


def _check_against_float64_loop(a, x, h0, reverse, label):
    """h and the gradients of a, x, h0 (a random float32-representable cotangent) of the Triton mode on float32
    copies against the float64 sequential loop."""
    g = _f32(torch.randn(x.shape, dtype=x.dtype)).to(x.dtype)

    def run(mode, cast):
        ins = [None if t is None else cast(t).detach().requires_grad_() for t in (a, x, h0)]
        out = linear_scan(ins[0], ins[1], ins[2], reverse=reverse, mode=mode)
        (out * cast(g).conj()).real.sum().backward()
        return [out] + [t.grad for t in ins if t is not None]

    ref = run("sequential", lambda t: t)
    got = run("triton", _f32)
    for name, o, r in zip(["h", "da", "dx", "dh0"], got, ref):
        check(o, r, TOL, f"triton {name} {label}")


def _pin_tiles(monkeypatch, chunk_tiles=None):
    """Tiles of 16 steps and 64 channels, so that L in {15, 16, 17, 100} and D in {17, 130} cross tile edges in
    time and in channels at interpreter speed (the GPU's tiles are larger; the kernels' code is the same), and
    ``chunk_tiles`` tiles a chunk: reduce-then-scan whenever that cuts L into two chunks or more (``None``: the
    one-pass plan, whatever the shape)."""
    import seqlab.ops.scan.triton as ks

    monkeypatch.setattr(ks, "block_t", lambda BD, L: 16)
    monkeypatch.setattr(ks, "block_d", lambda B, D: 64)
    monkeypatch.setattr(ks, "chunk_tiles", lambda programs, tiles: chunk_tiles or tiles)


# (kind, L, D, reverse, with_h0, a's shape: "full", "batch" broadcast (1, L, D) or "time" invariant (D,),
#  tiles a chunk: None for one pass, 1 or 2 for reduce-then-scan; L = 17 and 100 then make 2, 4 or 7 chunks)
TILE_EDGES = [
    ("real", 1, 130, False, False, "full", None), ("complex", 1, 17, False, True, "full", None),
    ("complex", 15, 17, True, True, "full", None), ("real_a_complex_x", 16, 1, False, True, "time", None),
    ("real", 16, 130, True, True, "time", None), ("real", 17, 17, True, True, "batch", None),
    ("complex", 17, 130, False, False, "time", None), ("real", 100, 17, False, True, "full", None),
    ("real", 17, 130, False, True, "full", 1), ("complex", 17, 1, True, False, "time", 1),
    ("real", 100, 1, True, False, "batch", 2), ("real_a_complex_x", 100, 17, True, True, "batch", 2),
    ("complex", 100, 17, False, True, "full", 2),
]


@pytest.mark.parametrize("kind, L, D, reverse, with_h0, a_shape, chunk_tiles", TILE_EDGES, ids=str)
def test_triton_tiles_match_float64_loop_across_tile_edges(monkeypatch, kind, L, D, reverse, with_h0, a_shape,
                                                           chunk_tiles):
    """h, ∂a, ∂x, ∂h0 against the float64 loop, with gates near 0 and near 1 and a reset (see ``_inputs``)."""
    _pin_tiles(monkeypatch, chunk_tiles)
    a, x, h0 = _inputs(kind, 2, L, D, a_shape == "time", with_h0)
    if a_shape == "batch":
        a = a[:1]
    _check_against_float64_loop(a, x, h0, reverse, f"tiled {kind} L={L} D={D}")


@pytest.mark.parametrize("kind, reverse, chunk_tiles", [("complex", True, None), ("real", False, 1)], ids=str)
def test_triton_gradcheck_float64_across_a_tile_edge(monkeypatch, kind, reverse, chunk_tiles):
    """Finite differences through two tiles (L = 17 over tiles of 16): complex in one pass in reverse, real
    by reduce-then-scan (two chunks) forward; state in float64."""
    _pin_tiles(monkeypatch, chunk_tiles)
    a, x, h0 = _inputs(kind, 1, 17, 3, False, True)
    a = (a * 0.9).requires_grad_()  # away from the |a| = 0 and 1 edges of finite differences
    x, h0 = x.requires_grad_(), h0.requires_grad_()
    assert torch.autograd.gradcheck(lambda a_, x_, h_: linear_scan(a_, x_, h_, reverse=reverse, mode="triton"),
                                     (a, x, h0), eps=1e-6, atol=1e-7, fast_mode=True)


def test_triton_launch_plan_fills_an_h100_and_moves_each_element_once():
    """B = 8, D = 256, L = 16,384 (float32): one pass of at least one program per SM of an H100, at most L / BT
    tiles scanned one after another by a program, 12 bytes per element forward (a, x in; h out) and 20 backward
    (a, h, g in; ∂x, ∂a out). A batch of one takes reduce-then-scan: as many programs from chunks of time, at most
    half the serial tiles, a and x (g) read twice. The plan is what the launches use; no GPU needed."""
    from seqlab.ops.scan.triton import launch_plan

    L, D = 16384, 256
    for B, forward, backward in ((8, 12, 20), (1, 20.1, 28.1)):
        for backward_, most_bytes in ((False, forward), (True, backward)):
            plan = launch_plan(B, L, D, backward=backward_)
            assert plan["programs"] >= 132, plan
            assert plan["grid"][1] * plan["BD"] >= D and plan["chunks"] * plan["chunk"] >= L, plan
            assert plan["serial_steps"] <= L / plan["BT"] / (1 if B == 8 else 2), plan
            assert plan["bytes_per_element"] <= most_bytes, plan
        assert (plan["chunks"] > 1) == (B == 1), plan
    assert launch_plan(8, L, D, complex_=True)["bytes_per_element"] == 24  # two planes each


def test_triton_block_rules():
    """Wide blocks (up to 64 channels) where the batch fills the GPU, narrow ones (down to 8) where it does not,
    never wider than D needs; tiles of 1024 elements, no longer than L needs; chunks only where the programs are
    too few and L long enough for two chunks of 4 tiles."""
    from seqlab.ops.scan.triton import block_d, block_t, chunk_tiles

    assert block_d(1024, 256) == 64
    assert block_d(8, 256) == 8
    assert block_d(32, 256) == 32  # 32 rows * 8 blocks = 256 programs; 64 wide would give 128 < 132
    assert block_d(4, 1) == 1 and block_d(4, 5) == 8
    assert (block_t(8, 16384), block_t(64, 16384), block_t(16, 20), block_t(64, 1)) == (128, 16, 32, 16)
    assert chunk_tiles(132, 64) == 64 and chunk_tiles(32, 7) == 7  # enough programs; too short to cut
    assert chunk_tiles(32, 64) == 12 and chunk_tiles(1, 64) == 4  # 32 * cdiv(64, 12) = 192; at least 4 tiles


@pytest.mark.parametrize("kind", ["complex"])
def test_interpreter_scan_by_slices_is_bit_for_bit_tritons_own(monkeypatch, kind):
    """``seqlab.kernels.interpreter`` scans by slices in the interpreter; the scan kernels forward and backward,
    on random complex planes too, give the very same bits with Triton's own element-by-element scan."""
    import triton.runtime.interpreter as ti

    from seqlab.kernels import interpreter

    assert interpreter.vectorize_scan(), "not installed: check scan_by_slices against this Triton's generic_scan"
    _pin_tiles(monkeypatch, 1)  # reduce-then-scan: all three scan kernels
    monkeypatch.setattr("seqlab.ops.scan.triton.block_d", lambda B, D: 8)  # Triton's own scan: BT x BD calls
    a, x, h0 = (_f32(t) for t in _inputs(kind, 1, 33, 5, False, True))
    g = torch.randn(x.shape, dtype=x.dtype)

    def run():
        ins = [t.clone().requires_grad_() for t in (a, x, h0)]
        out = linear_scan(*ins, reverse=True, mode="triton")
        (out * g.conj()).real.sum().backward()
        return [torch.view_as_real(t) if t.is_complex() else t for t in [out] + [t.grad for t in ins]]

    by_slices = run()
    monkeypatch.setattr(ti.ScanOps, "generic_scan", interpreter.triton_generic_scan)
    own = run()
    assert ti.ScanOps.generic_scan is interpreter.triton_generic_scan, "the op put the scan by slices back"
    for name, s, o in zip(["h", "da", "dx", "dh0"], by_slices, own):
        assert torch.equal(s, o), f"{name}: scan by slices differs from Triton's own scan"


def test_interpreter_scan_leaves_other_triton_internals_alone():
    """Where ``ScanOps.generic_scan`` is not the source it was checked against, nothing is installed."""
    from seqlab.kernels import interpreter

    class OtherScanOps:
        def generic_scan(self, input):
            return input

        def apply_impl(self, input):
            return self.generic_scan(input)

    own = OtherScanOps.generic_scan
    assert not interpreter.vectorize_scan(OtherScanOps)
    assert OtherScanOps.generic_scan is own


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
    """The kernel wrapper refuses float16 (the op hands it over as float32, see test_op_contract) and a complex
    ``a`` with a real ``x`` (the kernels would read an imaginary plane of x that is not there)."""
    from seqlab.ops.scan.triton import triton_linear_scan

    with pytest.raises(TypeError, match="dtype must be one of"):
        triton_linear_scan(torch.rand(1, 1, 4, dtype=torch.float16), torch.rand(2, 3, 4, dtype=torch.float16), None)
    with pytest.raises(TypeError, match="complex a .* needs a complex x"):  # the op says so before it gets here
        triton_linear_scan(torch.rand(1, 1, 4, dtype=torch.complex64), torch.rand(2, 3, 4), None)


_SIZES = {"L": "i32", "D": "i32", "CHUNK": "i32", "stride_ab": "i32", "stride_al": "i32", "stride_ad": "i32",
          "stride_xb": "i32", "stride_xl": "i32", "stride_xd": "i32"}
_CONST = {"BT": 16, "BD": 64, "COMPLEX_A": True, "COMPLEX_X": True, "STATE_FP64": False}


def _signature(kernel, io):
    """Every argument of ``kernel`` typed: pointers ``*io``, but float32 for ``a``, ``∂a`` and ``h0`` (decays
    and initial states kept in float32 beside a bfloat16 ``x``) and for the chunks' pairs and start states (the
    state's precision); sizes and strides ``i32``."""
    import inspect

    from seqlab.ops.scan import triton as ks

    sig = {}
    for p in inspect.signature(getattr(ks, kernel).fn).parameters.values():  # the interpreter's kernel, too
        if "constexpr" in str(p.annotation):
            sig[p.name] = "constexpr"
        elif p.name.startswith("stride") or p.name in _SIZES:
            sig[p.name] = "i32"
        elif p.name.startswith(("a_", "da_", "h0_", "c0_", "ca_", "cx_")):
            sig[p.name] = "*fp32"
        else:
            sig[p.name] = f"*{io}"
    return sig


# bf16 in and out with the float32 state, complex planes, an initial state: the widest branch of each kernel
# (every kernel is compiled in float32 at the plan's tiles by tests/ops/test_triton_spills.py)
AOT_JOBS = {
    "forward": [("linear_scan_fwd_kernel", dict(HAS_H0=True, REVERSE=False), 80),
                ("linear_scan_chunk_kernel", dict(GRAD=False, REVERSE=True), 90)],
    "backward": [("linear_scan_bwd_kernel", dict(HAS_H0=True, HAS_C0=True, REVERSE=True), 80),
                 ("linear_scan_chunk_kernel", dict(GRAD=True, REVERSE=False), 90)],
}


class TestAOTForward:  # one class per direction: pytest-xdist --dist loadscope runs the two on different workers
    @pytest.mark.parametrize("kernel, constexprs, capability", AOT_JOBS["forward"], ids=str)
    def test_forward_kernels_compile(self, kernel, constexprs, capability):
        from seqlab.kernels.aot import compile_for

        out = compile_for("seqlab.ops.scan.triton", kernel, _signature(kernel, "bf16"), {**_CONST, **constexprs},
                          capability=capability)
        assert "ptx" in out["asm"] and out["ptx_chars"] > 0


class TestAOTBackward:
    @pytest.mark.parametrize("kernel, constexprs, capability", AOT_JOBS["backward"], ids=str)
    def test_backward_kernels_compile(self, kernel, constexprs, capability):
        from seqlab.kernels.aot import compile_for

        out = compile_for("seqlab.ops.scan.triton", kernel, _signature(kernel, "bf16"), {**_CONST, **constexprs},
                          capability=capability)
        assert "ptx" in out["asm"] and out["ptx_chars"] > 0
