"""LRU parameterisation (paper 002 §2.1; Orvieto et al. 2023)."""
import math

import pytest
import torch
from helpers import check

from seqlab.ops import linear_scan, lru_gamma, lru_gamma_from_nu, lru_lambda, lru_nu_theta, lru_ring_init


def test_lambda_is_the_stable_exponential_parameterisation():
    nu = torch.linspace(-6, 3, 50, dtype=torch.float64)
    theta = torch.linspace(-4, 1.5, 50, dtype=torch.float64)
    lam = lru_lambda(nu, theta)
    assert lam.dtype == torch.complex128
    check(lam, torch.exp(-torch.exp(nu) + 1j * torch.exp(theta)), 1e-14, "lambda = exp(-exp(nu) + i exp(theta))")
    assert bool((lam.abs() < 1).all())
    assert lru_lambda(nu.float(), theta.float()).dtype == torch.complex64


def test_lambda_modulus_stays_below_one_for_extreme_parameters():
    nu = torch.tensor([-60.0, -20.0, 0.0, 20.0, 60.0])
    lam = lru_lambda(nu, torch.zeros(5))
    assert torch.isfinite(torch.view_as_real(lam)).all()
    assert bool((lam.abs() <= 1).all())


def test_lambda_gradients_flow_to_nu_and_theta():
    nu = torch.randn(8, dtype=torch.float64, requires_grad=True)
    theta = torch.randn(8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda n, t: torch.view_as_real(lru_lambda(n, t)), (nu, theta))


def test_ring_init_covers_the_annulus_uniformly():
    d, r_min, r_max, max_phase = 20000, 0.4, 0.9, math.pi
    nu, theta = lru_ring_init(d, r_min, r_max, max_phase, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    lam = lru_lambda(nu, theta)
    mod, phase = lam.abs(), lam.angle()
    assert float(mod.min()) >= r_min - 1e-12 and float(mod.max()) <= r_max + 1e-12
    assert float(phase.min()) >= 0 and float(phase.max()) <= max_phase + 1e-12
    # uniform on the annulus <=> |lambda|^2 uniform on [r_min^2, r_max^2]: mean and variance of U(lo, hi)
    lo, hi = r_min ** 2, r_max ** 2
    m2 = mod ** 2
    mean, sd = (lo + hi) / 2, (hi - lo) / math.sqrt(12)
    assert abs(float(m2.mean()) - mean) < 5 * sd / math.sqrt(d)
    assert abs(float(phase.mean()) - max_phase / 2) < 5 * (max_phase / math.sqrt(12)) / math.sqrt(d)


def test_gamma_normalises_the_stationary_variance():
    """h_t = lam h_{t-1} + gamma x_t with E|x|^2 = 1 has E|h|^2 -> gamma^2 / (1 - |lam|^2) = 1."""
    nu, theta = lru_ring_init(64, 0.5, 0.9, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    lam = lru_lambda(nu, theta)
    gamma = lru_gamma(lam)
    check(gamma, torch.sqrt(1 - lam.abs() ** 2), 1e-14, "gamma")
    check(lru_gamma_from_nu(nu), gamma, 1e-12, "gamma from nu")
    B, L = 256, 200  # |lam| <= 0.9: after 200 steps the start is forgotten (0.9^400 ~ 5e-19)
    x = torch.randn(B, L, 64, dtype=torch.complex128)  # E|x|^2 = 1
    h = linear_scan(lam, gamma * x, mode="blocked")
    power = (h[:, -1].abs() ** 2).mean()  # mean over 256 * 64 samples of an Exp(1)-like variable
    assert abs(float(power) - 1) < 5 / math.sqrt(B * 64)


def test_nu_theta_inverts_lambda():
    nu, theta = lru_ring_init(32, 0.1, 0.99, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    nu2, theta2 = lru_nu_theta(lru_lambda(nu, theta))
    check(nu2, nu, 1e-10, "nu")
    check(theta2, theta, 1e-10, "theta")


def test_lru_errors_name_the_argument():
    with pytest.raises(ValueError, match="r_min < r_max"):
        lru_ring_init(4, 0.9, 0.5)
    with pytest.raises(ValueError, match="d must be a positive int"):
        lru_ring_init(0)
    with pytest.raises(ValueError, match=r"\|lam\| <= 1"):
        lru_gamma(torch.tensor([1.5 + 0j]))
    with pytest.raises(ValueError, match="one shape"):
        lru_lambda(torch.zeros(3), torch.zeros(4))
    with pytest.raises(TypeError, match="must be real"):
        lru_lambda(torch.zeros(3, dtype=torch.complex64), torch.zeros(3))
