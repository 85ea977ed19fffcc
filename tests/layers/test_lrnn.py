"""LRNN layer (002 §2.1): every scan mode against the paper's unrolled sum in float64."""
import pytest
import torch

from helpers import check
from seqlab.layers.lrnn import LRNN, MLP, causal_mask


def unrolled_reference(layer: LRNN, x: torch.Tensor) -> torch.Tensor:
    """002 §2.1 literally, float64: h̄_t = Λ^t h̄_0 + Σ_{i=0}^{t-1} Λ^i W̄_in x_{t-i} (t = 1..L), y = Re(h̄)."""
    lam = layer.lam().detach().to(torch.complex128)                       # (N,)
    w = layer.input_weight().detach().to(torch.complex128)                # (D, N)
    h0 = layer.h0().detach().to(torch.complex128)                         # (N,)
    u = x.to(torch.complex128) @ w                                        # (B, L, N): W̄_in x_s, s = 1..L
    L = x.shape[1]
    t = torch.arange(1, L + 1)
    powers = lam ** (t[:, None, None] - t[None, :, None]).clamp_min(0)   # (L, L, N): Λ^(t-s)
    lower = (t[:, None] >= t[None, :]).to(torch.complex128)[..., None]    # only s <= t contributes
    h = torch.einsum("tsn,bsn->btn", powers * lower, u) + lam ** t[:, None] * h0
    return h.real


def make_layer(d_in, d_state, *, h0_scale=0.5, **kw):
    layer = LRNN(d_in, d_state, **kw)
    with torch.no_grad():  # a non-zero trainable h̄_0, so the Λ^t h̄_0 term is tested too
        layer.h0_re.normal_(0, h0_scale)
        layer.h0_im.normal_(0, h0_scale)
    return layer


@pytest.mark.parametrize("L", [1, 2, 7, 64, 100, 1000])
def test_lrnn_modes_match_unrolled_sum(L):
    layer = make_layer(5, 6)
    x = torch.randn(3, L, 5)
    ref = unrolled_reference(layer, x)
    for mode in ("sequential", "doubling", "blocked", "associative"):
        check(layer.states(x, mode=mode).real, ref.float(), 1e-5, f"LRNN {mode} L={L}")


@pytest.mark.parametrize("L", [7, 100, 1000])
def test_doubling_equals_sequential_recurrence(L):
    """Algorithm 1 (doubling) equals the step-by-step recurrence, fp32, odd lengths."""
    layer = make_layer(4, 8)
    x = torch.randn(2, L, 4)
    seq = layer.states(x, mode="sequential")
    dbl = layer.states(x, mode="doubling")
    check(dbl, seq, 1e-5, f"doubling vs sequential L={L}")


@pytest.mark.parametrize("r_min,r_max", [(0.999, 0.99999), (1e-4, 1e-2), (0.0, 0.5)])
def test_extreme_eigenvalue_moduli(r_min, r_max):
    layer = make_layer(3, 8, r_min=r_min, r_max=r_max, mode="doubling")
    x = torch.randn(2, 333, 3)
    check(layer(x), unrolled_reference(layer, x).float(), 1e-5, f"|lambda| in [{r_min}, {r_max}]")


@pytest.mark.parametrize("mode", ["doubling", "blocked"])
def test_gradients_match_float64_reference(mode):
    layer = make_layer(3, 5, mode=mode)
    ref = make_layer(3, 5, mode="sequential").double()
    ref.load_state_dict({k: v.double() for k, v in layer.state_dict().items()})
    x = torch.randn(2, 37, 3)
    g = torch.randn(2, 37, 5)
    (layer(x) * g).sum().backward()
    (ref(x.double()) * g.double()).sum().backward()
    for (name, p), (_, q) in zip(layer.named_parameters(), ref.named_parameters()):
        check(p.grad, q.grad.float(), 1e-5, f"grad {name} ({mode})")


def test_gamma_norm_off_is_the_bare_equation():
    layer = make_layer(3, 4, gamma_norm=False, mode="doubling")
    x = torch.randn(1, 20, 3)
    w = torch.complex(layer.w_re, layer.w_im)
    assert torch.equal(layer.input_weight(), w)
    check(layer(x), unrolled_reference(layer, x).float(), 1e-5, "gamma_norm=False")


def test_eigenvalues_inside_unit_circle_for_any_parameters():
    layer = LRNN(2, 16)
    with torch.no_grad():
        layer.nu.copy_(torch.linspace(-20, 5, 16))
        layer.theta.copy_(torch.linspace(-5, 5, 16))
    modulus = layer.lam().abs()
    # |λ| = exp(-exp(ν)) < 1 exactly; in float32 it may round to 1 for ν << 0, never above
    assert bool((modulus <= 1).all()) and bool((modulus[-4:] < 1).all())


def test_causal_input_mask_only_reads_past_inputs():
    layer = make_layer(6, 6, causal_input=True, mode="sequential")
    x = torch.randn(1, 5, 6, requires_grad=True)
    y = layer(x)
    for t in range(5):  # state (position) t over all steps depends on input features s <= t only
        (grad,) = torch.autograd.grad(y[..., t].sum(), x, retain_graph=True)
        assert grad[..., t + 1:].abs().max() == 0
        assert grad[..., : t + 1].abs().max() > 0


def test_causal_mlp_mask():
    mlp = MLP(5, 5, 5, causal=True)
    x = torch.randn(4, 5, requires_grad=True)
    y = mlp(x)
    for t in range(4):
        (grad,) = torch.autograd.grad(y[:, t].sum(), x, retain_graph=True)
        assert grad[:, t + 1:].abs().max() == 0
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))


def test_bad_inputs_are_named():
    layer = LRNN(4, 3)
    with pytest.raises(ValueError, match=r"x: expected shape \(\.\.\., L, 4\)"):
        layer(torch.randn(2, 7, 5))
    with pytest.raises(ValueError, match="causal_input needs d_in == d_state"):
        LRNN(4, 3, causal_input=True)
    with pytest.raises(ValueError, match="causal masking needs"):
        MLP(4, 5, 4, causal=True)


@pytest.mark.parametrize("d_state", [None, 3, 20])
def test_d_state_sets_the_lrnn_state_and_state_size_counts_it(d_state):
    """build("lrnn", d_state=N): each layer holds h̄_t, N complex numbers (2 N floats; N = d_model by default)."""
    from seqlab import models
    from seqlab.models.decoding import state_tensors

    model = models.build("lrnn", vocab_size=7, d_model=8, n_layers=2, d_state=d_state)
    N = d_state or 8
    assert model.blocks[0].lrnn1.d_state == N and model.blocks[0].mlp1.fc1.in_features == N
    with torch.no_grad():
        _, state = model.prefill(torch.randint(0, 7, (2, 5)))
    floats = sum(t[0].numel() * (2 if t.is_complex() else 1) for t in state_tensors(state["blocks"]))
    assert model.state_size(5) == floats == 2 * 2 * N
    with pytest.raises(ValueError, match="d_state: expected None"):
        models.build("lrnn", vocab_size=7, d_state=0)
