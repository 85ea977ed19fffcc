"""The decoding protocol of every causal language model, composed from its blocks.

    state = model.init_state(batch, device=None, dtype=None)   # before the first token
    logits_t, state = model.step(tokens_t, state)              # tokens_t (B,) -> (B, vocab_size)
    logits, state = model.prefill(tokens, state=None)          # a prompt (B, P) in one parallel pass
    model.state_size(t)                                        # floats held per sequence after t tokens

The state lives in the blocks: each block defines ``init_state(batch, device=, dtype=)``,
``step(x_t, state) -> (y_t, state)`` on ``(B, D)`` and ``state_size(t)``, and, where its recurrence has
a parallel form that starts from a state, ``prefill(x, state) -> (y, state)`` on ``(B, P, D)``. A
block without ``prefill`` is prefilled by stepping through the prompt. The model adds the token
embedding (and its positions, offset by the tokens already read), the final norm and the head.

``forward(x)``, ``prefill(x[:, :P])`` followed by ``step`` for the rest, and ``step`` alone from
``init_state`` compute the same logits; ``prefill(b, prefill(a)[1])`` continues ``prefill(a)``.
"""
from __future__ import annotations

import torch

from seqlab.models.common import SequenceModel

__all__ = ["DecodingModel", "state_tensors"]


def state_tensors(obj):
    """Every tensor inside a block state (tensors, tuples, lists, dicts, named tuples)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from state_tensors(v)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from state_tensors(v)


class DecodingModel(SequenceModel):
    """A ``SequenceModel`` whose causal language model decodes with a state (see the module docstring)."""

    def _state_tag(self) -> tuple:
        """What a state must come from: this family, config and stack of blocks."""
        config = getattr(self, "model_config", None)
        return (getattr(self, "model_name", type(self).__name__), repr(config),
                tuple(type(b).__name__ for b in self.blocks), self.d_model, self.vocab_size)

    def _check_decoder(self, what: str) -> None:
        if not self.is_language_model:
            raise ValueError(f"{what}: only a causal language model (num_classes=None) decodes token by token")

    def init_state(self, batch: int, device=None, dtype=None) -> dict:
        """The state before the first token, for ``batch`` sequences (dtype and device of the weights by default)."""
        self._check_decoder("init_state")
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ValueError(f"batch: expected a positive int, got {batch!r}")
        device = device or self.embed.weight.device
        dtype = dtype or self.embed.weight.dtype
        blocks = [b.init_state(batch, device=device, dtype=dtype) for b in self.blocks]
        return {"model": self._state_tag(), "batch": batch, "t": 0, "blocks": blocks}

    def check_state(self, state, batch: int) -> None:
        """``ValueError`` naming ``state`` unless it is a state of this model for ``batch`` sequences."""
        if not isinstance(state, dict) or state.get("model") != self._state_tag():
            raise ValueError(f"state: expected a state from this model's init_state/prefill/step "
                             f"({self._state_tag()[0]}), got one from {_owner(state)}")
        if state["batch"] != batch or any(t.shape[0] != batch for t in state_tensors(state["blocks"])):
            raise ValueError(f"state: holds {state['batch']} sequences but the tokens have batch size {batch}")

    def _check_positions(self, t: int, n: int, what: str) -> None:
        if self.max_len is not None and t + n > self.max_len:
            raise ValueError(f"{what}: positions {t}..{t + n - 1} go beyond this model's max_len={self.max_len}")

    def _embed_at(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        """Token embeddings ``(B, P, D)`` of tokens at positions ``t .. t + P - 1``."""
        x = self.embed(tokens)
        return x + self.position_embedding(t, tokens.shape[1], x)

    def prefill(self, tokens: torch.Tensor, state: dict | None = None) -> tuple[torch.Tensor, dict]:
        """``tokens`` (B, P) in one parallel pass: logits (B, P, vocab_size) and the state after them."""
        self._check_decoder("prefill")
        self.check_tokens(tokens)
        state = self.init_state(tokens.shape[0]) if state is None else state
        self.check_state(state, tokens.shape[0])
        t = state["t"]
        self._check_positions(t, tokens.shape[1], "tokens")
        x = self._embed_at(tokens, t)
        if tokens.shape[1] == 0:       # an empty prompt: no logits, and the state as it was (no block runs on it)
            return self.head(self.norm(x)), {**state, "blocks": list(state["blocks"])}
        new = []
        for block, s in zip(self.blocks, state["blocks"]):
            x, s = block.prefill(x, s) if hasattr(block, "prefill") else _prefill_by_steps(block, x, s)
            new.append(s)
        return self.head(self.norm(x)), {**state, "t": t + tokens.shape[1], "blocks": new}

    def step(self, tokens_t: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """``tokens_t`` (B,) at position ``state["t"]`` -> logits (B, vocab_size) and the new state: O(1)
        work per token for the linear families, O(t) for attention with a KV cache."""
        self._check_decoder("step")
        if not isinstance(tokens_t, torch.Tensor) or tokens_t.dim() != 1:
            got = getattr(tokens_t, "shape", tokens_t)
            raise ValueError(f"tokens_t: expected integer tokens of shape (B,), got {got!r}")
        self.check_tokens(tokens_t[:, None], "tokens_t")
        self.check_state(state, tokens_t.shape[0])
        t = state["t"]
        self._check_positions(t, 1, "tokens_t")
        x = self._embed_at(tokens_t[:, None], t)[:, 0]
        new = []
        for block, s in zip(self.blocks, state["blocks"]):
            x, s = block.step(x, s)
            new.append(s)
        return self.head(self.norm(x)), {**state, "t": t + 1, "blocks": new}

    def state_size(self, t: int) -> int:
        """Floats held per sequence after ``t`` tokens (a complex number counts as two)."""
        if not isinstance(t, int) or t < 0:
            raise ValueError(f"t: expected a non-negative int, got {t!r}")
        return sum(b.state_size(t) for b in self.blocks)


def _owner(state) -> str:
    if isinstance(state, dict) and "model" in state:
        return repr(state["model"][0])
    return type(state).__name__


def _prefill_by_steps(block, x: torch.Tensor, state):
    """For a block with no parallel form from a state: its ``step`` over the prompt."""
    rows = []
    for i in range(x.shape[1]):
        y, state = block.step(x[:, i], state)
        rows.append(y)
    return torch.stack(rows, 1), state
