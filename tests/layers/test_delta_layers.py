"""DeltaNet and Gated DeltaNet (seqlab.layers.delta, seqlab.models.delta): the time mixing against a float64 loop
written from the papers' equations, the decay's initial range, causality, every mode, decoding with every switch,
the config's errors, ``describe``, and the loss before the first step at the arena's widths."""
import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers import check
from seqlab import models
from seqlab.experiments import arena as A
from seqlab.layers.delta import DeltaNetTimeMixing
from seqlab.ops.delta import delta_rule_reference
from seqlab.train import INITIAL_LOSS_TOLERANCE

FAMILIES = ["deltanet", "gated-deltanet"]
SWITCHES = [dict(gated=False, use_gate=False, short_conv=4, allow_neg_eigval=False),      # DeltaNet as built
            dict(gated=True, use_gate=True, short_conv=4, allow_neg_eigval=False),        # Gated DeltaNet as built
            dict(gated=False, use_gate=True, short_conv=0, allow_neg_eigval=True),
            dict(gated=True, use_gate=False, short_conv=2, allow_neg_eigval=True)]


def _decoding_tests():
    """tests/models/test_decoding.py as a module of its own: its model helpers, not its tests."""
    path = Path(__file__).resolve().parents[1] / "models" / "test_decoding.py"
    spec = importlib.util.spec_from_file_location("_decoding_tests_delta", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dec = _decoding_tests()


def _perturbed(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter moved off its initial value (float64), so that no term of the equations is trivially zero."""
    torch.manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return module


def _heads(t: torch.Tensor, H: int) -> torch.Tensor:
    B, L, _ = t.shape
    return t.view(B, L, H, -1).transpose(1, 2)


def mixing_from_the_equations(tm: DeltaNetTimeMixing, x: torch.Tensor) -> torch.Tensor:
    """The time mixing of ``seqlab.layers.delta``'s docstring from the block's weights, in float64: the convolution
    as a loop over taps, q and k divided by their norms, beta and alpha, the papers' recurrence
    (``delta_rule_reference``), RMSNorm per head, the output gate, ``W_o``."""
    W = {name: p.detach().double() for name, p in tm.named_parameters()}
    linear = lambda name, t: t @ W[f"{name}.weight"].T + W.get(f"{name}.bias", 0.0)  # noqa: E731
    x = x.double()
    proj = linear("qkv", x)                                                      # (B, L, 2 H dk + H dv)
    if tm.conv is not None:              # y_t[c] = b[c] + sum_j W[c, j] x_{t-j}[c], the last tap the current token
        taps, conv = W["conv.weight"][:, 0], W["conv.bias"].expand_as(proj).clone()
        for j in range(taps.shape[-1]):
            conv[:, j:] += taps[:, -1 - j] * proj[:, : proj.shape[1] - j]
        proj = conv
    q, k, v = (_heads(t, tm.heads) for t in F.silu(proj).split([tm.key_dim, tm.key_dim, tm.value_dim], -1))
    q = q / q.norm(dim=-1, keepdim=True) / math.sqrt(tm.dk)
    k = k / k.norm(dim=-1, keepdim=True)
    beta = (tm.beta_scale * torch.sigmoid(linear("beta", x))).transpose(1, 2)
    g = None
    if tm.gated:                                                                 # log alpha = -A softplus(.)
        g = (-W["A_log"].exp() * F.softplus(linear("alpha", x) + W["dt_bias"])).transpose(1, 2)
    y = delta_rule_reference(q, k, v, beta, g)                                   # (B, H, L, dv)
    o = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + tm.norm.eps) * W["norm.weight"]
    o = o.transpose(1, 2).reshape(*x.shape[:2], tm.value_dim)
    if tm.gate is not None:
        o = o * F.silu(linear("gate", x))
    return linear("out", o)


@pytest.mark.parametrize("switches", SWITCHES)
def test_the_time_mixing_is_the_papers_equations(switches):
    tm = _perturbed(DeltaNetTimeMixing(12, 2, expand_v=2.0, chunk_size=8, **switches))
    x = torch.randn(2, 19, 12, dtype=torch.float64)                              # 19 tokens: 2 chunks and a part
    check(tm(x), mixing_from_the_equations(tm, x), 1e-10, f"{switches}")


def test_the_decay_starts_between_short_and_long_memories():
    """Gated DeltaNet's ``A`` in [1, 16), ``softplus(dt_bias)`` in [0.001, 0.1]: at initialisation
    ``alpha = exp(-A softplus(x w + dt_bias))`` lies in (0, 1], between exp(-1.6) and exp(-0.001) for x w = 0."""
    torch.manual_seed(0)
    tm = DeltaNetTimeMixing(64, 64, gated=True)
    A_, dt = tm.A_log.exp(), F.softplus(tm.dt_bias)
    assert A_.min() >= 1.0 and A_.max() < 16.0 and dt.min() >= 1e-3 * (1 - 1e-6) and dt.max() <= 0.1 * (1 + 1e-6)
    g = tm.log_decay(torch.randn(2, 9, 64))
    assert g.shape == (2, 64, 9) and (g <= 0).all()
    assert DeltaNetTimeMixing(16, 4).log_decay(torch.randn(2, 9, 16)) is None         # DeltaNet: alpha = 1


@pytest.mark.parametrize("name", FAMILIES)
def test_models_are_causal_and_every_mode_computes_the_same_function(name):
    model, x = dec._lm(name, mode="recurrent"), dec._tokens(length=29)
    with torch.no_grad():
        ref = model(x)
        changed = x.clone()
        changed[:, 11:] = (x[:, 11:] + 1) % dec.VOCAB
        check(model(changed)[:, :11], ref[:, :11], 1e-12, f"{name}: positions before 11 after changing the future")
        for mode, chunk in (("chunked", 8), ("chunked", 64), ("auto", 5)):
            other = dec._lm(name, mode=mode, chunk_size=chunk)
            other.load_state_dict(model.state_dict())
            check(other(x), ref, 1e-10, f"{name} mode={mode} chunk_size={chunk}")


@pytest.mark.parametrize("knobs", [dict(short_conv=0), dict(use_gate=True), dict(use_gate=False),
                                   dict(allow_neg_eigval=True), dict(expand_k=0.5, expand_v=2.0),
                                   dict(mode="recurrent")])
@pytest.mark.parametrize("name", FAMILIES)
def test_every_switch_decodes_and_its_state_is_counted(name, knobs):
    """forward == prefill in two parts == step alone (float64, test_decoding's helper); ``state_size`` is the delta
    states ``H dk dv`` and the conv's last ``short_conv - 1`` projected inputs ``(2 H dk + H dv)``, a layer."""
    model = dec._lm(name, **knobs)
    s = dec._check_parts_and_steps(model, dec._tokens(length=13), 6, f"{name} {knobs}")
    tm = model.blocks[0].time_mixing
    width = knobs.get("short_conv", 4)
    conv = (width - 1) * (2 * tm.key_dim + tm.value_dim) if width else 0
    per_layer = tm.heads * tm.dk * tm.dv + conv
    assert model.state_size(13) == dec._floats(s) == len(model.blocks) * per_layer


def test_gradients_reach_every_parameter():
    model = models.build("gated-deltanet", vocab_size=11, d_model=8, n_layers=2)
    x = torch.randint(0, 11, (2, 10))
    F.cross_entropy(model(x).flatten(0, 1), x.roll(-1, 1).flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("bad,match", [
    (dict(expand_k=0.375), r"expand_k: expand_k \* d_model = 3 must be a positive multiple of n_heads=2"),
    (dict(n_heads=0), r"n_heads: expected a positive int"),
    (dict(mode="fast"), r"mode: expected one of 'auto', 'recurrent', 'chunked', 'fla'"),
    (dict(chunk_size=0), r"chunk_size: expected a positive int"),
    (dict(short_conv=-1), r"short_conv: expected 0 \(off\) or a positive int"),
    (dict(d_model=0), r"d_model: expected a positive int")])
def test_bad_configs_are_refused_by_name(bad, match):
    for name in FAMILIES:
        with pytest.raises(ValueError, match=match):
            models.build(name, vocab_size=5, **{"d_model": 8, **bad})


def test_unknown_keys_list_the_valid_ones_and_describe_shows_every_knob(capsys):
    from seqlab.__main__ import main

    for name in FAMILIES:
        with pytest.raises(TypeError, match=r"unknown config key 'head_dim'; valid keys: d_model, n_layers, n_heads, "
                                            r"expand_k, expand_v, short_conv, use_gate, allow_neg_eigval"):
            models.build(name, vocab_size=5, head_dim=4)
        assert main(["describe", name]) == 0
        out = capsys.readouterr().out
        for key in models.config_keys(name):
            line = next(row for row in out.splitlines() if row.split()[:1] == [key])
            assert "default" in line and f"``{key}``" in line, line             # each knob, its default and meaning
    assert models.init_rule("deltanet") == models.init_rule("gated-deltanet") == "torch-default-scaled"


@pytest.mark.parametrize("name", FAMILIES)
def test_the_initial_loss_is_a_uniform_guess_at_the_arenas_widths(name):
    """Built at the d_model the arena matches to the Transformer's width (quick and medium profiles), the loss
    before any step is ``ln(vocab_size)`` within the arena's tolerance, and the output projections are scaled by
    ``1/sqrt(2 n_layers)`` from PyTorch's default (std ``1/sqrt(3 fan_in)``)."""
    widths = sorted({*A.sizes("quick")["widths"], *A.sizes("medium")["widths"]})
    for width in widths:
        d_model, _ = A.matched_width(name, A.target_parameters("transformer", width, 2), 2)
        torch.manual_seed(width)
        model = models.build(name, vocab_size=64, d_model=d_model, n_layers=2)
        x = torch.randint(0, 64, (16, 32))
        with torch.no_grad():
            loss = F.cross_entropy(model(x).flatten(0, 1), x.roll(-1, 1).flatten()).item()
        assert abs(loss - math.log(64)) <= INITIAL_LOSS_TOLERANCE, (name, d_model, loss)
    out = model.blocks[0].time_mixing.out.weight
    assert abs(float(out.detach().std()) / ((3 * out.shape[1]) ** -0.5 / 2) - 1) < 0.1
