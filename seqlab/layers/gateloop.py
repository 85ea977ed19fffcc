"""The GateLoop block (paper 004 §4 and Appendix C): time mixing + channel mixing, skips, LayerNorm.

Time mixing (eq. 24-25), real-valued weights, ``heads`` heads of ``dk = d_qk / heads`` and
``dv = d_v / heads`` (the paper uses the max-headed ``dk = dv = 1``)::

    q_n = Linear_q(x_n),  k_n = Linear_k(x_n),  v_n = Linear_v(x_n)                   (eq. 24)
    a_n = sigmoid(Linear_gamma(x_n)) * exp(i * Linear_theta(x_n))                    (eq. 25)
    y_n = Linear_out(Re(GateLoop(q, k, v, a)_n))                                       (eq. 7-8)

sigmoid magnitude, identity phase (Appendix C.1). ``data_controlled=False`` is the ablation of
Fig. 6: the same block with a *fixed* learned transition ``a = sigmoid(gamma) exp(i theta)`` per
channel, shared by every position (q, k, v stay input-dependent: RetNet's eq. 11).

Channel mixing: a point-wise FFN ``d_model -> d_ff -> d_model`` (GELU). Each half is wrapped as
``x + f(LayerNorm(x))`` (pre-norm residual). ``short_conv=w`` puts a causal depthwise convolution of ``w`` taps
(``seqlab.layers.conv``) between the first LayerNorm and the time mixing (not in the paper; H3, Based, Mamba).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from seqlab.layers.conv import conv_state_size, convolve, convolve_from, joined, make_short_conv, with_conv_state
from seqlab.ops.gateloop import gateloop

__all__ = ["GateLoopTimeMixing", "GateLoopBlock"]


def _magnitude_bias(n: int, lo: float = 0.5, hi: float = 0.999) -> torch.Tensor:
    """Sigmoid logits whose magnitudes span ``[lo, hi]`` log-uniformly in the time scale ``1/(1-|a|)``."""
    mags = 1.0 - torch.logspace(math.log10(1 - lo), math.log10(1 - hi), n)
    return torch.log(mags / (1.0 - mags))


class GateLoopTimeMixing(nn.Module):
    """Eq. 24-25 and the GateLoop operator: ``(B, L, d_model) -> (B, L, d_model)``."""

    def __init__(self, d_model: int, *, d_qk: int | None = None, d_v: int | None = None, heads: int | None = None,
                 data_controlled: bool = True, mode: str = "auto"):
        super().__init__()
        d_qk = d_qk or d_model
        d_v = d_v or d_model
        heads = heads or d_qk                       # max-headed: dk = 1 (Appendix C.1)
        if d_qk % heads or d_v % heads:
            raise ValueError(f"heads: must divide d_qk={d_qk} and d_v={d_v}, got heads={heads}")
        self.d_qk, self.d_v, self.heads, self.mode = d_qk, d_v, heads, mode
        self.data_controlled = data_controlled
        self.q = nn.Linear(d_model, d_qk)
        self.k = nn.Linear(d_model, d_qk)
        self.v = nn.Linear(d_model, d_v)
        if data_controlled:
            self.gamma = nn.Linear(d_model, d_qk)   # magnitude pre-activation, eq. 25
            self.theta = nn.Linear(d_model, d_qk)   # phase, identity activation
            with torch.no_grad():
                self.gamma.bias.copy_(_magnitude_bias(d_qk))
                self.theta.weight.mul_(0.1)
                self.theta.bias.zero_()
        else:
            self.gamma_fixed = nn.Parameter(_magnitude_bias(d_qk))
            self.theta_fixed = nn.Parameter(torch.zeros(d_qk))
        self.out = nn.Linear(d_v, d_model)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        B, L, D = t.shape
        return t.view(B, L, self.heads, D // self.heads).transpose(1, 2)     # (B, H, L, d)

    def magnitude_phase(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(|a_n|, arg a_n)``, each ``(B, L, d_qk)``: the state transitions this input gets (Fig. 5)."""
        if self.data_controlled:
            return torch.sigmoid(self.gamma(x)), self.theta(x)
        B, L, _ = x.shape
        return torch.sigmoid(self.gamma_fixed).expand(B, L, -1), self.theta_fixed.expand(B, L, -1)

    def _qkva(self, x: torch.Tensor):
        """``q, k, v, a`` of eq. 24-25 in heads, ``(B, H, L, d)``; ``a`` complex."""
        mag, phase = self.magnitude_phase(x)
        real = mag.dtype if mag.dtype in (torch.float32, torch.float64) else torch.float32
        a = torch.polar(mag.to(real), phase.to(real))                        # eq. 25, complex (B, L, d_qk)
        return self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x)), self._heads(a)

    def _readout(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``y`` (B, H, L, dv) complex -> ``Linear_out(Re y)`` (B, L, d_model) (Appendix C)."""
        y = y.real.transpose(1, 2).reshape(x.shape[0], x.shape[1], self.d_v)
        return self.out(y.to(x.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._readout(gateloop(*self._qkva(x), mode=self.mode), x)

    # -- decoding: the state is S_n of eq. 7, (B, H, dk, dv) complex --------------------------------------
    def init_state(self, batch: int, *, device=None, dtype=torch.float32) -> torch.Tensor:
        complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        H = self.heads
        return torch.zeros(batch, H, self.d_qk // H, self.d_v // H, dtype=complex_dtype, device=device)

    def prefill(self, x: torch.Tensor, S: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` (B, P, d_model) from the state ``S``: the op's parallel form started at ``h0 = S``, which also
        returns ``S_P`` (every mode, the Numba loop and Triton included)."""
        y, S = gateloop(*self._qkva(x), h0=S, mode=self.mode, return_state=True)
        return self._readout(y, x), S

    def step(self, x_t: torch.Tensor, S: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One token, ``x_t`` (B, d_model): ``S_n = diag(a_n) S_{n-1} + k_n^T v_n``, ``y_n = q_n S_n`` (eq. 7-8 with
        the transition on the key side, as ``seqlab.ops.gateloop`` explains)."""
        q, k, v, a = (t[:, :, 0] for t in self._qkva(x_t[:, None]))          # (B, H, d)
        S = a.to(S.dtype)[..., None] * S + k[..., None] * v[..., None, :]
        y = torch.einsum("bhd,bhde->bhe", q.to(S.dtype), S)
        return self._readout(y[:, :, None], x_t[:, None])[:, 0], S

    def state_size(self, t: int) -> int:
        return 2 * self.d_qk * (self.d_v // self.heads)      # complex S: dk * dv per head, two floats each


class GateLoopBlock(nn.Module):
    """One GateLoop layer (Appendix C): ``x + TimeMix(LN(x))`` then ``x + FFN(LN(x))`` (``TimeMix(Conv(LN(x)))``
    with ``short_conv``)."""

    def __init__(self, d_model: int = 64, *, d_qk: int | None = None, d_v: int | None = None, heads: int | None = None,
                 d_ff: int = 128, data_controlled: bool = True, mode: str = "auto", dropout: float = 0.0,
                 short_conv: int = 0):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.time_mixing = GateLoopTimeMixing(d_model, d_qk=d_qk, d_v=d_v, heads=heads,
                                              data_controlled=data_controlled, mode=mode)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)
        self.conv = make_short_conv(d_model, short_conv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.time_mixing(convolve(self.conv, self.norm1(x))))
        return x + self.drop(self.ffn(self.norm2(x)))

    # -- decoding: the state is the time mixing's S (and the conv's last inputs); the rest is per token ---------
    def init_state(self, batch: int, *, device=None, dtype=torch.float32):
        S = self.time_mixing.init_state(batch, device=device, dtype=dtype)
        return with_conv_state(self.conv, S, batch, device=device, dtype=dtype)

    def prefill(self, x: torch.Tensor, state):
        h, S, c = convolve_from(self.conv, self.norm1(x), state)
        y, S = self.time_mixing.prefill(h, S)
        x = x + self.drop(y)
        return x + self.drop(self.ffn(self.norm2(x))), joined(c, S)

    def step(self, x_t: torch.Tensor, state):
        h, S, c = convolve_from(self.conv, self.norm1(x_t)[:, None], state)
        y, S = self.time_mixing.step(h[:, 0], S)
        x_t = x_t + self.drop(y)
        return x_t + self.drop(self.ffn(self.norm2(x_t))), joined(c, S)

    def state_size(self, t: int) -> int:
        return self.time_mixing.state_size(t) + conv_state_size(self.conv)
