"""GateLoop's Triton kernels in chunks of 64 cut into sub-chunks of 16 (the boundary-referenced form of lesson 06,
section 5: ``subchunk_attention``), forward and backward, in the CPU interpreter against the float64 recurrence
(eq. 7-8): real, real of either sign and complex transitions, lengths that end anywhere inside a sub-chunk or a
chunk, heads of several (ragged) key / value tiles, an initial state, and gates so sharp (``log|a|`` from -50 to -20
a step) that the chunk-wide factorisation ``(q e^g)(k e^-g)^T`` overflows. Their compilation for sm_80 / sm_90 and
its registers: test_triton_spills.py.

The fast tier (``workbench.py test --quick``) runs the smallest case that reaches each branch: the launch routing,
real and complex planes past a sub-chunk boundary, ragged key and value tiles, sharp gates, near resets, the
additive decay over two chunks, bf16 products; the longer lengths and larger heads run in the full run (``slow``)."""
import importlib
import math

import pytest
import torch
from helpers import check

from seqlab.ops import decay_attention, relative_error
from seqlab.ops.gateloop import gateloop
from test_gateloop import make_inputs, to64

pytest.importorskip("triton")

gl = importlib.import_module("seqlab.ops.gateloop.triton")
SLOW = pytest.mark.slow


@pytest.fixture(autouse=True)
def subchunks(monkeypatch):
    """The sub-chunk path on (off by default), and a record of the kernels every launch runs."""
    monkeypatch.setattr(gl, "SUBCHUNKS", True)
    launched = []
    real_launch = gl._Launch.launch
    monkeypatch.setattr(gl._Launch, "launch",
                        lambda self, kernel, *args, **kw: launched.append(kernel) or real_launch(self, kernel, *args, **kw))
    return launched


def sharp_inputs(L, dk, dv, *, complex_, lo=-50.0, hi=-20.0):
    """Inputs whose first half of key channels decays by ``e^lo .. e^hi`` a step (so sharp that ``e^-g`` over a chunk
    overflows) and whose second half is mild (``|a|`` in [0.9, 1]), so that the keys of earlier sub-chunks still
    reach later queries through the mild channels."""
    q, k, v, a = make_inputs(1, 2, L, dk, dv, complex_=complex_, mag=(0.9, 1.0))
    half = dk // 2
    log_mag = a.abs().log()
    log_mag[..., :half] = torch.empty_like(log_mag[..., :half]).uniform_(lo, hi)
    a = torch.polar(log_mag.exp(), torch.angle(a)) if complex_ else log_mag.exp()
    return q, k, v, a


def run(inputs, mode, w, w_S):
    """``y``, ``S_L`` and the gradients of a fixed real loss of both, by ``mode``."""
    inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
    y, S = gateloop(*inputs[:4], h0=inputs[4], mode=mode, return_state=True)
    loss = (y.real.double() * w).sum() + (S.real.double() * w_S).sum()
    if y.is_complex():
        loss = loss + (y.imag.double() * w.flip(-2)).sum() + (S.imag.double() * w_S.flip(-1)).sum()
    loss.backward()
    return y, S, [t.grad for t in inputs]


def check_against_recurrence(q, k, v, a, what, tol=1e-5):
    h0 = torch.randn(*q.shape[:2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    w = torch.randn(*v.shape, dtype=torch.float64)
    w_S = torch.randn(*h0.shape, dtype=torch.float64)
    y_ref, S_ref, ref = run([to64(t) for t in (q, k, v, a, h0)], "recurrent", w, w_S)
    y, S, out = run([q, k, v, a, h0], "triton", w, w_S)
    check(y, y_ref, tol, f"{what}: y")
    check(S, S_ref, tol, f"{what}: S_L")
    for name, g, r in zip(["q", "k", "v", "a", "h0"], out, ref):
        check(g, r, tol, f"{what}: grad {name}")


def test_heads_of_16_and_more_take_chunks_of_64_and_the_subchunk_kernels(subchunks):
    assert gl.on_subchunks(16, 16) and not gl.on_subchunks(8, 16)
    for precision in gl.PRECISIONS:
        for cplx in (False, True):
            assert gl.gateloop_chunk(16, 64, precision, cplx) == 64
            for kernel in gl.SUBCHUNK_KERNELS:
                assert [c["BK"] for c in gl.gateloop_configs(kernel, 64, 64, precision, cplx)] == [16]
    q, k, v, a = make_inputs(1, 1, 20, 16, 16, complex_=True)
    check_against_recurrence(q, k, v, a, "launched kernels")
    assert sorted(set(subchunks) | {"subchunk_attention_kernel"}) == sorted(gl.SUBCHUNK_KERNELS)   # launched direct


@pytest.mark.parametrize("L,kind", [pytest.param(1, "complex", marks=SLOW), (15, "real"), (17, "complex"),
                                    pytest.param(63, "real_negative", marks=SLOW),
                                    pytest.param(65, "complex", marks=SLOW), pytest.param(100, "real", marks=SLOW)])
def test_forward_and_backward_match_float64_recurrence(L, kind):
    """Lengths inside the first sub-chunk (1, 15), past it (17), one short of a chunk (63), one past it (65), and
    a second chunk ending inside its third sub-chunk (100); an initial state; the final state's gradient too."""
    q, k, v, a = make_inputs(1, 2, L, 16, 16, complex_=kind == "complex", negative=kind == "real_negative")
    if kind == "real":
        a = a.abs()
    check_against_recurrence(q, k, v, a, f"sub-chunks L={L} {kind}")


@pytest.mark.parametrize("L,dk,dv,kind", [(20, 20, 17, "real"), pytest.param(70, 20, 33, "complex", marks=SLOW),
                                          pytest.param(70, 33, 17, "real", marks=SLOW)])
def test_heads_of_several_ragged_tiles(L, dk, dv, kind):
    q, k, v, a = make_inputs(1, 1, L, dk, dv, complex_=kind == "complex")
    if kind == "real":
        a = a.abs()
    check_against_recurrence(q, k, v, a, f"sub-chunks L={L} dk={dk} dv={dv} {kind}")


def chunk_wide_attention(q, k, log_a, C=64):
    """Each chunk's ``A`` factorised over the whole chunk, ``(q e^g)(k e^-g)^T`` with ``g`` summed from the chunk's
    start: the form the sub-chunks replace (lesson 06, section 3), in the working precision."""
    L = q.shape[-2]
    blocks = []
    for c0 in range(0, L, C):
        g = log_a[..., c0:c0 + C, :].cumsum(-2)
        qs, ks = q[..., c0:c0 + C, :], k[..., c0:c0 + C, :]
        blocks.append((qs * g.exp()) @ (ks * (-g).exp()).transpose(-1, -2))
    return blocks


def check_log_against_recurrence(q, k, v, log_a, phase, what, tol=1e-5):
    """The kernels with the transitions as ``log|a|`` and ``arg a`` (:func:`gateloop_triton_log`, the decays' entry)
    against the float64 recurrence of ``a = exp(log|a| + i arg a)``: ``y``, ``S_L`` and the gradients of q, k, v,
    log|a|, arg a and h0. (Through ``a`` itself, complex gates of ``|a|`` down to 1e-30: test_gateloop_tiny_gates.py.)"""
    h0 = torch.randn(*q.shape[:2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    w = torch.randn(*v.shape, dtype=torch.float64)
    w_S = torch.randn(*h0.shape, dtype=torch.float64)

    def loss(y, S):
        value = (y.real.double() * w).sum() + (S.real.double() * w_S).sum()
        if y.is_complex():
            value = value + (y.imag.double() * w.flip(-2)).sum() + (S.imag.double() * w_S.flip(-1)).sum()
        return value

    def grads(inputs, forward):
        inputs = [None if t is None else t.detach().clone().requires_grad_(True) for t in inputs]
        y, S = forward(*inputs)
        loss(y, S).backward()
        return y, S, [None if t is None else t.grad for t in inputs]

    def recurrent(q, k, v, la, ph, h0):
        a = la.exp() if ph is None else torch.polar(la.exp(), ph)
        return gateloop(q, k, v, a, h0=h0, mode="recurrent", return_state=True)

    def kernels(q, k, v, la, ph, h0):
        return gl.gateloop_triton_log(q, k, v, la, ph, h0=h0, return_state=True)

    y_ref, S_ref, ref = grads([to64(t) for t in (q, k, v, log_a, phase, h0)], recurrent)
    y, S, out = grads([q, k, v, log_a, phase, h0], kernels)
    check(y, y_ref, tol, f"{what}: y")
    check(S, S_ref, tol, f"{what}: S_L")
    for name, g, r in zip(["q", "k", "v", "log|a|", "arg a", "h0"], out, ref):
        if r is not None:
            check(g, r, tol, f"{what}: grad {name}")


@pytest.mark.parametrize("L,kind", [(40, "complex"), pytest.param(65, "complex", marks=SLOW),
                                    pytest.param(100, "real", marks=SLOW)])
def test_sharp_gates_overflow_the_chunk_wide_form_but_not_the_subchunks(L, kind):
    """``log|a|`` from -50 to -20 a step on half the key channels: ``e^-g`` reaches ``e^1000`` within a chunk, far
    past float32's range (88.7) and float64's (709.8): the chunk-wide factorised ``A`` is inf or NaN. The sub-chunk
    kernels refer every factor to a sub-chunk boundary (exponents <= 0) and match the float64 recurrence, gradients
    included."""
    q, k, v, a = sharp_inputs(L, 16, 16, complex_=kind == "complex")
    log_a = a.abs().log()
    assert -log_a[..., :64, :].sum(-2).min() > math.log(torch.finfo(torch.float64).max)   # 40 steps of >= 20
    for dtype in (torch.float32, torch.float64):
        qq, kk = (t.real.to(dtype) for t in (q, k))
        A = chunk_wide_attention(qq, kk, log_a.to(dtype))
        assert not all(torch.isfinite(block).all() for block in A), f"chunk-wide form finite in {dtype}"
    phase = torch.angle(a) if kind == "complex" else None
    check_log_against_recurrence(q, k, v, log_a, phase, f"sharp gates L={L} {kind}")
    if kind == "real":                      # through a itself as well
        check_against_recurrence(q, k, v, a, f"sharp gates L={L} {kind}, gradient of a")


@pytest.mark.parametrize("L", [20, pytest.param(80, marks=SLOW)])
def test_sharp_gates_every_channel_near_resets(L):
    """Every channel at ``log|a|`` -50 .. -20 (each step all but forgets the past), complex: nothing overflows or
    turns NaN, forward or backward, and every gradient matches the float64 recurrence's."""
    q, k, v, a = make_inputs(1, 2, L, 16, 16, complex_=True)
    log_a = torch.empty(a.shape).uniform_(-50.0, -20.0)
    check_log_against_recurrence(q, k, v, log_a, torch.angle(a), "near resets")


def test_subchunk_attention_matches_lesson_06_form():
    """The kernels' intra-chunk matrix ``A`` (real path, one chunk of 64) equals lesson 06's ``subchunk_attention``
    written in float64 here (its 5-line naive form: ``A[i, j] = sum_d q_id k_jd exp(g_id - g_jd)``, masked), with sharp
    gates: the off-diagonal blocks come from the sub-chunk products, the diagonal ones from the exact loop."""
    q, k, v, a = sharp_inputs(64, 16, 16, complex_=False, lo=-30.0, hi=-5.0)
    la = a.abs().log().float().reshape(2, 64, 16)
    q2, k2 = q.reshape(2, 64, 16), k.reshape(2, 64, 16)
    run_ = gl._Launch(2, 64, 16, 16, la, None, False, "ieee", sub=True)
    A = run_.attention(run_.planes(q2, torch.float32), run_.planes(k2, torch.float32))[0][:, 0]
    g = la.double().cumsum(-2)
    diff = (g[:, :, None, :] - g[:, None, :, :]).masked_fill(~torch.ones(64, 64, dtype=torch.bool).tril()[..., None],
                                                             -math.inf)
    A_ref = (q2.double()[:, :, None, :] * k2.double()[:, None, :, :] * diff.exp()).sum(-1)
    check(A, A_ref, 1e-5, "A by sub-chunks")
    off = torch.zeros(64, 64, dtype=torch.bool)
    for I in range(4):
        off[16 * I:16 * I + 16, :16 * I] = True
    assert A_ref[:, off].abs().max() > 1e-2            # the off-diagonal blocks carry weight (mild channels)
    assert (A[:, ~torch.ones(64, 64, dtype=torch.bool).tril()] == 0).all()


def test_additive_decay_runs_on_the_subchunk_kernels(subchunks):
    """LightNet's additive decay (eq. 7) shares GateLoop's kernels: on sub-chunks it matches its reference."""
    q, k, v = torch.randn(1, 2, 70, 16), torch.randn(1, 2, 70, 16), torch.randn(1, 2, 70, 16)
    ref = decay_attention(q.double(), k.double(), v.double(), decay="additive", mode="recurrent")
    check(decay_attention(q, k, v, decay="additive", mode="triton"), ref, 1e-5, "additive decay on sub-chunks")
    assert "subchunk_output_kernel" in subchunks


def test_bf16_products_are_bf16_accurate():
    """``precision="bf16"`` on sub-chunks rounds the products' operands to bfloat16 (relative error ~2^-9), where
    ``"ieee"`` keeps float32's."""
    q, k, v, a = make_inputs(1, 1, 40, 16, 16, complex_=False)
    a = a.abs()
    ref = gateloop(*(to64(t) for t in (q, k, v, a)), mode="recurrent")
    err = relative_error(gl.gateloop_triton(q, k, v, a, precision="bf16")[0], ref)
    assert 2 ** -12 < err < 2 ** -5, f"bf16 products: relative error {err:.2e}, not bfloat16's"
    assert relative_error(gl.gateloop_triton(q, k, v, a)[0], ref) < 1e-5
