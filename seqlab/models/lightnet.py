"""The LightNet model (paper 003, Fig. 3): token embedding, MD-TPE, a stack of LightNet layers.

``build("lightnet", vocab_size=V)`` is a causal language model (1-D TPE and LRPE, additive decay
eq. 7); ``build("lightnet", vocab_size=V, num_classes=C, grid=(4, 4))`` a non-causal classifier on a
2-D grid (MD-TPE, MD-LRPE, eq. 8: one scan). Without ``grid`` a classifier takes the square grid of
``seq_len`` if it is a perfect square, else 1-D positions.

Ablation switches (Tables 1, 5-7): ``tpe``, ``lrpe``, ``decay`` (``"additive"`` | ``"none"`` |
``"multiplicative"``), ``share``, ``norm``, ``gate_rank``.

A language model decodes with the protocol of ``seqlab.models.decoding`` (``init_state`` / ``prefill`` /
``step`` / ``state_size``): per layer the state of ``decay_attention`` (additive: the normalised sum ``kv``
and the log-normaliser ``log s``; eq. 7) and the position ``t`` that LRPE's phases start from; the 1-D
TPE's SSM state ``(B, e * d)``. Constant in the length read.
"""
from __future__ import annotations

import math

from seqlab.layers.lightnet import LightNetLayer, MDTPE
from seqlab.models.common import SequenceModel, scale_residual_init
from seqlab.models.decoding import DecodingModel
from seqlab.models.registry import register

__all__ = ["build_lightnet", "infer_grid"]


def infer_grid(seq_len: int | None, grid=None) -> tuple[int, ...] | None:
    """The classifier's grid: ``grid`` if given, else the square root grid of ``seq_len``, else 1-D."""
    if grid is not None:
        grid = tuple(int(n) for n in grid)
        if seq_len is not None and math.prod(grid) != seq_len:
            raise ValueError(f"grid: expected prod(grid) = seq_len = {seq_len}, got {grid}")
        return grid
    if seq_len is None:
        return None
    side = math.isqrt(seq_len)
    return (side, side) if side * side == seq_len and side > 1 else (seq_len,)


@register("lightnet")
def build_lightnet(*, vocab_size: int, num_classes: int | None = None, seq_len: int | None = None,
                   d_model: int = 64, n_layers: int = 2, n_heads: int = 4, grid=None, tpe: bool = True,
                   tpe_dim: int = 4, lrpe: bool = True, lrpe_base: float = 10000.0, decay: str = "additive",
                   share: bool = True, norm: bool = True, gate_rank: int | None = None, glu_hidden: int | None = None,
                   pool: str = "mean", abs_pos: bool = False, mode: str = "auto") -> SequenceModel:
    """LightNet; ``num_classes=None``: causal LM, else non-causal classifier on ``grid``.

    ``n_heads``: sets the state: heads of d = d_model / n_heads, each a d_k x d_v sum (keys doubled by LRPE).
    ``tpe``: the 1-D TPE (an SSM over the tokens, eq. 11-12); ``False`` drops it (Table 1's ablation).

    ``abs_pos=True`` adds learned absolute position embeddings (a grid classifier only), as the DeiT
    pipeline that LightNet's image classifier is built into has them (§5.1); off by default.

    Initialised by seqlab's rule (``"torch-default-scaled"``; paper 003 states none): PyTorch's default projections
    (the attention output N(0, 0.02)), output projections divided by ``sqrt(2 n_layers)``, embeddings and head
    N(0, 0.02); it measured best against N(0, 1) embeddings and PyTorch's default head (``results/init/medium.json``).
    """
    causal = num_classes is None
    if abs_pos and causal:
        raise ValueError("abs_pos: learned absolute positions are for the grid classifier; the causal LM uses 1-D TPE/LRPE")
    if causal and grid is not None and len(tuple(grid)) > 1:
        raise ValueError(f"grid: a causal language model reads a 1-D sequence; got grid={tuple(grid)} "
                         "(pass num_classes=C for a 2-D classifier)")
    shape = None if causal else infer_grid(seq_len, grid)
    head_dim = d_model // n_heads
    if lrpe and shape is not None and head_dim % len(shape):
        raise ValueError(f"d_model/n_heads = {head_dim} must be divisible by the grid's {len(shape)} axes for MD-LRPE")
    blocks = [MDTPE(d_model, shape=shape, e=tpe_dim)] if tpe else []
    for _ in range(n_layers):
        layer = LightNetLayer(d_model, n_heads, glu_hidden=glu_hidden, causal=causal, shape=shape, decay=decay,
                              lrpe=lrpe, share=share, norm=norm, gate_rank=gate_rank, lrpe_base=lrpe_base, mode=mode)
        scale_residual_init(layer.attn.out, 2 * n_layers)
        scale_residual_init(layer.glu.w3, 2 * n_layers)
        blocks.append(layer)
    model = DecodingModel(vocab_size=vocab_size, d_model=d_model, blocks=blocks, num_classes=num_classes,
                          seq_len=None, max_len=None if shape is None else math.prod(shape), pool=pool, causal=causal,
                          positions="learned" if abs_pos and shape is not None else "none")
    model.grid = shape
    return model
