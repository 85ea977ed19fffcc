"""The arena's matched families (:mod:`seqlab.experiments.arena`): every family at the width whose parameter count is
nearest the reference family's.

Matched size. The reference family (the Transformer) at a reference width ``w`` sets a target count of parameters
*excluding the token embedding, the position table and the output head* (:func:`core_parameters`); every other family
gets the ``d_model`` (the one key varied, in whole heads: :func:`width_step`) whose count is nearest, and a width
more than 10 % off is refused (:func:`matched_width`). Every other setting is the family's default in the one config
vocabulary (``n_layers`` is shared; GateLoop's ``d_ff`` is ``2 * d_model`` as in its own experiment).
"""
from __future__ import annotations

import functools

__all__ = ["FAMILIES", "TOLERANCE", "core_parameters", "family_config", "width_step", "target_parameters",
           "matched_width", "family_order"]

FAMILIES = ("transformer", "linear-transformer", "causalrn", "linear-causalrn", "lrnn", "lightnet", "gateloop")

TOLERANCE = 0.10                 # matched means within 10 % of the target count
EMBEDDING_PARAMETERS = ("embed.", "pos", "head.")   # the token table, learned positions, the output head


def core_parameters(model) -> int:
    """Parameters outside the token embedding, the position table and the output head (complex ones count two)."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for name, p in model.named_parameters()
               if not name.startswith(EMBEDDING_PARAMETERS))


def family_config(family: str, d_model: int, n_layers: int) -> dict:
    """The config of ``family`` at width ``d_model``: the shared keys, plus GateLoop's ``d_ff = 2 d_model``."""
    cfg = {"d_model": d_model, "n_layers": n_layers}
    if family == "gateloop":
        cfg["d_ff"] = 2 * d_model
    return cfg


def width_step(family: str) -> int:
    """The step ``d_model`` is varied in: whole heads, the builder's default ``n_heads``, where that is a number
    (4 for the Transformers and LightNet); 2 otherwise (GateLoop's heads follow its width)."""
    import inspect

    from seqlab.models.registry import builder

    heads = inspect.signature(builder(family)).parameters.get("n_heads")
    return heads.default if heads is not None and isinstance(heads.default, int) else 2


def _core_count(family: str, d_model: int, n_layers: int) -> int:
    from seqlab.models.registry import builder

    return _built_count(builder(family), family, d_model, n_layers)


@functools.lru_cache(maxsize=None)
def _built_count(build_fn, family: str, d_model: int, n_layers: int) -> int:
    """The count of ``family`` as ``build_fn`` builds it: the cache holds the builder, so a family registered again
    with another builder (a notebook cell run again) is counted again."""
    from seqlab import models

    return core_parameters(models.build(family, vocab_size=2, **family_config(family, d_model, n_layers)))


def target_parameters(reference: str, width: int, n_layers: int) -> int:
    """The count every family is matched to: the reference family's at ``width``."""
    return _core_count(reference, width, n_layers)


def matched_width(family: str, target: int, n_layers: int) -> tuple[int, int]:
    """``(d_model, parameters)`` of ``family`` nearest ``target`` parameters (bisection: the count grows with
    ``d_model``, in steps of :func:`width_step`); ``ValueError`` where the nearest is more than 10 % off."""
    step = width_step(family)
    lo, hi = 1, 2
    while _core_count(family, hi * step, n_layers) < target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:                                    # count(lo * step) < target <= count(hi * step)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _core_count(family, mid * step, n_layers) < target else (lo, mid)
    d = min((lo * step, hi * step), key=lambda w: abs(_core_count(family, w, n_layers) - target))
    params = _core_count(family, d, n_layers)
    if abs(params - target) > TOLERANCE * target:
        raise ValueError(f"{family}: no d_model (a multiple of {step}) comes within 10% of {target} parameters "
                         f"(nearest: d_model={d} with {params})")
    return d, params


def family_order(family: str) -> tuple:
    """Where ``family`` is listed: the seven of :data:`FAMILIES` in their order, then any other by name."""
    return (FAMILIES.index(family), "") if family in FAMILIES else (len(FAMILIES), family)
