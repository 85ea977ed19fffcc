"""LightNet layers and model (paper 003 §4, Fig. 3, eq. 7-9, Appendix A.2)."""
import pytest
import torch

from helpers import check
from seqlab.layers import LightNetAttention
from seqlab.models import build
from seqlab.ops import decay_attention, md_lrpe_phases

ABLATIONS = [dict(), dict(tpe=False), dict(lrpe=False), dict(decay="none"), dict(decay="multiplicative"),
             dict(share=False), dict(norm=False, gate_rank=2)]


@pytest.mark.parametrize("cfg", ABLATIONS)
def test_causal_lm_never_sees_the_future(cfg):
    model = build("lightnet", vocab_size=11, d_model=16, n_layers=2, n_heads=2, **cfg).eval()
    x = torch.randint(0, 11, (2, 23))
    y = model(x)
    assert y.shape == (2, 23, 11) and torch.isfinite(y).all()
    x2 = x.clone()
    x2[:, 15:] = (x2[:, 15:] + 3) % 11
    check(model(x2)[:, :15], y[:, :15], 1e-6, f"prefix unchanged {cfg}")
    assert (model(x2)[:, 15:] - y[:, 15:]).abs().max() > 1e-4, "the changed tokens must matter"


@pytest.mark.parametrize("cfg", ABLATIONS)
def test_grid_classifier(cfg):
    model = build("lightnet", vocab_size=20, num_classes=10, seq_len=16, d_model=16, n_layers=1, n_heads=2, **cfg)
    assert model.grid == (4, 4)
    x = torch.randint(0, 20, (3, 16))
    out = model(x)
    assert out.shape == (3, 10) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_additive_noncausal_is_permutation_invariant_without_positions():
    """§4.2: eq. 8 sums over all tokens; without TPE and LRPE a mean-pooled classifier cannot see order."""
    torch.manual_seed(0)
    kw = dict(vocab_size=20, num_classes=5, grid=(4, 4), d_model=16, n_layers=2, n_heads=2)
    plain = build("lightnet", tpe=False, lrpe=False, **kw).eval()
    x = torch.randint(0, 20, (2, 16))
    perm = torch.randperm(16)
    check(plain(x[:, perm]), plain(x), 1e-5, "permuted tokens, no positions")
    for cfg in (dict(tpe=True, lrpe=False), dict(tpe=False, lrpe=True)):
        torch.manual_seed(0)
        model = build("lightnet", **cfg, **kw).eval()
        with torch.no_grad():   # make the TPE projection large enough to matter at init
            for m in model.modules():
                if hasattr(m, "decay_logit"):
                    m.out.weight.normal_(std=1.0)
        assert (model(x[:, perm]) - model(x)).abs().max() > 1e-4, f"{cfg} must see positions"


def test_lrpe_in_lna_is_appendix_a2():
    """o_t = sum_s sum_i q_ti cos((phi_t - phi_s)_i) softmax_s(k_{., i}) v_s (non-causal, Appendix A.2)."""
    torch.manual_seed(0)
    shape = (3, 4)
    lna = LightNetAttention(16, 2, causal=False, shape=shape, lrpe_base=10.0).double()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    q2, k2, v, ld = lna.mixer_inputs(x)
    out = decay_attention(q2, k2, v, log_decay=ld, causal=False)
    # the same from the plain q, k: explicit relative cosines
    q = torch.nn.functional.silu(lna.heads(lna.q(x)))
    k = lna.heads(lna.k(x))
    phi = md_lrpe_phases(shape, 8, base=10.0, dtype=torch.float64)                 # (N, dh)
    cos = torch.cos(phi[:, None, :] - phi[None, :, :])                              # [t, s, i]
    w = torch.softmax(k, dim=-2)                                                    # softmax over s, per channel
    ref = torch.einsum("bhti,tsi,bhsi,bhsj->bhtj", q, cos, w, v)
    check(out, ref, 1e-10, "LRPE through log_decay and the key multiplier")


def test_causal_lrpe_is_relative_in_lna():
    """Causal too: o_t = sum_{s<=t} sum_i q_ti cos((t - s) theta_i) exp(k_si) / sum_{j<=t} exp(k_ji) v_s."""
    torch.manual_seed(0)
    lna = LightNetAttention(8, 1, causal=True, lrpe_base=10.0).double()
    x = torch.randn(1, 9, 8, dtype=torch.float64)
    q2, k2, v, ld = lna.mixer_inputs(x)
    out = decay_attention(q2, k2, v, log_decay=ld, causal=True, mode="recurrent")
    q, k = torch.nn.functional.silu(lna.heads(lna.q(x))), lna.heads(lna.k(x))
    phi = md_lrpe_phases((9,), 8, base=10.0, dtype=torch.float64)
    cos = torch.cos(phi[:, None, :] - phi[None, :, :])
    mask = torch.ones(9, 9, dtype=torch.bool).tril()[..., None]
    w = torch.softmax(k[..., None, :, :].expand(1, 1, 9, 9, 8).masked_fill(~mask, -torch.inf), dim=-2)   # [t, s, i]
    ref = torch.einsum("bhti,tsi,bhtsi,bhsj->bhtj", q, cos, w, v)
    check(out, ref, 1e-10, "causal LRPE")


def test_build_errors_are_clear():
    with pytest.raises(ValueError, match="grid: expected prod"):
        build("lightnet", vocab_size=5, num_classes=3, seq_len=16, grid=(3, 4))
    with pytest.raises(ValueError, match="causal language model reads a 1-D"):
        build("lightnet", vocab_size=5, grid=(4, 4))
    with pytest.raises(ValueError, match="divisible by the grid"):
        build("lightnet", vocab_size=5, num_classes=3, grid=(2, 2, 2), d_model=16, n_heads=4)
    model = build("lightnet", vocab_size=5, num_classes=3, grid=(4, 4), d_model=16, n_heads=2)
    with pytest.raises(ValueError, match="tokens"):
        model(torch.randint(0, 5, (1, 12)))


@pytest.mark.parametrize("cfg", [dict(), dict(decay="multiplicative"), dict(decay="none"), dict(share=False)])
@pytest.mark.parametrize("classifier", [False, True])
def test_readout_attention_matrix_reproduces_the_mixer(cfg, classifier):
    """seqlab.readout.lightnet_attention_matrix: o_t = sum_s A[t, s] v_s for the layer's own q, k, v."""
    from seqlab import readout

    model = build("lightnet", vocab_size=20, num_classes=10 if classifier else None, grid=(4, 4) if classifier else None,
                  d_model=16, n_heads=2, **cfg).eval()
    x = torch.randint(0, 20, (2, 16))
    A = readout.lightnet_attention_matrix(model, x, layer=1)
    lna = model.blocks[-1].attn
    seen = {}
    handle = lna.register_forward_hook(lambda _m, inputs, _o: seen.setdefault("x", inputs[0]))
    with torch.no_grad():
        model(x)
        handle.remove()
        q, k, v, ld = lna.mixer_inputs(seen["x"])
        out = decay_attention(q, k, v, decay=lna.decay, log_decay=ld, causal=lna.causal)
    assert A.shape == (2, 2, 16, 16)
    check(A @ v, out, 1e-5, f"A v = o {cfg} classifier={classifier}")
    if not classifier:
        assert torch.equal(A.triu(1), torch.zeros_like(A)), "a causal layer attends to no future token"
    decays = readout.lightnet_tpe_decays(model)
    assert decays.shape == (4, 16) and ((decays > 0) & (decays < 1)).all()


def test_scan_speed_rows_are_complete():
    """The Fig. 2 timing function behind benchmarks/decay.py and lesson 04 (no timing is asserted)."""
    from seqlab.experiments.lightnet import scan_speed

    rows = scan_speed(lengths=(32, 48), heads=2, dim=8, repeats=1, loop_max=32)
    assert [r["L"] for r in rows] == [32, 48]
    for r in rows:
        for key in ("one_fwd_ms", "two_fwd_ms", "one_bwd_ms", "two_bwd_ms", "floor_ms", "ratio_fwd", "ratio_bwd"):
            assert r[key] > 0, key
    assert rows[0]["loop_fwd_ms"] > 0 and rows[1]["loop_fwd_ms"] is None
