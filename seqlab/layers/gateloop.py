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
``x + f(LayerNorm(x))`` (pre-norm residual).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mag, phase = self.magnitude_phase(x)
        real = mag.dtype if mag.dtype in (torch.float32, torch.float64) else torch.float32
        a = torch.polar(mag.to(real), phase.to(real))                        # eq. 25, complex (B, L, d_qk)
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        y = gateloop(q, k, v, self._heads(a), mode=self.mode)               # (B, H, L, dv), complex
        y = y.real.transpose(1, 2).reshape(x.shape[0], x.shape[1], self.d_v)  # real part (Appendix C)
        return self.out(y.to(x.dtype))


class GateLoopBlock(nn.Module):
    """One GateLoop layer (Appendix C): ``x + TimeMix(LN(x))`` then ``x + FFN(LN(x))``."""

    def __init__(self, d_model: int = 64, *, d_qk: int | None = None, d_v: int | None = None, heads: int | None = None,
                 d_ff: int = 128, data_controlled: bool = True, mode: str = "auto", dropout: float = 0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.time_mixing = GateLoopTimeMixing(d_model, d_qk=d_qk, d_v=d_v, heads=heads,
                                              data_controlled=data_controlled, mode=mode)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.time_mixing(self.norm1(x)))
        return x + self.drop(self.ffn(self.norm2(x)))
