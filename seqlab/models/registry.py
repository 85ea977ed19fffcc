"""The model registry behind ``seqlab.models.build(name, ...)``."""
from __future__ import annotations

import difflib
import inspect
from typing import Callable

import torch.nn as nn

from seqlab.registry import Registry

BUILDERS = Registry("model", argument="name")     # name -> build_<family>(*, vocab_size, num_classes, seq_len, ...)


def register(name: str, *, replace: bool = False):
    """Decorator: ``@register("lrnn") def build_lrnn(*, vocab_size, num_classes, seq_len, **config)``.

    A family registered from outside seqlab (a lesson's exercise, a test) is built, trained and entered into the
    arena like the others; ``replace=True`` re-registers a name (a notebook cell run again)."""
    return BUILDERS.register(name, replace=replace)


def unregister(name: str) -> Callable[..., nn.Module]:
    """Take the family ``name`` out of the registry and return its builder (an unknown name is refused)."""
    return BUILDERS.unregister(name)


def builder(name: str) -> Callable[..., nn.Module]:
    """The function ``build(name, ...)`` calls (its signature is the model's config)."""
    return BUILDERS.lookup(name)


def names() -> list[str]:
    return BUILDERS.names()


# How each family's weights are drawn, by name: a run records it, and runs that differ in it never share a
# checkpoint or a results row. A rule that changes gets a new name.
INIT_RULES = {
    "transformer": "fan-in-unit-embeddings",  # linears N(0, 1/fan_in), out proj / sqrt(2 n_layers), embeddings and
                                              # positions N(0, 1), head N(0, 0.02)
    "linear-transformer": "gpt2-0.02",     # linears, embeddings, positions, head N(0, 0.02); out proj / sqrt(2 n_layers)
    "causalrn": "000-appendix-b",          # layers N(0, 0.02), outputs / sqrt(#residual), embeddings N(0, 1)
    "linear-causalrn": "000-appendix-b",
    "birn": "000-appendix-b",
    "lrnn": "lru-ring",                    # the LRU's ring init of lambda, embeddings N(0, 1), head N(0, 0.02)
    "fst": "lru-ring",
    "lightnet": "torch-default-scaled",    # PyTorch's default projections (LightNet's attention output N(0, 0.02)),
    "gateloop": "torch-default-scaled",    # out proj / sqrt(2 n_layers), embeddings and head N(0, 0.02)
    "deltanet": "torch-default-scaled",    # as GateLoop's (fla's GPT-2 std 0.02 is made for widths of hundreds)
    "gated-deltanet": "torch-default-scaled",
}


# A family registered from outside seqlab draws its weights as its own builder does: its runs record this name.
AS_BUILT = "as-built"


def init_rule(name: str) -> str:
    """The name of the rule ``build(name, ...)`` draws its initial weights by (:data:`INIT_RULES`; :data:`AS_BUILT`
    for a family registered from outside seqlab)."""
    _check_name(name)
    return INIT_RULES.get(name, AS_BUILT)


# One config vocabulary for every family (README, Architecture): d_model, n_layers, n_heads.
_BUILD_ARGS = ("vocab_size", "num_classes", "seq_len")


def config_keys(name: str) -> list[str]:
    """The config keys ``build(name, ...)`` accepts besides ``vocab_size``, ``num_classes`` and ``seq_len``."""
    _check_name(name)
    params = inspect.signature(BUILDERS[name]).parameters
    return [k for k, p in params.items() if k not in _BUILD_ARGS and p.kind == p.KEYWORD_ONLY]


def _check_name(name: str) -> None:
    BUILDERS.lookup(name)


def canonical_config(name: str, config: dict) -> dict:
    """``config`` checked against the shared vocabulary: unknown keys refused with the list of valid ones and the
    nearest match."""
    valid = config_keys(name)
    out = {}
    for key, value in config.items():
        if key not in valid:
            near = difflib.get_close_matches(key, valid + list(_BUILD_ARGS), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise TypeError(f"build({name!r}): unknown config key {key!r}; {hint}valid keys: {', '.join(valid)}")
        out[key] = value
    return out


def build(name: str, *, vocab_size: int, num_classes: int | None = None, seq_len: int | None = None, **config) -> nn.Module:
    """Build a registered model.

    ``vocab_size``: the input vocabulary (integer tokens ``(B, L)``). ``num_classes=None`` gives a
    causal language model returning ``(B, L, vocab_size)`` logits; ``num_classes=C`` a sequence
    classifier returning ``(B, C)``. ``seq_len`` is needed only by fixed-length models (FST).
    Every other keyword is the model's config, in one vocabulary for every family: ``d_model`` (width),
    ``n_layers`` (blocks) and, where the family has heads, ``n_heads``; family-specific keys come on top
    (:func:`config_keys`). An unknown key is an error listing the valid ones.
    """
    _check_name(name)
    config = canonical_config(name, config)
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size: expected a positive int, got {vocab_size!r}")
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 2):
        raise ValueError(f"num_classes: expected None (language model) or an int >= 2, got {num_classes!r}")
    if seq_len is not None and (not isinstance(seq_len, int) or seq_len < 1):
        raise ValueError(f"seq_len: expected None or a positive int, got {seq_len!r}")
    model = BUILDERS[name](vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len, **config)
    model.model_name = name
    # what rebuilds it: checkpoints carry this, and a resume with another config is refused by name
    model.model_config = {"vocab_size": vocab_size, "num_classes": num_classes, "seq_len": seq_len, **config}
    return model
