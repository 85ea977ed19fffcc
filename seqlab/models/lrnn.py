"""Models ``lrnn`` (LRNN-only blocks) and ``fst`` (Feature-Sequence Twist blocks) of paper 002.

Both embed tokens into ``hidden`` features, stack ``depth`` blocks from ``seqlab.layers.lrnn``,
apply a final LayerNorm and either predict a class from the **last position** (002 §3.2: "the
target prediction is the output of the final element of the generated sequence") or, with
``num_classes=None``, act as a causal language model.

FST has a fixed sequence length (002 §4), given by ``seq_len``. The padding rule for a shorter
input of length ``L < seq_len``: ``seq_len - L`` zero feature vectors are added after the
embedding —

- classifier: **in front** (as Algorithm 1, step 1 pads), so the last position is the last real token;
- language model: **behind**, so the padding lies in the future of every real token and the
  causal model cannot see it; the logits of the ``L`` real positions are returned.

A longer input is an error.

An ``lrnn`` language model decodes with the protocol of ``seqlab.models.decoding`` (``init_state`` /
``prefill`` / ``step`` / ``state_size``): its state is each block's complex ``h̄_t`` ``(B, d_state)``,
starting at the trained ``h̄_0`` (and the last inputs of its ``short_conv`` if it has one); ``prefill`` is one
``linear_scan`` from it. ``fst`` does not decode.
"""
from __future__ import annotations

import torch

from seqlab.layers.lrnn import FSTBlock, LRNNBlock
from seqlab.models.common import SequenceModel
from seqlab.models.decoding import DecodingModel
from seqlab.models.registry import register

__all__ = ["FSTModel", "build_lrnn", "build_fst"]


class FSTModel(SequenceModel):
    """``SequenceModel`` with FST blocks and the fixed-length padding rule of the module docstring.

    It has no decoding protocol (:data:`NO_DECODING` says why): ``init_state``, ``prefill`` and ``step``
    raise ``NotImplementedError`` with that reason, and ``seqlab.generate`` reruns its forward."""

    NO_DECODING = ("the FST cannot decode with a state: its twisted half mixes along the sequence axis with an "
                   "LRNN whose input map is (seq_len x seq_len), so every output depends on the whole fixed-length "
                   "sequence at once (002 §2.2) and no state of the past alone gives the next token's logits")

    def _no_decoding(self, *args, **kwargs):
        raise NotImplementedError(self.NO_DECODING)

    init_state = prefill = step = state_size = _no_decoding

    def check_tokens(self, tokens: torch.Tensor) -> None:
        if isinstance(tokens, torch.Tensor) and tokens.dim() == 2 and tokens.shape[1] > self.seq_len:
            raise ValueError(f"tokens: FST has a fixed sequence length seq_len={self.seq_len}; got length "
                             f"{tokens.shape[1]} (truncate the input or build the model with a larger seq_len)")
        super().check_tokens(tokens)

    def features(self, tokens: torch.Tensor) -> torch.Tensor:
        self.check_tokens(tokens)
        x = self.embed_tokens(tokens)                       # (B, L, D)
        length, pad = x.shape[1], self.seq_len - x.shape[1]
        if pad:
            zeros = x.new_zeros(x.shape[0], pad, x.shape[2])
            x = torch.cat([x, zeros], 1) if self.is_language_model else torch.cat([zeros, x], 1)
        for block in self.blocks:
            x = block(x)                                     # (B, seq_len, D)
        x = x[:, :length] if self.is_language_model else x[:, pad:]
        return self.norm(x)


def _check_config(d_model: int, n_layers: int) -> None:
    if not isinstance(d_model, int) or d_model < 1:
        raise ValueError(f"d_model: expected a positive int, got {d_model!r}")
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"n_layers: expected a positive int, got {n_layers!r}")


@register("lrnn")
def build_lrnn(*, vocab_size: int, num_classes: int | None = None, seq_len: int | None = None, d_model: int = 64,
               n_layers: int = 2, norm: bool = True, mode: str = "auto", r_min: float = 0.9, r_max: float = 0.999,
               gamma_norm: bool = True, d_state: int | None = None, short_conv: int = 0,
               d_mlp: int | None = None) -> SequenceModel:
    """LRNN-only blocks (002 §3.5 ablation). Any length; causal, so it is also a language model. Initialised by
    the LRU's ring init of lambda (``"lru-ring"``), embeddings N(0, 1), head N(0, 0.02).

    ``d_state``: the LRNN's state width, complex numbers a layer (None: d_model); also its MLP's hidden width,
    unless d_mlp sets that.
    ``d_mlp``: the MLP's hidden width (None: d_state); with d_model and the parameter count held (d_mlp chosen for
    them), d_state then moves the state alone (the recall sweep's frontier plan).
    ``short_conv``: width of a causal depthwise conv on each layer's LRNN input (0: none; not in the paper).
    State per sequence and layer: ``2 * d_state + (short_conv - 1) * d_model`` floats (no conv term without
    one): ``model.state_size(t)``."""
    _check_config(d_model, n_layers)
    if d_state is not None and (isinstance(d_state, bool) or not isinstance(d_state, int) or d_state < 1):
        raise ValueError(f"d_state: expected None (d_model) or a positive int, got {d_state!r}")
    if d_mlp is not None and (isinstance(d_mlp, bool) or not isinstance(d_mlp, int) or d_mlp < 1):
        raise ValueError(f"d_mlp: expected None (d_state) or a positive int, got {d_mlp!r}")
    blocks = [LRNNBlock(d_model, d_hidden=d_state, norm=norm, mode=mode, r_min=r_min, r_max=r_max,
                        gamma_norm=gamma_norm, short_conv=short_conv, d_mlp=d_mlp) for _ in range(n_layers)]
    return DecodingModel(vocab_size=vocab_size, d_model=d_model, blocks=blocks, num_classes=num_classes,
                         seq_len=None, pool="last", causal=True, embed_std=1.0)


@register("fst")
def build_fst(*, vocab_size: int, num_classes: int | None = None, seq_len: int | None = None, d_model: int = 64,
              n_layers: int = 2, causal: bool | None = None, norm: bool = True, mode: str = "auto", r_min: float = 0.9,
              r_max: float = 0.999, gamma_norm: bool = True) -> FSTModel:
    """FST blocks (002 Fig. 1). ``seq_len`` is required. ``causal`` defaults to ``num_classes is None``
    (a language model must be causal; a classifier uses the paper's unmasked twist). Initialised as
    :func:`build_lrnn` (``"lru-ring"``)."""
    _check_config(d_model, n_layers)
    if seq_len is None:
        raise ValueError("seq_len: the fst model has a fixed sequence length (002 §4); pass seq_len=L")
    if causal is None:
        causal = num_classes is None
    if num_classes is None and not causal:
        raise ValueError("causal: a language model (num_classes=None) needs the causal FST; got causal=False")
    blocks = [FSTBlock(d_model, seq_len, causal=causal, norm=norm, mode=mode, r_min=r_min, r_max=r_max,
                       gamma_norm=gamma_norm) for _ in range(n_layers)]
    return FSTModel(vocab_size=vocab_size, d_model=d_model, blocks=blocks, num_classes=num_classes,
                    seq_len=seq_len, max_len=seq_len, pool="last", causal=causal, embed_std=1.0)
