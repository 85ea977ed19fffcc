"""Linear RNN and Feature-Sequence Twist blocks (paper 002 §2.1-2.2, Fig. 1, §4).

**LRNN** (002 §2.1). A linear RNN ``h_t = W_rnn h_{t-1} + W_in x_t`` unrolls to

    h_t = W_rnn^t h_0 + Σ_{i=0}^{t-1} W_rnn^i W_in x_{t-i}.

Diagonalising ``W_rnn = C Λ C^{-1}`` and absorbing ``C^{-1}`` into ``h̄_t = C^{-1} h_t`` and
``W̄_in = C^{-1} W_in`` gives the paper's final equation

    h̄_t = Λ^t h̄_0 + Σ_{i=0}^{t-1} Λ^i W̄_in x_{t-i},      y_t = Re(h̄_t),

with ``W̄_in`` and ``h̄_0`` complex and trainable (``C^{-1}`` is never computed) and
``λ_j = exp(-exp(ν_j) + i exp(θ_j))`` (the paper's ``α_j`` is our ``ν_j``; ``seqlab.ops.lru``).
The sum is the scan ``h̄_t = Λ h̄_{t-1} + W̄_in x_t`` from ``h̄_0``, computed by
``seqlab.ops.linear_scan``; its ``mode="doubling"`` is the paper's Algorithm 1.
Following Orvieto et al. (2023), whom 002 §2.1 cites for the parameterisation, the input is
scaled by ``γ_j = sqrt(1 - |λ_j|^2)`` (``gamma_norm=True``; set False for the bare equation).

**FST block** (002 §2.2, Fig. 1) on ``x: (B, L, D)``:

    x <- (1 - α1) x + α1 MLP1(LRNN1(x))                      along the sequence, state size D
    x <- (1 - α2) x + α2 [MLP2(LRNN2(x^T))]^T                along the features, state size L

``α_k = sigmoid(p_k)``, ``p_k`` initialised at 0. The MLPs have one hidden ReLU layer. The
twist needs a fixed ``L`` (the transposed LRNN's input size): the block raises on any other
length; the models pad (``seqlab.models.lrnn``). We add a LayerNorm before each half (per
position, over the features — it never mixes positions); ``norm=False`` removes it.

**Causal FST** (the paper's §4 future work). Only the transposed half mixes positions: its
input weights ``W̄_in`` (``L -> L``) and both MLP2 layers (``L -> L -> L``) are masked to be
lower-triangular in position, so output position ``t`` reads only positions ``s <= t``. The
recurrence of LRNN2 runs along the feature axis and is diagonal in its state (= position)
index, so it cannot move information between positions; LRNN1 is causal by construction.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from seqlab import ops
from seqlab.layers.conv import conv_state_size, convolve, convolve_from, joined, make_short_conv, with_conv_state
from seqlab.ops.lru import lru_gamma_from_nu, lru_lambda, lru_ring_init

__all__ = ["LRNN", "MLP", "MaskedLinear", "FSTBlock", "LRNNBlock", "causal_mask"]


def causal_mask(n: int) -> torch.Tensor:
    """``(n, n)`` bool, ``mask[t, s] = s <= t``: output ``t`` may read input ``s`` (an ``nn.Linear`` weight layout)."""
    return torch.ones(n, n, dtype=torch.bool).tril()


class MaskedLinear(nn.Linear):
    """``nn.Linear`` whose weight is multiplied by a fixed 0/1 mask (``(out, in)``) on every call."""

    def __init__(self, d_in: int, d_out: int, mask: torch.Tensor | None = None, bias: bool = True):
        super().__init__(d_in, d_out, bias=bias)
        if mask is not None and tuple(mask.shape) != (d_out, d_in):
            raise ValueError(f"mask: expected shape ({d_out}, {d_in}), got {tuple(mask.shape)}")
        self.register_buffer("mask", None if mask is None else mask.to(self.weight.dtype), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight if self.mask is None else self.weight * self.mask
        return F.linear(x, weight, self.bias)


class MLP(nn.Module):
    """The one-hidden-layer ReLU MLP of Fig. 1: ``d_in -> d_hidden -> d_out``; ``causal`` masks both layers (needs equal sizes)."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int, *, causal: bool = False):
        super().__init__()
        if causal and not (d_in == d_hidden == d_out):
            raise ValueError(f"MLP: causal masking needs d_in == d_hidden == d_out (one unit per position), "
                             f"got {d_in}, {d_hidden}, {d_out}")
        self.fc1 = MaskedLinear(d_in, d_hidden, causal_mask(d_hidden) if causal else None)
        self.fc2 = MaskedLinear(d_hidden, d_out, causal_mask(d_out) if causal else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class LRNN(nn.Module):
    """The complex diagonal linear RNN of 002 §2.1 along dim ``-2``: ``(..., L, d_in) -> (..., L, d_state)`` real.

    Parameters: ``W̄_in`` complex ``(d_in, d_state)`` (stored as real and imaginary planes),
    ``h̄_0`` complex ``(d_state,)`` (initialised at 0), ``ν, θ`` real ``(d_state,)`` (ring
    initialisation with ``r_min, r_max, max_phase``). ``mode`` is passed to ``linear_scan``.
    ``causal_input=True`` masks ``W̄_in`` so that state ``t`` reads only inputs ``s <= t`` (needs
    ``d_in == d_state``; the transposed half of the causal FST).
    """

    def __init__(self, d_in: int, d_state: int, *, r_min: float = 0.9, r_max: float = 0.999,
                 max_phase: float = 2 * math.pi, gamma_norm: bool = True, causal_input: bool = False,
                 mode: str = "auto"):
        super().__init__()
        if causal_input and d_in != d_state:
            raise ValueError(f"LRNN: causal_input needs d_in == d_state, got {d_in} and {d_state}")
        self.d_in, self.d_state, self.mode, self.gamma_norm = d_in, d_state, mode, gamma_norm
        scale = 1.0 / math.sqrt(2 * d_in)  # Glorot-style for a complex weight (Orvieto et al. 2023)
        self.w_re = nn.Parameter(torch.randn(d_in, d_state) * scale)
        self.w_im = nn.Parameter(torch.randn(d_in, d_state) * scale)
        self.h0_re = nn.Parameter(torch.zeros(d_state))
        self.h0_im = nn.Parameter(torch.zeros(d_state))
        nu, theta = lru_ring_init(d_state, r_min=r_min, r_max=r_max, max_phase=max_phase)
        self.nu, self.theta = nn.Parameter(nu), nn.Parameter(theta)
        # W_in is applied as x @ W (in, state): state t reads input s iff s <= t -> upper-triangular
        self.register_buffer("input_mask", causal_mask(d_state).T.float() if causal_input else None, persistent=False)

    def lam(self) -> torch.Tensor:
        """``Λ = exp(-exp(ν) + i exp(θ))``, complex ``(d_state,)``."""
        return lru_lambda(self.nu, self.theta)

    def input_weight(self) -> torch.Tensor:
        """``W̄_in`` (times ``γ`` with ``gamma_norm``), complex ``(d_in, d_state)``."""
        w = _complex(self.w_re, self.w_im)
        if self.input_mask is not None:
            w = w * self.input_mask
        if self.gamma_norm:
            w = w * lru_gamma_from_nu(self.nu)
        return w

    def h0(self) -> torch.Tensor:
        return _complex(self.h0_re, self.h0_im)

    def states(self, x: torch.Tensor, mode: str | None = None) -> torch.Tensor:
        """The complex hidden states ``h̄_1..h̄_L``, ``(..., L, d_state)``."""
        if x.dim() < 2 or x.shape[-1] != self.d_in:
            raise ValueError(f"x: expected shape (..., L, {self.d_in}), got {tuple(x.shape)}")
        w = self.input_weight()                                                 # (d_in, N) complex
        u = torch.matmul(x.to(w.dtype), w)                                      # (..., L, N)  W̄_in x_t
        h0 = self.h0().expand(*u.shape[:-2], self.d_state)                     # (..., N)
        return ops.linear_scan(self.lam(), u, h0, mode=mode or self.mode)          # h̄_t = Λ h̄_{t-1} + W̄_in x_t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.states(x).real.to(x.dtype)

    # decoding: the state is h̄_t, complex (B, d_state); before the first token the trained h̄_0

    def init_state(self, batch: int, *, device=None, dtype=torch.float32) -> torch.Tensor:
        h0 = self.h0().to(device=device, dtype=torch.complex128 if dtype == torch.float64 else torch.complex64)
        return h0.expand(batch, self.d_state).clone()

    def prefill(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` (B, P, d_in) from the state ``h``: one ``linear_scan`` started at ``h0 = h``; ``(y, h̄_P)``."""
        if x.shape[1] == 0:
            return x.new_zeros(*x.shape[:-1], self.d_state), h
        u = torch.matmul(x.to(self.input_weight().dtype), self.input_weight())
        hs = ops.linear_scan(self.lam(), u, h.to(u.dtype), mode=self.mode)
        return hs.real.to(x.dtype), hs[:, -1]

    def step(self, x_t: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One token (B, d_in): ``h̄_t = Λ h̄_{t-1} + W̄_in x_t``."""
        lam, w = self._decoding_weights()
        h = lam.to(h.dtype) * h + torch.matmul(x_t.to(w.dtype), w).to(h.dtype)
        return h.real.to(x_t.dtype), h

    def _decoding_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Λ, W̄_in)`` for :meth:`step`. Without gradients (decoding) they are made once per set of weights,
        not once per token: kept until a parameter changes (its storage or its in-place version counter)."""
        if torch.is_grad_enabled():
            return self.lam(), self.input_weight()
        key = tuple((p.data_ptr(), p._version) for p in (self.w_re, self.w_im, self.nu, self.theta))
        cached = self.__dict__.get("_decoding_cache")
        if cached is None or cached[0] != key:
            cached = self.__dict__["_decoding_cache"] = (key, self.lam(), self.input_weight())
        return cached[1], cached[2]

    def state_size(self, t: int) -> int:
        return 2 * self.d_state                              # complex: two floats each


def _complex(re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """``re + i im``; half-precision planes make complex64 (there is no complex bfloat16)."""
    if re.dtype in (torch.float16, torch.bfloat16):
        re, im = re.float(), im.float()
    return torch.complex(re, im)


def _alpha_param() -> nn.Parameter:
    return nn.Parameter(torch.zeros(()))   # p = 0  ->  α = sigmoid(0) = 1/2 (002 §2.2)


class LRNNBlock(nn.Module):
    """The first half of Fig. 1 alone (the "LRNN-only" block of 002 §3.5): ``x <- (1-α1) x + α1 MLP1(LRNN1(x))``.

    ``d_hidden``: LRNN1's state width (complex numbers; default ``d_model``), also MLP1's hidden width unless
    ``d_mlp`` names another (then the state moves without the MLP's ``d_hidden^2`` term: a knob of the state alone).
    ``short_conv=w``: a causal depthwise convolution of ``w`` taps on LRNN1's input (``seqlab.layers.conv``;
    not in the paper)."""

    def __init__(self, d_model: int, *, d_hidden: int | None = None, norm: bool = True, mode: str = "auto",
                 short_conv: int = 0, d_mlp: int | None = None, **lrnn_kwargs):
        super().__init__()
        d_hidden = d_hidden or d_model
        self.norm1 = nn.LayerNorm(d_model) if norm else nn.Identity()
        self.lrnn1 = LRNN(d_model, d_hidden, mode=mode, **lrnn_kwargs)
        self.mlp1 = MLP(d_hidden, d_mlp or d_hidden, d_model)
        self.p1 = _alpha_param()
        self.conv = make_short_conv(d_model, short_conv)

    @property
    def alpha1(self) -> torch.Tensor:
        return torch.sigmoid(self.p1)

    def sequence_half(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp1(self.lrnn1(convolve(self.conv, self.norm1(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a1 = self.alpha1
        return (1 - a1) * x + a1 * self.sequence_half(x)

    # decoding (seqlab.models.decoding): the state is LRNN1's h̄_t; the FST block's twisted half mixes
    # positions through a fixed seq_len and does not decode token by token (it has no methods of its own here)

    def init_state(self, batch: int, *, device=None, dtype=torch.float32):
        self._check_decodes()
        h = self.lrnn1.init_state(batch, device=device, dtype=dtype)
        return with_conv_state(self.conv, h, batch, device=device, dtype=dtype)

    def prefill(self, x: torch.Tensor, state):
        self._check_decodes()
        u, h, c = convolve_from(self.conv, self.norm1(x), state)
        y, h = self.lrnn1.prefill(u, h)
        a1 = self.alpha1
        return (1 - a1) * x + a1 * self.mlp1(y), joined(c, h)

    def step(self, x_t: torch.Tensor, state):
        self._check_decodes()
        u, h, c = convolve_from(self.conv, self.norm1(x_t)[:, None], state)
        y, h = self.lrnn1.step(u[:, 0], h)
        a1 = self.alpha1
        return (1 - a1) * x_t + a1 * self.mlp1(y), joined(c, h)

    def state_size(self, t: int) -> int:
        return self.lrnn1.state_size(t) + conv_state_size(self.conv)

    def _check_decodes(self) -> None:
        if type(self) is not LRNNBlock:
            raise NotImplementedError(f"{type(self).__name__}: only the LRNN-only block decodes token by token "
                                      "(the twisted half reads the whole fixed-length sequence)")


class FSTBlock(LRNNBlock):
    """Fig. 1 of 002: the LRNN-only block followed by the twisted half along the feature axis.

    ``x: (B, L, D)`` with ``L == seq_len`` exactly. ``causal=True`` masks the twisted half's
    weights so position ``t`` depends only on positions ``<= t`` (§4 future work).
    """

    def __init__(self, d_model: int, seq_len: int, *, d_hidden: int | None = None, causal: bool = False,
                 norm: bool = True, mode: str = "auto", twist_r_min: float = 0.5, twist_r_max: float = 0.99,
                 **lrnn_kwargs):
        super().__init__(d_model, d_hidden=d_hidden, norm=norm, mode=mode, **lrnn_kwargs)
        if not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"seq_len: expected a positive int, got {seq_len!r}")
        self.seq_len, self.causal = seq_len, causal
        self.norm2 = nn.LayerNorm(d_model) if norm else nn.Identity()
        # the transposed LRNN runs over D "time steps" (the features) with L "features" (the positions);
        # its state size is L (Fig. 1). D is short, so its eigenvalues may decay faster.
        self.lrnn2 = LRNN(seq_len, seq_len, r_min=twist_r_min, r_max=twist_r_max, causal_input=causal, mode=mode)
        self.mlp2 = MLP(seq_len, seq_len, seq_len, causal=causal)
        self.p2 = _alpha_param()

    @property
    def alpha2(self) -> torch.Tensor:
        return torch.sigmoid(self.p2)

    def check_length(self, x: torch.Tensor) -> None:
        if x.dim() != 3 or x.shape[1] != self.seq_len:
            raise ValueError(f"x: FSTBlock has a fixed sequence length; expected shape (B, {self.seq_len}, D), "
                             f"got {tuple(x.shape)} (pad or truncate to seq_len={self.seq_len}, see seqlab.models.lrnn)")

    def twisted_half(self, x: torch.Tensor) -> torch.Tensor:
        xt = self.norm2(x).transpose(1, 2)                  # (B, D, L): the features become the sequence
        return self.mlp2(self.lrnn2(xt)).transpose(1, 2)    # (B, L, D): twist back

    def forward(self, x: torch.Tensor, alphas: tuple[float, float] | None = None) -> torch.Tensor:
        """``alphas=(α1, α2)`` overrides the trained mixing coefficients (for exploring, not training)."""
        self.check_length(x)
        a1, a2 = (self.alpha1, self.alpha2) if alphas is None else alphas
        x = (1 - a1) * x + a1 * self.sequence_half(x)
        return (1 - a2) * x + a2 * self.twisted_half(x)
