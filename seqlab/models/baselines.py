"""Baseline models: ``transformer`` (softmax attention) and ``linear-transformer`` (Katharopoulos et al. 2020).

Both are :class:`SequenceModel` stacks of pre-norm blocks from ``seqlab.layers.attention``, the Transformer
with learned positions (up to ``max_len`` tokens: its KV cache grows with the context anyway), the Linear
Transformer with fixed sinusoidal ones (any length: its state does not grow), built as a causal language model
(``num_classes=None``) or as a sequence classifier (``num_classes=C``, pooled ``"mean"`` or
``"last"``; ``causal=False`` makes a classifier bidirectional)::

    model = seqlab.models.build("transformer", vocab_size=30, d_model=64, n_layers=2, n_heads=4)

A language model decodes with the protocol of ``seqlab.models.decoding``: the Transformer's state is its
KV cache (``2 * d_model`` floats per token and layer), the Linear Transformer's the constant
``[S | z]`` of its RNN form (Katharopoulos et al. 2020, §3.4), whose size its ``feature_map``, ``feature_dim``
and ``n_heads`` set (Based, arXiv 2402.18668), with the last inputs of its ``short_conv`` if it has one.
"""
from __future__ import annotations

from seqlab.layers.attention import LinearTransformerBlock, TransformerBlock
from seqlab.models.common import SequenceModel, scale_residual_init
from seqlab.models.decoding import DecodingModel
from seqlab.models.registry import register

__all__ = ["build_transformer", "build_linear_transformer"]

DEFAULT_MAX_LEN = 512


def _max_len(max_len: int | None, seq_len: int | None, positions: str) -> int | None:
    """The longest input: the learned table's size (``max_len``, default 512 or ``seq_len`` if longer); none
    for sinusoidal positions or none at all, which fit any length (``max_len`` must then be left out)."""
    if positions != "learned":
        if max_len is not None:
            raise ValueError(f"max_len: only learned positions have a longest length; positions={positions!r} "
                             f"fits any length, leave max_len out")
        return None
    if max_len is None:
        return max(DEFAULT_MAX_LEN, seq_len or 0)
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len: expected a positive int, got {max_len!r}")
    if seq_len is not None and seq_len > max_len:
        raise ValueError(f"max_len: seq_len {seq_len} is longer than max_len {max_len}; pass max_len>={seq_len}")
    return max_len


def _check_config(d_model, n_layers, pool, causal, num_classes) -> None:
    if not isinstance(d_model, int) or d_model < 1:
        raise ValueError(f"d_model: expected a positive int, got {d_model!r}")
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"n_layers: expected a positive int, got {n_layers!r}")
    if pool not in ("mean", "last"):
        raise ValueError(f"pool: expected 'mean' or 'last', got {pool!r}")
    if num_classes is None and not causal:
        raise ValueError("causal: a language model (num_classes=None) must be causal; "
                         "causal=False is for classifiers (pass num_classes=C)")


def _stack(block_cls, *, vocab_size, num_classes, seq_len, d_model, n_layers, max_len, positions, pool, causal,
           embed_std=0.02, **block_kw):
    _check_config(d_model, n_layers, pool, causal, num_classes)
    max_len = _max_len(max_len, seq_len, positions)
    blocks = [block_cls(d_model, causal=causal, **block_kw) for _ in range(n_layers)]
    for block in blocks:  # output projections scaled by sqrt(#residual connections) (paper 001, App. D)
        scale_residual_init(block.out, 2 * n_layers)
        scale_residual_init(block.mlp.proj, 2 * n_layers)
    return DecodingModel(vocab_size=vocab_size, d_model=d_model, blocks=blocks, num_classes=num_classes,
                         seq_len=None, max_len=max_len, positions=positions,
                         pool=pool, causal=causal, embed_std=embed_std)


@register("transformer")
def build_transformer(*, vocab_size: int, num_classes: int | None = None, seq_len: int | None = None,
                      d_model: int = 64, n_layers: int = 2, n_heads: int = 4, mlp_ratio: float = 4.0,
                      dropout: float = 0.0, max_len: int | None = None, causal: bool = True,
                      pool: str = "mean", positions: str = "learned") -> SequenceModel:
    """Pre-norm softmax Transformer with learned positions (``max_len`` default 512, or ``seq_len`` if longer;
    ``positions="sinusoidal"`` for fixed ones of any length).

    Initialised for its width (rule ``"fan-in-unit-embeddings"``): every linear of a block normal with std
    ``1/sqrt(fan_in)``, biases zero, the output projections then divided by ``sqrt(2 n_layers)``; token embeddings
    and positions N(0, 1); the head N(0, 0.02). Measured (``results/init/medium.json``, MQAR at the arena's base
    width 48, 1500 steps, lr 1e-3, 3 seeds): validation accuracy 0.998 ± 0.003, against 0.279 ± 0.009 with
    GPT-2's std 0.02 everywhere (its authors' rule, made for widths of hundreds)."""
    return _stack(TransformerBlock, vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len,
                  d_model=d_model, n_layers=n_layers, max_len=max_len, positions=positions, pool=pool, causal=causal,
                  heads=n_heads, mlp_ratio=mlp_ratio, dropout=dropout, init_std="fan_in", embed_std=1.0)


@register("linear-transformer")
def build_linear_transformer(*, vocab_size: int, num_classes: int | None = None, seq_len: int | None = None,
                             d_model: int = 64, n_layers: int = 2, n_heads: int = 4, mlp_ratio: float = 4.0,
                             dropout: float = 0.0, max_len: int | None = None, causal: bool = True,
                             pool: str = "mean", mode: str = "auto", chunk: int = 64,
                             positions: str = "sinusoidal", feature_map: str = "elu", feature_dim: int | None = None,
                             short_conv: int = 0) -> SequenceModel:
    """Pre-norm Linear Transformer (Katharopoulos et al. 2020) with sinusoidal positions: it decodes any length.

    ``positions="learned"``: a table of ``max_len`` rows, as the Transformer's.
    ``n_heads``: heads of d = d_model / n_heads values; each holds a state of phi x (d + 1) floats (below).
    ``mode`` of ``linear_attention`` (``auto``: causal attention on GateLoop's Numba loop on a CPU, else chunked).
    ``feature_map``: ``"elu"`` (elu+1, the paper's) or ``"taylor"`` (Based's [1, x, x⊗x/√2]: 1 + f + f²).
    ``feature_dim``: f, width of a head's q and k before the map (None: d_model / n_heads; Based: 16).
    ``short_conv``: width of a causal depthwise conv on the mixing input (0: none; 3-4 in H3, Based, Mamba).
    State per sequence and layer: ``n_heads * phi * (d_model / n_heads + 1) + (short_conv - 1) * d_model`` floats
    (``phi`` = f for elu, 1 + f + f² for taylor; no conv term without one): ``model.state_size(t)``.

    Initialised by GPT-2's rule (``"gpt2-0.02"``: linears, embeddings and head N(0, 0.02), output projections
    divided by ``sqrt(2 n_layers)``), kept because it measured best among the rules tried at its width
    (``results/init/medium.json``, MQAR at width 48, 1500 steps, 3 seeds: 0.474 ± 0.007, against 0.339 ± 0.052
    with the Transformer's fan-in rule and 0.266 ± 0.009 with PyTorch's default linears and N(0, 1) embeddings)."""
    return _stack(LinearTransformerBlock, vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len,
                  d_model=d_model, n_layers=n_layers, max_len=max_len, positions=positions, pool=pool, causal=causal,
                  heads=n_heads, mlp_ratio=mlp_ratio, dropout=dropout, mode=mode, chunk=chunk,
                  feature_map=feature_map, feature_dim=feature_dim, short_conv=short_conv)
