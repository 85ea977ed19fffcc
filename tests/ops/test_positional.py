"""MD-TPE (eq. 10-11) against its O(N^2) definition; MD-LRPE (eq. 12-16, Appendix A.2) shift invariance."""
import itertools
import math

import pytest
import torch

from helpers import check
from seqlab.ops import grid_coordinates, md_lrpe, md_tpe, md_tpe_reference

GRIDS = [(1,), (7,), (64,), (4, 4), (3, 5), (1, 6), (2, 3, 4)]


@pytest.mark.parametrize("shape", GRIDS)
@pytest.mark.parametrize("decay_shape", ["e", "ed", "ked"])
def test_md_tpe_equals_toeplitz_definition(shape, decay_shape):
    k, d, e = len(shape), 6, 3
    x = torch.randn(2, 3, int(torch.tensor(shape).prod()), d)
    full = {"e": (e,), "ed": (e, d), "ked": (k, e, d)}[decay_shape]
    lam = torch.rand(full)
    lam.view(-1)[0] = 1.0           # |lambda| = 1: no decay
    lam.view(-1)[-1] = 1e-6         # nearly 0
    check(md_tpe(x, shape, lam), md_tpe_reference(x, shape, lam), 1e-5, f"md_tpe {shape} decays {full}")


def test_md_tpe_complex_and_long():
    x = torch.randn(1, 1500, 4, dtype=torch.complex64)
    lam = 0.999 * torch.exp(1j * torch.rand(2, 4))
    check(md_tpe(x, (1500,), lam), md_tpe_reference(x, (1500,), lam), 1e-5, "md_tpe complex 1-D L=1500")
    x = torch.randn(2, 12 * 11, 4)
    lam = torch.rand(2, 4)
    check(md_tpe(x, (12, 11), lam), md_tpe_reference(x, (12, 11), lam), 1e-5, "md_tpe 12x11")


def test_md_tpe_is_eq11_by_hand_on_2x2():
    """y_{1,1} on a 2x2 grid (1-based): axis 1 gives (1+lam) terms of x_{1,1}, x_{0,1}; axis 2 of x_{1,1}, x_{1,0}."""
    lam = torch.tensor([0.5], dtype=torch.float64)
    x = torch.randn(4, 1, dtype=torch.float64)          # rows: (0,0), (0,1), (1,0), (1,1)
    y = md_tpe(x, (2, 2), lam)
    expected = 2 * x[3] + lam * x[1] + lam * x[2]       # sum over both axes of lam^0 x_n + lam^1 x_(neighbour before)
    check(y[3], expected, 1e-12, "y_(1,1)")
    check(y[0], 2 * x[0], 1e-12, "y_(0,0)")


def test_md_tpe_gradients():
    x = torch.randn(2, 20, 3, dtype=torch.float64, requires_grad=True)
    lam = torch.rand(2, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 20, 3, dtype=torch.float64)
    gx, gl = torch.autograd.grad((md_tpe(x, (4, 5), lam) * w).sum(), (x, lam))
    rx, rl = torch.autograd.grad((md_tpe_reference(x, (4, 5), lam) * w).sum(), (x, lam))
    check(gx, rx, 1e-10, "d x")
    check(gl, rl, 1e-10, "d lambda")


def offsets_agree(G, shape):
    """G[n, m] depends only on the grid offset m - n: group pairs by offset and compare."""
    coords = grid_coordinates(shape)
    groups = {}
    for n, m in itertools.product(range(len(coords)), repeat=2):
        groups.setdefault(tuple((coords[m] - coords[n]).tolist()), []).append(G[n, m])
    spread = max(float((torch.stack(v) - v[0]).abs().max()) for v in groups.values())
    return spread, len(groups)


@pytest.mark.parametrize("shape", [(9,), (4, 4), (3, 5), (2, 3, 4)])
@pytest.mark.parametrize("base", [10000.0, 10.0])
def test_md_lrpe_dot_products_are_shift_invariant(shape, base):
    d = 6 * len(shape)
    N = int(torch.tensor(shape).prod())
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
    Q = md_lrpe(q.expand(N, d), shape, base=base)
    K = md_lrpe(k.expand(N, d), shape, base=base)
    assert Q.shape == (N, 2 * d)
    G = Q @ K.T
    spread, n_offsets = offsets_agree(G, shape)
    assert n_offsets == int(torch.tensor([2 * n - 1 for n in shape]).prod())
    assert spread < 1e-12, f"dot products vary within one offset by {spread:.2e}"
    # and they do depend on the offset (a constant G would pass the test above trivially)
    assert float(G.std()) > 1e-3


def test_md_lrpe_is_real_part_of_complex_eq16():
    shape, d = (3, 4), 8
    N = 12
    q, k = torch.randn(N, d, dtype=torch.float64), torch.randn(N, d, dtype=torch.float64)
    G = md_lrpe(q, shape) @ md_lrpe(k, shape).T
    Q, K = md_lrpe(q, shape), md_lrpe(k, shape)
    Wq = torch.complex(Q[:, :d], Q[:, d:])               # W_n q_n = q_n exp(i phi_n)
    Wk = torch.complex(K[:, :d], K[:, d:])
    check(G, (Wq.conj() @ Wk.T).real, 1e-12, "real form = Re(eq. 16)")
    # eq. 16: q_n^H W_{m - n} k_m, with the phase of the offset
    coords = grid_coordinates(shape)
    n, m = 5, 10
    off = (coords[m] - coords[n])
    ds = d // 2
    theta = 10000.0 ** (-2.0 * torch.arange(ds, dtype=torch.float64) / ds)
    phi_off = torch.cat([off[0] * theta, off[1] * theta])
    check(G[n, m].reshape(1), (q[n] * k[m] * phi_off.cos()).sum().reshape(1), 1e-12, "eq. 16 at one offset")


def test_bad_grid_inputs():
    x = torch.randn(2, 10, 4)
    with pytest.raises(ValueError, match=r"x: expected N = prod\(shape\) = 12"):
        md_lrpe(x, (3, 4))
    with pytest.raises(ValueError, match="not divisible"):
        md_lrpe(torch.randn(2, 10, 3), (2, 5))
    with pytest.raises(ValueError, match="decays: expected shape"):
        md_tpe(x, (10,), torch.rand(2, 3))
    with pytest.raises(ValueError, match="shape: expected a non-empty"):
        md_tpe(x, (), torch.rand(2))


@pytest.mark.parametrize("d", [1, 6, 7])
def test_sinusoidal_positions_are_vaswanis_formula_from_any_start(d):
    from seqlab.ops import sinusoidal_positions

    pe = sinusoidal_positions(0, 50, d, dtype=torch.float64)
    for p in (0, 1, 49):
        for j in range(d):
            angle = p / 10000 ** (2 * (j // 2) / d)
            assert pe[p, j].item() == pytest.approx(math.sin(angle) if j % 2 == 0 else math.cos(angle), abs=1e-12)
    assert torch.equal(sinusoidal_positions(37, 13, d, dtype=torch.float64), pe[37:])   # an offset is a slice
    assert sinusoidal_positions(5, 0, d).shape == (0, d)                                   # an empty prompt
    far = sinusoidal_positions(10**6, 2, d, dtype=torch.float64)                        # no table, no cap
    assert torch.isfinite(far).all() and far.abs().max() <= 1
    with pytest.raises(ValueError, match="start: expected an int >= 0, got -1"):
        sinusoidal_positions(-1, 3, d)
    with pytest.raises(ValueError, match="d: expected an int >= 1, got 0"):
        sinusoidal_positions(0, 3, 0)


def test_positions_option_of_the_models():
    from seqlab import models

    with pytest.raises(ValueError, match=r"positions: expected one of \('learned', 'sinusoidal', 'none'\), got 'rope'"):
        models.build("linear-transformer", vocab_size=10, d_model=8, n_layers=1, n_heads=2, positions="rope")
    for name in ("transformer", "linear-transformer", "causalrn", "linear-causalrn"):
        for positions in ("learned", "sinusoidal", "none"):
            model = models.build(name, vocab_size=10, d_model=8, n_layers=1, positions=positions)
            assert (model.pos is not None) == (positions == "learned")
            assert (model.max_len is not None) == (positions == "learned")
            assert model(torch.randint(0, 10, (2, 5))).shape == (2, 5, 10)
