"""Model ``gateloop`` (paper 004 Appendix C, Fig. 10): token embedding, a stack of GateLoop blocks,
a final LayerNorm and a language head (``num_classes=None``) or a classifier on the last position.

Defaults are the Memory Horizon sizes of Appendix C.1: ``n_layers=4``, ``d_model=d_qk=d_v=64``,
``heads=64`` (``dk = dv = 1``), ``d_ff=128``. ``data_controlled=False`` builds the fixed-transition
model of the ablation (Fig. 6-7)::

    model = seqlab.models.build("gateloop", vocab_size=7, data_controlled=False)

A language model decodes with the protocol of ``seqlab.models.decoding`` (``init_state`` / ``prefill`` /
``step`` / ``state_size``); its state is each block's ``S_n`` (eq. 7), ``(B, H, dk, dv)`` complex, whose size
``n_heads`` sets (``2 d_qk d_v / n_heads`` floats), and the last inputs of its ``short_conv`` if it has one.
"""
from __future__ import annotations

from seqlab.layers.gateloop import GateLoopBlock
from seqlab.models.common import SequenceModel, scale_residual_init
from seqlab.models.decoding import DecodingModel
from seqlab.models.registry import register

__all__ = ["build_gateloop"]


@register("gateloop")
def build_gateloop(*, vocab_size: int, num_classes: int | None = None, seq_len: int | None = None,
                   d_model: int = 64, n_layers: int = 4, d_qk: int | None = None, d_v: int | None = None,
                   n_heads: int | None = None, d_ff: int = 128, data_controlled: bool = True, mode: str = "auto",
                   dropout: float = 0.0, pool: str = "last", short_conv: int = 0) -> SequenceModel:
    """GateLoop model (any length; causal, so it is a language model or a last-position classifier).

    ``d_qk``, ``d_v``: total widths of the queries and keys, and of the values (None: d_model).
    ``n_heads``: sets the state: heads of dk = d_qk / n_heads, dv = d_v / n_heads (None: the paper's dk = dv = 1).
    ``short_conv``: width of a causal depthwise conv on the time mixing's input (0: none; not in the paper).
    State per sequence and layer: ``2 * d_qk * d_v / n_heads + (short_conv - 1) * d_model`` floats (complex S_n;
    no conv term without one): ``model.state_size(t)``.

    Initialised by seqlab's rule (``"torch-default-scaled"``; paper 004 App. C states none): PyTorch's default
    projections, output projections divided by ``sqrt(2 n_layers)``, embeddings and head N(0, 0.02); measured
    against N(0, 1) embeddings and PyTorch's default head in ``results/init/medium.json`` (no difference)."""
    for name, value in (("d_model", d_model), ("n_layers", n_layers), ("d_ff", d_ff)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    d_qk = d_qk or d_model
    d_v = d_v or d_model
    n_heads = n_heads or d_qk
    blocks = [GateLoopBlock(d_model, d_qk=d_qk, d_v=d_v, heads=n_heads, d_ff=d_ff, data_controlled=data_controlled,
                            mode=mode, dropout=dropout, short_conv=short_conv) for _ in range(n_layers)]
    for block in blocks:
        scale_residual_init(block.time_mixing.out, 2 * n_layers)
        scale_residual_init(block.ffn[2], 2 * n_layers)
    model = DecodingModel(vocab_size=vocab_size, d_model=d_model, blocks=blocks, num_classes=num_classes,
                          seq_len=None, pool=pool, causal=True)
    model.data_controlled = data_controlled
    return model
