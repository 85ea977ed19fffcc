"""CausalRN / BiRN blocks and models: modes agree, decoding steps equal the parallel forward,
causality, initialisation of 000 Appendix B, and clear refusals."""
import math

import pytest
import torch

from helpers import check
from seqlab import models
from seqlab.layers.relation import BiRNBlock, CausalRNBlock, RelationBlock


@pytest.mark.parametrize("pre_norm", ["none", "approx"])
@pytest.mark.parametrize("causal", [True, False])
def test_block_linear_equals_quadratic(pre_norm, causal):
    lin = RelationBlock(8, causal=causal, pre_norm=pre_norm, mode="linear", state_expansion=2)
    quad = RelationBlock(8, causal=causal, pre_norm=pre_norm, mode="quadratic", state_expansion=2)
    quad.load_state_dict(lin.state_dict())
    x = torch.randn(3, 13, 8)
    check(lin(x), quad(x), 1e-5, "block forward")


@pytest.mark.parametrize("config", [dict(mode="linear"), dict(mode="linear", pre_norm="approx", post_norm=False),
                                    dict(pre_norm="exact", mode="quadratic"), dict(activation="gelu", mode="quadratic")])
def test_block_step_equals_forward(config):
    block = CausalRNBlock(6, **config)
    with torch.no_grad():   # give the LN affine maps non-trivial values
        for prm in block.parameters():
            prm.add_(0.1 * torch.randn_like(prm))
    x = torch.randn(2, 11, 6)
    full = block(x)
    state = block.init_state(2)
    rows = []
    for t in range(11):
        y, state = block.step(x[:, t], state)
        rows.append(y)
    check(torch.stack(rows, 1), full, 1e-5, f"step vs forward {config}")
    if config.get("mode") == "linear":
        assert block.streams_in_constant_time and state.log_sum.shape == (2, 6)


@pytest.mark.parametrize("name", ["causalrn", "linear-causalrn"])
def test_model_step_equals_forward_and_is_causal(name):
    model = models.build(name, vocab_size=11, d_model=16, n_layers=2, state_expansion=2)
    tokens = torch.randint(0, 11, (2, 9))
    logits = model(tokens)
    assert logits.shape == (2, 9, 11)
    state = model.init_state(2)
    rows = []
    for t in range(9):
        out, state = model.step(tokens[:, t], state)
        rows.append(out)
    check(torch.stack(rows, 1), logits, 1e-5, f"{name} decoding")
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 11
    check(model(changed)[:, :5], logits[:, :5], 1e-6, "positions before 5 do not see tokens after 5")
    assert not torch.allclose(model(changed)[:, 5:], logits[:, 5:])


def test_birn_is_a_classifier_only():
    with pytest.raises(ValueError, match="birn: a BiRN is bidirectional"):
        models.build("birn", vocab_size=10)
    model = models.build("birn", vocab_size=10, num_classes=4, d_model=8, n_layers=2, max_len=16)
    tokens = torch.randint(0, 10, (3, 16))
    assert model(tokens).shape == (3, 4)
    # bidirectional: the CLS output depends on the last token
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 10
    assert not torch.allclose(model(changed), model(tokens))
    with pytest.raises(ValueError, match="bidirectional"):
        BiRNBlock(4).init_state(1)


def test_refusals():
    with pytest.raises(ValueError, match="linear-causalrn: pre_norm='exact' cannot be linear"):
        models.build("linear-causalrn", vocab_size=5, pre_norm="exact")
    with pytest.raises(ValueError, match="needs activation='exp'"):
        models.build("linear-causalrn", vocab_size=5, activation="relu")
    with pytest.raises(ValueError, match="state_expansion"):
        models.build("causalrn", vocab_size=5, state_expansion=0)
    with pytest.raises(TypeError, match=r"unknown config key 'heads'; .*valid keys: d_model, n_layers"):
        models.build("causalrn", vocab_size=5, heads=2)     # a CausalRN has no heads
    with pytest.raises(ValueError, match=r"x: expected shape \(B, L, 4\)"):
        CausalRNBlock(4)(torch.randn(2, 3, 5))


def test_config_and_initialisation_follow_appendix_b():
    depth, d = 4, 96
    model = models.build("causalrn", vocab_size=300, d_model=d, n_layers=depth, state_expansion=2, post_norm=False)
    block = model.blocks[0]
    assert block.d_hidden == 2 * d and block.post_norm is None and block.pre_norm == "exact" and block.mode == "quadratic"
    # N(0, 0.02) weights, W_out / sqrt(#residual connections), zero biases, N(0, 1) embeddings;
    # a sample std of n draws is within ~4/sqrt(2n) of the true std (relative)
    for w, std in ((block.w_left.weight, 0.02), (block.w_right.weight, 0.02), (block.w_out.weight, 0.02 / math.sqrt(depth)),
                   (model.embed.weight, 1.0), (model.pos, 1.0)):
        rel = abs(float(w.detach().std()) / std - 1)
        assert rel < 4 / math.sqrt(2 * w.numel()), f"std {float(w.std()):.4f} vs {std}"
    assert (block.w_right.bias == 0).all() and (block.w_out.bias == 0).all()
    assert models.build("linear-causalrn", vocab_size=5).blocks[0].mode == "linear"
    assert models.build("birn", vocab_size=5, num_classes=2).blocks[0].causal is False
