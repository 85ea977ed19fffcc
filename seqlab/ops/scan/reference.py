"""The reference: ``h_t = a_t h_{t-1} + x_t`` as a loop, the way the recurrence reads (float64 in the tests)."""
from __future__ import annotations

import torch


def linear_scan_reference(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None = None, *,
                          reverse: bool = False) -> torch.Tensor:
    """``h_t = a_t h_{t-1} + x_t`` by a Python loop over ``t`` (vectorised over batch and channels).

    The reference every other mode is tested against; autograd flows through the loop.
    ``a`` broadcastable to ``x`` (``(..., L, D)``) or ``(D,)``; ``h0`` broadcastable to ``(..., D)``.
    """
    L = x.shape[-2]
    a_t = a.unsqueeze(-2) if a.dim() == 1 else a  # (D,) -> (1, D): the same a_t at every t
    h = torch.zeros_like(x[..., 0, :]) if h0 is None else h0 + torch.zeros_like(x[..., 0, :])
    a_steps = a_t.unbind(-2)  # one (..., D) slice per step (unbind: a single backward, not L scatters)
    x_steps = x.unbind(-2)
    states = [None] * L
    steps = range(L - 1, -1, -1) if reverse else range(L)
    for t in steps:
        at = a_steps[t if len(a_steps) > 1 else 0]
        h = at * h + x_steps[t]  # h_t = a_t h_{t-1} + x_t
        states[t] = h
    return torch.stack(states, dim=-2)
