"""Baselines: linear attention's three forms vs the paper's recurrence (float64 loop), softmax attention vs
its formula, causality of both language models, shapes, and clear errors."""
import pytest
import torch
import torch.nn.functional as F

from helpers import check
from seqlab import models
from seqlab.layers.attention import (LinearTransformerBlock, TransformerBlock, elu_feature_map, linear_attention,
                                     taylor_feature_map)
from test_decoding import _check_parts_and_steps, _floats, _lm, _tokens


def elu_plus_one(t):
    return torch.where(t > 0, t + 1, torch.exp(t.clamp(max=0)))        # elu(x) + 1, no cancellation


def linear_attention_loop(q, k, v, causal=True, eps=1e-6, phi=elu_plus_one):
    """Katharopoulos et al. 2020 §3.3 as written: S_i = S_{i-1} + phi(k_i) v_i^T, z_i = z_{i-1} + phi(k_i),
    y_i = phi(q_i)^T S_i / phi(q_i)^T z_i (non-causal: the sums over all j). float64, one step at a time."""
    q, k, v = q.double(), k.double(), v.double()
    fq, fk = phi(q), phi(k)
    L = q.shape[-2]
    S = torch.zeros(*fq.shape[:-2], fq.shape[-1], v.shape[-1], dtype=torch.float64)
    z = torch.zeros(*fq.shape[:-2], fq.shape[-1], dtype=torch.float64)
    if not causal:
        S = torch.einsum("...ld,...le->...de", fk, v)
        z = fk.sum(-2)
    out = []
    for i in range(L):
        if causal:
            S = S + fk[..., i, :, None] * v[..., i, None, :]
            z = z + fk[..., i, :]
        num = (fq[..., i, :, None] * S).sum(-2)
        den = (fq[..., i, :] * z).sum(-1).clamp_min(eps)
        out.append(num / den[..., None])
    return torch.stack(out, dim=-2)


@pytest.mark.parametrize("L", [1, 2, 7, 64, 100])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("mode", ["quadratic", "cumsum", "chunked", "numba", "auto"])
def test_linear_attention_modes_match_the_recurrence(L, causal, mode):
    if mode == "numba" and not causal:
        pytest.skip("the numba mode is the causal recurrence")
    B, H, d, e = 2, 3, 8, 5
    q, k, v = torch.randn(B, H, L, d), torch.randn(B, H, L, d), torch.randn(B, H, L, e)
    ref = linear_attention_loop(q, k, v, causal)
    out = linear_attention(q, k, v, causal=causal, mode=mode, chunk=16)      # chunk 16: L=7, 100 pad the last chunk
    check(out, ref.float(), 1e-4, f"{mode} causal={causal} L={L}")


@pytest.mark.parametrize("mode", ["quadratic", "cumsum", "chunked", "numba", "triton"])
def test_linear_attention_extreme_keys_and_gradients(mode):
    if mode == "triton":
        pytest.importorskip("triton")     # GateLoop's Triton kernels in the CPU interpreter
    B, H, L, d, e = 2, 2, 37, 4, 3
    q = torch.randn(B, H, L, d) * 3
    k = torch.randn(B, H, L, d)
    k[..., ::5, :] = 50.0                  # keys of +-50: features 51 and exp(-51) (underflow towards 0)
    k[..., 1::5, :] = -50.0
    v = torch.randn(B, H, L, e)
    qr, kr, vr = (t.double().requires_grad_() for t in (q, k, v))
    ref = linear_attention_loop(qr, kr, vr)
    qf, kf, vf = (t.clone().requires_grad_() for t in (q, k, v))
    out = linear_attention(qf, kf, vf, mode=mode, chunk=8)
    check(out, ref.detach().float(), 1e-4, f"{mode} forward, extreme keys")
    w = torch.randn_like(ref)
    (ref * w).sum().backward()
    (out * w.float()).sum().backward()
    for name, a, b in (("q", qf, qr), ("k", kf, kr), ("v", vf, vr)):
        check(a.grad, b.grad.float(), 1e-4, f"{mode} d/d{name}")


def test_linear_attention_never_divides_by_zero():
    q = torch.full((1, 1, 9, 4), -200.0)   # phi(q) = exp(-200) = 0 in float32: every denominator is 0
    k, v = torch.randn(1, 1, 9, 4), torch.randn(1, 1, 9, 2)
    for mode in ("quadratic", "cumsum", "chunked", "numba"):
        out = linear_attention(q, k, v, mode=mode)
        assert torch.isfinite(out).all(), mode


def test_elu_feature_map_is_positive():
    x = torch.linspace(-60, 60, 1001, dtype=torch.float64)
    phi = elu_feature_map(x)
    assert (phi > 0).all()
    assert torch.allclose(phi[x >= 0], F.elu(x[x >= 0]) + 1)
    assert torch.allclose(phi[x < 0], F.elu(x[x < 0]) + 1)           # the same function as elu(x) + 1 ...
    assert torch.allclose(phi[x < 0], torch.exp(x[x < 0]), rtol=1e-12, atol=0)   # ... without its cancellation


def test_taylor_feature_map_is_the_second_order_expansion_of_exp():
    """Based (arXiv 2402.18668): phi(q).phi(k) = 1 + s + s^2 / 2, s = q.k / sqrt(d), > 0 for every s."""
    q, k = torch.randn(50, 6, dtype=torch.float64) * 3, torch.randn(50, 6, dtype=torch.float64) * 3
    s = (q * k).sum(-1) / 6 ** 0.5
    fq, fk = taylor_feature_map(q), taylor_feature_map(k)
    assert fq.shape == (50, 1 + 6 + 36)
    check((fq * fk).sum(-1), 1 + s + s ** 2 / 2, 1e-12, "phi(q).phi(k)")
    assert ((fq * fk).sum(-1) >= 0.5).all()                  # min over s of 1 + s + s^2/2 is 1/2 (at s = -1)


@pytest.mark.parametrize("mode", ["quadratic", "cumsum", "chunked", "numba"])
def test_linear_attention_with_taylor_features_matches_the_recurrence(mode):
    q, k, v = torch.randn(2, 3, 29, 4), torch.randn(2, 3, 29, 4), torch.randn(2, 3, 29, 5)
    ref = linear_attention_loop(q, k, v, phi=taylor_feature_map)
    check(linear_attention(q, k, v, mode=mode, chunk=8, feature_map=taylor_feature_map), ref.float(), 1e-4, mode)


def lt_state_floats(n_layers, d_model, n_heads, feature_map="elu", feature_dim=None, short_conv=0):
    """The Linear Transformer's state written out: per layer and head [S | z] of phi x (d + 1), and the conv's
    last short_conv - 1 inputs."""
    f = feature_dim or d_model // n_heads
    phi = f if feature_map == "elu" else 1 + f + f * f
    return n_layers * (n_heads * phi * (d_model // n_heads + 1) + max(short_conv - 1, 0) * d_model)


@pytest.mark.parametrize("knobs", [dict(), dict(feature_dim=6), dict(feature_map="taylor"),
                                   dict(feature_map="taylor", feature_dim=3, short_conv=4),
                                   dict(feature_map="elu", feature_dim=5, short_conv=3, n_heads=4)])
def test_linear_transformer_state_knobs_decode_and_are_counted(knobs):
    """Each setting of feature_map, feature_dim, n_heads and short_conv: forward == prefill in parts == steps, and
    state_size equals the floats in the state tensors and the formula."""
    model = _lm("linear-transformer", **knobs)
    s = _check_parts_and_steps(model, _tokens(length=13), 6, f"linear-transformer {knobs}")
    heads = knobs.get("n_heads", 2)
    assert model.state_size(13) == _floats(s) == lt_state_floats(2, 8, **{"n_heads": heads, **knobs})
    assert model.blocks[0].qkv.out_features == 2 * heads * knobs.get("feature_dim", 8 // heads) + 8


def test_linear_transformer_knobs_are_checked():
    with pytest.raises(ValueError, match="feature_map: expected one of 'elu', 'taylor', got 'relu'"):
        models.build("linear-transformer", vocab_size=5, feature_map="relu")
    with pytest.raises(ValueError, match=r"feature_dim: expected None \(the head width\) or a positive int, got 0"):
        models.build("linear-transformer", vocab_size=5, feature_dim=0)


@pytest.mark.parametrize("causal", [True, False])
def test_transformer_block_is_softmax_attention(causal):
    torch.manual_seed(1)
    block = TransformerBlock(16, heads=4, causal=causal).double()
    x = torch.randn(3, 11, 16, dtype=torch.float64)
    q, k, v = block.heads_qkv(block.norm1(x))
    scores = q @ k.transpose(-1, -2) / (16 // 4) ** 0.5
    if causal:
        scores = scores + torch.full((11, 11), float("-inf"), dtype=torch.float64).triu(1)
    A = scores.softmax(-1)                                                # softmax(QK^T/sqrt(d) + mask)
    check(block.attention_matrix(x), A, 1e-12, "attention_matrix")
    y = (A @ v).transpose(1, 2).reshape(3, 11, 16)
    h = x + block.out(y)
    ref = h + block.mlp(block.norm2(h))
    check(block(x), ref, 1e-10, "TransformerBlock forward")


def test_linear_block_attention_matrix_reproduces_its_mixing():
    block = LinearTransformerBlock(8, heads=2).double()
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    q, k, v = block.heads_qkv(block.norm1(x))
    check(block.attention_matrix(x) @ v, linear_attention(q, k, v), 1e-10, "effective attention matrix")


@pytest.mark.parametrize("name", ["transformer", "linear-transformer"])
def test_language_models_are_causal(name):
    model = models.build(name, vocab_size=13, d_model=16, n_layers=2, n_heads=2).eval()
    tokens = torch.randint(0, 13, (2, 20))
    logits = model(tokens)
    assert logits.shape == (2, 20, 13)
    for t in (0, 7, 18):
        changed = tokens.clone()
        changed[:, t + 1:] = (tokens[:, t + 1:] + 1) % 13            # every future token differs
        other = model(changed)
        assert (other[:, : t + 1] - logits[:, : t + 1]).abs().max() < 1e-6, f"{name}: position <= {t} saw the future"
        assert not torch.allclose(other[:, t + 1:], logits[:, t + 1:]), "the future positions must change"


@pytest.mark.parametrize("name", ["transformer", "linear-transformer"])
@pytest.mark.parametrize("pool", ["mean", "last"])
def test_classifiers_shapes_and_bidirectionality(name, pool):
    causal_clf = models.build(name, vocab_size=7, num_classes=4, d_model=16, n_layers=1, n_heads=2, pool=pool)
    tokens = torch.randint(0, 7, (3, 12))
    assert causal_clf(tokens).shape == (3, 4)
    bi = models.build(name, vocab_size=7, num_classes=4, d_model=16, n_layers=1, n_heads=2, causal=False, pool=pool).eval()
    h = bi.features(tokens)
    changed = tokens.clone()
    changed[:, -1] = (tokens[:, -1] + 1) % 7
    assert not torch.allclose(bi.features(changed)[:, 0], h[:, 0]), "a bidirectional model's first position sees the last"


def test_baseline_errors_are_clear():
    with pytest.raises(ValueError, match="heads: expected a positive int dividing d_model=16, got 3"):
        models.build("transformer", vocab_size=5, d_model=16, n_heads=3)
    with pytest.raises(ValueError, match="language model .* must be causal"):
        models.build("linear-transformer", vocab_size=5, causal=False)
    with pytest.raises(ValueError, match="max_len: seq_len 100 is longer than max_len 50"):
        models.build("transformer", vocab_size=5, seq_len=100, max_len=50)
    with pytest.raises(ValueError, match="pool: expected 'mean' or 'last', got 'cls'"):
        models.build("transformer", vocab_size=5, num_classes=2, pool="cls")
    with pytest.raises(TypeError, match="unknown config key 'widht'; valid keys: d_model"):
        models.build("transformer", vocab_size=5, widht=3)
    model = models.build("transformer", vocab_size=5, d_model=8, n_heads=2, max_len=10)
    with pytest.raises(ValueError, match="length 11 exceeds this model's max_len=10"):
        model(torch.zeros(1, 11, dtype=torch.long))
    with pytest.raises(ValueError, match=r"v: expected shape"):
        linear_attention(torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 6, 3))
    with pytest.raises(ValueError, match="mode must be one of"):
        linear_attention(torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3), mode="fast")


def test_models_default_max_len_grows_with_seq_len():
    assert models.build("transformer", vocab_size=5).max_len == 512
    assert models.build("transformer", vocab_size=5, seq_len=1000).max_len == 1000
    assert models.build("linear-transformer", vocab_size=5, positions="learned", seq_len=1000).max_len == 1000
    assert models.build("linear-transformer", vocab_size=5, seq_len=1000).max_len is None     # sinusoids: no cap
