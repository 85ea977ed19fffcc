"""DeltaNet and Gated DeltaNet blocks: the delta rule as a time-mixing layer (beyond the five papers).

DeltaNet (Yang et al., NeurIPS 2024, arXiv 2406.06484) and Gated DeltaNet (Yang, Kautz, Hatamizadeh, ICLR 2025,
arXiv 2412.06464) mix tokens with the recurrence of :func:`seqlab.ops.delta_rule`, written as seqlab writes every
state (``S: (dk, dv)``, read with a row query; the papers' state transposed)::

    S_t = alpha_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t,      y_t = q_t S_t        (the gated delta rule)

``alpha_t = 1`` is DeltaNet. The time mixing around it, as both papers (and fla's ``DeltaNet`` and
``GatedDeltaNet`` layers) build it, for ``x`` the block's normalised input, ``H`` heads of
``dk = expand_k d_model / H`` and ``dv = expand_v d_model / H``::

    q, k, v = SiLU(Conv(x W_q)), SiLU(Conv(x W_k)), SiLU(Conv(x W_v))    short causal convolutions, then SiLU
    q, k    = q / |q|, k / |k|           per head                        L2 norm: I - beta k^T k is non-expansive
    q       = q / sqrt(dk)                                                the attention scale (fla's default)
    beta_t  = sigmoid(x_t w_beta)        per head                        write strength (or 2 sigmoid, fla's option)
    alpha_t = exp(-A softplus(x_t w_alpha + dt_bias))   per head        Gated DeltaNet's gate, Mamba-2's form
    o_t     = RMSNorm(y_t) per head   (* SiLU(x_t W_g) with the output gate)
    out     = o W_o

The three convolutions are one depthwise :class:`~seqlab.layers.conv.ShortConv` over the concatenated projections
``[x W_q | x W_k | x W_v]``: a depthwise convolution convolves each channel on its own, so one over the
concatenation is the three of the papers. The projections and the convolution have biases, as seqlab's
Transformer and GateLoop blocks (fla's have none); the decay's projection has none, ``dt_bias`` is its bias.
Gated DeltaNet's decay ``A`` is drawn in ``[1, 16)`` and kept as ``log A`` (Mamba-2's range; fla draws
``[0, 16)``), ``dt_bias`` so that ``softplus(dt_bias)`` is log-uniform in ``[0.001, 0.1]``: at initialisation
``alpha`` spans about ``0.2`` to ``0.999``, short and long memories side by side.

The output gate: Gated DeltaNet has it (``use_gate=True``), DeltaNet not (``use_gate=False``, fla's default for
its DeltaNet layer); either family takes the other setting.

Channel mixing is the Transformer baseline's :class:`~seqlab.layers.attention.MLP` (the papers use Llama's SwiGLU
and RMSNorm; seqlab keeps one channel MLP and pre-norm LayerNorm for every family it compares). Each half is
``x + f(LayerNorm(x))``.

Decoding: a block's state is ``(conv state, S)``: the last ``short_conv - 1`` projected inputs
``(B, short_conv - 1, 2 H dk + H dv)`` and the delta state ``S: (B, H, dk, dv)`` (``S`` alone with
``short_conv=0``). ``prefill`` runs the op (chunked by default) from ``h0 = S``; ``step`` runs
:func:`seqlab.ops.delta_rule_step`.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from seqlab.layers.attention import MLP
from seqlab.layers.conv import conv_state_size, convolve, convolve_from, joined, make_short_conv, with_conv_state
from seqlab.ops.delta import DELTA_MODES, delta_rule, delta_rule_step

__all__ = ["DeltaNetTimeMixing", "DeltaNetBlock", "decay_rate_init", "dt_bias_init"]

_L2_EPS = 1e-6      # the floor of |q| and |k| in their L2 norm
_NORM_EPS = 1e-5    # the output RMSNorm's epsilon (fla's)


def decay_rate_init(heads: int, low: float = 1.0, high: float = 16.0) -> torch.Tensor:
    """``log A`` with ``A`` uniform in ``[low, high)``, one per head: Gated DeltaNet's (Mamba-2's) decay rates."""
    return torch.empty(heads).uniform_(low, high).log()


def dt_bias_init(heads: int, dt_min: float = 1e-3, dt_max: float = 0.1) -> torch.Tensor:
    """``dt_bias`` with ``softplus(dt_bias)`` log-uniform in ``[dt_min, dt_max]`` (Mamba-2): the inverse of
    softplus, ``dt + log(1 - exp(-dt))``, of each head's drawn step."""
    dt = torch.exp(torch.rand(heads) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    return dt + torch.log(-torch.expm1(-dt))


def _check_width(name: str, width: int, heads: int) -> None:
    if width < 1 or width % heads:
        raise ValueError(f"{name}: {name} * d_model = {width} must be a positive multiple of n_heads={heads}")


class DeltaNetTimeMixing(nn.Module):
    """The (gated) delta rule time mixing of the module docstring: ``(B, L, d_model) -> (B, L, d_model)``.

    ``gated``: Gated DeltaNet's decay ``alpha_t`` (False: DeltaNet, ``alpha = 1``). ``use_gate``: the output gate
    ``RMSNorm(o) * SiLU(x W_g)``. ``short_conv``: the convolutions' width (0: none, SiLU on the projections).
    ``allow_neg_eigval``: ``beta = 2 sigmoid`` (eigenvalues of the transition in ``[-1, 1]``). ``mode`` and
    ``chunk_size``: those of :func:`seqlab.ops.delta_rule`."""

    def __init__(self, d_model: int, heads: int = 2, *, gated: bool = False, use_gate: bool = False,
                 expand_k: float = 1.0, expand_v: float = 1.0, short_conv: int = 4, allow_neg_eigval: bool = False,
                 mode: str = "auto", chunk_size: int = 64):
        super().__init__()
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
            raise ValueError(f"n_heads: expected a positive int, got {heads!r}")
        if mode not in DELTA_MODES:
            raise ValueError(f"mode: expected one of {', '.join(map(repr, DELTA_MODES))}, got {mode!r}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
        self.key_dim, self.value_dim = int(d_model * expand_k), int(d_model * expand_v)
        _check_width("expand_k", self.key_dim, heads)
        _check_width("expand_v", self.value_dim, heads)
        self.heads, self.gated, self.use_gate = heads, gated, use_gate
        self.dk, self.dv = self.key_dim // heads, self.value_dim // heads
        self.beta_scale = 2.0 if allow_neg_eigval else 1.0
        self.mode, self.chunk_size = mode, chunk_size
        self.qkv = nn.Linear(d_model, 2 * self.key_dim + self.value_dim)
        self.conv = make_short_conv(2 * self.key_dim + self.value_dim, short_conv)
        self.beta = nn.Linear(d_model, heads)
        if gated:
            self.alpha = nn.Linear(d_model, heads, bias=False)          # its bias is dt_bias
            self.A_log = nn.Parameter(decay_rate_init(heads))
            self.dt_bias = nn.Parameter(dt_bias_init(heads))
        self.gate = nn.Linear(d_model, self.value_dim) if use_gate else None
        self.norm = nn.RMSNorm(self.dv, eps=_NORM_EPS)               # per head, one weight shared by the heads
        self.out = nn.Linear(self.value_dim, d_model)

    # -- the inputs of the delta rule ---------------------------------------------------------------------
    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        """``(B, L, H d)`` -> ``(B, H, L, d)``."""
        B, L, _ = t.shape
        return t.view(B, L, self.heads, -1).transpose(1, 2)

    def write_strength(self, x: torch.Tensor) -> torch.Tensor:
        """``beta_t = sigmoid(x_t w_beta)`` (times 2 with negative eigenvalues), ``(B, H, L)``."""
        return (self.beta_scale * torch.sigmoid(self.beta(x))).transpose(1, 2)

    def log_decay(self, x: torch.Tensor) -> torch.Tensor | None:
        """Gated DeltaNet's ``g_t = log alpha_t = -A softplus(x_t w_alpha + dt_bias)``, ``(B, H, L)``, at most 0;
        None for DeltaNet."""
        if not self.gated:
            return None
        return (-self.A_log.exp() * F.softplus(self.alpha(x) + self.dt_bias)).transpose(1, 2)

    def _qkv(self, c: torch.Tensor):
        """The convolved projections ``c`` (B, L, 2 H dk + H dv) -> ``q, k, v`` in heads: SiLU, then q and k
        L2-normalised per head, q scaled by ``1/sqrt(dk)``."""
        q, k, v = F.silu(c).split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = F.normalize(self._heads(q), dim=-1, eps=_L2_EPS) * self.dk ** -0.5
        k = F.normalize(self._heads(k), dim=-1, eps=_L2_EPS)
        return q, k, self._heads(v)

    def _readout(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``y`` (B, H, L, dv) -> ``RMSNorm(y)`` per head, gated by ``SiLU(x W_g)`` if so built, ``W_o``."""
        o = self.norm(y.to(x.dtype)).transpose(1, 2).reshape(*x.shape[:2], self.value_dim)
        if self.gate is not None:
            o = o * F.silu(self.gate(x))
        return self.out(o)

    # -- forward and decoding -----------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(convolve(self.conv, self.qkv(x)))
        y = delta_rule(q, k, v, self.write_strength(x), self.log_decay(x), mode=self.mode, chunk_size=self.chunk_size)
        return self._readout(y, x)

    def init_state(self, batch: int, *, device=None, dtype=torch.float32):
        """``(conv state, S)`` before the first token (``S`` alone without a conv), zeros."""
        S = torch.zeros(batch, self.heads, self.dk, self.dv, device=device, dtype=dtype)
        return with_conv_state(self.conv, S, batch, device=device, dtype=dtype)

    def prefill(self, x: torch.Tensor, state):
        """``x`` (B, P, d_model) after the tokens ``state`` holds: the op in the block's mode (chunked by default)
        from ``h0 = S``, which also returns ``S_P``; the conv continues from its last inputs."""
        c, S, conv_state = convolve_from(self.conv, self.qkv(x), state)
        y, S = delta_rule(*self._qkv(c), self.write_strength(x), self.log_decay(x), h0=S, mode=self.mode,
                          chunk_size=self.chunk_size, return_state=True)
        return self._readout(y, x), joined(conv_state, S)

    def step(self, x_t: torch.Tensor, state):
        """One token ``x_t`` (B, d_model): the delta rule's read-before-write step, O(H dk dv):
        ``S_t = alpha_t S_{t-1} + beta_t k_t^T (v_t - alpha_t k_t S_{t-1})``, ``y_t = q_t S_t``."""
        x = x_t[:, None]
        c, S, conv_state = convolve_from(self.conv, self.qkv(x), state)
        q, k, v = (t[:, :, 0] for t in self._qkv(c))                                   # (B, H, d)
        g = self.log_decay(x)
        y, S = delta_rule_step(q, k, v, self.write_strength(x)[..., 0], None if g is None else g[..., 0], S)
        return self._readout(y[:, :, None], x)[:, 0], joined(conv_state, S)

    def state_size(self, t: int) -> int:
        """Floats per sequence: ``S`` (H dk dv) and the conv's last ``short_conv - 1`` projected inputs."""
        return self.heads * self.dk * self.dv + conv_state_size(self.conv)


class DeltaNetBlock(nn.Module):
    """One (Gated) DeltaNet layer: ``x + TimeMix(LN(x))`` then ``x + MLP(LN(x))`` (module docstring); the
    keywords of :class:`DeltaNetTimeMixing` pass through."""

    def __init__(self, d_model: int = 64, heads: int = 2, *, mlp_ratio: float = 4.0, dropout: float = 0.0,
                 **time_mixing):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.time_mixing = DeltaNetTimeMixing(d_model, heads, **time_mixing)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, mlp_ratio)
        self.drop = nn.Dropout(dropout)

    def _channel_mix(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.mlp(self.norm2(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._channel_mix(x + self.drop(self.time_mixing(self.norm1(x))))

    # -- decoding: the time mixing's state; the rest is per token -----------------------------------------
    def init_state(self, batch: int, *, device=None, dtype=torch.float32):
        return self.time_mixing.init_state(batch, device=device, dtype=dtype)

    def prefill(self, x: torch.Tensor, state):
        y, state = self.time_mixing.prefill(self.norm1(x), state)
        return self._channel_mix(x + self.drop(y)), state

    def step(self, x_t: torch.Tensor, state):
        y, state = self.time_mixing.step(self.norm1(x_t), state)
        return self._channel_mix(x_t + self.drop(y)), state

    def state_size(self, t: int) -> int:
        return self.time_mixing.state_size(t)
