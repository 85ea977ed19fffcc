"""Initial weights drawn again by a named rule, to measure what scale each family trains best at its width.

Every builder draws its own weights (the rule :data:`seqlab.models.registry.INIT_RULES` names). GPT-2's std 0.02,
which the Transformer baselines use, was chosen for widths of hundreds; at the workbench's widths (16 to 72) it
may slow a family down. :func:`redraw` draws a built model's weights again, one group at a time, so that each
choice can be measured on its own (``python -m seqlab experiment init-scale``):

- ``linears``: every ``nn.Linear`` inside the blocks: ``"default"`` (PyTorch's own, uniform with std
  ``1/sqrt(3 fan_in)``), ``"fan_in"`` (normal with std ``1/sqrt(fan_in)``) or a number (normal with that std);
  the blocks' output projections are then divided by ``sqrt(2 n_layers)`` again, as the builders do;
- ``embeddings``: the token table, the learned positions and a CLS token, normal with this std;
- ``head``: the output layer, normal with this std (bias zero), or ``"default"``.

:data:`VARIANTS` names the rules the measurement compares; a run records the name.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

__all__ = ["VARIANTS", "redraw", "residual_outputs"]

VARIANTS = {
    "as-built": {},                                             # the family's own rule (INIT_RULES)
    "gpt2-0.02": {"linears": 0.02, "embeddings": 0.02, "head": 0.02},   # GPT-2's rule (the attention baselines')
    "default-linears": {"linears": "default"},                  # the attention baselines only
    "embeddings-1": {"embeddings": 1.0},
    "embeddings-0.02": {"embeddings": 0.02},
    "head-default": {"head": "default"},
    "default-linears+embeddings-1": {"linears": "default", "embeddings": 1.0},
    "fan-in-linears+embeddings-1": {"linears": "fan_in", "embeddings": 1.0},
}


def residual_outputs(block: nn.Module) -> list[nn.Linear]:
    """The linears of ``block`` that write into the residual stream (attention's output projection and the
    MLP's last layer), which the builders scale by ``1/sqrt(2 n_layers)``."""
    out = [getattr(block, "out", None), getattr(getattr(block, "mlp", None), "proj", None)]
    found = [m for m in out if isinstance(m, nn.Linear)]
    if len(found) != 2:
        raise ValueError(f"redraw: {type(block).__name__} has no out and mlp.proj linears; linears can be redrawn "
                         "for the attention baselines only")
    return found


def _draw_linear(lin: nn.Linear, how) -> None:
    if how == "default":
        lin.reset_parameters()
        return
    std = 1.0 / math.sqrt(lin.in_features) if how == "fan_in" else float(how)
    nn.init.normal_(lin.weight, std=std)
    if lin.bias is not None:
        nn.init.zeros_(lin.bias)


@torch.no_grad()
def redraw(model: nn.Module, *, linears=None, embeddings: float | None = None, head=None) -> nn.Module:
    """Draw ``model``'s weights again by group (module docstring); a group given as None keeps its weights."""
    if linears is not None:
        if linears not in ("default", "fan_in") and not isinstance(linears, (int, float)):
            raise ValueError(f"linears: expected 'default', 'fan_in' or a std, got {linears!r}")
        n_residual = 2 * len(model.blocks)
        for block in model.blocks:
            outputs = residual_outputs(block)
            for lin in block.modules():
                if isinstance(lin, nn.Linear):
                    _draw_linear(lin, linears)
            for lin in outputs:
                lin.weight.div_(math.sqrt(n_residual))
    if embeddings is not None:
        for p in (model.embed.weight, getattr(model, "pos", None), getattr(model, "cls", None)):
            if p is not None:
                nn.init.normal_(p, std=float(embeddings))
        if hasattr(model, "pos_scale"):        # fixed sinusoids are added at the embeddings' scale
            model.pos_scale = float(embeddings)
    if head is not None:
        _draw_linear(model.head, head)
    return model
