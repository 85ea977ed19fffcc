"""LightNet blocks (paper 003 §4, Fig. 3): MD-TPE, LightNet Attention (LNA), GLU, the LightNet layer.

LNA (eq. 7-9)::

    Q = X W_q, K = X W_k, V = X W_v, U = X W_u1 W_u2                          (eq. 9)
    O = Norm[ additive_decay(phi(Q), K, V) ] * sigmoid(U),   phi = Swish       (eq. 7 causal, eq. 8 non-causal)

with the decay shared with the key (``delta = exp(k)``), a normalisation after the attention
(Qin et al. 2022) and a low-rank output gate. MD-LRPE enters the additive decay as Appendix A.2
writes it: ``q`` becomes ``[q cos(phi), q sin(phi)]`` and the normalised key weight
``exp(k_s)/sum exp(k)`` is multiplied by ``[cos(phi_s), sin(phi_s)]``, so the weight of ``v_s`` in
``o_t`` carries ``cos(phi_t - phi_s)``: only the relative position. In ``decay_attention`` terms:
``log_decay = [k, k]`` and the key multiplier is ``md_lrpe(1)``.

Ablation switches (Tables 1, 5-7): ``lrpe``, ``decay`` (``"additive"``; ``"none"`` = the paper's
"w/o Decay": SiLU keys, plain linear attention; ``"multiplicative"``: eq. 2 with a data-dependent
``delta = softplus(X W_d)``, two scans when non-causal), ``share`` (key and decay shared, Table 5),
``norm`` and ``gate_rank`` (Table 6). MD-TPE is its own block (``tpe`` in the model).
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from seqlab.layers.rows import keep_rows
from seqlab.ops.decay import decay_attention
from seqlab.ops.positional import md_lrpe as _md_lrpe
from seqlab.ops.positional import md_tpe

__all__ = ["MDTPE", "LightNetAttention", "GLU", "LightNetLayer"]


def _grid(shape, L: int) -> tuple[int, ...]:
    """The grid of the ``L`` tokens: the configured ``shape``, or 1-D ``(L,)``."""
    if shape is None:
        return (L,)
    if math.prod(shape) != L:
        raise ValueError(f"tokens: this LightNet block was built for the grid {tuple(shape)} "
                         f"({math.prod(shape)} tokens), got a sequence of length {L}")
    return tuple(shape)


@functools.lru_cache(maxsize=32)
def _lrpe_frequencies(d: int, base: float, device: torch.device) -> torch.Tensor:
    """``theta_j = base^(-2j/d)`` (float64), made once per size: a decoding step needs only ``t theta``."""
    return base ** (-2.0 * torch.arange(d, dtype=torch.float64, device=device) / d)


def _lrpe_from(x: torch.Tensor, shape, *, base: float, start) -> torch.Tensor:
    """``md_lrpe`` on 1-D positions ``start .. start + L - 1`` (decoding after ``start`` tokens): the phases
    ``n theta_j`` and the real form ``[x cos(phi), x sin(phi)]`` computed as ``md_lrpe`` computes them.
    ``start`` may be one position per row (B,) (a ragged batch): the phases are then ``(B, 1, L, d)``, for
    ``x`` of ``(B, H, L, d)`` or ``(L, d)``."""
    (L,) = shape
    d = x.shape[-1]
    real = torch.float64 if x.dtype in (torch.float64, torch.complex128) else torch.float32
    theta = _lrpe_frequencies(d, base, x.device)
    if isinstance(start, torch.Tensor):
        n = start.to(device=x.device, dtype=torch.float64)[:, None] + torch.arange(L, dtype=torch.float64,
                                                                                  device=x.device)
        phi = (n[:, None, :, None] * theta).to(real)                           # (B, 1, L, d)
    else:
        n = torch.arange(start, start + L, dtype=torch.float64, device=x.device)
        phi = (n[:, None] * theta[None, :]).to(real)
    cast = x.dtype if not x.is_complex() else real
    return torch.cat([x * phi.cos().to(cast), x * phi.sin().to(cast)], dim=-1)


class MDTPE(nn.Module):
    """MD-TPE (eq. 11) as a residual block: ``x + W_o md_tpe(x, grid, lambda)``, ``lambda = sigmoid(theta)``
    learnable, ``e`` exponentials per feature (the SSM hidden size)."""

    def __init__(self, d_model: int, *, shape=None, e: int = 4):
        super().__init__()
        self.shape = None if shape is None else tuple(shape)
        self.e = e
        # decays initialised from 0.5 to 0.95 across the e exponentials: short and long ranges
        init = torch.linspace(0.5, 0.95, e)[:, None].expand(e, d_model)
        self.decay_logit = nn.Parameter(torch.logit(init).clone())
        self.out = nn.Linear(d_model, d_model)
        nn.init.normal_(self.out.weight, std=0.02)
        nn.init.zeros_(self.out.bias)

    @property
    def decays(self) -> torch.Tensor:
        return torch.sigmoid(self.decay_logit)                                   # (e, d) in (0, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = _grid(self.shape, x.shape[-2])
        y = md_tpe(x, shape, self.decays.to(x.dtype)) / (len(shape) * self.e)
        return x + self.out(y)

    # decoding (1-D, causal): the state is eq. 11's SSM state h_n = lambda h_{n-1} + x_n, (B, e * d)

    def _check_1d(self) -> None:
        if self.shape is not None:
            raise ValueError(f"MD-TPE on the grid {self.shape} is not causal: only the 1-D TPE decodes")

    def init_state(self, batch: int, *, device=None, dtype=torch.float32) -> torch.Tensor:
        self._check_1d()
        return torch.zeros(batch, self.e * self.out.in_features, device=device, dtype=dtype)

    def prefill(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` (B, P, d) from the SSM state ``h``: one ``linear_scan`` started at ``h0 = h``, the 1-D eq. 11."""
        from seqlab.ops.scan import linear_scan

        self._check_1d()
        B, P, d = x.shape
        lam = self.decays.to(x.dtype).reshape(self.e * d)
        if P == 0:
            return x, h
        xe = x[..., None, :].expand(B, P, self.e, d).reshape(B, P, self.e * d)    # one copy per exponential
        hs = linear_scan(lam, xe, h0=h.to(x.dtype))
        y = hs.reshape(B, P, self.e, d).sum(-2) / self.e
        return x + self.out(y), hs[:, -1]

    def step(self, x_t: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self._check_1d()
        B, d = x_t.shape
        h = self.decays.to(x_t.dtype).reshape(self.e * d) * h + x_t.repeat(1, self.e)   # h_n = lambda h_{n-1} + x_n
        return x_t + self.out(h.reshape(B, self.e, d).sum(-2) / self.e), h

    def state_size(self, t: int) -> int:
        return self.e * self.out.in_features


class LightNetAttention(nn.Module):
    """LNA: ``(B, L, D) -> (B, L, D)``; see the module docstring for the switches."""

    def __init__(self, d_model: int, n_heads: int = 4, *, causal: bool = True, shape=None, decay: str = "additive",
                 lrpe: bool = True, share: bool = True, norm: bool = True, gate_rank: int | None = None,
                 lrpe_base: float = 10000.0, mode: str = "auto"):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model: expected a multiple of n_heads={n_heads}, got {d_model}")
        if decay not in ("additive", "multiplicative", "none"):
            raise ValueError(f"decay: expected 'additive', 'multiplicative' or 'none', got {decay!r}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.causal, self.shape, self.decay, self.lrpe, self.share = causal, shape, decay, lrpe, share
        self.lrpe_base, self.mode = lrpe_base, mode
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        # a separate decay projection: the "no share" ablation, or the multiplicative delta
        self.d = nn.Linear(d_model, d_model) if (decay == "multiplicative" or not share) else None
        rank = gate_rank if gate_rank is not None else max(1, d_model // 8)
        self.u1 = nn.Linear(d_model, rank, bias=False)                          # low-rank output gate
        self.u2 = nn.Linear(rank, d_model)
        self.norm = nn.RMSNorm(d_model) if norm else nn.Identity()
        self.out = nn.Linear(d_model, d_model)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.n_heads, self.head_dim).transpose(1, 2)         # (B, H, L, dh)

    def mixer_inputs(self, x: torch.Tensor, start: int = 0):
        """``(q, k, v, log_decay)`` exactly as passed to ``decay_attention`` (also used by ``seqlab.readout``);
        ``start``: the 1-D position of ``x[:, 0]`` (decoding: the tokens already read)."""
        L = x.shape[1]
        shape = _grid(self.shape, L)
        if isinstance(start, torch.Tensor) or start:
            if self.shape is not None:
                raise ValueError(f"start: LightNet on the grid {self.shape} reads the whole grid at once")
            md_lrpe = functools.partial(_lrpe_from, start=start)
        else:
            md_lrpe = _md_lrpe
        q = self.heads(F.silu(self.q(x)))                                        # phi = Swish     (B, H, L, dh)
        k, v = self.heads(self.k(x)), self.heads(self.v(x))
        ld = None
        if self.decay == "additive":
            if not self.share:
                ld = self.heads(self.d(x))
            if self.lrpe:
                ld = torch.cat([k, k] if ld is None else [ld, ld], dim=-1)      # log-importance per (cos, sin) lane
                mult = md_lrpe(torch.ones(L, self.head_dim, dtype=x.dtype, device=x.device), shape,
                               base=self.lrpe_base)
                k = mult.expand(*k.shape[:-1], 2 * self.head_dim) if self.share else md_lrpe(k, shape,
                                                                                           base=self.lrpe_base)
                q = md_lrpe(q, shape, base=self.lrpe_base)
        else:
            k = F.silu(k)
            if self.decay == "multiplicative":
                ld = F.softplus(self.heads(self.d(x)))                           # delta >= 0
            if self.lrpe:
                q, k = md_lrpe(q, shape, base=self.lrpe_base), md_lrpe(k, shape, base=self.lrpe_base)
                ld = None if ld is None else torch.cat([ld, ld], dim=-1)
        return q, k, v, ld

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        q, k, v, ld = self.mixer_inputs(x)
        o = decay_attention(q, k, v, decay=self.decay, log_decay=ld, causal=self.causal, mode=self.mode)
        return self._readout(o, x)

    def _readout(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        o = o.transpose(1, 2).reshape(B, L, D)
        gate = torch.sigmoid(self.u2(self.u1(x)))                                # psi(U), U = X W_u1 W_u2
        return self.out(self.norm(o) * gate)

    # decoding (causal, 1-D): the state is {"t": tokens read (the LRPE position), "decay": decay_attention's
    # state}: additive (kv, log s) (B, H, dk, dh) and (B, H, dk); multiplicative / none kv (B, H, dk, dh),
    # dk = 2 * head_dim with LRPE ([cos, sin] lanes), else head_dim

    def _key_dim(self) -> int:
        return 2 * self.head_dim if self.lrpe else self.head_dim

    def init_state(self, batch: int, *, device=None, dtype=torch.float32) -> dict:
        if not self.causal or self.shape is not None:
            raise ValueError("LightNet attention decodes only causal and 1-D (build the language model)")
        kv = torch.zeros(batch, self.n_heads, self._key_dim(), self.head_dim, device=device, dtype=dtype)
        if self.decay != "additive":
            return {"t": 0, "decay": kv}
        log_s = torch.full((batch, self.n_heads, self._key_dim()), -torch.inf, device=device, dtype=dtype)
        return {"t": 0, "decay": (kv, log_s)}

    def prefill(self, x: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """``x`` (B, P, D) at positions ``t .. t + P - 1`` from the decay state: one ``decay_attention`` started
        at ``h0``, which returns the state after the prompt (its parallel form, every mode)."""
        q, k, v, ld = self.mixer_inputs(x, start=state["t"])
        o, s = decay_attention(q, k, v, decay=self.decay, log_decay=ld, causal=True, mode=self.mode,
                               h0=state["decay"], return_state=True)
        return self._readout(o, x), {"t": state["t"] + x.shape[1], "decay": s}

    def step_rows(self, x_t: torch.Tensor, state: dict, t: torch.Tensor, active: torch.Tensor):
        """One token (B, D) for rows at different positions ``t`` (B,) (a ragged batch, ``seqlab.layers.rows``):
        each row's LRPE phases from its own position; rows where ``active`` is False keep their state exactly."""
        x = x_t[:, None]
        q, k, v, ld = self.mixer_inputs(x, start=t)
        o, s = decay_attention(q, k, v, decay=self.decay, log_decay=ld, causal=True, mode=self.mode,
                               h0=state["decay"], return_state=True)
        return self._readout(o, x)[:, 0], {"t": t + active.long(), "decay": keep_rows(active, s, state["decay"])}

    def step(self, x_t: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """One token (B, D): eq. 7 (or eq. 2) once from the state, as ``decay_attention`` on a length-1 sequence."""
        y, state = self.prefill(x_t[:, None], state)
        return y[:, 0], state

    def state_size(self, t: int) -> int:
        dk = self._key_dim()
        return self.n_heads * (dk * self.head_dim + (dk if self.decay == "additive" else 0))


class GLU(nn.Module):
    """Gated linear unit (Shazeer 2020): ``W_3 (act(X W_1) * X W_2)``."""

    def __init__(self, d_model: int, hidden: int | None = None, activation: str = "silu"):
        super().__init__()
        hidden = hidden or 2 * d_model
        self.w1 = nn.Linear(d_model, hidden)
        self.w2 = nn.Linear(d_model, hidden)
        self.w3 = nn.Linear(hidden, d_model)
        acts = {"silu": F.silu, "sigmoid": torch.sigmoid, "none": lambda t: t}
        if activation not in acts:
            raise ValueError(f"activation: expected one of {sorted(acts)}, got {activation!r}")
        self.act = acts[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w3(self.act(self.w1(x)) * self.w2(x))


class LightNetLayer(nn.Module):
    """One LightNet layer (Fig. 3): ``x + LNA(norm(x))`` then ``x + GLU(norm(x))``."""

    def __init__(self, d_model: int, n_heads: int = 4, *, glu_hidden: int | None = None, **attention):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = LightNetAttention(d_model, n_heads, **attention)
        self.norm2 = nn.LayerNorm(d_model)
        self.glu = GLU(d_model, glu_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.glu(self.norm2(x))

    def init_state(self, batch: int, *, device=None, dtype=torch.float32) -> dict:
        return self.attn.init_state(batch, device=device, dtype=dtype)

    def prefill(self, x: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        y, state = self.attn.prefill(self.norm1(x), state)
        x = x + y
        return x + self.glu(self.norm2(x)), state

    def step(self, x_t: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        y, state = self.attn.step(self.norm1(x_t), state)
        x_t = x_t + y
        return x_t + self.glu(self.norm2(x_t)), state

    def step_rows(self, x_t: torch.Tensor, state: dict, t: torch.Tensor, active: torch.Tensor):
        y, state = self.attn.step_rows(self.norm1(x_t), state, t, active)
        x_t = x_t + y
        return x_t + self.glu(self.norm2(x_t)), state

    def state_size(self, t: int) -> int:
        return self.attn.state_size(t)
