"""GateLoop's Triton kernels (chunked algorithm, forward and backward) in the CPU interpreter, over several
key / value tiles and on the small heads' elementwise path (their compilation for sm_80 / sm_90 and its
register use: test_triton_spills.py). Shapes are small: the interpreter runs one program at a time."""
import importlib

import pytest
import torch
from helpers import check

from seqlab.ops.gateloop import gateloop
from test_gateloop import make_inputs, reference, to64

pytest.importorskip("triton")


@pytest.fixture(autouse=True)
def chunked_kernels_for_every_head(monkeypatch):
    """Every head here runs on the chunked kernels, the small ones too (which ``gateloop`` otherwise sends to the
    scan: test_gateloop_triton_scan.py), so that the kernels' elementwise path stays checked."""
    kernels = importlib.import_module("seqlab.ops.gateloop.triton")
    monkeypatch.setattr(kernels, "SCAN_STATE", 0)
    assert not kernels.runs_on_scan(1, 1)


@pytest.mark.parametrize("L,dk,dv,kind", [(1, 1, 1, "complex"), (7, 3, 5, "complex"), (37, 2, 3, "real"),
                                          (40, 4, 2, "real_negative"), (35, 17, 3, "complex")])
def test_forward_matches_float64_recurrence(L, dk, dv, kind):
    q, k, v, a = make_inputs(2, 1, L, dk, dv, complex_=kind == "complex", negative=kind == "real_negative")
    ref, _ = reference(q, k, v, a)
    y = gateloop(q, k, v, a, mode="triton")
    assert y.dtype == (torch.complex64 if kind == "complex" else torch.float32)
    check(y, ref, 1e-5, f"triton forward L={L} {kind}")


@pytest.mark.parametrize("gates,kind", [("near_zero", "complex"), ("near_one", "complex"), ("big_keys", "complex"),
                                        ("near_zero", "real"), ("near_one", "real")])
def test_forward_extreme_gates(gates, kind):
    kw = {"near_zero": dict(mag=(1e-30, 1e-3)), "near_one": dict(mag=(1 - 1e-6, 1.0)),
          "big_keys": dict(key_scale=50.0)}[gates]
    q, k, v, a = make_inputs(1, 2, 33, 2, 2, complex_=kind == "complex", **kw)
    ref, _ = reference(q, k, v, a)
    check(gateloop(q, k, v, a, mode="triton"), ref, 1e-5, f"triton {gates} {kind}")


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


@pytest.mark.parametrize("dk,dv,kind", [(40, 20, "complex"), (33, 16, "real"), (20, 1, "real_negative"),
                                         (1, 24, "complex")])
def test_tiled_heads_forward_and_backward(dk, dv, kind):
    """Heads of several key / value tiles (ragged last tile), and heads under 16 on the elementwise path;
    real positive, real negative and complex transitions (the kernels' phase-free and phasor branches)."""
    q, k, v, a = make_inputs(1, 1, 19, dk, dv, complex_=kind == "complex", negative=kind == "real_negative")
    if kind == "real":
        a = a.abs()
    w = torch.randn(1, 1, 19, dv, dtype=torch.float64)

    def run(inputs, mode):
        inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
        y = gateloop(*inputs, mode=mode)
        (torch.view_as_real(y).double().sum(-1) * w if y.is_complex() else y.double() * w).sum().backward()
        return y, [t.grad for t in inputs]

    y_ref, ref = run([to64(t) for t in (q, k, v, a)], "recurrent")
    y, out = run([q, k, v, a], "triton")
    check(y, y_ref, 1e-5, f"triton y dk={dk} dv={dv} {kind}")
    for name, g, r in zip("qkva", out, ref):
        check(g, r, 1e-5, f"triton grad {name} dk={dk} dv={dv} {kind}")


@pytest.fixture
def tensor_core_chunks(monkeypatch):
    """The path of chunks of 64 for real inputs at tf32 / bf16, off by default (measured slower), switched on."""
    monkeypatch.setattr(importlib.import_module("seqlab.ops.gateloop.triton"), "TENSOR_CORE_CHUNKS", True)


@pytest.mark.parametrize("on", [False, True])
def test_blocks_stay_within_64_and_small_heads_are_not_padded(monkeypatch, on):
    """By default every head runs chunks of 16 at one configuration; with the tensor-core path on, real inputs
    of heads of 16 and more at tf32 / bf16 run chunks of 64 with tiles of 16 to 64."""
    from seqlab.ops.gateloop.triton import KERNELS, gateloop_blocks, gateloop_chunk, gateloop_configs

    monkeypatch.setattr(importlib.import_module("seqlab.ops.gateloop.triton"), "TENSOR_CORE_CHUNKS", on)
    for d in range(1, 257):
        BK, BV, DOT = gateloop_blocks(d, d)
        assert BK <= 64 and BV <= 64 and BK == BV
        assert DOT == (d >= 16)
        assert BK >= min(d, 16) and (DOT or BK < 2 * d)     # a small head is not padded to 16
        for precision in ("ieee", "tf32x3", "tf32", "bf16"):
            for cplx in (False, True):
                tensor_cores = on and DOT and not cplx and precision in ("tf32", "bf16")
                assert gateloop_chunk(d, d, precision, cplx) == (64 if tensor_cores else 16)
                for kernel in KERNELS:
                    configs = gateloop_configs(kernel, d, d, precision, cplx)
                    assert configs and all(16 <= c["BK"] <= 64 if tensor_cores else c["BK"] == BK for c in configs)
                    assert not tensor_cores or kernel == "chunk_dqk_kernel" or all(c["BK"] >= 32 for c in configs)


def test_chunks_of_64_on_tensor_cores_forward_and_backward(tensor_core_chunks):
    """Real inputs at precision "tf32" run in chunks of 64 with tiles of 32 (autotuning's first configuration,
    the one the interpreter runs; it computes tl.dot in float32 whatever the precision, so the float32 tolerance
    holds): L = 65, a whole chunk and one step; a state h0; a head (24 x 20) inside one ragged tile; gates from
    near-resets (1e-30) to 1, whose segment sums a chunk of 64 must keep exact."""
    from seqlab.ops.gateloop.triton import gateloop_triton

    L = 65
    q, k, v, a = make_inputs(1, 1, L, 24, 20, complex_=False, mag=(1e-30, 1.0))
    h0 = torch.randn(1, 1, 24, 20)
    w = torch.randn(1, 1, L, 20, dtype=torch.float64)

    def run(inputs, forward):
        inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
        y, S = forward(*inputs)
        ((y.double() * w).sum() + S.double().sum()).backward()
        return y, S, [t.grad for t in inputs]

    y_ref, S_ref, ref = run([to64(t) for t in (q, k, v, a, h0)],
                            lambda q, k, v, a, h0: gateloop(q, k, v, a, h0=h0, mode="recurrent", return_state=True))
    y, S, out = run([q, k, v, a, h0],
                    lambda q, k, v, a, h0: gateloop_triton(q, k, v, a, h0=h0, return_state=True, precision="tf32"))
    check(y, y_ref, 1e-5, f"chunks of 64: y L={L}")
    check(S, S_ref, 1e-5, f"chunks of 64: S_L L={L}")
    for name, g, r in zip(["q", "k", "v", "a", "h0"], out, ref):
        check(g, r, 1e-5, f"chunks of 64: grad {name} L={L}")


def test_bf16_products_are_bf16_accurate():
    """``precision="bf16"`` rounds the chunk products' operands to bfloat16 (8-bit mantissas: relative error
    ~2^-9 a product; the default ``"ieee"`` keeps float32's 1e-5, tested above at the same head size); tf32 /
    tf32x3 are tl.dot options the interpreter cannot show (``test_triton_spills.py`` checks that the compiled
    products carry them)."""
    from seqlab.ops.gateloop.triton import gateloop_triton
    from seqlab.ops import relative_error

    q, k, v, a = make_inputs(1, 1, 20, 16, 16, complex_=False)
    ref, _ = reference(q, k, v, a)
    err = relative_error(gateloop_triton(q, k, v, a, precision="bf16")[0], ref)
    assert 2 ** -12 < err < 2 ** -5, f"bf16 products: relative error {err:.2e}, not bfloat16's"


def test_precision_names_are_checked():
    from seqlab.ops.gateloop.triton import gateloop_triton

    q, k, v, a = make_inputs(1, 1, 3, 2, 2, complex_=False)
    with pytest.raises(ValueError, match="precision must be one of"):
        gateloop_triton(q, k, v, a, precision="fp16")
    with pytest.raises(ValueError, match="float64 / complex128 inputs always multiply in full"):
        gateloop_triton(q.double(), k.double(), v.double(), a.double(), precision="tf32")


def test_the_op_passes_its_precision_to_the_kernels(monkeypatch):
    """``gateloop(..., precision=)`` reaches the kernels' products; a name it does not know, or a lower precision
    for float64 inputs, is refused naming the argument."""
    kernels = importlib.import_module("seqlab.ops.gateloop.triton")
    seen = []
    real_apply = kernels._GateLoopTriton.apply
    monkeypatch.setattr(kernels._GateLoopTriton, "apply", lambda *args: seen.append(args[-1]) or real_apply(*args))
    q, k, v, a = make_inputs(1, 1, 5, 5, 4, complex_=False)
    a = a.abs()
    for precision in ("tf32", "ieee"):
        gateloop(q, k, v, a, mode="triton", precision=precision)
    assert seen == ["tf32", "ieee"]
    with pytest.raises(ValueError, match="precision: expected one of"):
        gateloop(q, k, v, a, mode="triton", precision="fp8")
    with pytest.raises(ValueError, match="float64"):
        gateloop(*(to64(t) for t in (q, k, v, a)), mode="triton", precision="tf32")


def test_autotuned_launches_time_every_configuration_and_run_the_pick(monkeypatch, tensor_core_chunks):
    """On a GPU, kernels with several configurations (chunks of 64, heads of 64: the attention and output kernels'
    tiles of 32 and 64) launch through ``triton.autotune``, which times each and runs the fastest. Here the
    interpreter takes that path with a stand-in for the GPU timer (it has none), which runs the configuration and
    ranks the last timed fastest: every configuration runs, and the pick (tiles of 64, whose launch writes the
    output last; the other tests run the first, tiles of 32) matches the float64 reference."""
    gl = importlib.import_module("seqlab.ops.gateloop.triton")
    timed, autotuned = [], gl._autotuned

    def with_stand_in_timer(kernel, configs):
        tuner = autotuned(kernel, configs)

        def bench(launch, quantiles=None, **_):
            launch()
            timed.append(kernel)
            return [1.0 / len(timed)] * 3

        tuner.__dict__["do_bench"] = bench
        return tuner

    autotuned.cache_clear()
    monkeypatch.setattr(gl, "_INTERPRETER", False)
    monkeypatch.setattr(gl, "_autotuned", with_stand_in_timer)
    try:
        q, k, v, a = make_inputs(1, 1, 20, 64, 64, complex_=False)
        ref, _ = reference(q, k, v, a)
        check(gl.gateloop_triton(q, k, v, a, precision="tf32")[0], ref, 1e-5, "autotuned launches")
    finally:
        autotuned.cache_clear()       # its tuners carry the stand-in timer
    assert timed == ["chunk_attention_kernel"] * 2 + ["chunk_output_kernel"] * 2


@pytest.mark.parametrize("L", [1, 17, 300])
def test_sign_products_on_the_scan_equal_cumprod(L):
    """The folded signs ``sigma_n = prod_{j<=n} sign a_j`` that the GPU path takes from the Triton scan are
    exactly torch's ``cumprod`` (products of +-1), at lengths that cut the scan's tiles raggedly."""
    from seqlab.ops.gateloop.triton import _sign_products

    sign = torch.where(torch.rand(2, 3, L, 5) < 0.4, -1.0, 1.0)
    on_scan = _sign_products(sign, on_scan=True)
    assert torch.equal(on_scan, torch.cumprod(sign, dim=-2))
    assert torch.equal(_sign_products(sign.double(), on_scan=True), torch.cumprod(sign.double(), dim=-2))
