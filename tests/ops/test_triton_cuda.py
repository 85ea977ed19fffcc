"""On a CUDA GPU (``-m cuda``, run by ``python3 workbench.py gpu-check``; skipped elsewhere): the compiled
Triton kernels, forward and backward, against float64 references at sizes the interpreter cannot reach:
GateLoop's chunked kernels at the head sizes ``auto`` tiles differently (1, 16, 64, 128), ragged lengths,
complex and real transitions, bfloat16 inputs; the causal decays and linear attention on them; the scan."""
import pytest
import torch

from helpers import check
from seqlab.ops import decay_attention, decay_attention_reference, gateloop, linear_scan, linear_scan_reference

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
DEV = "cuda"


def _grads(fn, inputs, weight):
    inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*inputs)
    (torch.view_as_real(out).sum(-1) if out.is_complex() else out).mul(weight).sum().backward()
    return out.detach(), [t.grad for t in inputs]


@pytest.mark.parametrize("d", [1, 16, 64, 128])
@pytest.mark.parametrize("kind", ["complex", "real"])
def test_gateloop_kernels_at_every_tiling(d, kind):
    g = torch.Generator(device=DEV).manual_seed(d)
    B, H, L = 1, 2, 1000                                             # 1000: a ragged last chunk
    shape = (B, H, L, d)
    q, k, v = (torch.randn(shape, device=DEV, generator=g) for _ in range(3))
    mag = torch.rand(shape, device=DEV, generator=g) * 0.2 + 0.8
    if kind == "complex":
        q, k = torch.complex(q, torch.randn_like(q)), torch.complex(k, torch.randn_like(k))
        a = torch.polar(mag, torch.rand(shape, device=DEV, generator=g) * 6.28 - 3.14)
    else:
        a = mag
    weight = torch.randn(B, H, L, d, device=DEV, dtype=torch.float64, generator=g)
    y, grads = _grads(lambda *t: gateloop(*t, mode="triton"), [q, k, v, a], weight.float())
    to64 = (lambda t: t.to(torch.complex128 if t.is_complex() else torch.float64))
    y_ref, refs = _grads(lambda *t: gateloop(*t, mode="associative"), [to64(t) for t in (q, k, v, a)], weight)
    check(y, y_ref, 1e-4, f"triton y d={d} {kind}")
    for name, got, want in zip("qkva", grads, refs):
        check(got, want, 1e-4, f"triton d{name} d={d} {kind}")


def test_gateloop_bfloat16_inputs():
    g = torch.Generator(device=DEV).manual_seed(0)
    q, k, v = (torch.randn(2, 4, 512, 64, device=DEV, generator=g) for _ in range(3))
    a = torch.rand(2, 4, 512, 64, device=DEV, generator=g) * 0.1 + 0.9
    y = gateloop(*(t.bfloat16() for t in (q, k, v, a)), mode="triton")
    ref = gateloop(*(t.bfloat16().double() for t in (q, k, v, a)), mode="associative")
    assert y.dtype == torch.bfloat16
    check(y.double(), ref, 2e-2, "bf16 inputs, float32 kernels")


@pytest.mark.parametrize("decay", ["additive", "multiplicative", "none"])
def test_causal_decays_on_the_kernels_with_keys_of_80(decay):
    g = torch.Generator(device=DEV).manual_seed(1)
    q, v = (torch.randn(1, 2, 300, 32, device=DEV, generator=g) for _ in range(2))
    k = (torch.randn(1, 2, 300, 32, device=DEV, generator=g) * 80).clamp(-80, 80)
    ld = torch.rand(1, 2, 300, 32, device=DEV, generator=g) * 2 if decay == "multiplicative" else None
    weight = torch.randn(1, 2, 300, 32, device=DEV, dtype=torch.float64, generator=g)
    kw = dict(decay=decay, log_decay=ld)
    out, grads = _grads(lambda q, k, v: decay_attention(q, k, v, mode="triton", **kw), [q, k, v], weight.float())
    ref, refs = _grads(lambda q, k, v: decay_attention_reference(q, k, v, decay=decay,
                                                                 log_decay=None if ld is None else ld.double()),
                       [t.double() for t in (q, k, v)], weight)
    check(out, ref, 1e-4, f"{decay} on the kernels")
    for name, got, want in zip("qkv", grads, refs):
        check(got, want, 1e-4, f"{decay} d{name}")


def test_scan_kernel_long_and_wide():
    g = torch.Generator(device=DEV).manual_seed(2)
    a = torch.polar(torch.rand(2, 4096, 256, device=DEV, generator=g) * 0.1 + 0.9,
                    torch.rand(2, 4096, 256, device=DEV, generator=g))
    x = torch.randn(2, 4096, 256, device=DEV, dtype=torch.complex64, generator=g)
    check(linear_scan(a, x, mode="triton"), linear_scan_reference(a.to(torch.complex128), x.to(torch.complex128)),
          1e-4, "scan triton, L=4096 D=256")


@pytest.mark.parametrize("kind", ["real", "complex"])
@pytest.mark.parametrize("B, L, D, reverse, with_h0", [(1, 5000, 40, False, True),    # reduce-then-scan (few programs)
                                                         (1, 5000, 40, True, False),
                                                         (8, 1029, 300, False, False),  # one pass, ragged tiles
                                                         (3, 1, 7, True, True)])
def test_scan_tiles_forward_and_backward(kind, B, L, D, reverse, with_h0):
    """The time-tiled scan compiled: both plans of ``launch_plan`` (reduce-then-scan at B = 1), ragged last tiles
    and blocks, ``reverse`` and ``h0``, forward and backward against the float64 recurrence."""
    from seqlab.ops.scan.triton import launch_plan

    g = torch.Generator(device=DEV).manual_seed(B * L + D)
    mag = torch.rand(B, L, D, device=DEV, generator=g) * 0.2 + 0.8
    if kind == "complex":
        a = torch.polar(mag, torch.rand(B, L, D, device=DEV, generator=g) * 6.28)
        x = torch.randn(B, L, D, device=DEV, dtype=torch.complex64, generator=g)
        h0 = torch.randn(B, D, device=DEV, dtype=torch.complex64, generator=g) if with_h0 else None
    else:
        a = mag * torch.where(torch.rand(B, L, D, device=DEV, generator=g) < 0.3, -1.0, 1.0)
        x = torch.randn(B, L, D, device=DEV, generator=g)
        h0 = torch.randn(B, D, device=DEV, generator=g) if with_h0 else None
    plan = launch_plan(B, L, D, complex_=kind == "complex")
    assert (plan["chunks"] > 1) == (L == 5000), plan          # the cases exercise the plan they say they do
    inputs = [a, x] + ([h0] if with_h0 else [])
    weight = torch.randn(B, L, D, device=DEV, dtype=torch.float64, generator=g)
    to64 = (lambda t: t.to(torch.complex128 if t.is_complex() else torch.float64))
    h, grads = _grads(lambda *t: linear_scan(*t, reverse=reverse, mode="triton"), inputs, weight.float())
    ref, refs = _grads(lambda *t: linear_scan_reference(*t, reverse=reverse), [to64(t) for t in inputs], weight)
    check(h, ref, 1e-4, f"scan {kind} B={B} L={L} D={D}")
    for name, got, want in zip(["a", "x", "h0"], grads, refs):
        check(got, want, 1e-4, f"scan d{name} {kind} B={B} L={L} D={D}")


@pytest.mark.parametrize("B, L, H", [(1, 3000, 8), (4, 517, 96)])
def test_relation_log_cumsum_exp_tiles_forward_and_backward(B, L, H):
    """The relation op's tiled log-cumsum-exp compiled, CausalRN's exp reduction forward and backward against
    the float64 reference, keys spread over +-30 so the running maximum moves."""
    from seqlab.ops import relation, relation_reference

    g = torch.Generator(device=DEV).manual_seed(L + H)
    p = torch.randn(B, L, H, device=DEV, generator=g) * 10
    q = torch.randn(B, L, H, device=DEV, generator=g)
    weight = torch.randn(B, L, H, device=DEV, dtype=torch.float64, generator=g)
    out, grads = _grads(lambda p, q: relation(p, q, normalized=True, mode="triton"), [p, q], weight.float())
    ref, refs = _grads(lambda p, q: relation_reference(p, q, normalized=True), [p.double(), q.double()], weight)
    check(out, ref, 1e-4, f"relation triton B={B} L={L} H={H}")
    for name, got, want in zip("pq", grads, refs):
        check(got, want, 1e-4, f"relation triton d{name}")


# The chunk products' rounding a precision may add: tf32 (10-bit mantissa) near 3e-4, bf16 (7-bit) 1e-3 to 1e-2.
PRECISION_TOL = {"ieee": 1e-4, "tf32x3": 1e-4, "tf32": 3e-3, "bf16": 3e-2}


@pytest.mark.parametrize("precision", ["ieee", "tf32x3", "tf32", "bf16"])
@pytest.mark.parametrize("kind", ["real-signed", "complex"])
def test_gateloop_precisions_forward_and_backward(precision, kind):
    """Every ``precision=`` compiled at heads of 64, in chunks of 16 (the tensor-core path of chunks of 64 is off:
    measured slower); real ``a`` of both signs (signs folded into q and k)."""
    g = torch.Generator(device=DEV).manual_seed(len(precision))
    shape = (2, 2, 777, 64)
    q, k, v = (torch.randn(shape, device=DEV, generator=g) for _ in range(3))
    mag = torch.rand(shape, device=DEV, generator=g) * 0.2 + 0.8
    if kind == "complex":
        q, k = torch.complex(q, torch.randn_like(q)), torch.complex(k, torch.randn_like(k))
        a = torch.polar(mag, torch.rand(shape, device=DEV, generator=g) * 6.28)
    else:
        a = mag * torch.where(torch.rand(shape, device=DEV, generator=g) < 0.2, -1.0, 1.0)
    weight = torch.randn(shape, device=DEV, dtype=torch.float64, generator=g)
    to64 = (lambda t: t.to(torch.complex128 if t.is_complex() else torch.float64))
    y, grads = _grads(lambda *t: gateloop(*t, mode="triton", precision=precision), [q, k, v, a], weight.float())
    y_ref, refs = _grads(lambda *t: gateloop(*t, mode="associative"), [to64(t) for t in (q, k, v, a)], weight)
    tol = PRECISION_TOL[precision]
    check(y, y_ref, tol, f"gateloop y {precision} {kind}")
    for name, got, want in zip("qkva", grads, refs):
        check(got, want, 4 * tol, f"gateloop d{name} {precision} {kind}")
    if precision in ("tf32", "bf16"):                  # the rounding is there: not the ieee path under another name
        ieee = gateloop(q, k, v, a, mode="triton")
        assert not torch.equal(y, ieee), f"precision={precision} computed the ieee products"


@pytest.mark.parametrize("dk, dv", [(1, 1), (4, 4), (2, 8)])
def test_gateloop_small_heads_on_the_scan(dk, dv):
    """Heads of ``dk * dv <= SCAN_STATE`` run on the compiled scan (``gateloop_scan``), with a state."""
    g = torch.Generator(device=DEV).manual_seed(dk * 10 + dv)
    B, H, L = 2, 64, 2049
    q, k = (torch.randn(B, H, L, dk, device=DEV, generator=g) for _ in range(2))
    v = torch.randn(B, H, L, dv, device=DEV, generator=g)
    a = torch.rand(B, H, L, dk, device=DEV, generator=g) * 0.3 + 0.7
    h0 = torch.randn(B, H, dk, dv, device=DEV, generator=g)
    weight = torch.randn(B, H, L, dv, device=DEV, dtype=torch.float64, generator=g)
    fn = (lambda q, k, v, a, h0, **kw: gateloop(q, k, v, a, h0=h0, **kw))
    y, grads = _grads(lambda *t: fn(*t, mode="triton"), [q, k, v, a, h0], weight.float())
    y_ref, refs = _grads(lambda *t: fn(*t, mode="associative"), [t.double() for t in (q, k, v, a, h0)], weight)
    check(y, y_ref, 1e-4, f"gateloop scan heads {dk}x{dv}")
    for name, got, want in zip(["q", "k", "v", "a", "h0"], grads, refs):
        check(got, want, 1e-4, f"gateloop scan heads d{name} {dk}x{dv}")
