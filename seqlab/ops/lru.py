"""The LRU parameterisation of a diagonal complex recurrence (paper 002 §2.1; Orvieto et al. 2023).

Paper 002 §2.1 diagonalises ``W_rnn = C Λ C^{-1}`` and keeps only the complex eigenvalues
``λ_j``. For stability ``|λ_j| < 1`` must hold *by construction* and stay close to 1, which the
"stable exponential parameterisation" guarantees for any real trainable ``ν_j, θ_j``:

    λ_j = exp(-exp(ν_j) + i exp(θ_j))          (paper 002 §2.1, its ``α_i`` is our ``ν_j``)

so ``|λ_j| = exp(-exp(ν_j)) ∈ (0, 1)`` and ``arg λ_j = exp(θ_j)``.

The *ring initialisation* (Orvieto et al. 2023, §3.2) draws ``λ`` uniformly on the annulus
``r_min <= |λ| <= r_max`` with phase in ``[0, max_phase]``; the input normalisation
``γ_j = sqrt(1 - |λ_j|^2)`` keeps the stationary variance of ``h_t = λ h_{t-1} + γ x_t`` equal
to that of white-noise ``x`` (``Σ_k |λ|^{2k} γ^2 = 1``).
"""
from __future__ import annotations

import math

import torch

from seqlab.ops._checks import at_least_float32, check_tensor

__all__ = ["lru_lambda", "lru_ring_init", "lru_gamma", "lru_gamma_from_nu", "lru_nu_theta"]


def lru_lambda(nu: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """``λ = exp(-exp(ν) + i exp(θ))`` (paper 002 §2.1): complex, ``|λ| < 1`` for every real ``ν, θ``.

    ``nu`` and ``theta`` are real tensors of one shape; returns complex64 for float32 (and for float16 /
    bfloat16, which have no complex dtype of their own) and complex128 for float64. Differentiable in both.
    """
    check_tensor("nu", nu)
    check_tensor("theta", theta)
    if nu.is_complex() or theta.is_complex():
        raise TypeError(f"lru_lambda: nu and theta must be real, got nu {nu.dtype}, theta {theta.dtype}")
    if nu.shape != theta.shape:
        raise ValueError(f"lru_lambda: nu and theta must have one shape, got nu {tuple(nu.shape)}, theta {tuple(theta.shape)}")
    nu, theta = at_least_float32(nu), at_least_float32(theta)
    log_modulus = -torch.exp(nu)  # log|λ| < 0  =>  |λ| < 1
    phase = torch.exp(theta)
    return torch.polar(torch.exp(log_modulus), phase)


def lru_gamma(lam: torch.Tensor) -> torch.Tensor:
    """``γ = sqrt(1 - |λ|^2)`` (Orvieto et al. 2023 eq. 7 normalisation), real, same shape as ``lam``.

    Raises if some ``|λ| > 1`` (the recurrence would be unstable). For ``λ`` built from ``ν``
    prefer :func:`lru_gamma_from_nu`, which has no cancellation when ``|λ|`` is near 1.
    """
    check_tensor("lam", lam)
    modulus_sq = lam.abs() ** 2 if lam.is_complex() else lam ** 2
    if bool((modulus_sq > 1).any()):
        raise ValueError(f"lru_gamma: expected |lam| <= 1 (a stable recurrence), got max |lam| = {float(modulus_sq.max().sqrt()):.6f}")
    return torch.sqrt(1 - modulus_sq)


def lru_gamma_from_nu(nu: torch.Tensor) -> torch.Tensor:
    """``γ = sqrt(1 - |λ|^2) = sqrt(-expm1(-2 exp(ν)))``: the same as ``lru_gamma(lru_lambda(ν, θ))``, computed stably."""
    check_tensor("nu", nu)
    return torch.sqrt(-torch.expm1(-2 * torch.exp(nu)))


def lru_nu_theta(lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`lru_lambda` for ``0 < |λ| < 1``, ``λ`` not on the positive real axis:
    ``ν = log(-log|λ|)``, ``θ = log(arg λ)`` with ``arg λ`` taken in ``(0, 2π)``."""
    check_tensor("lam", lam)
    if not lam.is_complex():
        raise TypeError(f"lru_nu_theta: lam must be complex, got {lam.dtype}")
    modulus, phase = lam.abs(), torch.remainder(lam.angle(), 2 * math.pi)
    if bool(((modulus <= 0) | (modulus >= 1)).any()) or bool((phase <= 0).any()):
        raise ValueError("lru_nu_theta: needs 0 < |lam| < 1 and 0 < arg(lam) < 2*pi for every entry")
    return torch.log(-torch.log(modulus)), torch.log(phase)


def lru_ring_init(d: int, r_min: float = 0.9, r_max: float = 0.999, max_phase: float = 2 * math.pi,
                  generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Ring initialisation of Orvieto et al. 2023 (§3.2, Lemma 3.2): returns ``(nu, theta)``, each ``(d,)``.

    ``|λ|`` is drawn so that ``λ`` is uniform on the annulus ``r_min <= |λ| <= r_max``
    (``|λ|^2 = u1 (r_max^2 - r_min^2) + r_min^2``) and ``arg λ = u2 * max_phase``; then
    ``ν = log(-log|λ|)`` and ``θ = log(arg λ)`` so that ``lru_lambda(nu, theta)`` gives that ``λ``.
    """
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"lru_ring_init: d must be a positive int, got {d!r}")
    if not (0.0 <= r_min < r_max < 1.0):
        raise ValueError(f"lru_ring_init: expected 0 <= r_min < r_max < 1, got r_min={r_min}, r_max={r_max}")
    if not (0.0 < max_phase <= 2 * math.pi + 1e-12):
        raise ValueError(f"lru_ring_init: expected 0 < max_phase <= 2*pi, got {max_phase}")
    u1 = torch.rand(d, generator=generator, dtype=torch.float64)
    u2 = torch.rand(d, generator=generator, dtype=torch.float64)
    # u in (0, 1]: keep away from 0 so that log(u2 * max_phase) is finite
    u2 = u2.clamp_min(1e-12)
    modulus_sq = u1 * (r_max ** 2 - r_min ** 2) + r_min ** 2
    nu = torch.log(-0.5 * torch.log(modulus_sq))  # -exp(ν) = log|λ| = 0.5 log|λ|^2
    theta = torch.log(u2 * max_phase)
    return nu.to(dtype), theta.to(dtype)
