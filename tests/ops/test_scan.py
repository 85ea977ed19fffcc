"""``linear_scan``: every torch mode against the float64 loop, forward and backward."""
import math

import pytest
import torch
from helpers import check

from seqlab.ops import SCAN_MODES, linear_scan, linear_scan_reference, scan_auto_mode
from seqlab.ops.scan import scan_chunk_size

TOL = 1e-5  # float32 relative error for scans
FAST = ("blocked", "associative", "doubling", "numba")
LENGTHS = (1, 2, 7, 64, 1000, 4099)
KINDS = ("real", "real_a_complex_x", "complex")
# (time_invariant, reverse, with_h0)
VARIANTS = ((False, False, False), (False, True, True), (True, False, True), (True, True, False))


def _f32(t):
    if t is None:
        return None
    return t.to(torch.complex64 if t.is_complex() else torch.float32)


def make_inputs(kind, B, L, D, *, time_invariant, with_h0, extreme=True, g=None):
    """float64 inputs; ``|a|`` spread over [0, 1) with channels near 0 and near 1, and resets (a = 0)."""
    shape = (D,) if time_invariant else (B, L, D)
    modulus = torch.rand(shape, dtype=torch.float64, generator=g)
    if extreme:
        # a third of the channels with |a| in [0, 1e-3], a third with |a| in [1 - 1e-3, 1)
        modulus[..., 0::3] = 1 - 1e-3 * modulus[..., 0::3]
        modulus[..., 1::3] = 1e-3 * modulus[..., 1::3]
    if not time_invariant and L > 2:
        modulus[:, L // 2] = 0.0  # a reset: the state forgets everything before L/2
    cx = kind != "real"
    if kind == "complex":
        a = torch.polar(modulus, 2 * math.pi * torch.rand(shape, dtype=torch.float64, generator=g))
    else:
        a = modulus * torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).double()  # signs too
    dtype = torch.complex128 if cx else torch.float64
    x = torch.randn(B, L, D, dtype=dtype, generator=g)
    h0 = torch.randn(B, D, dtype=dtype, generator=g) if with_h0 else None
    # values exactly representable in float32: the float64 reference then scans the very numbers the
    # float32 modes get (with |a| = 1 - 1e-3 a rounding of a alone would move h by 3e-8 / 1e-3 = 3e-5)
    return tuple(None if t is None else _f32(t).to(t.dtype) for t in (a, x, h0))


def modes_for(time_invariant):
    return [m for m in FAST if time_invariant or m != "doubling"]


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "ti%d-rev%d-h0%d" % v)
def test_forward_matches_float64_loop(L, kind, variant):
    time_invariant, reverse, with_h0 = variant
    a, x, h0 = make_inputs(kind, 3, L, 5, time_invariant=time_invariant, with_h0=with_h0)
    ref = linear_scan_reference(a, x, h0, reverse=reverse)
    for mode in modes_for(time_invariant) + ["sequential", "auto"]:
        out = linear_scan(_f32(a), _f32(x), _f32(h0), reverse=reverse, mode=mode)
        assert out.dtype == _f32(x).dtype
        check(out, ref, TOL, f"{mode} L={L} {kind} {variant}")


def test_reference_is_the_recurrence():
    """The loop itself against the recurrence written out by hand for three steps."""
    a, x, h0 = make_inputs("complex", 2, 3, 4, time_invariant=False, with_h0=True)
    h1 = a[:, 0] * h0 + x[:, 0]
    h2 = a[:, 1] * h1 + x[:, 1]
    h3 = a[:, 2] * h2 + x[:, 2]
    check(linear_scan_reference(a, x, h0), torch.stack([h1, h2, h3], 1), 1e-14, "loop")
    g3 = a[:, 2] * h0 + x[:, 2]
    g2 = a[:, 1] * g3 + x[:, 1]
    g1 = a[:, 0] * g2 + x[:, 0]
    check(linear_scan_reference(a, x, h0, reverse=True), torch.stack([g1, g2, g3], 1), 1e-14, "reverse loop")


def _grads(mode, a, x, h0, g, reverse, cast):
    ins = [None if t is None else cast(t).detach().requires_grad_() for t in (a, x, h0)]
    out = linear_scan(ins[0], ins[1], ins[2], reverse=reverse, mode=mode)
    loss = (out * cast(g).conj()).real.sum()  # <g, h>: dloss/dh = g
    loss.backward()
    return {name: t.grad for name, t in zip("a x h0".split(), ins) if t is not None}


# every variant at the short lengths; at L=4099 the two variants that hold h0, reverse and both kinds of a
GRAD_CASES = [(L, v) for L in LENGTHS[:-1] for v in VARIANTS] + [(4099, VARIANTS[1]), (4099, VARIANTS[2])]


@pytest.mark.parametrize("L, variant", GRAD_CASES, ids=lambda c: str(c) if isinstance(c, int) else "ti%d-rev%d-h0%d" % c)
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_match_float64_autograd_of_loop(L, kind, variant):
    time_invariant, reverse, with_h0 = variant
    a, x, h0 = make_inputs(kind, 2, L, 4, time_invariant=time_invariant, with_h0=with_h0)
    g = _f32(torch.randn(x.shape, dtype=x.dtype)).to(x.dtype)
    ref = _grads("sequential", a, x, h0, g, reverse, lambda t: t)
    for mode in modes_for(time_invariant) + ["sequential"]:
        got = _grads(mode, a, x, h0, g, reverse, _f32)
        assert got.keys() == ref.keys()
        for name in ref:
            assert got[name].shape == ref[name].shape, (mode, name)
            check(got[name], ref[name], TOL, f"d{name} {mode} L={L} {kind} {variant}")


def test_near_unit_modulus_long_sequence_does_not_blow_up():
    """|a| = 1 - 1e-4 over L = 65 536: the closed form of a constant recurrence, then fp32 against fp64."""
    L, D = 65536, 4
    r = 1 - 1e-4
    a64 = torch.polar(torch.full((D,), r, dtype=torch.float64), torch.tensor([0.0, 1e-3, 0.1, 3.0], dtype=torch.float64))
    x64 = torch.ones(1, L, D, dtype=torch.complex128)
    t = torch.arange(1, L + 1, dtype=torch.float64).unsqueeze(-1)
    closed = (1 - a64 ** t) / (1 - a64)  # h_t = sum_{k<t} a^k = (1 - a^t) / (1 - a)
    h64 = linear_scan(a64, x64, mode="blocked")
    check(h64[0], closed, 1e-10, "float64 blocked vs closed form")
    x = torch.randn(2, L, D, dtype=torch.complex128)
    a64, x = _f32(a64).to(a64.dtype), _f32(x).to(x.dtype)  # float32-exact inputs (see make_inputs)
    a_tv = a64.expand(2, L, D).clone()
    for a in (a64, a_tv):
        ref = linear_scan(a, x, mode="blocked")  # float64: validated against the closed form above
        for mode in modes_for(a.dim() == 1):
            out = linear_scan(_f32(a), _f32(x), mode=mode)
            check(out, ref, TOL, f"{mode} |a|=1-1e-4 L=65536 time-invariant={a.dim() == 1}")


def test_broadcast_decays_and_leading_dims():
    """``a`` shared across batch (H heads), per-batch time-invariant ``(B, H, 1, D)``, ``h0`` of shape ``(D,)``."""
    B, H, L, D = 2, 3, 37, 6
    x = torch.randn(B, H, L, D).double()  # float32-exact values in float64
    for a in (torch.rand(H, L, D).double(), torch.rand(B, H, 1, D).double()):
        h0 = torch.randn(D).double()
        ref = linear_scan_reference(a, x, h0)
        modes = FAST if a.shape[-2] == 1 else modes_for(False)
        for mode in modes:
            ins = [t.float().requires_grad_() for t in (a, x, h0)]
            out = linear_scan(*ins[:2], ins[2], mode=mode)
            check(out, ref, TOL, f"{mode} a{tuple(a.shape)}")
            out.square().sum().backward()
            refs = [t.clone().requires_grad_() for t in (a, x, h0)]
            linear_scan_reference(refs[0], refs[1], refs[2]).square().sum().backward()
            for name, got, want in zip(("a", "x", "h0"), ins, refs):
                check(got.grad, want.grad, TOL, f"d{name} {mode} a{tuple(a.shape)}")


@pytest.mark.parametrize("mode", ["blocked", "associative", "doubling", "numba", "triton"])
def test_decay_shared_over_batch_and_real_h0_with_complex_x(mode):
    """``a`` of shape ``(L, D)`` shared by the batch (``(D,)`` for doubling); a real ``h0`` for a complex ``x``."""
    B, L, D = 3, 21, 4
    a = torch.rand(D).double() if mode == "doubling" else torch.rand(L, D).double()
    x = torch.randn(B, L, D, dtype=torch.complex64).to(torch.complex128)
    h0 = torch.randn(B, D).double()
    refs = [t.clone().requires_grad_() for t in (a, x, h0)]
    ref = linear_scan_reference(*refs)
    ref.abs().square().sum().backward()
    ins = [_f32(t).requires_grad_() for t in (a, x, h0)]
    out = linear_scan(*ins, mode=mode)
    out.abs().square().sum().backward()
    check(out, ref, TOL, f"{mode} h")
    for name, got, want in zip(("a", "x", "h0"), ins, refs):
        assert got.grad.dtype == got.dtype
        check(got.grad, want.grad, TOL, f"{mode} d{name}")


def test_half_precision_inputs_use_a_float32_state():
    a, x, _ = make_inputs("real", 2, 300, 8, time_invariant=False, with_h0=False, extreme=False)
    xb, ab = x.bfloat16(), a.bfloat16()
    ref = linear_scan_reference(ab.double(), xb.double())  # exact scan of the rounded inputs
    for mode in ("blocked", "associative", "numba"):
        out = linear_scan(ab, xb, mode=mode)
        assert out.dtype == torch.bfloat16
        # one bfloat16 rounding of the output (2^-8 relative), not an error that grows with L
        check(out, ref, 2 ** -8, f"bf16 {mode}")


def test_auto_is_the_compiled_loop_on_cpu():
    assert scan_auto_mode(torch.device("cpu")) == "numba"
    assert set(SCAN_MODES) == {"auto", "sequential", "doubling", "associative", "blocked", "numba", "triton"}


def test_auto_falls_back_to_blocked_without_numba(monkeypatch):
    import seqlab.kernels.numba as compiled

    monkeypatch.setattr(compiled, "HAVE_NUMBA", False)
    assert scan_auto_mode(torch.device("cpu")) == "blocked"
    with pytest.raises(compiled.NumbaUnavailable, match="numba"):
        linear_scan(torch.rand(4), torch.randn(2, 5, 4), mode="numba")


@pytest.mark.parametrize("B, D", [(1, 1), (3, 2), (1, 200), (8, 256), (5, 70)])
def test_compiled_task_split_covers_every_row_and_channel(B, D):
    """The compiled loop splits rows and channel blocks over threads; every element must be scanned once."""
    a, x, h0 = make_inputs("complex", B, 19, D, time_invariant=False, with_h0=True, extreme=False)
    ref = linear_scan_reference(a, x, h0)
    for threads in (1, 2):
        prev = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            out = linear_scan(_f32(a), _f32(x), _f32(h0), mode="numba")
        finally:
            torch.set_num_threads(prev)
        check(out, ref, TOL, f"compiled B={B} D={D} threads={threads}")


def test_chunk_size_in_range():
    for L in (1, 100, 4096, 65536):
        for width in (1, 15, 2048, 10 ** 6):
            assert 16 <= scan_chunk_size(L, width) <= 1024


def test_blocked_with_explicit_chunks_and_leftovers():
    """Chunk lengths that do not divide L leave a tail (forward) or head (reverse) run sequentially."""
    from seqlab.ops.scan.blocked import _forward_blocked

    a, x, h0 = make_inputs("complex", 2, 203, 3, time_invariant=False, with_h0=True)
    for C in (2, 5, 16, 101):
        for reverse in (False, True):
            out = _forward_blocked(a, x, h0, reverse, chunk=C)
            check(out, linear_scan_reference(a, x, h0, reverse=reverse), 1e-12, f"C={C} reverse={reverse}")


@pytest.mark.parametrize("bad, match", [
    (dict(a=torch.rand(3)), r"a: .*\(D,\) = \(5,\)"),
    (dict(a=torch.rand(2, 9, 5)), r"a: expected .*broadcastable"),
    (dict(h0=torch.rand(2, 4)), r"h0: expected a shape broadcastable"),
    (dict(x=torch.rand(5)), r"x: expected at least 2 dimensions"),
    (dict(a=torch.rand(5, dtype=torch.complex64)), r"a is complex .* x is real"),
    (dict(a=torch.rand(5, dtype=torch.float64)), r"a: precision must match x's"),
    (dict(x=torch.ones(2, 7, 5, dtype=torch.long)), r"x: expected a floating-point or complex tensor"),
    (dict(a=torch.rand(5, device="meta")), r"one device"),
    (dict(mode="fastest"), r"mode must be one of"),
    (dict(mode="doubling", a=torch.rand(2, 7, 5)), r"doubling.*time-invariant"),
])
def test_bad_input_errors_name_the_argument(bad, match):
    args = dict(a=torch.rand(2, 7, 5), x=torch.rand(2, 7, 5), h0=None, mode="blocked")
    args.update(bad)
    with pytest.raises((ValueError, TypeError), match=match):
        linear_scan(args["a"], args["x"], args["h0"], mode=args["mode"])


def test_compiled_rounds_like_the_loop_on_real_inputs():
    """No reassociation and no fused multiply-add: the compiled loop's float32 bits are the torch loop's."""
    g = torch.Generator().manual_seed(3)
    x, a = torch.randn(3, 500, 7, generator=g), torch.rand(3, 500, 7, generator=g)
    h0 = torch.randn(3, 7, generator=g)
    for reverse in (False, True):
        assert torch.equal(linear_scan(a, x, h0, reverse=reverse, mode="numba"),
                           linear_scan(a, x, h0, reverse=reverse, mode="sequential"))


@pytest.mark.slow  # a fresh process compiling the Numba loop
def test_a_numba_loop_leaves_torchs_thread_count_as_it_was():
    """Numba's OpenMP pool shares the runtime with torch: launching it reset torch's intra-op threads (one
    thread became every core, and sums rounded differently from the first compiled call on). A fresh process,
    where the pool is launched by the call itself."""
    import subprocess
    import sys

    code = ("import torch; torch.set_num_threads(1)\n"
            "from seqlab.ops import linear_scan\n"
            "linear_scan(torch.rand(2, 5, 3), torch.rand(2, 5, 3), mode='numba')\n"
            "print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "1"
