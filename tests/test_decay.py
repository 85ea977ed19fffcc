"""decay_attention and decay_coefficients (paper 003 §2-3, eq. 2, 7, 8, Theorem 3.1, Prop. 3.2)
against float64 loops written as the paper writes them."""
import pytest
import torch

from conftest import check
from seqlab.ops import decay_attention, decay_attention_reference, decay_coefficients, linear_scan_reference

TORCH_MODES = ("recurrent", "parallel", "chunked")
# the recurrent mode is a scan (1e-5); the cumulative and chunked forms are matrix forms (1e-4, design.md §4)
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
    with pytest.raises(NotImplementedError, match="additive causal"):
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
