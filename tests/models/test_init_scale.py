"""seqlab.models.init.redraw and the init-scale measurement: each group drawn again at its scale, runs keyed by
their init and resumed."""
import json
import math

import pytest
import torch

from seqlab import experiments, models
from seqlab.models.init import VARIANTS, redraw


def _std(t):
    return float(t.detach().float().std())


def test_redraw_draws_each_group_at_its_scale():
    torch.manual_seed(0)
    m = models.build("linear-transformer", vocab_size=500, d_model=64, n_layers=2, positions="learned")
    assert abs(_std(m.embed.weight) - 0.02) < 0.002 and abs(_std(m.blocks[0].qkv.weight) - 0.02) < 0.002
    redraw(m, linears="default", embeddings=1.0)
    fan_in = 64
    assert abs(_std(m.blocks[0].qkv.weight) - 1 / math.sqrt(3 * fan_in)) < 0.005          # PyTorch's default
    assert abs(_std(m.blocks[1].out.weight) - 1 / math.sqrt(3 * fan_in) / 2) < 0.005      # / sqrt(2 n_layers)
    assert abs(_std(m.embed.weight) - 1.0) < 0.05 and abs(_std(m.pos) - 1.0) < 0.05
    assert abs(_std(m.head.weight) - 0.02) < 0.002                                       # untouched
    redraw(m, linears="fan_in", head="default")
    assert abs(_std(m.blocks[0].mlp.fc.weight) - 1 / math.sqrt(fan_in)) < 0.01
    lt = models.build("linear-transformer", vocab_size=50, d_model=16, n_layers=1)
    redraw(lt, embeddings=1.0)
    assert lt.pos_scale == 1.0                                   # fixed sinusoids at the embeddings' scale


def test_linears_are_redrawn_for_the_attention_baselines_only():
    with pytest.raises(ValueError, match="attention baselines only"):
        redraw(models.build("gateloop", vocab_size=20, d_model=16, n_layers=1), linears="default")
    redraw(models.build("gateloop", vocab_size=20, d_model=16, n_layers=1), **VARIANTS["embeddings-1"])
    with pytest.raises(ValueError, match="linears: expected"):
        redraw(models.build("transformer", vocab_size=20, d_model=16, n_layers=1), linears="xavier")


def test_the_quick_measurement_records_each_variant_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path / "data"))
    out = tmp_path / "init.json"
    kw = dict(profile="quick", families="transformer,gateloop", variants="as-built,default-linears+embeddings-1",
              widths=[16], steps=4, eval_every=2, out=str(out), progress=False, verbose=False)
    result = experiments.run("init-scale", **kw)
    runs = json.loads(out.read_text())["runs"]
    # the linears variant applies to the Transformer only
    assert sorted((r["family"], r["init"]) for r in runs) == [
        ("gateloop", "torch-default-scaled"), ("transformer", "default-linears+embeddings-1"),
        ("transformer", "fan-in-unit-embeddings")]
    for r in runs:
        assert [s for s, _ in r["curve"]] == [0, 2, 4] and abs(r["initial_loss"] - math.log(64)) <= 0.3
    assert {(row["family"], row["init"]) for row in result["table"]} == {(r["family"], r["init"]) for r in runs}
    again = experiments.run("init-scale", **kw)
    assert len(again["runs"]) == 3                                # nothing trained twice
    with pytest.raises(ValueError, match="variants"):
        experiments.run("init-scale", profile="quick", variants="xavier", out=None)


def test_every_family_names_its_init_rule():
    from seqlab.models.registry import INIT_RULES

    assert set(INIT_RULES) == set(models.names())
    assert models.init_rule("transformer") == "fan-in-unit-embeddings"
    assert models.init_rule("linear-transformer") == "gpt2-0.02"
    with pytest.raises(ValueError, match="unknown model"):
        models.init_rule("gpt")


def test_the_transformer_is_built_at_its_width_and_gpt2_can_be_drawn_again():
    torch.manual_seed(0)
    m = models.build("transformer", vocab_size=500, d_model=64, n_layers=2)
    assert abs(_std(m.blocks[0].qkv.weight) - 64 ** -0.5) < 0.005                    # 1/sqrt(fan_in)
    assert abs(_std(m.blocks[0].mlp.proj.weight) - 256 ** -0.5 / 2) < 0.003          # fan_in 4 d, / sqrt(2 n_layers)
    assert abs(_std(m.embed.weight) - 1.0) < 0.05 and abs(_std(m.head.weight) - 0.02) < 0.002
    redraw(m, **VARIANTS["gpt2-0.02"])
    assert abs(_std(m.blocks[0].qkv.weight) - 0.02) < 0.002 and abs(_std(m.embed.weight) - 0.02) < 0.002
    with pytest.raises(ValueError, match="init_std: expected"):
        from seqlab.layers.attention import TransformerBlock
        TransformerBlock(16, init_std="xavier")
