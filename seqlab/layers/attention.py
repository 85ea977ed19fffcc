"""Baseline attention blocks: the softmax Transformer and the Linear Transformer.

Softmax attention (Vaswani et al. 2017): ``softmax(Q K^T / sqrt(d) + mask) V``, computed by
``F.scaled_dot_product_attention`` (``is_causal=True`` for language models, no mask for a
bidirectional classifier).

Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs", §3.2-3.3): replace the
similarity ``exp(q.k)`` by ``phi(q).phi(k)`` with the feature map ``phi(x) = elu(x) + 1`` (> 0), or Based's
second-order Taylor expansion of ``exp(q.k / sqrt(d))`` (``taylor_feature_map``, arXiv 2402.18668), so

    y_i = phi(q_i)^T S_i / (phi(q_i)^T z_i),   S_i = sum_{j<=i} phi(k_j) v_j^T,   z_i = sum_{j<=i} phi(k_j)

(causal: cumulative sums over ``j <= i``, the RNN view; non-causal: the global sums over all ``j``).
Three causal forms compute the same function and are tested against each other:

- ``"quadratic"``: the masked ``L x L`` matrix ``A_ij = phi(q_i).phi(k_j) [j <= i]``, rows divided by their sums;
- ``"cumsum"``: ``S_i`` and ``z_i`` as cumulative sums (memory ``L * d * e``), literally the paper's recurrence;
- ``"chunked"``: quadratic inside chunks of ``C`` tokens, the running state ``S`` carried between chunks
  (memory ``L * C + (L / C) * d * e``): the default.

The denominator ``phi(q_i).z_i`` is a sum of positive terms; it is clamped below by ``eps`` so that
features that underflow (``elu(x) + 1 = exp(x)`` for ``x << 0``) never divide by zero.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from seqlab.layers.conv import conv_state_size, convolve, convolve_from, joined, make_short_conv, with_conv_state
from seqlab.layers.rows import write_rows
from seqlab.ops import check_mode, check_tensor

__all__ = ["elu_feature_map", "taylor_feature_map", "FEATURE_MAPS", "linear_attention", "MLP", "TransformerBlock",
           "LinearTransformerBlock"]

LINEAR_ATTENTION_MODES = ("auto", "quadratic", "cumsum", "chunked", "numba", "triton")
_EPS = 1e-6   # the floor of the normaliser phi(q_i) . z_i


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """``phi(x) = elu(x) + 1``: ``x + 1`` for ``x > 0`` and ``exp(x)`` for ``x <= 0``, always positive.

    Written piecewise: ``F.elu(x) + 1 = expm1(x) + 1`` cancels to exactly 0 for ``x < -37`` (float64),
    ``exp(x)`` keeps the tiny positive value. (The clamp keeps the unused branch from overflowing.)
    """
    return torch.where(x > 0, x + 1.0, torch.exp(torch.clamp(x, max=0.0)))


def taylor_feature_map(x: torch.Tensor) -> torch.Tensor:
    """Based's ``phi(x) = [1, x / d^(1/4), (x ⊗ x) / sqrt(2 d)]`` on ``(..., d)`` -> ``(..., 1 + d + d^2)``, so that
    ``phi(q).phi(k) = 1 + s + s^2 / 2`` with ``s = q.k / sqrt(d)``: the Taylor expansion of ``exp(s)`` to second
    order, positive for every ``s`` (arXiv 2402.18668 §4)."""
    d = x.shape[-1]
    outer = (x[..., :, None] * x[..., None, :]).flatten(-2)                # (..., d * d): x_i x_j
    return torch.cat([torch.ones_like(x[..., :1]), x / d ** 0.25, outer / (2 * d) ** 0.5], dim=-1)


FEATURE_MAPS = {"elu": elu_feature_map, "taylor": taylor_feature_map}   # feature_map= of the Linear Transformer


def _divide(num: torch.Tensor, den: torch.Tensor, eps: float) -> torch.Tensor:
    # num: (..., L, e), den: (..., L) -- positive sums, clamped so that they never reach 0
    return num / den.clamp_min(eps).unsqueeze(-1)


def _linear_attention_quadratic(fq, fk, v, causal: bool, eps: float) -> torch.Tensor:
    A = fq @ fk.transpose(-1, -2)                          # (..., L, L): phi(q_i).phi(k_j)
    if causal:
        L = A.shape[-1]
        A = A * torch.ones(L, L, dtype=torch.bool, device=A.device).tril()
    return _divide(A @ v, A.sum(-1), eps)


def _linear_attention_cumsum(fq, fk, v, causal: bool, eps: float) -> torch.Tensor:
    if not causal:
        S = fk.transpose(-1, -2) @ v                      # (..., d, e) = sum_j phi(k_j) v_j^T
        z = fk.sum(-2)                                    # (..., d)    = sum_j phi(k_j)
        return _divide(fq @ S, (fq * z.unsqueeze(-2)).sum(-1), eps)
    S = torch.cumsum(fk.unsqueeze(-1) * v.unsqueeze(-2), dim=-3)   # (..., L, d, e): S_i
    z = torch.cumsum(fk, dim=-2)                                   # (..., L, d):    z_i
    num = (fq.unsqueeze(-2) @ S).squeeze(-2)                       # (..., L, e):    phi(q_i)^T S_i
    return _divide(num, (fq * z).sum(-1), eps)


def _linear_attention_chunked(fq, fk, v, causal: bool, eps: float, chunk: int) -> torch.Tensor:
    if not causal:
        return _linear_attention_cumsum(fq, fk, v, False, eps)
    *lead, L, d = fq.shape
    e = v.shape[-1]
    C = max(1, min(chunk, L))
    pad = (-L) % C
    if pad:  # zero features after the end: they add nothing to any sum, and come after every real token
        fq, fk, v = (F.pad(t, (0, 0, 0, pad)) for t in (fq, fk, v))
    N = (L + pad) // C
    fq, fk, v = fq.reshape(*lead, N, C, d), fk.reshape(*lead, N, C, d), v.reshape(*lead, N, C, e)
    A = (fq @ fk.transpose(-1, -2)) * torch.ones(C, C, dtype=torch.bool, device=fq.device).tril()  # (..., N, C, C)
    kv = fk.transpose(-1, -2) @ v                          # (..., N, d, e): each chunk's sum of phi(k) v^T
    S = torch.cumsum(kv, dim=-3) - kv                      # (..., N, d, e): state before the chunk
    ks = fk.sum(-2)                                        # (..., N, d)
    z = torch.cumsum(ks, dim=-2) - ks                      # (..., N, d):    normaliser before the chunk
    num = A @ v + fq @ S                                   # (..., N, C, e)
    den = A.sum(-1) + (fq @ z.unsqueeze(-1)).squeeze(-1)   # (..., N, C)
    out = _divide(num, den, eps).reshape(*lead, N * C, e)
    return out[..., :L, :]


def _linear_attention_gateloop(fq, fk, v, eps: float, mode: str) -> torch.Tensor:
    """Causal linear attention as GateLoop's recurrence with ``a = 1``: the numerator ``phi(q_t) S_t`` and the
    normaliser ``phi(q_t) . z_t`` (``z_t = sum_{s<=t} phi(k_s)``) in one run, by a column of ones appended to ``v``."""
    from seqlab.ops import gateloop

    *lead, L, d = fk.shape
    ve = torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)                # (..., L, e + 1)
    rows = lambda t: t.reshape(1, -1, L, t.shape[-1])  # noqa: E731  every leading index a head
    y = gateloop(rows(fq), rows(fk), rows(ve), torch.ones_like(rows(fk)), mode=mode).reshape(*lead, L, -1)
    return _divide(y[..., :-1], y[..., -1], eps)


def _auto_mode(causal: bool, device: torch.device) -> str:
    from seqlab.kernels import fast_backend

    backend = fast_backend(device)
    return backend if causal and backend is not None else "chunked"


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = True,
                     mode: str = "auto", feature_map=elu_feature_map, eps: float = _EPS,
                     chunk: int = 64) -> torch.Tensor:
    """Linear attention of Katharopoulos et al. 2020: ``q, k: (..., L, d)``, ``v: (..., L, e)`` -> ``(..., L, e)``.

    ``mode``: ``"quadratic"`` (masked ``L x L`` matrix), ``"cumsum"`` (the recurrence as cumulative
    sums), ``"chunked"``, ``"numba"`` and ``"triton"`` (causal only: GateLoop's compiled loop and its Triton
    kernels with ``a = 1``), ``"auto"`` (causal attention: ``numba`` on a CPU, ``triton`` on CUDA; else
    ``chunked``). All compute the same function.
    """
    mode = check_mode("linear_attention", mode, LINEAR_ATTENTION_MODES)
    check_tensor("q", q, min_ndim=2)
    check_tensor("k", k, min_ndim=2)
    check_tensor("v", v, min_ndim=2)
    if q.shape != k.shape:
        raise ValueError(f"k: expected the shape of q {tuple(q.shape)}, got {tuple(k.shape)}")
    if v.shape[:-1] != q.shape[:-1]:
        raise ValueError(f"v: expected shape {tuple(q.shape[:-1]) + ('e',)} (q's leading dims), got {tuple(v.shape)}")
    fq, fk = feature_map(q), feature_map(k)
    if mode == "auto":
        mode = _auto_mode(causal, q.device)
    if mode in ("numba", "triton"):
        if not causal:
            raise NotImplementedError(f"linear_attention(mode={mode!r}) runs the causal recurrence; the non-causal "
                                      "form is two matrix products: use mode='chunked' or 'cumsum'")
        return _linear_attention_gateloop(fq, fk, v, eps, mode)
    if mode == "quadratic":
        return _linear_attention_quadratic(fq, fk, v, causal, eps)
    if mode == "cumsum":
        return _linear_attention_cumsum(fq, fk, v, causal, eps)
    return _linear_attention_chunked(fq, fk, v, causal, eps, chunk)


class MLP(nn.Module):
    """``Linear(D, r*D) -> GELU -> Linear(r*D, D)``: the position-wise feed-forward layer."""

    def __init__(self, d_model: int, mlp_ratio: float = 4.0, dropout: float = 0.0):
        super().__init__()
        hidden = int(round(mlp_ratio * d_model))
        self.fc = nn.Linear(d_model, hidden)
        self.proj = nn.Linear(hidden, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class _AttentionBlock(nn.Module):
    """Pre-norm residual block: ``x + attn(LN(x))`` then ``x + MLP(LN(x))``.

    ``init_std``: the normal std of the four linears (qkv, out, and the MLP's two), biases zero: a number (GPT-2's
    0.02), or ``"fan_in"``, ``1/sqrt(fan_in)`` for each (``1/sqrt(d_model)``, and ``1/sqrt(mlp_ratio d_model)`` for
    the MLP's second layer): the scale follows the width. ``qk_dim``: the width of a head's queries and keys
    (default ``d_model / heads``, the values' width)."""

    def __init__(self, d_model: int, heads: int = 4, mlp_ratio: float = 4.0, dropout: float = 0.0,
                 causal: bool = True, init_std: float | str = 0.02, qk_dim: int | None = None):
        super().__init__()
        if not isinstance(heads, int) or heads < 1 or d_model % heads:
            raise ValueError(f"heads: expected a positive int dividing d_model={d_model}, got {heads!r}")
        self.d_model, self.heads, self.causal, self.dropout = d_model, heads, causal, dropout
        self.qk_dim = qk_dim or d_model // heads
        self.conv = None        # a ShortConv on the mixing layer's input (seqlab.layers.conv), where a subclass has one
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 2 * heads * self.qk_dim + d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, mlp_ratio, dropout)
        self.drop = nn.Dropout(dropout)
        if init_std != "fan_in" and (isinstance(init_std, bool) or not isinstance(init_std, (int, float))
                                     or not init_std > 0):
            raise ValueError(f"init_std: expected a positive std or 'fan_in', got {init_std!r}")
        for lin in (self.qkv, self.out, self.mlp.fc, self.mlp.proj):
            std = lin.in_features ** -0.5 if init_std == "fan_in" else float(init_std)
            nn.init.normal_(lin.weight, std=std)
            nn.init.zeros_(lin.bias)

    def heads_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(B, L, D)`` (already normalised) -> ``q, k`` ``(B, H, L, qk_dim)`` and ``v`` ``(B, H, L, D/H)``."""
        B, L, D = x.shape
        width = self.heads * self.qk_dim
        q, k, v = self.qkv(x).split([width, width, D], dim=-1)
        return tuple(t.view(B, L, self.heads, -1).transpose(1, 2) for t in (q, k, v))   # each (B, H, L, d)

    def mixer_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the mixing layer reads of the block's input ``x`` (B, L, D): ``LN(x)``, through the conv if any."""
        return convolve(self.conv, self.norm1(x))

    def mix(self, q, k, v) -> torch.Tensor:
        """The token mixing of a subclass: ``q, k, v (B, H, L, d) -> (B, H, L, d)``."""
        raise NotImplementedError(f"{type(self).__name__} must define mix(q, k, v)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, ndim=3)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x: expected last dimension d_model={self.d_model}, got shape {tuple(x.shape)}")
        return self._around(self.mix(*self.heads_qkv(self.mixer_input(x))), x)

    def _around(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The rest of the block around the mixing ``y`` (B, H, L, d): output projection, residuals, MLP."""
        B, L, D = x.shape
        x = x + self.drop(self.out(y.transpose(1, 2).reshape(B, L, D)))
        return x + self.mlp(self.norm2(x))

    # -- decoding (causal blocks): a subclass defines init_state, mix_cached and state_size ---------------
    def _check_causal(self) -> None:
        if not self.causal:
            raise ValueError("init_state: a bidirectional block reads the whole sequence; only a causal block decodes")

    def mix_cached(self, q, k, v, state):
        """The mixing of new tokens ``q, k, v`` (B, H, P, d) after those the ``state`` holds: ``(y, state)``."""
        raise NotImplementedError(f"{type(self).__name__} must define mix_cached(q, k, v, state)")

    def prefill(self, x: torch.Tensor, state):
        """``x`` (B, P, D) after the tokens ``state`` holds, in one parallel pass: ``(y, state)``."""
        h, inner, c = convolve_from(self.conv, self.norm1(x), state)
        y, inner = self.mix_cached(*self.heads_qkv(h), inner)
        return self._around(y, x), joined(c, inner)

    def step(self, x_t: torch.Tensor, state):
        """One token ``x_t`` (B, D): ``(y_t, state)``."""
        y, state = self.prefill(x_t[:, None], state)
        return y[:, 0], state


class TransformerBlock(_AttentionBlock):
    """Pre-norm softmax-attention block (``F.scaled_dot_product_attention``; causal unless ``causal=False``)."""

    def mix(self, q, k, v) -> torch.Tensor:
        p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)

    # -- decoding: the KV cache, (K, V) each (B, H, t, d) --------------------------------------------------
    def init_state(self, batch: int, *, device=None, dtype=torch.float32):
        self._check_causal()
        empty = torch.zeros(batch, self.heads, 0, self.d_model // self.heads, device=device, dtype=dtype)
        return empty, empty.clone()

    def mix_cached(self, q, k, v, state):
        """New queries attend to the cached keys and to the new ones up to themselves: query ``i`` (position
        ``t0 + i``) sees keys ``j <= t0 + i``, the causal mask shifted by the ``t0`` cached tokens."""
        K, V = torch.cat([state[0], k], dim=2), torch.cat([state[1], v], dim=2)
        t0, P = state[0].shape[2], q.shape[2]
        pos = torch.arange(t0 + P, device=q.device)
        mask = pos[None, :] <= pos[t0:, None]                               # (P, t0 + P)
        p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, K, V, attn_mask=mask, dropout_p=p), (K, V)

    def step_rows(self, x_t: torch.Tensor, state, t: torch.Tensor, active: torch.Tensor):
        """One token ``x_t`` (B, D) for rows at different positions ``t`` (B,) (a ragged batch,
        ``seqlab.layers.rows``): row ``r`` writes its key and value at index ``t_r`` of the cache (if ``active``)
        and its query reads the keys ``j <= t_r``; the cache keeps each row's own entries first, zeros after."""
        q, k, v = self.heads_qkv(self.norm1(x_t[:, None]))                           # (B, H, 1, d)
        K, K_kept = write_rows(state[0], k, t, active, dim=2)
        V, V_kept = write_rows(state[1], v, t, active, dim=2)
        mask = torch.arange(K.shape[2], device=t.device)[None, :] <= t[:, None]      # (B, T): keys j <= t_r
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, K, V, attn_mask=mask[:, None, None, :], dropout_p=p)
        return self._around(y, x_t[:, None])[:, 0], (K_kept, V_kept)

    def state_size(self, t: int) -> int:
        return 2 * self.d_model * t                                         # a key and a value per token

    @torch.no_grad()
    def attention_matrix(self, x: torch.Tensor) -> torch.Tensor:
        """The softmax attention weights ``(B, H, L, L)`` this block applies to its input ``x`` (for pictures)."""
        q, k, _ = self.heads_qkv(self.mixer_input(x))
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if self.causal:
            L = scores.shape[-1]
            scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool, device=x.device).tril(), float("-inf"))
        return scores.softmax(-1)


class LinearTransformerBlock(_AttentionBlock):
    """Pre-norm linear-attention block (Katharopoulos et al. 2020).

    ``feature_map``: ``"elu"`` (elu+1, the paper's) or ``"taylor"`` (Based's second-order Taylor expansion of
    ``exp``, of ``1 + f + f^2`` features); ``feature_dim``: the width ``f`` of a head's queries and keys before the
    map (default ``d_model / heads``; Based projects them to 16); ``short_conv``: the width of a causal depthwise
    convolution on the mixing layer's input (0: none). The state per sequence is ``heads * phi_dim * (d + 1)``
    floats (``d = d_model / heads``) and the conv's last ``short_conv - 1`` inputs."""

    def __init__(self, d_model: int, heads: int = 4, mlp_ratio: float = 4.0, dropout: float = 0.0,
                 causal: bool = True, mode: str = "auto", chunk: int = 64, init_std: float | str = 0.02,
                 feature_map: str = "elu", feature_dim: int | None = None, short_conv: int = 0):
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"feature_map: expected one of {', '.join(map(repr, FEATURE_MAPS))}, got {feature_map!r}")
        if feature_dim is not None and (isinstance(feature_dim, bool) or not isinstance(feature_dim, int)
                                        or feature_dim < 1):
            raise ValueError(f"feature_dim: expected None (the head width) or a positive int, got {feature_dim!r}")
        super().__init__(d_model, heads, mlp_ratio, dropout, causal, init_std, qk_dim=feature_dim)
        self.mode = check_mode("LinearTransformerBlock", mode, LINEAR_ATTENTION_MODES)
        self.chunk = chunk
        self.feature_map, self.phi = feature_map, FEATURE_MAPS[feature_map]
        self.phi_dim = self.phi(torch.zeros(self.qk_dim)).shape[-1]           # features a query or key becomes
        self.conv = make_short_conv(d_model, short_conv)

    def mix(self, q, k, v) -> torch.Tensor:
        return linear_attention(q, k, v, causal=self.causal, mode=self.mode, chunk=self.chunk, feature_map=self.phi)

    # -- decoding: the RNN state [S | z] of §3.4, (B, H, phi_dim, e + 1): S_i = sum phi(k_j) v_j^T, z_i = sum phi(k_j)
    def init_state(self, batch: int, *, device=None, dtype=torch.float32):
        self._check_causal()
        S = torch.zeros(batch, self.heads, self.phi_dim, self.d_model // self.heads + 1, device=device, dtype=dtype)
        return with_conv_state(self.conv, S, batch, device=device, dtype=dtype)

    def mix_cached(self, q, k, v, state):
        """GateLoop's recurrence with ``a = 1`` started from ``h0 = [S | z]`` (a column of ones appended to ``v``
        makes its last output column the normaliser ``phi(q_i) . z_i``); the op returns the final state."""
        from seqlab.ops import gateloop

        fq, fk = self.phi(q), self.phi(k)
        ve = torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)
        mode = self.mode if self.mode in ("numba", "triton") else "auto"
        y, state = gateloop(fq, fk, ve, torch.ones_like(fk), h0=state, mode=mode, return_state=True)
        return _divide(y[..., :-1], y[..., -1], _EPS), state

    def step(self, x_t: torch.Tensor, state):
        """One token (Katharopoulos et al. 2020, eq. 18-20): ``[S | z] += phi(k_t) [v_t | 1]``,
        ``y_t = phi(q_t) S / (phi(q_t) . z)``."""
        h, S, c = convolve_from(self.conv, self.norm1(x_t[:, None]), state)
        q, k, v = (t[:, :, 0] for t in self.heads_qkv(h))                                # (B, H, d)
        fq, fk = self.phi(q), self.phi(k)
        ve = torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)
        S = S + fk[..., None] * ve[..., None, :]
        y = torch.einsum("bhd,bhde->bhe", fq, S)
        y = _divide(y[..., None, :-1], y[..., None, -1], _EPS)                          # (B, H, 1, e)
        return self._around(y, x_t[:, None])[:, 0], joined(c, S)

    def state_size(self, t: int) -> int:
        return self.heads * self.phi_dim * (self.d_model // self.heads + 1) + conv_state_size(self.conv)

    @torch.no_grad()
    def attention_matrix(self, x: torch.Tensor) -> torch.Tensor:
        """The effective (normalised) linear-attention weights ``(B, H, L, L)`` (for pictures)."""
        q, k, _ = self.heads_qkv(self.mixer_input(x))
        A = self.phi(q) @ self.phi(k).transpose(-1, -2)
        if self.causal:
            L = A.shape[-1]
            A = A * torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        return A / A.sum(-1, keepdim=True).clamp_min(1e-6)
