"""FST block (002 Fig. 1), the causal twist (§4), and the models ``lrnn`` / ``fst``."""
import pytest
import torch

from helpers import check
from seqlab.layers.lrnn import FSTBlock, LRNNBlock
from seqlab.models import build, count_parameters


def fig1_reference(block: FSTBlock, x: torch.Tensor) -> torch.Tensor:
    """Fig. 1 in float64, each LRNN by its step-by-step loop h_t = Λ h_{t-1} + W̄ x_t from h̄_0."""
    block = block.double()
    x = x.double()

    def lrnn_loop(lrnn, z):                                   # z: (B, T, n_in) -> Re(h): (B, T, N)
        lam, w, h = lrnn.lam(), lrnn.input_weight(), lrnn.h0().expand(z.shape[0], -1)
        out = []
        for t in range(z.shape[1]):
            h = lam * h + z[:, t].to(w.dtype) @ w
            out.append(h.real)
        return torch.stack(out, 1)

    a1, a2 = torch.sigmoid(block.p1), torch.sigmoid(block.p2)
    x = (1 - a1) * x + a1 * block.mlp1(lrnn_loop(block.lrnn1, block.norm1(x)))
    twisted = block.mlp2(lrnn_loop(block.lrnn2, block.norm2(x).transpose(1, 2))).transpose(1, 2)
    return (1 - a2) * x + a2 * twisted


@pytest.mark.parametrize("L,D,causal", [(7, 5, False), (13, 8, True), (1, 3, False)])
def test_fst_block_matches_figure_1(L, D, causal):
    block = FSTBlock(D, L, causal=causal)
    with torch.no_grad():
        block.p1.fill_(0.3)
        block.p2.fill_(-0.7)
        for lrnn in (block.lrnn1, block.lrnn2):
            lrnn.h0_re.normal_()
            lrnn.h0_im.normal_()
    x = torch.randn(3, L, D)
    out = block(x)
    ref = fig1_reference(block, x)
    check(out, ref.float(), 1e-5, f"FSTBlock L={L} D={D} causal={causal}")


def test_alphas_start_at_one_half_and_train():
    block = FSTBlock(4, 6)
    assert block.alpha1.item() == 0.5 and block.alpha2.item() == 0.5
    block(torch.randn(2, 6, 4)).square().sum().backward()
    assert block.p1.grad.abs() > 0 and block.p2.grad.abs() > 0
    assert block.lrnn2.h0_re.grad.abs().sum() > 0


def test_alpha_override_extremes():
    block = FSTBlock(4, 6)
    x = torch.randn(2, 6, 4)
    assert torch.equal(block(x, alphas=(0.0, 0.0)), x)                       # pure skip path
    lrnn_only = LRNNBlock(4)
    lrnn_only.load_state_dict({k: v for k, v in block.state_dict().items() if k in lrnn_only.state_dict()})
    y1 = block(x, alphas=(0.5, 0.0))
    check(y1, lrnn_only(x), 1e-6, "FST with alpha2=0 is the LRNN-only block")


def test_fixed_length_errors():
    block = FSTBlock(4, 6)
    with pytest.raises(ValueError, match=r"fixed sequence length; expected shape \(B, 6, D\)"):
        block(torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="seq_len: the fst model has a fixed sequence length"):
        build("fst", vocab_size=5, num_classes=3)
    model = build("fst", vocab_size=5, num_classes=3, seq_len=8, d_model=4, n_layers=1)
    with pytest.raises(ValueError, match="fixed sequence length seq_len=8; got length 9"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="needs the causal FST"):
        build("fst", vocab_size=5, seq_len=8, causal=False)


def test_causal_fst_language_model_ignores_future_tokens():
    """§4 future work: with the twisted half masked, changing tokens after t never changes outputs <= t."""
    L = 24
    model = build("fst", vocab_size=11, seq_len=L, d_model=16, n_layers=2)
    model.eval()
    tokens = torch.randint(0, 11, (3, L))
    base = model(tokens)
    assert base.shape == (3, L, 11)
    for t in (0, 5, 17, 22):
        changed = tokens.clone()
        changed[:, t + 1:] = torch.randint(0, 11, (3, L - t - 1))
        assert not torch.equal(changed[:, t + 1:], tokens[:, t + 1:])
        out = model(changed)
        assert torch.equal(out[:, : t + 1], base[:, : t + 1]), f"position <= {t} saw the future"
        assert not torch.allclose(out[:, t + 1:], base[:, t + 1:])            # the future does change


def test_unmasked_fst_is_not_causal():
    """The same check fails without the mask: the twist mixes every position (why §4 needs the mask)."""
    L = 12
    model = build("fst", vocab_size=7, num_classes=None, seq_len=L, d_model=8, n_layers=1)
    model_nc = build("fst", vocab_size=7, num_classes=3, seq_len=L, d_model=8, n_layers=1, causal=False)
    model_nc.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("head")}, strict=False)
    tokens = torch.randint(0, 7, (2, L))
    changed = tokens.clone()
    changed[:, -1] = (tokens[:, -1] + 1) % 7
    f0, f1 = model_nc.features(tokens), model_nc.features(changed)
    assert not torch.allclose(f0[:, 0], f1[:, 0])
    g0, g1 = model.features(tokens), model.features(changed)
    assert torch.equal(g0[:, :-1], g1[:, :-1])


def test_padding_rules():
    L = 16
    lm = build("fst", vocab_size=9, seq_len=L, d_model=8, n_layers=2).eval()
    tokens = torch.randint(0, 9, (2, L))
    short = lm(tokens[:, :10])                   # padded behind: the padding is in every real token's future
    assert short.shape == (2, 10, 9)
    check(short, lm(tokens)[:, :10], 1e-6, "LM on a prefix = LM on the full sequence, first positions")
    clf = build("fst", vocab_size=9, num_classes=4, seq_len=L, d_model=8, n_layers=2).eval()
    assert clf(tokens[:, :10]).shape == (2, 4)   # padded in front: predicts from the last real token
    x = clf.embed_tokens(tokens[:, :10])
    padded = torch.cat([torch.zeros(2, 6, 8), x], 1)
    h = padded
    for block in clf.blocks:
        h = block(h)
    check(clf(tokens[:, :10]), clf.head(clf.norm(h)[:, -1]), 1e-6, "classifier left padding")


def test_models_shapes_and_parameter_counts():
    V, L, H = 17, 32, 16
    lrnn = build("lrnn", vocab_size=V, num_classes=10, d_model=H, n_layers=2)
    fst = build("fst", vocab_size=V, num_classes=10, seq_len=L, d_model=H, n_layers=2)
    tokens = torch.randint(0, V, (4, L))
    assert lrnn(tokens).shape == (4, 10) and fst(tokens).shape == (4, 10)
    assert build("lrnn", vocab_size=V, d_model=H).forward(tokens).shape == (4, L, V)
    # the twisted half adds exactly: W̄_in 2L^2, h̄_0 2L, ν θ 2L, MLP2 2(L^2 + L), LayerNorm 2H, p2 1
    extra = 2 * L * L + 2 * L + 2 * L + 2 * (L * L + L) + 2 * H + 1
    assert count_parameters(fst) - count_parameters(lrnn) == 2 * extra


def test_readout_readouts():
    from seqlab import readout

    model = build("fst", vocab_size=9, num_classes=4, seq_len=12, d_model=8, n_layers=3)
    with torch.no_grad():
        model.blocks[1].p2.fill_(2.0)
    alphas = readout.fst_alphas(model)
    assert [a["block"] for a in alphas] == [0, 1, 2]
    assert alphas[1]["alpha2"] == pytest.approx(1 / (1 + torch.exp(torch.tensor(-2.0)).item()))
    assert alphas[0]["alpha1"] == 0.5
    assert readout.fst_alphas(build("lrnn", vocab_size=9, num_classes=4, d_model=8))[0]["alpha2"] is None
    tokens = torch.randint(0, 9, (5, 12))
    read = readout.fst_representation_changes(model, tokens)
    check(read["logits"], model(tokens).detach(), 1e-6, "read-out logits = model logits")
    off = readout.fst_representation_changes(model, tokens, alphas=(0.0, 0.0))
    assert all(c["sequence_half"] == 0 and c["twisted_half"] == 0 for c in off["changes"])
    eig = readout.lrnn_eigenvalues(model)
    assert len(eig) == 6 and eig[1]["lambda"].shape == (12,) and eig[0]["lambda"].shape == (8,)


def test_parameter_matching_and_twist_cost():
    from seqlab.experiments import lrnn as fst_exp

    cfg = fst_exp.comparison_models(vocab_size=17, num_classes=10, seq_len=32, d_model=16, n_layers=2)
    target = cfg["fst"][1]
    assert cfg["lrnn"][0]["n_layers"] == 4 and cfg["transformer"][0]["n_layers"] == 2
    for name in ("lrnn", "transformer"):
        width_key = "d_model"
        width, n = cfg[name][0][width_key], cfg[name][1]
        step = 2 if name == "lrnn" else 4
        # no neighbouring width is closer to the FST's count than the chosen one
        for other in (width - step, width + step):
            m = count_parameters(build(name, vocab_size=17, num_classes=10, seq_len=32,
                                       **{k: v for k, v in cfg[name][0].items() if k != width_key},
                                       **{width_key: other}))
            assert abs(n - target) <= abs(m - target)
    cost = fst_exp.twist_cost(seq_len=16, hiddens=(8, 16, 32), repeats=1)
    assert cost["multiplies"]["attention along features"] == [2 * h * h * 16 for h in (8, 16, 32)]
    assert all(t > 0 for t in cost["seconds"]["LRNN along features"])


def test_comparison_experiment_runs():
    from seqlab.experiments import run

    out = run("fst-comparison", task="digits", models=("fst", "lrnn"), steps=2, eval_every=2, progress=False)
    assert [r["model"] for r in out["rows"]] == ["fst", "lrnn"]
    assert all(0 <= r["test_accuracy"] <= 1 and r["params"] > 0 for r in out["rows"])
    assert len(out["alphas"]) == 2
    with pytest.raises(TypeError, match="unexpected keyword"):
        run("fst-comparison", task="digits", step=3)


def test_lrnn_figures():
    from seqlab.layers.lrnn import causal_mask
    from seqlab.viz.lrnn import mask_figure, twist_figure

    x = torch.randn(6, 4)
    fig = twist_figure(x)
    left, right = fig.data
    assert torch.tensor(left.z).shape == (6, 4) and torch.tensor(right.z).shape == (4, 6)
    check(torch.tensor(right.z, dtype=torch.float32), x.T, 1e-4, "the right panel is x transposed")
    fig = mask_figure({"a": causal_mask(5), "b": causal_mask(3).T})
    assert len(fig.data) == 2 and torch.tensor(fig.data[0].z).sum() == 15
