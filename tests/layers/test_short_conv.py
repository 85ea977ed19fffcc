"""The short convolution (seqlab.layers.conv): a float64 loop over taps, causality, its state in parts and steps,
and the decoding protocol of every family that has the option (``short_conv=w``)."""
import importlib.util
from pathlib import Path

import pytest
import torch

from helpers import check
from seqlab import models
from seqlab.layers.conv import ShortConv, make_short_conv


def _decoding_tests():
    """tests/models/test_decoding.py as a module of its own: its model helpers, not its tests."""
    path = Path(__file__).resolve().parents[1] / "models" / "test_decoding.py"
    spec = importlib.util.spec_from_file_location("_decoding_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dec = _decoding_tests()
FAMILIES = ["linear-transformer", "gateloop", "lrnn"]


def conv_loop(conv: ShortConv, x: torch.Tensor) -> torch.Tensor:
    """y_t[c] = b[c] + sum_j W[c, j] x_{t-j}[c], x_s = 0 before the start; float64, one tap at a time
    (``weight[:, 0, -1]`` is the current token's tap, ``weight[:, 0, -1 - j]`` the one ``j`` tokens back)."""
    w, b, x = conv.weight.detach().double()[:, 0], conv.bias.detach().double(), x.double()
    y = b.expand_as(x).clone()
    for j in range(conv.width):
        y[:, j:] += w[:, -1 - j] * x[:, : x.shape[1] - j]
    return y


@pytest.mark.parametrize("width", [1, 2, 3, 4])
@pytest.mark.parametrize("L", [1, 2, 7, 64])
def test_short_conv_is_a_loop_over_taps(width, L):
    conv = ShortConv(5, width)
    x = torch.randn(3, L, 5)
    check(conv(x), conv_loop(conv, x).float(), 1e-6, f"float32 width={width} L={L}")
    check(conv.double()(x.double()), conv_loop(conv, x), 1e-12, f"float64 width={width} L={L}")


@pytest.mark.parametrize("width", [2, 4])
def test_short_conv_is_causal(width):
    conv, x = ShortConv(6, width), torch.randn(2, 20, 6)
    y = conv(x)
    for t in (0, 5, 18):
        changed = x.clone()
        changed[:, t + 1:] = torch.randn(2, 19 - t, 6)
        assert torch.equal(conv(changed)[:, : t + 1], y[:, : t + 1]), f"output <= {t} saw the future"
        assert not torch.allclose(conv(changed)[:, t + 1:], y[:, t + 1:])


@pytest.mark.parametrize("width", [1, 3, 4])
def test_short_conv_state_is_the_last_inputs(width):
    """prefill in parts and step by step from init_state give forward; the state is the last width - 1 inputs."""
    conv, x = ShortConv(4, width).double(), torch.randn(2, 11, 4, dtype=torch.float64)
    state = conv.init_state(2, dtype=torch.float64)
    assert state.shape == (2, width - 1, 4) and conv.state_size(0) == state[0].numel()
    a, s = conv.prefill(x[:, :1], state)                 # fewer inputs than the state holds: zeros before them
    b, s = conv.prefill(x[:, 1:6], s)
    steps = []
    for t in range(6, 11):
        y, s = conv.prefill(x[:, t: t + 1], s)
        steps.append(y)
    check(torch.cat([a, b, *steps], 1), conv(x), 1e-12, f"width={width} in parts and steps")
    assert torch.equal(s, x[:, 11 - (width - 1):])


@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("name", FAMILIES)
def test_families_with_a_short_conv_decode(name, width):
    """forward == prefill in two parts == step alone (float64, 1e-9, test_decoding's helper), the state counted
    exactly by state_size (its conv part (width - 1) * d_model a layer), and the model stays causal."""
    model, x = dec._lm(name, short_conv=width), dec._tokens(length=13)
    plain = dec._lm(name)
    s = dec._check_parts_and_steps(model, x, 6, f"{name} short_conv={width}")
    conv_floats = (width - 1) * model.d_model * len(model.blocks)
    assert model.state_size(13) == dec._floats(s) == plain.state_size(13) + conv_floats
    with torch.no_grad():
        y, changed = model(x), x.clone()
        changed[:, 7:] = (x[:, 7:] + 1) % dec.VOCAB
        check(model(changed)[:, :7], y[:, :7], 1e-12, f"{name}: positions before 7 after changing the future")


@pytest.mark.parametrize("name", FAMILIES)
def test_short_conv_off_adds_nothing_and_bad_widths_are_refused(name):
    model = models.build(name, vocab_size=5, d_model=8, n_layers=1)
    assert not any("conv" in key for key in model.state_dict())
    on = models.build(name, vocab_size=5, d_model=8, n_layers=1, short_conv=3)
    assert isinstance(on.blocks[0].conv, ShortConv) and on.blocks[0].conv.weight.shape == (8, 1, 3)
    for bad in (-1, 2.0, True, "4"):
        with pytest.raises(ValueError, match=r"short_conv: expected 0 \(off\) or a positive int"):
            models.build(name, vocab_size=5, d_model=8, n_layers=1, short_conv=bad)
    assert make_short_conv(8, 0) is None
