"""CausalRN, Linear CausalRN and BiRN models (papers 000 and 001).

``build("causalrn")``: quadratic CausalRN with exact pre-activation normalisation (001 §2: the
  configuration that copies like a Transformer).
``build("linear-causalrn")``: the exp-linearised CausalRN (000 eq. 9), O(L) training, O(1) decoding.
``build("birn", num_classes=C)``: the bidirectional version with a CLS token (000 §4.3); a
  classifier only.

Config: ``d_model`` (d_e), ``depth`` (blocks), ``activation``, ``pre_norm`` (``"none" | "approx" |
"exact"``), ``post_norm`` (bool), ``state_expansion`` (d_h = state_expansion * d_e), ``positions``
(``"learned"``: a table of ``max_len`` rows, 001 App. D; ``"sinusoidal"``: fixed, any length, the Linear
CausalRN's default so that it decodes any length; ``"none"``), ``embed_std`` (000 Appendix B: N(0, 1) token
and position embeddings).

Decoding protocol (``seqlab.models.decoding``, used by ``seqlab.generate``): ``model.init_state(batch)``,
``model.step(tokens_t, state) -> (logits_t, state)`` with ``tokens_t`` of shape ``(B,)``, ``prefill`` and
``state_size`` (the blocks have no parallel form from a state yet: ``prefill`` steps through the prompt).
"""
from __future__ import annotations

from seqlab.layers.relation import RelationBlock
from seqlab.models.decoding import DecodingModel
from seqlab.models.registry import register

__all__ = ["RelationModel"]


class RelationModel(DecodingModel):
    """A ``DecodingModel`` of relation blocks: a causal stack decodes token by token (each block's state)."""


def _build(*, vocab_size, num_classes, causal, mode, d_model=64, n_layers=2, activation="exp", pre_norm="none",
           post_norm=True, state_expansion=1, max_len=None, seq_len=None, embed_std=1.0, positions="learned"):
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"n_layers: expected a positive int, got {n_layers!r}")
    depth = n_layers
    blocks = [RelationBlock(d_model, causal=causal, activation=activation, pre_norm=pre_norm, post_norm=post_norm,
                            state_expansion=state_expansion, mode=mode, n_residual=depth) for _ in range(depth)]
    if positions == "learned":
        max_len = max_len or seq_len or 1024
    elif max_len is not None:
        raise ValueError(f"max_len: only learned positions have a longest length; positions={positions!r} fits "
                         f"any length, leave max_len out")
    return RelationModel(vocab_size=vocab_size, d_model=d_model, blocks=blocks, num_classes=num_classes,
                         max_len=max_len, positions=positions,
                         pool="last" if causal else "cls", causal=causal, embed_std=embed_std)


@register("causalrn")
def build_causalrn(*, vocab_size, num_classes=None, seq_len=None, d_model=64, n_layers=2, activation="exp",
                   pre_norm="exact", post_norm=True, state_expansion=1, max_len=None, embed_std=1.0,
                   positions="learned", mode="quadratic"):
    """CausalRN with pre-activation normalisation (000 §3.4; quadratic, a KV-cache-like memory).

    Initialised as paper 000 App. B (``"000-appendix-b"``): layers N(0, 0.02), output layers divided by the square
    root of the number of residual connections, embeddings N(0, 1) (README, "How each family is initialised")."""
    config = dict(d_model=d_model, n_layers=n_layers, activation=activation, post_norm=post_norm,
                  state_expansion=state_expansion, max_len=max_len, embed_std=embed_std, positions=positions)
    return _build(vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len, causal=True, mode=mode,
                  pre_norm=pre_norm, **config)


@register("linear-causalrn")
def build_linear_causalrn(*, vocab_size, num_classes=None, seq_len=None, d_model=64, n_layers=2, activation="exp",
                          pre_norm="none", post_norm=True, state_expansion=1, max_len=None, embed_std=1.0,
                          positions="sinusoidal"):
    """CausalRN with ``exp`` and no exact pre-norm: the linear-time form (000 eq. 9), with fixed sinusoidal
    positions so that it decodes any length (``positions="learned"``: the paper's table, capped at ``max_len``).
    ``state_expansion``: sets the state: hidden width d_h = state_expansion x d_model (a running log-sum-exp).
    Initialised as paper 000 App. B, as :func:`build_causalrn`."""
    config = dict(d_model=d_model, n_layers=n_layers, activation=activation, post_norm=post_norm,
                  state_expansion=state_expansion, max_len=max_len, embed_std=embed_std, positions=positions)
    if pre_norm == "exact":
        raise ValueError("linear-causalrn: pre_norm='exact' cannot be linear (LN(p_i + q_j) does not factorise, "
                         "000 §3.4); use build('causalrn', pre_norm='exact') or pre_norm='approx'")
    return _build(vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len, causal=True, mode="linear",
                  pre_norm=pre_norm, **config)


@register("birn")
def build_birn(*, vocab_size, num_classes=None, seq_len=None, d_model=64, n_layers=2, activation="exp",
               pre_norm="none", post_norm=True, state_expansion=1, max_len=None, embed_std=1.0,
               positions="learned", mode="auto"):
    """BiRN: the bidirectional relation network, a classifier read from its CLS token (000 eq. 4). Initialised as
    paper 000 App. B, as :func:`build_causalrn`."""
    config = dict(d_model=d_model, n_layers=n_layers, activation=activation, post_norm=post_norm,
                  state_expansion=state_expansion, max_len=max_len, embed_std=embed_std, positions=positions)
    if num_classes is None:
        raise ValueError("birn: a BiRN is bidirectional (each token sees the whole sequence, 000 eq. 4), so it cannot "
                         "be a causal language model; pass num_classes=C for a classifier read from its CLS token, "
                         "or use 'causalrn' / 'linear-causalrn' for language modelling")
    return _build(vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len, causal=False, mode=mode,
                  pre_norm=pre_norm, **config)
