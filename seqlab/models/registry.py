"""The model registry behind ``seqlab.models.build(name, ...)`` (design.md §3)."""
from __future__ import annotations

from typing import Callable

import torch.nn as nn

_BUILDERS: dict[str, Callable[..., nn.Module]] = {}


def register(name: str):
    """Decorator: ``@register("lrnn") def build_lrnn(*, vocab_size, num_classes, seq_len, **config)``."""

    def wrap(fn):
        if name in _BUILDERS:
            raise ValueError(f"model {name!r} is registered twice")
        _BUILDERS[name] = fn
        return fn

    return wrap


def names() -> list[str]:
    return sorted(_BUILDERS)


def build(name: str, *, vocab_size: int, num_classes: int | None = None, seq_len: int | None = None, **config) -> nn.Module:
    """Build a registered model.

    ``vocab_size``: the input vocabulary (integer tokens ``(B, L)``). ``num_classes=None`` gives a
    causal language model returning ``(B, L, vocab_size)`` logits; ``num_classes=C`` a sequence
    classifier returning ``(B, C)``. ``seq_len`` is needed only by fixed-length models (FST).
    Every other keyword is the model's config; unknown keywords are an error.
    """
    if name not in _BUILDERS:
        raise ValueError(f"name: unknown model {name!r}; expected one of {names()}")
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size: expected a positive int, got {vocab_size!r}")
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 2):
        raise ValueError(f"num_classes: expected None (language model) or an int >= 2, got {num_classes!r}")
    if seq_len is not None and (not isinstance(seq_len, int) or seq_len < 1):
        raise ValueError(f"seq_len: expected None or a positive int, got {seq_len!r}")
    try:
        model = _BUILDERS[name](vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len, **config)
    except TypeError as err:
        if "unexpected keyword" in str(err):
            raise TypeError(f"build({name!r}): {err}") from err
        raise
    model.model_name = name
    return model
