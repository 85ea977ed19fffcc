"""The short convolution: a depthwise causal conv1d of a few taps on the input of a mixing layer.

H3 (its "shift" SSM), Based (arXiv 2402.18668) and Mamba put one in front of their linear recurrences: each
channel ``c`` of ``x: (B, L, D)`` becomes

    y_t[c] = b[c] + sum_{j=0}^{w-1} W[c, j] x_{t-j}[c]        (x_s = 0 for s < 0)

so that a key can hold the token before it as well as its own, which is what associative recall needs
(Zoology, arXiv 2312.04927). ``w`` is the width (3-4 in those models).

A block with the option holds ``conv = make_short_conv(d, width)`` (``None`` when ``width`` is 0) and runs its
mixing layer on ``convolve(conv, x)``. For decoding, the conv's state is the last ``w - 1`` inputs,
``(B, w - 1, D)``; the block's state is ``(conv state, mixer state)`` with a conv, the mixer's alone
without one, built and taken apart by :func:`with_conv_state`, :func:`convolve_from` and :func:`joined`.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["ShortConv", "make_short_conv", "convolve", "convolve_from", "joined", "with_conv_state", "conv_state_size"]


class ShortConv(nn.Conv1d):
    """Depthwise causal conv1d of ``width`` taps on ``(B, L, D)``; weight ``(D, 1, width)``, the last tap the
    current token (PyTorch's default initialisation, as Mamba's)."""

    def __init__(self, d_model: int, width: int):
        super().__init__(d_model, d_model, width, groups=d_model)
        self.width = width

    def prefill(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` (B, P, D) after the ``width - 1`` inputs of ``state``: ``(y, the last width - 1 inputs)``."""
        xs = torch.cat([state.to(x.dtype), x], dim=1)                          # (B, w - 1 + P, D)
        y = F.conv1d(xs.transpose(1, 2), self.weight, self.bias, groups=self.groups).transpose(1, 2)
        return y, xs[:, xs.shape[1] - (self.width - 1):]

    def init_state(self, batch: int, *, device=None, dtype=torch.float32) -> torch.Tensor:
        return torch.zeros(batch, self.width - 1, self.in_channels, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.prefill(x, self.init_state(x.shape[0], device=x.device, dtype=x.dtype))[0]

    def state_size(self, t: int) -> int:
        return (self.width - 1) * self.in_channels


def make_short_conv(d_model: int, width: int) -> ShortConv | None:
    """The conv of a block's ``short_conv`` option: ``None`` for 0 (off), else a :class:`ShortConv` of ``width``."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 0:
        raise ValueError(f"short_conv: expected 0 (off) or a positive int, the width of the convolution "
                         f"(3 or 4 in H3, Based, Mamba), got {width!r}")
    return ShortConv(d_model, width) if width else None


def convolve(conv: ShortConv | None, x: torch.Tensor) -> torch.Tensor:
    """``x`` through the conv, or unchanged without one."""
    return x if conv is None else conv(x)


def with_conv_state(conv: ShortConv | None, inner, batch: int, *, device=None, dtype=torch.float32):
    """A block's state before the first token, from its mixer's ``inner`` state."""
    return inner if conv is None else (conv.init_state(batch, device=device, dtype=dtype), inner)


def convolve_from(conv: ShortConv | None, x: torch.Tensor, state):
    """``x`` (B, P, D) through the conv from a block's ``state``: ``(y, the mixer's state, the conv's new state)``;
    give the last two to :func:`joined` once the mixer has run."""
    if conv is None:
        return x, state, None
    c, inner = state
    y, c = conv.prefill(x, c)
    return y, inner, c


def joined(c: torch.Tensor | None, inner):
    """The block's state from the conv's (``None`` without a conv) and its mixer's."""
    return inner if c is None else (c, inner)


def conv_state_size(conv: ShortConv | None) -> int:
    """Floats the conv holds per sequence: its last ``width - 1`` inputs."""
    return 0 if conv is None else conv.state_size(0)
