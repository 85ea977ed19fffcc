"""What every model shares: token embedding, a stack of blocks, a final norm and a head.

A block maps ``(B, L, D) -> (B, L, D)``. ``SequenceModel`` is a causal language model when
``num_classes is None`` (logits ``(B, L, vocab_size)``) and a sequence classifier otherwise
(logits ``(B, C)``, pooled by ``pool`` = ``"last" | "mean" | "cls"``).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from seqlab.ops.positional import sinusoidal_positions

# Absolute positions a model can add to its token embeddings: a learned table (as paper 001 App. D does; it
# caps the length at its size), fixed sinusoids (no cap: what lets a linear model decode any length) or none.
POSITIONS = ("learned", "sinusoidal", "none")


class SequenceModel(nn.Module):
    def __init__(self, *, vocab_size: int, d_model: int, blocks: list[nn.Module], num_classes: int | None = None,
                 seq_len: int | None = None, max_len: int | None = None, positions: str = "none",
                 pool: str = "mean", causal: bool = True, final_norm: bool = True, embed_std: float = 0.02):
        super().__init__()
        if pool not in ("last", "mean", "cls"):
            raise ValueError(f"pool: expected 'last', 'mean' or 'cls', got {pool!r}")
        if positions not in POSITIONS:
            raise ValueError(f"positions: expected one of {POSITIONS}, got {positions!r}")
        if num_classes is None and not causal:
            raise ValueError("a bidirectional model cannot be a causal language model: pass num_classes=C")
        self.vocab_size, self.num_classes, self.d_model = vocab_size, num_classes, d_model
        self.seq_len = seq_len        # fixed length the model requires (None: any length)
        self.max_len = max_len        # longest input the model accepts (learned positions), None: any
        self.positions = positions    # absolute positions added to the embeddings: POSITIONS
        self.causal = causal
        self.pool = pool
        self.embed = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embed.weight, std=embed_std)
        self.cls = nn.Parameter(torch.randn(1, 1, d_model) * embed_std) if pool == "cls" else None
        n_pos = (max_len or seq_len or 0) + (1 if pool == "cls" else 0)
        self.pos = nn.Parameter(torch.randn(1, n_pos, d_model) * embed_std) if positions == "learned" else None
        self.pos_scale = embed_std    # sinusoidal positions are drawn at the embeddings' scale
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(d_model) if final_norm else nn.Identity()
        out = vocab_size if num_classes is None else num_classes
        self.head = nn.Linear(d_model, out)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    @property
    def is_language_model(self) -> bool:
        return self.num_classes is None

    def check_tokens(self, tokens: torch.Tensor, name: str = "tokens") -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point() or tokens.is_complex():
            got = f"shape {tuple(tokens.shape)}, dtype {tokens.dtype}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise ValueError(f"{name}: expected integer tokens of shape (B, L), got {got}")
        L = tokens.shape[1]
        if self.max_len is not None and L > self.max_len:
            raise ValueError(f"{name}: length {L} exceeds this model's max_len={self.max_len}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"{name}: ids must lie in [0, vocab_size={self.vocab_size}), got range "
                             f"[{int(tokens.min())}, {int(tokens.max())}]")

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.position_embedding(0, x.shape[1], x)

    def position_embedding(self, start: int, length: int, like: torch.Tensor) -> torch.Tensor | float:
        """What is added to the embeddings at positions ``start .. start + length - 1``: ``(1, length, D)``
        rows of the learned table, fixed sinusoids (any position) or ``0`` without positions."""
        if self.positions == "learned":
            return self.pos[:, start: start + length]
        if self.positions == "sinusoidal":
            pe = sinusoidal_positions(start, length, self.d_model, device=like.device, dtype=like.dtype)
            return self.pos_scale * pe[None]
        return 0.0

    def features(self, tokens: torch.Tensor) -> torch.Tensor:
        """Hidden states after the final norm, ``(B, L', D)`` (L' = L + 1 with a CLS token)."""
        self.check_tokens(tokens)
        x = self.embed_tokens(tokens)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.features(tokens)
        if self.num_classes is None:
            return self.head(h)
        if self.pool == "cls":
            pooled = h[:, 0]
        elif self.pool == "last":
            pooled = h[:, -1]
        else:
            pooled = h.mean(dim=1)
        return self.head(pooled)


def scale_residual_init(module: nn.Module, n_residual: int) -> None:
    """Divide an output projection's initial weights by sqrt(#residual connections) (GPT-2 style)."""
    with torch.no_grad():
        module.weight.div_(math.sqrt(max(1, n_residual)))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
