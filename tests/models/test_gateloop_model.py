"""GateLoop block and model (paper 004 Appendix C): shapes, causality, the fixed-transition ablation."""
import pytest
import torch
from helpers import check

import seqlab.models as models
from seqlab.layers.gateloop import GateLoopBlock, GateLoopTimeMixing


def test_block_maps_b_l_d_and_is_causal():
    block = GateLoopBlock(16, heads=4, d_ff=32)
    x = torch.randn(2, 23, 16)
    y = block(x)
    assert y.shape == x.shape and y.dtype == torch.float32 and torch.isfinite(y).all()
    x2 = x.clone()
    x2[:, 12:] = torch.randn(2, 11, 16)
    # causal up to rounding (the chunked mode's chunk length and references may see the future inputs)
    check(block(x2)[:, :12], y[:, :12], 1e-6, "past outputs after changing the future")
    assert (block(x2)[:, 12:] - y[:, 12:]).abs().max() > 1e-3    # while the future outputs do change


def test_transitions_eq25_data_controlled_vs_fixed():
    x = torch.randn(3, 10, 8)
    dc = GateLoopTimeMixing(8, data_controlled=True)
    mag, phase = dc.magnitude_phase(x)
    assert mag.shape == (3, 10, 8) and ((mag > 0) & (mag < 1)).all()
    assert mag.std(dim=1).max() > 0                 # depends on the input
    fixed = GateLoopTimeMixing(8, data_controlled=False)
    mag_f, phase_f = fixed.magnitude_phase(x)
    assert torch.equal(mag_f, mag_f[:1, :1].expand_as(mag_f))   # one a per channel for every position
    assert torch.equal(phase_f, phase_f[:1, :1].expand_as(phase_f))


def test_time_mixing_is_real_part_of_the_operator():
    from seqlab.ops.gateloop import gateloop

    tm = GateLoopTimeMixing(8, d_qk=8, d_v=4, heads=2)
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    tm = tm.double()
    mag, phase = tm.magnitude_phase(x)
    a = torch.polar(mag, phase).view(2, 9, 2, 4).transpose(1, 2)
    hd = lambda t, d: t.view(2, 9, 2, d).transpose(1, 2)          # noqa: E731
    y = gateloop(hd(tm.q(x), 4), hd(tm.k(x), 4), hd(tm.v(x), 2), a, mode="recurrent")
    expected = tm.out(y.real.transpose(1, 2).reshape(2, 9, 4))
    assert torch.allclose(tm(x), expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("data_controlled", [True, False])
def test_model_lm_and_classifier(data_controlled):
    lm = models.build("gateloop", vocab_size=11, d_model=16, n_layers=2, d_ff=32, data_controlled=data_controlled)
    tokens = torch.randint(0, 11, (2, 30))
    logits = lm(tokens)
    assert logits.shape == (2, 30, 11)
    logits.logsumexp(-1).mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in lm.parameters() if p.requires_grad)
    clf = models.build("gateloop", vocab_size=11, num_classes=3, d_model=16, n_layers=1, data_controlled=data_controlled)
    assert clf(tokens).shape == (2, 3)


def test_bad_heads_is_a_clear_error():
    with pytest.raises(ValueError, match="heads"):
        models.build("gateloop", vocab_size=5, d_model=16, n_heads=5)


def test_readout_reads_the_transitions_of_every_layer():
    from seqlab.readout import gateloop_transitions

    model = models.build("gateloop", vocab_size=9, d_model=8, n_layers=3, d_ff=16)
    tokens = torch.randint(0, 9, (2, 13))
    read = gateloop_transitions(model, tokens)
    assert len(read["magnitude"]) == 3 and read["magnitude"][0].shape == (2, 13, 8)
    # layer 0 sees LayerNorm(embedding): recompute its transitions by hand (eq. 25)
    block = model.blocks[0]
    x = block.norm1(model.embed(tokens))
    expected = torch.sigmoid(block.time_mixing.gamma(x))
    assert torch.allclose(read["magnitude"][0], expected.detach(), atol=1e-6)
    assert torch.allclose(read["phase"][0], block.time_mixing.theta(x).detach(), atol=1e-6)


@pytest.mark.parametrize("knobs", [dict(), dict(n_heads=4), dict(n_heads=1), dict(n_heads=2, d_qk=4, d_v=12),
                                   dict(n_heads=4, short_conv=4)])
def test_heads_set_the_state_and_state_size_counts_it(knobs):
    """The state is S_n of eq. 7 per layer, complex (B, H, d_qk / H, d_v / H): 2 d_qk d_v / H floats, and the conv's
    last short_conv - 1 inputs; state_size equals the floats in the tensors that init_state and prefill return."""
    from test_decoding import _floats, _lm, _tokens

    config = {**dict(d_model=8, n_layers=2, d_qk=8, d_v=8, n_heads=None), **knobs}
    model = _lm("gateloop", **config)
    H = config["n_heads"] or config["d_qk"]
    formula = 2 * (2 * config["d_qk"] * config["d_v"] // H + max(knobs.get("short_conv", 0) - 1, 0) * 8)
    with torch.no_grad():
        for state in (model.init_state(2), model.prefill(_tokens(batch=2, length=9))[1]):
            assert model.state_size(9) == _floats(state) == formula, knobs
    S = model.init_state(2)["blocks"][0]
    S = S[1] if isinstance(S, tuple) else S
    assert S.shape == (2, H, config["d_qk"] // H, config["d_v"] // H) and S.is_complex()
