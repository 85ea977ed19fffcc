"""Every registered model, in every precision a user trains in: float32, bfloat16 weights, CPU autocast."""
import pytest
import torch

from seqlab import models
from seqlab.ops import relative_error


def _variants():
    """(name, num_classes) for every model the registry can build: language model and classifier."""
    out = []
    for name in models.names():
        for num_classes in (None, 3):
            if name == "birn" and num_classes is None:
                continue  # bidirectional: a classifier only (its build refuses a language model)
            out.append((name, num_classes))
    return out


@pytest.mark.parametrize("name,num_classes", _variants())
def test_forward_in_bfloat16_and_under_cpu_autocast(name, num_classes):
    model = models.build(name, vocab_size=11, num_classes=num_classes, seq_len=16)
    x = torch.randint(0, 11, (2, 16))
    with torch.no_grad():
        ref = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = model(x)
        half = model.to(torch.bfloat16)(x)
    assert half.dtype == torch.bfloat16 and half.shape == ref.shape
    for what, out in (("bfloat16 weights", half), ("CPU autocast", auto)):
        assert torch.isfinite(out.float()).all(), f"{name}: {what} gave non-finite logits"
        # bfloat16 keeps 8 bits of mantissa: logits within a few percent of the float32 forward
        err = relative_error(out.float(), ref)
        assert err < 0.1, f"{name} ({what}): relative error {err:.3f} to the float32 forward"


@pytest.mark.parametrize("name", models.names())
def test_one_config_vocabulary_builds_every_family(name):
    """``d_model``, ``n_layers`` and (where the family has heads) ``n_heads`` mean the same in every builder."""
    keys = models.config_keys(name)
    assert {"d_model", "n_layers"} <= set(keys), f"{name}: {keys}"
    config = dict(d_model=32, n_layers=2, **({"n_heads": 2} if "n_heads" in keys else {}))
    num_classes = 3 if name == "birn" else None
    model = models.build(name, vocab_size=11, num_classes=num_classes, seq_len=16, **config)
    assert model.d_model == 32
    blocks = [b for b in model.blocks if b.__class__.__name__ != "MDTPE"]   # LightNet's positional block
    assert len(blocks) == 2, f"{name}: n_layers=2 built {len(blocks)} blocks"


@pytest.mark.parametrize("name,old", [("transformer", "depth"), ("lrnn", "hidden"), ("gateloop", "heads")])
def test_names_outside_the_one_vocabulary_are_refused(name, old):
    with pytest.raises(TypeError, match=rf"unknown config key '{old}'.* valid keys: d_model, n_layers"):
        models.build(name, vocab_size=7, seq_len=8, **{old: 2})


def test_unknown_config_key_lists_the_valid_ones_and_the_nearest():
    with pytest.raises(TypeError, match=r"unknown config key 'd_modle'; did you mean 'd_model'\? valid keys: "
                                        r"d_model, n_layers, n_heads"):
        models.build("transformer", vocab_size=5, d_modle=64)
    with pytest.raises(ValueError, match=r"unknown model 'gatelop'; did you mean 'gateloop'\?"):
        models.build("gatelop", vocab_size=5)


def test_a_family_registered_from_outside_is_refused_twice_replaced_on_purpose_and_taken_out():
    def build_a(*, vocab_size, num_classes=None, seq_len=None, d_model=8, n_layers=1):
        return models.build("lrnn", vocab_size=vocab_size, num_classes=num_classes, d_model=d_model, n_layers=n_layers)

    def build_b(*, vocab_size, num_classes=None, seq_len=None, d_model=8, n_layers=2):
        return build_a(vocab_size=vocab_size, num_classes=num_classes, d_model=d_model, n_layers=n_layers)

    models.register("outside")(build_a)
    try:
        with pytest.raises(ValueError, match=r"model 'outside' is registered twice \(replace=True replaces it\)"):
            models.register("outside")(build_b)
        assert len(models.build("outside", vocab_size=5).blocks) == 1 and models.init_rule("outside") == "as-built"
        models.register("outside", replace=True)(build_b)
        assert len(models.build("outside", vocab_size=5).blocks) == 2
    finally:
        assert models.unregister("outside") is build_b
    assert "outside" not in models.names()
    with pytest.raises(ValueError, match="unknown model 'outside'"):
        models.unregister("outside")


def test_the_lrnns_mlp_width_moves_apart_from_its_state():
    """``d_mlp`` sets the LRNN's MLP width (``d_state`` by default): the state stays ``2 d_state`` a layer and only
    the MLP's weights change, so that a sweep can hold ``d_model`` and the parameter count while ``d_state`` moves."""
    def build(**kw):
        return models.build("lrnn", vocab_size=16, d_model=8, n_layers=2, d_state=12, **kw)

    plain, narrow = build(), build(d_mlp=3)
    assert plain.state_size(5) == narrow.state_size(5) == 2 * 2 * 12
    assert narrow.blocks[0].mlp1.fc1.weight.shape == (3, 12) and plain.blocks[0].mlp1.fc1.weight.shape == (12, 12)
    count = lambda m: sum(p.numel() for p in m.parameters())            # noqa: E731
    assert count(plain) - count(narrow) == 2 * ((12 - 3) * (12 + 1) + (12 - 3) * 8)   # two layers: fc1 and fc2
    assert narrow(torch.zeros(1, 4, dtype=torch.long)).shape == (1, 4, 16)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="d_mlp: expected None"):
            build(d_mlp=bad)
