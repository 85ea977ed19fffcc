"""decay_attention and decay_coefficients (paper 003 §2-3, eq. 2, 7, 8, Theorem 3.1, Prop. 3.2)
against float64 loops written as the paper writes them."""
import pytest
import torch

from helpers import check
from seqlab.ops import decay_attention, decay_attention_reference, decay_coefficients, linear_scan_reference

TORCH_MODES = ("recurrent", "parallel", "chunked")
# the recurrent mode is a scan (1e-5); the cumulative and chunked forms are matrix forms (1e-4)
TOL = {"recurrent": 1e-5, "parallel": 1e-4, "chunked": 1e-4, "auto": 1e-4}


def inputs(L, *, B=2, H=3, dk=5, dv=4, key_scale=1.0, complex_=False, dtype=torch.float32):
    q = torch.randn(B, H, L, dk, dtype=dtype)
    k = torch.randn(B, H, L, dk, dtype=dtype) * key_scale
    v = torch.randn(B, H, L, dv, dtype=dtype)
    if complex_:
        q = torch.complex(q, torch.randn_like(q))
        v = torch.complex(v, torch.randn_like(v))
    return q, k, v


def log_decays(k, low=0.0, high=3.0):
    """delta >= 0: lambda = exp(-delta) from 1 (delta = 0) down to exp(-3)."""
    return torch.empty_like(k).uniform_(low, high)


@pytest.mark.parametrize("L", [1, 2, 7, 64, 259])
@pytest.mark.parametrize("key_scale", [1.0, 50.0])
@pytest.mark.parametrize("mode", TORCH_MODES)
def test_additive_causal_equals_eq7_loop(L, key_scale, mode):
    q, k, v = inputs(L, key_scale=key_scale)
    k = k.clamp(-50, 50)
    ref = decay_attention_reference(q, k, v)
    check(decay_attention(q, k, v, mode=mode), ref, TOL[mode], f"additive causal {mode} L={L} keys x{key_scale}")


@pytest.mark.parametrize("mode,L", [("parallel", 1100), ("chunked", 1100), ("chunked", 4099), ("recurrent", 1100)])
def test_additive_causal_long(mode, L):
    q, k, v = inputs(L, B=1, H=2, dk=4, dv=4, key_scale=50.0)
    check(decay_attention(q, k, v, mode=mode), decay_attention_reference(q, k, v), TOL[mode], f"{mode} L={L}")


def test_keys_at_plus_minus_50_exactly():
    """The extremes: alternating +50 / -50 keys (exp(100) ratios between neighbours)."""
    q, _, v = inputs(130)
    k = torch.full_like(q, 50.0)
    k[..., ::2, :] = -50.0
    k[..., :3, 1] = torch.tensor([-50.0, 50.0, -50.0])
    ref = decay_attention_reference(q, k, v)
    for mode in TORCH_MODES:
        check(decay_attention(q, k, v, mode=mode), ref, TOL[mode], f"+-50 keys {mode}")


@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("causal", [True, False])
def test_additive_complex_q_v(mode, causal):
    q, k, v = inputs(70, complex_=True)
    ref = decay_attention_reference(q, k, v, causal=causal)
    check(decay_attention(q, k, v, causal=causal, mode=mode), ref, TOL[mode], f"complex {mode} causal={causal}")


@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("causal", [True, False])
def test_additive_separate_log_decay(mode, causal):
    """No-share / MD-LRPE form: delta = exp(log_decay), k multiplies kbar (signed, like cos/sin factors)."""
    q, k, v = inputs(97)
    ld = torch.randn_like(k) * 20
    ref = decay_attention_reference(q, k, v, log_decay=ld, causal=causal)
    check(decay_attention(q, k, v, log_decay=ld, causal=causal, mode=mode), ref, TOL[mode], f"log_decay {mode}")
    # with log_decay = k and a unit multiplier it is eq. 7 itself
    shared = decay_attention(q, torch.ones_like(k), v, log_decay=k, causal=causal, mode=mode)
    check(shared, decay_attention_reference(q, k, v, causal=causal), TOL[mode], "log_decay=k, key=1 is eq. 7")


@pytest.mark.parametrize("mode", TORCH_MODES + ("auto",))
@pytest.mark.parametrize("L", [1, 7, 200])
def test_additive_noncausal_equals_eq8(mode, L):
    q, k, v = inputs(L, key_scale=20.0)
    s = k.double().exp().sum(-2, keepdim=True)                              # eq. 8: s = sum_t exp(k_t)
    kv = (k.double().exp() / s).transpose(-1, -2) @ v.double()
    ref = q.double() @ kv
    check(decay_attention(q, k, v, causal=False, mode=mode), ref, TOL[mode], f"eq. 8 {mode}")
    check(decay_attention_reference(q, k, v, causal=False), ref, 1e-12, "reference eq. 8")


def test_causal_additive_is_per_channel_causal_softmax():
    """Unrolled eq. 7: kv_t = sum_{s<=t} softmax_{s<=t}(k_{., i})_s v_s^T for every channel i."""
    q, k, v = inputs(33, dtype=torch.float64)
    L = k.shape[-2]
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    logits = k[..., None, :, :].expand(*k.shape[:-2], L, L, k.shape[-1])         # [t, s, i] = k_{s, i}
    w = torch.softmax(logits.masked_fill(~mask[..., None], -torch.inf), dim=-2)  # softmax over s <= t
    ref = torch.einsum("...ti,...tsi,...sj->...tj", q, w, v)
    check(decay_attention_reference(q, k, v), ref, 1e-12, "eq. 7 loop = causal softmax")


@pytest.mark.parametrize("L", [1, 2, 7, 64, 200])
@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("causal", [True, False])
def test_multiplicative_equals_eq2_scans(L, mode, causal):
    q, k, v = inputs(L)
    ld = log_decays(k)
    ld[..., 0] = 0.0          # lambda = 1 exactly
    ld[..., 1] = 30.0         # lambda ~ 1e-13
    ref = decay_attention_reference(q, k, v, decay="multiplicative", log_decay=ld, causal=causal)
    out = decay_attention(q, k, v, decay="multiplicative", log_decay=ld, causal=causal, mode=mode)
    check(out, ref, TOL[mode], f"multiplicative {mode} causal={causal} L={L}")


@pytest.mark.parametrize("mode", TORCH_MODES)
def test_multiplicative_noncausal_is_its_two_scans(mode):
    """Non-causal multiplicative = forward scan + backward scan (§3.1), each through linear_scan_reference."""
    q, k, v = inputs(90, dtype=torch.float64)
    ld = log_decays(k)
    lam = (-ld).exp()
    x = k[..., :, None] * v[..., None, :]                                         # k_t v_t^T   (L, dk, dv)
    a = lam[..., None].expand_as(x).reshape(*x.shape[:-3], x.shape[-3], -1)
    fwd = linear_scan_reference(a, x.reshape(*x.shape[:-3], x.shape[-3], -1)).reshape(x.shape)
    bwd = linear_scan_reference(a, x.reshape(*x.shape[:-3], x.shape[-3], -1), reverse=True).reshape(x.shape)
    ref = torch.einsum("...ti,...tij->...tj", q, fwd) + torch.einsum("...ti,...tij->...tj", q, bwd)
    out = decay_attention(q.float(), k.float(), v.float(), decay="multiplicative", log_decay=ld.float(), causal=False,
                          mode=mode)
    check(out, ref, TOL[mode], f"two scans {mode}")


@pytest.mark.parametrize("mode", TORCH_MODES + ("auto",))
@pytest.mark.parametrize("causal", [True, False])
def test_no_decay_is_plain_linear_attention(mode, causal):
    q, k, v = inputs(150, complex_=True)
    A = q.to(torch.complex128) @ k.to(torch.complex128).transpose(-1, -2)
    if causal:
        A = A.tril()
    ref = A @ v.to(torch.complex128)
    check(decay_attention(q, k, v, decay="none", causal=causal, mode=mode), ref, TOL[mode], f"none {mode}")


@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("causal", [True, False])
def test_multiplicative_one_decay_per_head(mode, causal):
    """log_decay of shape (..., L, 1): the same decay on every channel (Lightning Attention's setting)."""
    q, k, v = inputs(150)
    ld = log_decays(k[..., :1], 0.0, 0.5)
    ref = decay_attention_reference(q, k, v, decay="multiplicative", log_decay=ld.expand_as(k), causal=causal)
    out = decay_attention(q, k, v, decay="multiplicative", log_decay=ld, causal=causal, mode=mode)
    check(out, ref, TOL[mode], f"per-head decay {mode}")


def test_multiplicative_long_chunked():
    q, k, v = inputs(1500, B=1, H=2, dk=4, dv=4)
    ld = log_decays(k, 0.0, 0.2)
    ref = decay_attention_reference(q, k, v, decay="multiplicative", log_decay=ld)
    for mode in ("chunked", "parallel"):
        check(decay_attention(q, k, v, decay="multiplicative", log_decay=ld, mode=mode), ref, TOL[mode], mode)


# ---------------------------------------------------------------------------------------- gradients

def grads(fn, *tensors):
    tensors = [t.detach().clone().requires_grad_(True) for t in tensors]
    out = fn(*tensors)
    weight = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    (out * weight).real.sum().backward()
    return [t.grad for t in tensors]


@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("key_scale", [1.0, 50.0])
def test_additive_gradients(mode, causal, key_scale):
    q, k, v = inputs(75, key_scale=key_scale)
    k = k.clamp(-50, 50)
    got = grads(lambda q, k, v: decay_attention(q, k, v, causal=causal, mode=mode), q, k, v)
    ref = grads(lambda q, k, v: decay_attention_reference(q, k, v, causal=causal), q.double(), k.double(), v.double())
    for name, g, r in zip("qkv", got, ref):
        check(g, r, TOL[mode], f"d{name} {mode} causal={causal} keys x{key_scale}")


def test_additive_gradients_separate_log_decay():
    q, k, v = inputs(70)
    ld = torch.randn_like(k) * 5
    for mode in TORCH_MODES:
        got = grads(lambda q, k, v, d: decay_attention(q, k, v, log_decay=d, mode=mode), q, k, v, ld)
        ref = grads(lambda q, k, v, d: decay_attention_reference(q, k, v, log_decay=d), q.double(), k.double(),
                    v.double(), ld.double())
        for name, g, r in zip(("q", "k", "v", "log_decay"), got, ref):
            check(g, r, TOL[mode], f"d{name} {mode}")


@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("causal", [True, False])
def test_multiplicative_gradients(mode, causal):
    q, k, v = inputs(80)
    ld = log_decays(k)
    got = grads(lambda q, k, v, d: decay_attention(q, k, v, decay="multiplicative", log_decay=d, causal=causal,
                                                   mode=mode), q, k, v, ld)
    ref = grads(lambda q, k, v, d: decay_attention_reference(q, k, v, decay="multiplicative", log_decay=d,
                                                             causal=causal), q.double(), k.double(), v.double(),
                ld.double())
    for name, g, r in zip(("q", "k", "v", "log_decay"), got, ref):
        check(g, r, TOL[mode], f"d{name} {mode}")


# ---------------------------------------------------------------------------------------- Theorem 3.1

def unrolled(a, x, reverse=False):
    """y_t = a_t y_{t-1} + x_t, y_0 = 0 (eq. 3), float64 loop; ``reverse``: y_t = a_t y_{t+1} + x_t."""
    y, out = torch.zeros_like(x[..., 0]), [None] * x.shape[-1]
    for t in (range(x.shape[-1] - 1, -1, -1) if reverse else range(x.shape[-1])):
        y = a[..., t] * y + x[..., t]
        out[t] = y
    return torch.stack(out, -1)


def prop32_decay(delta, kind):
    """a_t of Proposition 3.2."""
    if kind == "multiplicative":
        return (-delta).exp()
    g = delta.cumsum(-1)
    return torch.cat([torch.zeros_like(g[..., :1]), g[..., :-1]], -1) / g          # g_{t-1} / g_t


@pytest.mark.parametrize("kind", ["additive", "multiplicative"])
@pytest.mark.parametrize("L", [1, 2, 9, 60])
def test_theorem_31_unrolled_recurrence_is_c_matrix(kind, L):
    delta = torch.rand(3, L, dtype=torch.float64) * 2 + 0.01
    x = torch.randn(3, L, dtype=torch.float64)
    C = decay_coefficients(delta, kind)
    check(torch.einsum("...ts,...s->...t", C, x), unrolled(prop32_decay(delta, kind), x), 1e-12, f"Thm 3.1 {kind}")
    # c_ts = g_s / g_t, c_tt = 1, zero above the diagonal
    assert torch.equal(C.triu(1), torch.zeros_like(C))
    check(torch.diagonal(C, dim1=-2, dim2=-1), torch.ones(3, L, dtype=torch.float64), 1e-12, "c_tt = 1")
    g = delta.cumsum(-1) if kind == "additive" else delta.cumsum(-1).exp()
    check(C, (g[..., None, :] / g[..., :, None]).tril(), 1e-10, "c_ts = g_s / g_t")


def test_noncausal_additive_coefficients_are_one_scan():
    """c_ts = g_s / g_n: every position reads the last state of the single causal scan."""
    delta = torch.rand(2, 40, dtype=torch.float64) + 0.1
    x = torch.randn(2, 40, dtype=torch.float64)
    y = torch.einsum("...ts,...s->...t", decay_coefficients(delta, "additive", causal=False), x)
    last = unrolled(prop32_decay(delta, "additive"), x)[..., -1:]
    check(y, last.expand_as(y), 1e-12, "non-causal additive = final state everywhere")


def test_noncausal_multiplicative_coefficients_are_two_scans():
    delta = torch.rand(2, 40, dtype=torch.float64) * 2
    x = torch.randn(2, 40, dtype=torch.float64)
    a = prop32_decay(delta, "multiplicative")
    y = torch.einsum("...ts,...s->...t", decay_coefficients(delta, "multiplicative", causal=False), x)
    check(y, unrolled(a, x) + unrolled(a, x, reverse=True), 1e-12, "forward + backward scan")


def test_eq7_is_theorem_31_with_additive_decay():
    """One channel of eq. 7: o_t = sum_s c_ts kbar_s v_s with delta = exp(k), kbar_s = delta_s / g_s."""
    k = torch.randn(1, 1, 50, 1, dtype=torch.float64) * 3
    v = torch.randn(1, 1, 50, 1, dtype=torch.float64)
    delta = k[0, 0, :, 0].exp()
    C = decay_coefficients(delta, "additive")
    x = delta / delta.cumsum(0) * v[0, 0, :, 0]
    out = decay_attention(torch.ones_like(k), k, v, mode="recurrent")
    check(out[0, 0, :, 0], C @ x, 1e-12, "eq. 7 through c_ts")


# ---------------------------------------------------------------------------------------- bad input

def test_bad_inputs_are_named():
    q, k, v = inputs(5)
    with pytest.raises(ValueError, match="q: expected the shape of k"):
        decay_attention(q[..., :3], k, v)
    with pytest.raises(ValueError, match="v: expected shape"):
        decay_attention(q, k, v[..., :4, :])
    with pytest.raises(TypeError, match="k: expected a real tensor"):
        decay_attention(q, torch.complex(k, k), v)
    with pytest.raises(ValueError, match="log_decay: multiplicative decay needs log_decay"):
        decay_attention(q, k, v, decay="multiplicative")
    with pytest.raises(ValueError, match="log_decay >= 0"):
        decay_attention(q, k, v, decay="multiplicative", log_decay=-torch.ones_like(k))
    with pytest.raises(ValueError, match="log_decay: expected the shape of k"):
        decay_attention(q, k, v, log_decay=k[..., :2])
    with pytest.raises(ValueError, match="mode must be one of"):
        decay_attention(q, k, v, mode="fast")
    with pytest.raises(ValueError, match="decay: expected one of"):
        decay_attention(q, k, v, decay="exp")
    with pytest.raises(NotImplementedError, match="runs the causal decays.*causal=False"):
        decay_attention(q, k, v, causal=False, mode="triton")
    with pytest.raises(ValueError, match="delta_t >= 0"):
        decay_coefficients(-torch.ones(4), "additive")
    with pytest.raises(ValueError, match="kind"):
        decay_coefficients(torch.ones(4), "both")


def test_non_finite_never_passes():
    q, k, v = inputs(6)
    v[0, 0, 2, 1] = torch.inf
    for mode in TORCH_MODES:
        with pytest.raises(FloatingPointError, match="decay_attention"):
            decay_attention(q, k, v, mode=mode)


# ----------------------------------------------------------------------------- causal decays on GateLoop's loop

NUMBA_CASES = [("additive", False), ("additive", True), ("multiplicative", False), ("multiplicative", True),
               ("none", False)]


def _decay_args(decay, with_log_decay, k, per_head=False):
    if decay == "multiplicative":
        return log_decays(k[..., :1] if per_head else k)
    return log_decays(k, -3.0, 3.0) if (decay == "additive" and with_log_decay) else None


@pytest.mark.parametrize("L", [1, 2, 7, 64, 259, 4099])
@pytest.mark.parametrize("decay,flag", NUMBA_CASES)
def test_causal_decays_on_the_gateloop_loop(L, decay, flag):
    """``mode="numba"`` (auto on CPU): additive (shared or given log-decay), multiplicative (per channel or per
    head), none, equal to the float64 eq. 7 / eq. 2 loops, keys of +-80, forward and backward."""
    B, H = (1, 1) if L > 1000 else (2, 3)
    q, k, v = inputs(L, B=B, H=H, key_scale=80.0 if L > 1 else 1.0)
    k = k.clamp(-80, 80)
    ld = _decay_args(decay, flag, k, per_head=decay == "multiplicative" and flag)
    if decay == "additive" and flag:
        ld = ld * 25                                                 # log-decays of +-75 as well
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    ld_in = None if ld is None else ld.clone().requires_grad_()
    out = decay_attention(*ins, decay=decay, log_decay=ld_in, mode="numba")
    ref_ins = [t.double().requires_grad_() for t in (q, k, v)]
    ld_ref = None if ld is None else ld.double().requires_grad_()
    ref = decay_attention_reference(*ref_ins, decay=decay, log_decay=ld_ref)
    check(out, ref, 1e-5, f"{decay} (log_decay given: {flag}) numba L={L}")
    if L > 300:
        return
    w = torch.randn_like(ref)
    (out * w.float()).sum().backward()
    (ref * w).sum().backward()
    for name, a, b in zip("qkv", ins, ref_ins):
        if name == "k" and decay == "additive" and not flag and L == 1:   # kbar_1 = 1 whatever k_1: dk = 0
            assert a.grad.abs().max() < 1e-6
            continue
        check(a.grad, b.grad, 1e-4, f"{decay} numba d{name} L={L}")
    if ld is not None and not (decay == "additive" and L == 1):
        check(ld_in.grad, ld_ref.grad, 1e-4, f"{decay} numba dlog_decay L={L}")


def test_numba_is_auto_on_cpu_for_causal_decays_and_complex_inputs():
    q, k, v = inputs(50, complex_=True)
    ref = decay_attention_reference(q, k, v)
    check(decay_attention(q, k, v, mode="numba"), ref, 1e-5, "complex q, v on the loop")
    assert torch.equal(decay_attention(q, k, v), decay_attention(q, k, v, mode="numba"))
    with pytest.raises(NotImplementedError, match="causal"):
        decay_attention(q, k, v, causal=False, mode="numba")


@pytest.mark.parametrize("path", ["numba", "torch"])
def test_additive_transitions_and_their_written_out_gradient(path, monkeypatch):
    """``kbar_t = exp(d_t)/s_t`` and ``a_t = s_{t-1}/s_t`` (eq. 7) against the plain float64 formula, and the
    hand-written backward against autograd (gradcheck), in the compiled and the torch path."""
    from seqlab.kernels import numba as compiled
    from seqlab.ops.decay.on_gateloop import _additive_transitions

    if path == "torch":
        monkeypatch.setattr(compiled, "HAVE_NUMBA", False)
    d = torch.randn(2, 3, 37, 4, dtype=torch.float64) * 30
    d[0, 0, 5:9] = torch.tensor([80.0, -80.0, 79.0, -75.0])[:, None]
    kbar, a = _additive_transitions(d)
    s = d.exp().cumsum(-2)
    check(kbar, d.exp() / s, 1e-12, f"kbar ({path})")
    check(a[..., 1:, :], s[..., :-1, :] / s[..., 1:, :], 1e-12, f"a ({path})")
    assert (a[..., 0, :] == 0).all()
    x = (torch.randn(1, 2, 9, 3, dtype=torch.float64) * 5).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: _additive_transitions(t), (x,))


def test_row_extremes_are_amax_and_amin_along_the_sequence():
    """The compiled pass that gives the additive transitions their spread check and ``max d``: torch's
    ``amax(-2)`` / ``amin(-2)`` for any leading dimensions, a strided input, float32 and float64, L = 1."""
    from seqlab.ops.decay.numba import row_extremes

    torch.manual_seed(0)
    for d in (torch.randn(2, 3, 37, 4) * 30, torch.randn(5, 3, dtype=torch.float64),
              torch.randn(2, 9, 6).transpose(-1, -2), torch.randn(3, 1, 16)):
        hi, lo = row_extremes(d)
        assert hi.dtype == d.dtype and hi.shape == d.amax(-2).shape
        assert torch.equal(hi, d.amax(-2)) and torch.equal(lo, d.amin(-2))


@pytest.mark.parametrize("path", ["numba", "torch"])
def test_additive_transitions_beyond_float64_range_use_the_log_domain(path, monkeypatch):
    from seqlab.kernels import numba as compiled
    from seqlab.ops.decay.on_gateloop import _additive_transitions

    if path == "torch":
        monkeypatch.setattr(compiled, "HAVE_NUMBA", False)
    d = torch.tensor([[-500.0], [400.0], [390.0]], dtype=torch.float64)     # a spread of 900: exp(-900) = 0
    kbar, a = _additive_transitions(d)
    z = torch.logcumsumexp(d, 0)
    check(kbar, (d - z).exp(), 1e-12, "kbar, log domain")
    assert torch.isfinite(kbar).all() and torch.isfinite(a).all()


# ---- h0 / return_state: a sequence read in parts equals it read whole ------------------------

STATE_CASES = [  # (decay, log_decay: None | "shared" (additive: the no-share ablation) | "channel" | "head")
    ("additive", None), ("additive", "channel"), ("multiplicative", "channel"), ("multiplicative", "head"),
    ("none", None),
]


def _state_inputs(decay, ld, L, seed, complex_=False):
    torch.manual_seed(seed)
    q, k, v = inputs(L, dk=6, dv=5, key_scale=4.0, complex_=complex_, dtype=torch.float64)
    log_decay = None
    if ld == "channel":
        log_decay = log_decays(k) if decay == "multiplicative" else torch.randn_like(k) * 4
    elif ld == "head":
        log_decay = log_decays(k[..., :1])
    return q, k, v, log_decay


def _part(t, a, b):
    return None if t is None else t[..., a:b, :]


def _in_parts(q, k, v, log_decay, cuts, decay, mode, h0=None):
    outs, state = [], h0
    for a, b in zip(cuts[:-1], cuts[1:]):
        o, state = decay_attention(_part(q, a, b), _part(k, a, b), _part(v, a, b), decay=decay,
                                   log_decay=_part(log_decay, a, b), mode=mode, h0=state, return_state=True)
        outs.append(o)
    return torch.cat(outs, -2), state


@pytest.mark.parametrize("mode", TORCH_MODES + ("numba",))
@pytest.mark.parametrize("decay,ld", STATE_CASES)
@pytest.mark.parametrize("complex_", [False, True])
def test_state_carries_a_sequence_read_in_parts(mode, decay, ld, complex_):
    """o(a + b) == o(a) then o(b) from a's state (float64, 1e-9), on fresh inputs of awkward lengths; the
    final state equals the one the whole sequence leaves, and a single token at a time gives the same."""
    if mode == "numba":
        pytest.importorskip("numba")
    L = 53
    q, k, v, log_decay = _state_inputs(decay, ld, L, seed=hash((mode, decay, ld, complex_)) % 1000,
                                       complex_=complex_)
    whole = decay_attention(q, k, v, decay=decay, log_decay=log_decay, mode=mode)
    ref, state_whole = decay_attention(q, k, v, decay=decay, log_decay=log_decay, mode=mode, return_state=True)
    check(ref, whole, 1e-9, f"{decay} {mode}: return_state changes nothing")
    for cuts in ([0, 17, L], [0, 1, 2, 30, 31, L], [0, 0, 5, 5, L]):
        out, state = _in_parts(q, k, v, log_decay, cuts, decay, mode)
        check(out, whole, 1e-9, f"{decay} {mode} parts {cuts}")
        for s, s_ref in zip(*(x if decay == "additive" else (x,) for x in (state, state_whole))):
            check(s, s_ref, 1e-9, f"{decay} {mode} final state, parts {cuts}")
    if mode == "recurrent":
        steps, _ = _in_parts(q, k, v, log_decay, list(range(L + 1)), decay, mode)
        check(steps, whole, 1e-9, f"{decay} one token at a time")


def test_state_of_additive_decay_is_the_normalised_sum_and_its_log_normaliser():
    """(kv, log s): kv = sum_s softmax_s(k) v_s^T per channel, log s = logsumexp(k) (eq. 7 unrolled)."""
    q, k, v, _ = _state_inputs("additive", None, 23, seed=5)
    _, (kv, log_s) = decay_attention(q, k, v, return_state=True)
    check(log_s, torch.logsumexp(k, -2), 1e-12, "log s")
    check(kv, torch.einsum("...ti,...tj->...ij", torch.softmax(k, -2), v), 1e-12, "kv")
    _, kv_m = decay_attention(q, k, v, decay="none", return_state=True)
    check(kv_m, k.transpose(-1, -2) @ v, 1e-12, "none: kv = K^T V")


@pytest.mark.parametrize("mode", ["auto", "recurrent", "parallel", "chunked"])
def test_non_causal_attention_has_no_state(mode):
    q, k, v, _ = _state_inputs("additive", None, 9, seed=6)
    with pytest.raises(NotImplementedError, match=f"causal=False, mode='{mode}'"):
        decay_attention(q, k, v, causal=False, mode=mode, return_state=True)
    _, s = decay_attention(q, k, v, return_state=True)
    with pytest.raises(NotImplementedError, match="no state"):
        decay_attention(q, k, v, causal=False, mode=mode, h0=s)


def test_bad_states_are_named():
    q, k, v, _ = _state_inputs("additive", None, 9, seed=7)
    _, (kv, log_s) = decay_attention(q, k, v, return_state=True)
    with pytest.raises(ValueError, match="pair"):
        decay_attention(q, k, v, h0=kv)
    with pytest.raises(ValueError, match="log_s"):
        decay_attention(q, k, v, h0=(kv, log_s[..., :1]))
    with pytest.raises(ValueError, match="kv"):
        decay_attention(q, k, v, decay="none", h0=kv[..., :2])
    with pytest.raises(FloatingPointError, match="h0"):
        decay_attention(q, k, v, h0=(kv * torch.nan, log_s))


def test_empty_part_keeps_the_state_and_gradients_reach_h0():
    q, k, v, _ = _state_inputs("additive", None, 12, seed=8)
    _, s = decay_attention(q[..., :5, :], k[..., :5, :], v[..., :5, :], return_state=True)
    o, s2 = decay_attention(q[..., :0, :], k[..., :0, :], v[..., :0, :], h0=s, return_state=True)
    assert o.shape == (2, 3, 0, 5) and s2[0] is s[0] and s2[1] is s[1]
    kv0 = s[0].clone().requires_grad_()
    torch.autograd.gradcheck(lambda kv: decay_attention(q[..., 5:, :], k[..., 5:, :], v[..., 5:, :],
                                                        mode="chunked", h0=(kv, s[1])), (kv0,))


@pytest.mark.parametrize("mode", TORCH_MODES + ("numba",))
def test_state_with_keys_of_plus_minus_50(mode):
    """The state's log-normaliser keeps every exponent <= 0: keys of +-50, float32 in parts vs float64 whole."""
    if mode == "numba":
        pytest.importorskip("numba")
    torch.manual_seed(12)
    q, k, v = inputs(103, key_scale=50.0)
    k = k.clamp(-50, 50)
    ref = decay_attention(q.double(), k.double(), v.double(), mode="recurrent")
    out, (kv, log_s) = _in_parts(q, k, v, None, [0, 13, 14, 103], "additive", mode)
    check(out, ref.float(), 1e-5, f"additive {mode} keys +-50 in parts")
    check(log_s, torch.logsumexp(k.double(), -2).float(), 1e-6, f"{mode} log s")
