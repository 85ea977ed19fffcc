"""The delta-rule models: ``deltanet`` (arXiv 2406.06484) and ``gated-deltanet`` (arXiv 2412.06464).

Both are :class:`~seqlab.models.decoding.DecodingModel` stacks of :class:`~seqlab.layers.delta.DeltaNetBlock`
(token embedding, no absolute positions: the short convolutions and the recurrence give the order, a final
LayerNorm, the head), a causal language model (``num_classes=None``) or a last-position classifier::

    model = seqlab.models.build("gated-deltanet", vocab_size=64, d_model=48, n_layers=2, n_heads=4)

They differ in two defaults: Gated DeltaNet decays its state (``alpha_t = exp(-A softplus(x w + dt_bias))``,
always on) and gates its output (``use_gate=True``); DeltaNet keeps ``alpha = 1`` and, as fla's DeltaNet layer
by default, has no output gate (``use_gate=True`` adds it).

A language model decodes with the protocol of ``seqlab.models.decoding``: per layer the delta state
``S: (n_heads, dk, dv)`` and the last ``short_conv - 1`` inputs of the convolutions on q, k and v, constant in
the length read (``model.state_size(t)``).
"""
from __future__ import annotations

from seqlab.layers.delta import DeltaNetBlock
from seqlab.models.common import SequenceModel, scale_residual_init
from seqlab.models.decoding import DecodingModel
from seqlab.models.registry import register

__all__ = ["build_deltanet", "build_gated_deltanet"]


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


def _stack(*, gated: bool, vocab_size: int, num_classes: int | None, d_model: int, n_layers: int, n_heads: int,
           mlp_ratio: float, dropout: float, pool: str, **time_mixing) -> SequenceModel:
    """``n_layers`` blocks at width ``d_model``, output projections scaled by ``1/sqrt(2 n_layers)``."""
    _check_positive_int("d_model", d_model)
    _check_positive_int("n_layers", n_layers)
    _check_positive_int("n_heads", n_heads)
    blocks = [DeltaNetBlock(d_model, n_heads, mlp_ratio=mlp_ratio, dropout=dropout, gated=gated, **time_mixing)
              for _ in range(n_layers)]
    for block in blocks:
        scale_residual_init(block.time_mixing.out, 2 * n_layers)
        scale_residual_init(block.mlp.proj, 2 * n_layers)
    return DecodingModel(vocab_size=vocab_size, d_model=d_model, blocks=blocks, num_classes=num_classes,
                         seq_len=None, pool=pool, causal=True)


# The knobs both builders take, as ``python -m seqlab describe`` lists them (one line each; a family's own
# wording of a knob replaces the shared one).
_KNOBS = {
    "d_model": "the width of the residual stream (one config vocabulary with every family).",
    "n_layers": "the number of blocks, each time mixing then channel mixing.",
    "n_heads": "heads of dk x dv states, dk = expand_k d_model / n_heads (2: wide heads, as the papers').",
    "expand_k": "the keys' total width over d_model (fla: 1).",
    "expand_v": "the values' total width over d_model (fla: 1).",
    "short_conv": "width of the causal depthwise convs on q, k and v before their SiLU (0: none; fla: 4).",
    "use_gate": "the output gate RMSNorm(o) * SiLU(x W_g).",
    "allow_neg_eigval": "beta = 2 sigmoid: the transition's eigenvalues in [-1, 1] (fla's option).",
    "mlp_ratio": "the channel MLP's hidden width over d_model (GELU: the Transformer baseline's MLP).",
    "chunk_size": "chunk length of the delta rule's chunked (UT transform) form, in forward and prefill.",
    "mode": "of ``seqlab.ops.delta_rule``: ``auto`` (chunked), ``chunked``, ``recurrent``, ``fla`` (CUDA).",
    "dropout": "after each half of a block.",
    "pool": "a classifier's pooling, ``last`` or ``mean``.",
}

_STATE_AND_INIT = """State per sequence and layer: ``n_heads dk dv + (short_conv - 1)(2 n_heads dk + n_heads dv)`` floats (no conv
term without one): ``model.state_size(t)``.

Initialised by seqlab's rule (``"torch-default-scaled"``, as GateLoop and LightNet; fla's GPT-2 std 0.02 is
made for widths of hundreds): PyTorch's default projections and convolution, the output projections (``W_o``
and the MLP's second layer) divided by ``sqrt(2 n_layers)``, embeddings and head N(0, 0.02); its loss before
the first step is ln(vocab_size) (tests/layers/test_delta_layers.py)."""


def _documented(summary: str, **own):
    """The builder's docstring: ``summary``, the knob table (``own`` replacing shared lines), state and init."""
    def document(build):
        knobs = "\n".join(f"``{name}``: {own.get(name, text)}" for name, text in _KNOBS.items())
        build.__doc__ = f"{summary}\n\n{knobs}\n{_STATE_AND_INIT}"
        return build
    return document


@register("deltanet")
@_documented("DeltaNet (Yang et al. 2024): the delta rule ``S_t = (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t``.",
             use_gate="the output gate RMSNorm(o) * SiLU(x W_g) (off: fla's DeltaNet default).")
def build_deltanet(*, vocab_size: int, num_classes: int | None = None, seq_len: int | None = None,
                   d_model: int = 64, n_layers: int = 2, n_heads: int = 2, expand_k: float = 1.0,
                   expand_v: float = 1.0, short_conv: int = 4, use_gate: bool = False, allow_neg_eigval: bool = False,
                   mlp_ratio: float = 4.0, chunk_size: int = 64, mode: str = "auto", dropout: float = 0.0,
                   pool: str = "last") -> SequenceModel:
    return _stack(gated=False, **_knob_values(locals()))


@register("gated-deltanet")
@_documented("Gated DeltaNet (Yang, Kautz, Hatamizadeh 2025): the gated delta rule, ``alpha_t`` a decay per head.\n\n"
             "``S_t = alpha_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t``, ``alpha_t = exp(-A softplus(x_t w + "
             "dt_bias))``\n(Mamba-2's gate; ``A`` drawn in [1, 16) and kept as ``log A``, ``softplus(dt_bias)`` in "
             "[0.001, 0.1]).",
             expand_k="the keys' total width over d_model (fla at width 2048: 0.75).",
             expand_v="the values' total width over d_model (fla at width 2048: 1.5).",
             use_gate="the output gate RMSNorm(o) * SiLU(x W_g) (on: the paper's and fla's Gated DeltaNet).",
             allow_neg_eigval="beta = 2 sigmoid: the transition's eigenvalues in [-alpha, alpha] (fla's option).")
def build_gated_deltanet(*, vocab_size: int, num_classes: int | None = None, seq_len: int | None = None,
                         d_model: int = 64, n_layers: int = 2, n_heads: int = 2, expand_k: float = 1.0,
                         expand_v: float = 1.0, short_conv: int = 4, use_gate: bool = True,
                         allow_neg_eigval: bool = False, mlp_ratio: float = 4.0, chunk_size: int = 64,
                         mode: str = "auto", dropout: float = 0.0, pool: str = "last") -> SequenceModel:
    return _stack(gated=True, **_knob_values(locals()))


def _knob_values(arguments: dict) -> dict:
    """A builder's arguments as :func:`_stack` takes them (``seq_len`` is unused: the recurrence has no length)."""
    return {k: v for k, v in arguments.items() if k != "seq_len"}
