"""CausalRN and BiRN blocks: the computational pipeline of 000 Fig. 2.

    x ─ LN (pre-normalisation) ─┬─ W_left  (linear) ─ p_i ─┐
                                └─ W_right (affine) ─ q_j ─┴─ broadcast p_i + q_j
        ─ [pre-activation LN] ─ psi ─ reduction (mean over i) ─ [post-reduction LN] ─ W_out ─ + x

The broadcast / activation / reduction part is ``seqlab.ops.relation`` (000 eq. 8-9); everything
else is per token (eq. 7: the affine layers moved outside the pairwise sum). The hidden width is
``d_h = state_expansion * d_model`` (000 §4.2, Fig. 4d).

Initialisation (000 Appendix B): weights N(0, 0.02), biases 0, the output layer ``W_out``
further divided by sqrt(number of residual connections); LayerNorms start at (1, 0).

Decoding: ``init_state(batch)`` and ``step(x_t, state)`` advance a causal block one token at a time.
When the reduction factorises (``exp``, pre-norm ``none``/``approx``) the state is a running
log-sum-exp of the ``p_i``: O(1) work per token. Otherwise (exact pre-norm, other activations) the
state keeps every past ``p_i`` (the KV-cache-like memory of 000 §3.4) and a step costs O(t).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from seqlab.layers.rows import write_rows
from seqlab.ops.relation import (RELATION_ACTIVATIONS, RELATION_PRE_NORMS, resolve_mode, relation, relation_query,
                                 relation_state, relation_step)
from seqlab.ops.relation.streaming import RelationState

__all__ = ["RelationBlock", "CausalRNBlock", "BiRNBlock"]


class RelationBlock(nn.Module):
    """One CausalRN (``causal=True``) or BiRN (``causal=False``) block, ``(B, L, D) -> (B, L, D)``."""

    def __init__(self, d_model: int, *, causal: bool = True, activation: str = "exp", pre_norm: str = "none",
                 post_norm: bool = True, state_expansion: int = 1, mode: str = "auto", n_residual: int = 1,
                 init_std: float = 0.02):
        super().__init__()
        if not isinstance(d_model, int) or d_model < 1:
            raise ValueError(f"d_model: expected a positive int, got {d_model!r}")
        if not isinstance(state_expansion, int) or state_expansion < 1:
            raise ValueError(f"state_expansion: expected a positive int, got {state_expansion!r}")
        if activation not in RELATION_ACTIVATIONS:
            raise ValueError(f"activation: expected one of {RELATION_ACTIVATIONS}, got {activation!r}")
        if pre_norm not in RELATION_PRE_NORMS:
            raise ValueError(f"pre_norm: expected one of {RELATION_PRE_NORMS}, got {pre_norm!r}")
        self.mode = resolve_mode(mode, activation, pre_norm)   # refuses linear + exact / non-exp, with the reason
        self.requested_mode = mode                                 # "auto" picks the Triton kernel on a GPU
        self.causal, self.activation, self.pre_norm = causal, activation, pre_norm
        self.d_model, self.d_hidden = d_model, state_expansion * d_model
        d_h = self.d_hidden
        self.norm = nn.LayerNorm(d_model)                          # pre-normalisation (Fig. 2, Xiong et al.)
        self.w_left = nn.Linear(d_model, d_h, bias=False)          # p_i = W_left x_i
        self.w_right = nn.Linear(d_model, d_h)                     # q_j = W_right x_j + b_in
        if pre_norm != "none":                                     # affine map of the pre-activation LN
            self.act_weight = nn.Parameter(torch.ones(d_h))
            self.act_bias = nn.Parameter(torch.zeros(d_h))
        else:
            self.register_parameter("act_weight", None)
            self.register_parameter("act_bias", None)
        self.post_norm = nn.LayerNorm(d_h) if post_norm else None  # post-reduction normalisation (§3.3)
        self.w_out = nn.Linear(d_h, d_model)
        for lin in (self.w_left, self.w_right, self.w_out):
            nn.init.normal_(lin.weight, std=init_std)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        with torch.no_grad():
            self.w_out.weight.div_(math.sqrt(max(1, n_residual)))

    # -- the pieces of Fig. 2 (readout reads them) --------------------------------------------------
    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(p, q)``, each ``(B, L, d_h)``, from the block input."""
        h = self.norm(x)
        return self.w_left(h), self.w_right(h)

    @property
    def normalized(self) -> bool:
        # The Appendix A rescaling is exact only because the post-reduction LN follows it.
        return self.post_norm is not None

    def _op_kwargs(self) -> dict:
        return dict(activation=self.activation, pre_norm=self.pre_norm, normalized=self.normalized,
                    weight=self.act_weight, bias=self.act_bias)

    def reduce(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return relation(p, q, causal=self.causal, mode=self.requested_mode, **self._op_kwargs())

    def _output(self, r: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.post_norm is not None:
            r = self.post_norm(r)
        return x + self.w_out(r)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x: expected shape (B, L, {self.d_model}), got {tuple(x.shape)}")
        p, q = self.project(x)
        return self._output(self.reduce(p, q), x)

    # -- streaming decode ------------------------------------------------------------------------------
    @property
    def streams_in_constant_time(self) -> bool:
        return self.causal and self.mode in ("linear", "triton")

    def init_state(self, batch: int, *, device=None, dtype=torch.float32):
        if not self.causal:
            raise ValueError("init_state: a BiRN block is bidirectional; only a causal block can decode token by token")
        if self.streams_in_constant_time:
            return relation_state(batch, self.d_hidden, dtype=dtype, device=device)
        return torch.zeros(batch, 0, self.d_hidden, dtype=dtype, device=device)   # past p_i (KV-cache-like)

    def state_size(self, t: int) -> int:
        """Floats per sequence after ``t`` tokens: the running log-sum (linear) or every past ``p_i``."""
        return self.d_hidden if self.streams_in_constant_time else self.d_hidden * t

    def _step_inputs(self, x_t: torch.Tensor):
        """``(p_t, q_t, the op's keywords)`` of one token ``x_t`` (B, D), checked."""
        if x_t.dim() != 2 or x_t.shape[-1] != self.d_model:
            raise ValueError(f"x_t: expected shape (B, {self.d_model}), got {tuple(x_t.shape)}")
        p_t, q_t = self.project(x_t)
        kw = self._op_kwargs()
        if self.streams_in_constant_time:
            kw.pop("activation")
        return p_t, q_t, kw

    def step(self, x_t: torch.Tensor, state):
        """One token: ``x_t`` (B, D) -> ``(y_t, new_state)``, equal to row t of ``forward``."""
        p_t, q_t, kw = self._step_inputs(x_t)
        if self.streams_in_constant_time:
            r_t, state = relation_step(p_t, q_t, state, **kw)
        else:
            state = torch.cat([state, p_t[:, None]], dim=1)
            r_t = relation_query(state, q_t, **kw)
        return self._output(r_t, x_t), state

    def step_rows(self, x_t: torch.Tensor, state, t: torch.Tensor, active: torch.Tensor):
        """One token ``x_t`` (B, D) for rows at different positions ``t`` (B,) (a ragged batch,
        ``seqlab.layers.rows``); rows where ``active`` is False keep their state exactly. The linear state's count
        becomes one per row; the kept ``p_i`` are written at index ``t_r`` of each row, each row's query reads its
        own ``t_r + 1`` keys (the rows at one position in one call)."""
        p_t, q_t, kw = self._step_inputs(x_t)
        if self.streams_in_constant_time:
            r_t, new = relation_step(p_t, q_t, RelationState(state.log_sum, t), **kw)
            log_sum = torch.where(active[:, None], new.log_sum, state.log_sum)
            return self._output(r_t, x_t), RelationState(log_sum, t + active.long())
        keys, kept = write_rows(state, p_t[:, None], t, active, dim=1)
        r_t = q_t.new_empty(q_t.shape[0], self.d_hidden)
        for position in torch.unique(t).tolist():
            rows = (t == position).nonzero().flatten()
            r_t[rows] = relation_query(keys[rows, :position + 1], q_t[rows], **kw)
        return self._output(r_t, x_t), kept


def CausalRNBlock(d_model: int, **kwargs) -> RelationBlock:
    """A causal relation block (000 eq. 5)."""
    return RelationBlock(d_model, causal=True, **kwargs)


def BiRNBlock(d_model: int, **kwargs) -> RelationBlock:
    """A bidirectional relation block (000 eq. 4)."""
    return RelationBlock(d_model, causal=False, **kwargs)
