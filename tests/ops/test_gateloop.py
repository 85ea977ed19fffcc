"""GateLoop op (paper 004): every mode against the float64 recurrence of eq. 7-8, values and gradients."""
import math

import pytest
import torch
from helpers import check

from seqlab.ops.gateloop import gateloop, gateloop_attention_matrix, gateloop_softmax

SCAN_MODES = ("recurrent", "associative", "chunked", "numba", "auto")      # tolerance 1e-5
MATRIX_MODES = ("attention",)                              # tolerance 1e-4


def tol(mode):
    return 1e-4 if mode.startswith("attention") else 1e-5


def to64(t):
    return None if t is None else t.detach().to(torch.complex128 if t.is_complex() else torch.float64)


def make_inputs(B=2, H=3, L=16, dk=4, dv=5, *, complex_=True, mag=(1e-3, 1.0), negative=False, key_scale=1.0):
    """Fresh random inputs; |a| log-uniform in ``mag``; complex a with phases in [-pi, pi)."""
    q = torch.randn(B, H, L, dk)
    k = torch.randn(B, H, L, dk) * key_scale
    v = torch.randn(B, H, L, dv)
    lo, hi = math.log(mag[0]), math.log(mag[1])
    m = torch.exp(torch.empty(B, H, L, dk).uniform_(lo, hi)).clamp(max=1.0)
    if complex_:
        q = torch.complex(q, torch.randn_like(q))
        k = torch.complex(k, torch.randn_like(k) * key_scale)
        a = torch.polar(m, torch.empty(B, H, L, dk).uniform_(-math.pi, math.pi))
    else:
        a = m * (torch.where(torch.rand_like(m) < 0.3, -1.0, 1.0) if negative else 1.0)
    return q, k, v, a


def reference(q, k, v, a, h0=None):
    """The float64 recurrence, eq. 7-8."""
    return gateloop(to64(q), to64(k), to64(v), to64(a), h0=to64(h0), mode="recurrent", return_state=True)


def test_recurrence_equals_unrolled_sum_eq9():
    q, k, v, a = (to64(t) for t in make_inputs(1, 2, 7, 3, 2))
    y = gateloop(q, k, v, a, mode="recurrent")
    B, H, L, dk = q.shape
    expected = torch.zeros_like(y)
    for n in range(L):                       # y_n = q_n sum_{m<=n} k_m^T v_m prod_{j=m+1..n} a_j  (eq. 9)
        for m in range(n + 1):
            prod = torch.ones_like(a[:, :, 0])
            for j in range(m + 1, n + 1):
                prod = prod * a[:, :, j]
            expected[:, :, n] += torch.einsum("bhd,bhd,bhe->bhe", q[:, :, n], k[:, :, m] * prod, v[:, :, m])
    check(y, expected, 1e-12, "recurrent vs eq. 9")


@pytest.mark.parametrize("mode", SCAN_MODES + MATRIX_MODES)
@pytest.mark.parametrize("L", [1, 2, 7, 64, 100])
@pytest.mark.parametrize("kind", ["complex", "real", "real_negative"])
def test_mode_matches_float64_recurrence(mode, L, kind):
    q, k, v, a = make_inputs(L=L, complex_=kind == "complex", negative=kind == "real_negative")
    h0 = torch.randn(2, 3, 4, 5, dtype=q.dtype)
    ref, S_ref = reference(q, k, v, a, h0)
    y, S = gateloop(q, k, v, a, h0=h0, mode=mode, return_state=True, chunk_size=16)
    check(y, ref, tol(mode), f"{mode} L={L} {kind}")
    check(S, S_ref, tol(mode), f"{mode} final state L={L} {kind}")


def test_attention_naive_matches_while_products_stay_in_range():
    q, k, v, a = make_inputs(L=12, mag=(0.5, 1.0))
    ref, _ = reference(q, k, v, a)
    check(gateloop(q, k, v, a, mode="attention_naive"), ref, 1e-4, "attention_naive, short")


def test_attention_naive_underflows_where_stable_forms_do_not():
    # |a| = 1e-3 everywhere: Pi_n = 1e-3n leaves float32 (~1e-38) after 13 steps (Fig. 3)
    q, k, v, a = make_inputs(1, 1, 64, 2, 2, mag=(1e-3, 1e-3))
    with pytest.raises(FloatingPointError, match="underflow"):
        gateloop(q, k, v, a, mode="attention_naive")
    ref, _ = reference(q, k, v, a)
    check(gateloop(q, k, v, a, mode="attention"), ref, 1e-4, "attention where naive underflows")
    check(gateloop(q, k, v, a, mode="chunked"), ref, 1e-5, "chunked where naive underflows")


@pytest.mark.parametrize("mode,L", [("chunked", 4096), ("attention", 4096), ("recurrent", 4096), ("associative", 4096),
                                    ("chunked", 4099), ("auto", 4096), ("associative", 1000)])
def test_long_sequences(mode, L):
    q, k, v, a = make_inputs(1, 1, L, 2, 3)
    ref, S_ref = reference(q, k, v, a)
    y, S = gateloop(q, k, v, a, mode=mode, return_state=True)
    check(y, ref, tol(mode), f"{mode} L={L}")
    check(S, S_ref, tol(mode), f"{mode} L={L} state")


@pytest.mark.parametrize("mode", SCAN_MODES + MATRIX_MODES)
@pytest.mark.parametrize("gates", ["near_zero", "near_one", "big_keys", "mixed"])
def test_extreme_gates(mode, gates):
    L = 70
    if gates == "near_zero":
        args = make_inputs(L=L, mag=(1e-30, 1e-3))
    elif gates == "near_one":
        args = make_inputs(L=L, mag=(1 - 1e-6, 1.0))
    elif gates == "big_keys":
        args = make_inputs(L=L, key_scale=50.0)
    else:  # strong decay then none: cumulative logs large, differences small (cancellation test)
        q, k, v, a = make_inputs(L=L, mag=(1.0, 1.0))
        a = a.clone()
        a[:, :, : L // 2] *= 1e-3
        args = (q, k, v, a)
    ref, S_ref = reference(*args)
    y, S = gateloop(*args, mode=mode, return_state=True)
    check(y, ref, tol(mode), f"{mode} {gates}")
    check(S, S_ref, tol(mode), f"{mode} {gates} state")


@pytest.mark.parametrize("chunk_size", [1, 5, 64, 200])
def test_chunk_sizes(chunk_size):
    q, k, v, a = make_inputs(L=77)
    ref, _ = reference(q, k, v, a)
    check(gateloop(q, k, v, a, mode="chunked", chunk_size=chunk_size), ref, 1e-5, f"chunk {chunk_size}")


def grads(fn, inputs):
    inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
    y, S = fn(*inputs)
    w_y, w_S = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64), \
        torch.randn(S.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    loss = (y.real.double() * w_y).sum() + (S.real.double() * w_S).sum()
    if y.is_complex():
        loss = loss + (y.imag.double() * w_y).sum()
    loss.backward()
    return [t.grad for t in inputs]


@pytest.mark.parametrize("mode", SCAN_MODES + MATRIX_MODES)
@pytest.mark.parametrize("complex_", [True, False])
def test_gradients_match_float64_recurrence(mode, complex_):
    q, k, v, a = make_inputs(2, 2, 45, 3, 4, complex_=complex_)
    h0 = torch.randn(2, 2, 3, 4, dtype=q.dtype)
    ref = grads(lambda *t: gateloop(*t[:4], h0=t[4], mode="recurrent", return_state=True),
                [to64(t) for t in (q, k, v, a, h0)])
    out = grads(lambda *t: gateloop(*t[:4], h0=t[4], mode=mode, return_state=True, chunk_size=16), [q, k, v, a, h0])
    for name, g, r in zip("q k v a h0".split(), out, ref):
        check(g, r, tol(mode), f"{mode} grad {name}")


def test_attention_matrix_is_the_operator():
    q, k, v, a = make_inputs(L=33)
    A = gateloop_attention_matrix(q, k, a)
    assert A.shape == (2, 3, 33, 33)
    assert (A.triu(1) == 0).all()
    ref, _ = reference(q, k, v, a)
    check(A @ v.to(A.dtype), ref, 1e-4, "attention matrix @ v")
    # eq. 18-21 literally in float64 (short, no underflow)
    q64, k64, a64 = to64(q), to64(k), to64(a)
    Pi = torch.cumprod(a64, dim=-2)
    literal = torch.tril((q64 * Pi) @ (k64 / Pi).transpose(-1, -2))
    check(A, literal, 1e-4, "attention matrix vs Qbar Kbar^T . M")


def test_softmax_generalisation_eq22_23():
    q, k, v, a = make_inputs(L=20, mag=(0.3, 1.0))
    y = gateloop_softmax(q, k, v, a, scale=0.5)
    q64, k64, a64, v64 = to64(q), to64(k), to64(a), to64(v)
    Pi = torch.cumprod(a64, dim=-2)
    scores = ((q64 * Pi) @ (k64 / Pi).transpose(-1, -2)).real * 0.5
    mask = torch.ones(20, 20, dtype=torch.bool).tril()
    expected = torch.softmax(scores.masked_fill(~mask, -math.inf), -1) @ v64          # eq. 22-23
    check(y, expected, 1e-4, "softmax eq. 22-23")


def test_fixed_transition_is_retnet_eq11():
    q, k, v, _ = make_inputs(1, 2, 30, 3, 2)
    a_fixed = torch.polar(torch.tensor([0.9, 0.5, 0.99]), torch.tensor([0.3, -1.0, 2.0]))   # gamma e^{i theta}
    a = a_fixed.expand(1, 2, 30, 3)
    y = gateloop(q, k, v, a, mode="chunked", chunk_size=8)
    q64, k64, v64, af = to64(q), to64(k), to64(v), to64(a_fixed)
    n = torch.arange(30)
    power = (n[:, None] - n[None, :]).clamp(min=0).double()
    decay = af[None, None, :] ** power[..., None] * (n[:, None] >= n[None, :])[..., None]   # a^{n-m}, m <= n
    expected = torch.einsum("bhnd,bhmd,nmd,bhme->bhne", q64, k64, decay, v64.to(torch.complex128))  # eq. 11
    check(y, expected, 1e-5, "RetNet eq. 11")


def test_no_gates_is_s4d_lru_convolution_eq10_by_fft():
    L, H = 100, 4
    a_fixed = torch.polar(torch.tensor([0.95, 0.7, 0.999, 0.5]), torch.tensor([0.1, 1.0, -0.5, 3.0]))
    v = torch.randn(1, H, L, 1)
    ones = torch.ones(1, H, L, 1, dtype=torch.complex64)
    y = gateloop(ones, ones, v, a_fixed.view(1, H, 1, 1).expand(1, H, L, 1), mode="chunked")
    # eq. 10: y = V * (1, a, ..., a^{L-1}) computed as an FFT convolution (zero-padded to 2L)
    kernel = to64(a_fixed)[:, None] ** torch.arange(L, dtype=torch.float64)           # (H, L)
    n_fft = 2 * L
    conv = torch.fft.ifft(torch.fft.fft(to64(v)[0, :, :, 0].to(torch.complex128), n_fft) * torch.fft.fft(kernel, n_fft))
    check(y[0, :, :, 0], conv[:, :L], 1e-5, "S4D/LRU convolution eq. 10")


def test_associativity_of_the_operator_appendix_b():
    def op(p, q):                                       # eq. 13
        return p[0] * q[0], q[0] * p[1] + q[1]
    x = [(torch.polar(torch.rand(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)),
          torch.randn(5, dtype=torch.complex128)) for _ in range(3)]
    left, right = op(op(x[0], x[1]), x[2]), op(x[0], op(x[1], x[2]))
    for l_, r_ in zip(left, right):
        check(l_, r_, 1e-14, "associativity")


def test_bad_inputs_name_the_argument():
    q, k, v, a = make_inputs(L=5)
    with pytest.raises(ValueError, match="k: expected shape"):
        gateloop(q, k[:, :, :4], v, a)
    with pytest.raises(ValueError, match="v: expected shape"):
        gateloop(q, k, v[:, :1], a)
    with pytest.raises(ValueError, match="a: state transitions need magnitudes"):
        gateloop(q, k, v, a * 2)
    with pytest.raises(ValueError, match="mode must be one of"):
        gateloop(q, k, v, a, mode="fast")
    with pytest.raises(ValueError, match="h0: expected shape"):
        gateloop(q, k, v, a, h0=torch.zeros(2, 3, 5, 4, dtype=q.dtype))
    with pytest.raises(TypeError, match="q: expected a floating-point"):
        gateloop(torch.ones(2, 3, 5, 4, dtype=torch.long), k, v, a)


def test_auto_on_max_headed_inputs():
    # the paper's models: dk = dv = 1 per head, many heads (Appendix C.1)
    q, k, v, a = make_inputs(2, 64, 300, 1, 1)
    ref, _ = reference(q, k, v, a)
    check(gateloop(q, k, v, a), ref, 1e-5, "auto, dk = dv = 1")


@pytest.mark.slow  # L = 4096; test_gradients_match_float64_recurrence covers every mode at small sizes
@pytest.mark.parametrize("mode", ["chunked", "auto", "associative", "numba"])
def test_gradients_long_sequence(mode):
    q, k, v, a = make_inputs(1, 1, 4096, 2, 2)
    ref = grads(lambda *t: gateloop(*t, mode="recurrent", return_state=True), [to64(t) for t in (q, k, v, a)])
    out = grads(lambda *t: gateloop(*t, mode=mode, return_state=True), [q, k, v, a])
    for name, g, r in zip("qkva", out, ref):
        check(g, r, 1e-5, f"{mode} grad {name}, L=4096")


# ----------------------------------------------------------------------------- the compiled CPU kernel


def test_auto_is_the_compiled_kernel_on_cpu(monkeypatch):
    from seqlab.kernels import numba as compiled
    from seqlab.ops.gateloop import _pick_auto

    q, k, v, a = make_inputs(L=5)
    assert _pick_auto(q, v) == "numba"
    monkeypatch.setattr(compiled, "HAVE_NUMBA", False)
    assert _pick_auto(q, v) == "chunked"
    with pytest.raises(compiled.NumbaUnavailable, match="numba"):
        gateloop(q, k, v, a, mode="numba")


@pytest.mark.parametrize("dk, dv", [(1, 1), (3, 2)])   # the max-headed kernel and the general one
@pytest.mark.parametrize("B, H, L", [(1, 6, 5), (2, 3, 130), (1, 1, 1)])
def test_compiled_gradients_gradcheck(dk, dv, B, H, L):
    """float64 gradcheck through the compiled forward and backward, h0 and the final state included.

    Head counts not divisible by the 4 interleaved heads, L shorter than their skew, and L past
    two checkpoints (one per 64 steps) with a partial last chunk.
    """
    q, k, v, a = make_inputs(B, H, L, dk, dv)
    h0 = torch.randn(B, H, dk, dv, dtype=torch.complex128)
    ins = [to64(t).requires_grad_() for t in (q, k, v, a)] + [h0.requires_grad_()]

    def f(q, k, v, a, h0):
        y, S = gateloop(q, k, v, a, h0=h0, mode="numba", return_state=True)
        return y, S

    # The short shapes compare every entry of the Jacobian; at L = 130 (the checkpoint edges) a random
    # projection of it (fast mode: u^T J v against its finite difference), which any wrong entry moves.
    assert torch.autograd.gradcheck(f, ins, atol=1e-8, rtol=1e-6, fast_mode=L > 64)


def test_compiled_keeps_real_inputs_real_with_complex_a():
    """Real q, k, v with a complex a (the usual GateLoop layer): computed without copying them to complex;
    their gradients are real and equal the float64 recurrence's."""
    q, k, v, a = make_inputs(2, 5, 77, 1, 1, complex_=False)
    a = torch.polar(a.abs(), torch.rand_like(a) * 6)
    for dkv in ((1, 1), (2, 3)):
        q2, k2, a2 = (t.expand(-1, -1, -1, dkv[0]).contiguous() for t in (q, k, a))
        v2 = v.expand(-1, -1, -1, dkv[1]).contiguous()
        ins = [t.clone().requires_grad_() for t in (q2, k2, v2, a2)]
        y = gateloop(*ins, mode="numba")
        ref_ins = [to64(t).requires_grad_() for t in (q2, k2, v2, a2)]
        ref = gateloop(*ref_ins, mode="recurrent")
        check(y, ref, 1e-5, f"compiled real q, k, v, dk, dv = {dkv}")
        y.real.square().sum().backward()
        ref.real.square().sum().backward()
        for name, t, r in zip("qkva", ins, ref_ins):
            assert t.grad.dtype == t.dtype
            check(t.grad, r.grad, 1e-5, f"compiled grad {name}, dk, dv = {dkv}")


def test_compiled_result_does_not_depend_on_threads():
    q, k, v, a = make_inputs(2, 9, 200, 1, 1)
    prev = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = gateloop(q, k, v, a, mode="numba")
        torch.set_num_threads(2)
        two = gateloop(q, k, v, a, mode="numba")
    finally:
        torch.set_num_threads(prev)
    assert torch.equal(one, two)


@pytest.mark.parametrize("dk, dv", [(1, 1), (4, 5)])
def test_compiled_checks_inside_the_kernel(dk, dv):
    """|a| > 1 raises ValueError naming a; a NaN in a or an inf in q raise FloatingPointError naming the
    argument and the index (the kernel's flags; the inputs are searched only then)."""
    q, k, v, a = make_inputs(2, 3, 50, dk, dv)
    with pytest.raises(ValueError, match="a: state transitions need magnitudes"):
        gateloop(q, k, v, a * 1.01, mode="numba")
    bad = a.clone()
    bad[1, 2, 17, 0] = float("nan")
    with pytest.raises(FloatingPointError, match=r"a holds a non-finite value .* at index \(1, 2, 17, 0\)"):
        gateloop(q, k, v, bad, mode="numba")
    q = q.clone()
    q[0, 1, 30, 0] = float("inf")
    with pytest.raises(FloatingPointError, match=r"q holds a non-finite value .*inf.* at index \(0, 1, 30, 0\)"):
        gateloop(q, k, v, a, mode="numba")


def test_compiled_half_precision_inputs():
    q, k, v, a = make_inputs(1, 2, 40, 2, 2, complex_=False)
    low = [t.bfloat16() for t in (q, k, v, a)]
    out = gateloop(*low, mode="numba")
    assert out.dtype == torch.bfloat16                       # the dtype policy: the input's dtype out ...
    in_float32 = gateloop(*(t.float() for t in low), mode="numba")
    assert torch.equal(out, in_float32.bfloat16())           # ... computed in float32, rounded once
    check(in_float32, reference(*low)[0], 1e-5, "compiled bf16 inputs, float32 computation")


def test_compiled_heads_last_layout_is_kept_and_exact():
    """dk = dv = 1 inputs viewed from (B, L, H) memory (the layer's projections): the vectorised kernel,
    a heads-last y, and gradients equal to the float64 recurrence's (gradcheck, h0 and final state)."""
    from seqlab.ops.gateloop.numba import _is_heads_last

    B, L, H = 3, 150, 5
    lay = lambda t: t.transpose(1, 2).unsqueeze(-1)  # noqa: E731  (B, L, H) -> (B, H, L, 1) view
    q, k, v = (torch.randn(B, L, H, dtype=torch.float64) for _ in range(3))
    a = torch.polar(torch.rand(B, L, H, dtype=torch.float64), torch.randn(B, L, H, dtype=torch.float64))
    h0 = torch.randn(B, H, 1, 1, dtype=torch.complex128)
    ins = [lay(t) for t in (q, k, v, a)]
    assert all(_is_heads_last(t) for t in ins) and not _is_heads_last(ins[0].contiguous())
    y, S = gateloop(*ins, h0=h0, mode="numba", return_state=True)
    ref_y, ref_S = gateloop(*[t.contiguous() for t in ins], h0=h0, mode="recurrent", return_state=True)
    assert y.transpose(1, 2).is_contiguous()          # handed back in the layer's layout
    check(y, ref_y, 1e-12, "heads-last y")
    check(S, ref_S, 1e-12, "heads-last final state")
    ins32 = [t.float() if not t.is_complex() else t.to(torch.complex64) for t in ins]
    y32 = gateloop(*ins32, mode="numba")
    check(y32, gateloop(*ins, mode="recurrent"), 1e-5, "heads-last float32")
    assert torch.equal(y32, gateloop(*[t.contiguous() for t in ins32], mode="numba"))  # same bits, either kernel

    def f(q, k, v, a, h0):
        return gateloop(lay(q), lay(k), lay(v), lay(a), h0=h0, mode="numba", return_state=True)

    leaves = [t.clone().requires_grad_() for t in (q, k, v, a, h0)]
    assert torch.autograd.gradcheck(f, leaves, fast_mode=True)   # a random projection of the Jacobian (L = 150)
    with pytest.raises(ValueError, match="a: state transitions need magnitudes"):
        gateloop(*ins[:3], lay(a * 1.01), mode="numba")
    q_bad = q.clone()
    q_bad[1, 20, 3] = float("nan")
    with pytest.raises(FloatingPointError, match="non-finite"):
        gateloop(lay(q_bad), *ins[1:], mode="numba")


def _layer_like_inputs(B, H, L, mag=(1e-3, 1.0)):
    """float32 q, k, v and a complex64 a, dk = dv = 1 (what the GateLoop layer makes), one contiguous row per head."""
    q, k, v, a = make_inputs(B, H, L, 1, 1, complex_=False, mag=mag)
    return q, k, v, torch.polar(a, torch.empty_like(a).uniform_(-math.pi, math.pi))


@pytest.mark.parametrize("B, H, L", [(1, 8, 2), (1, 8, 113), (2, 4, 119), (1, 8, 120), (1, 8, 121),
                                     (1, 19, 300), (3, 8, 4099)])
def test_numba_row_per_head_max_headed(B, H, L):
    """Real q, k, v with complex a, dk = dv = 1, a row per head (the row kernel).

    Lengths around and past the 64-step checkpoints, not powers of two, odd head counts, h0 and the
    final state, and gradients through states recomputed from the checkpoints; all against the float64
    recurrence. The heads-last kernel gives the same bits.
    """
    q, k, v, a = _layer_like_inputs(B, H, L)
    h0 = torch.randn(B, H, 1, 1, dtype=torch.complex64)
    ins = [t.clone().requires_grad_() for t in (q, k, v, a, h0)]
    y, S = gateloop(*ins[:4], h0=ins[4], mode="numba", return_state=True)
    ref = [to64(t).requires_grad_() for t in ins]
    ref_y, ref_S = gateloop(*ref[:4], h0=ref[4], mode="recurrent", return_state=True)
    check(y, ref_y, 1e-5, f"row kernel y, B, H, L = {B, H, L}")
    check(S, ref_S, 1e-5, f"row kernel final state, B, H, L = {B, H, L}")
    gy, gS = torch.randn_like(ref_y), torch.randn_like(ref_S)
    loss = lambda y, S: (y * gy.conj()).real.sum() + (S * gS.conj()).real.sum()  # noqa: E731
    loss(y, S).backward()
    loss(ref_y, ref_S).backward()
    for name, t, r in zip(("q", "k", "v", "a", "h0"), ins, ref):
        check(t.grad, r.grad, 1e-5, f"row kernel grad {name}, B, H, L = {B, H, L}")
    lay = lambda t: t.transpose(1, 2).contiguous().transpose(1, 2)  # noqa: E731  (B, L, H) memory
    with torch.no_grad():
        assert torch.equal(y, gateloop(*(lay(t) for t in (q, k, v, a)), h0=h0, mode="numba"))


@pytest.mark.parametrize("t", [3, 200, 298])      # the first steps, the middle, the last steps
def test_numba_row_kernel_checks(t):
    q, k, v, a = _layer_like_inputs(1, 8, 300)
    bad = a.clone()
    bad[0, 5, t, 0] = 1.0001
    with pytest.raises(ValueError, match="a: state transitions need magnitudes"):
        gateloop(q, k, v, bad, mode="numba")
    bad[0, 5, t, 0] = complex("nan+0j")
    with pytest.raises(FloatingPointError, match=rf"a holds a non-finite value .* at index \(0, 5, {t}, 0\)"):
        gateloop(q, k, v, bad, mode="numba")
    q = q.clone()
    q[0, 5, t, 0] = float("inf")
    with pytest.raises(FloatingPointError, match=rf"q holds a non-finite value .* at index \(0, 5, {t}, 0\)"):
        gateloop(q, k, v, a, mode="numba")
    edge = torch.polar(torch.ones(1, 8, 300, 1), a.angle())      # |a| = 1 exactly is allowed
    check(gateloop(q.nan_to_num(posinf=0.0), k, v, edge, mode="numba"),
          reference(q.nan_to_num(posinf=0.0), k, v, edge)[0], 1e-5, "row kernel, |a| = 1")


def test_numba_gradients_at_wide_heads_match_the_float64_recurrence():
    """dk = dv = 52 (the sweep's one-headed GateLoop): the backward kernel's row sums run vectorised (reordered);
    in float32 its gradients still equal the float64 recurrence's, past a checkpoint (L = 70)."""
    q, k, v, a = make_inputs(2, 1, 70, 52, 52, complex_=False)
    a = torch.polar(a.abs(), torch.rand_like(a) * 6)
    ins = [t.float().clone().requires_grad_() if not t.is_complex() else t.clone().requires_grad_()
           for t in (q, k, v, a)]
    ref_ins = [to64(t).requires_grad_() for t in ins]
    y, ref = gateloop(*ins, mode="numba"), gateloop(*ref_ins, mode="recurrent")
    w = torch.randn(y.shape, dtype=torch.float64)
    (y.real.double() * w).sum().backward()
    (ref.real * w).sum().backward()
    for name, t, r in zip("qkva", ins, ref_ins):
        check(t.grad, r.grad, 1e-5, f"numba grad {name}, dk = dv = 52")
