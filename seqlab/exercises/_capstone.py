"""A family as an exercise's answer: the checks a capstone runs on a model family the learner registered.

A capstone's answer names a family the learner registered with ``models.register(name, replace=True)``.
:func:`refuse_seqlab_name` refuses one of seqlab's own names (registering it would replace seqlab's builder),
:func:`check_decoding` runs the decoding protocol on it, and :func:`enter_arena` trains it for two steps in the
quick arena. Each raises :class:`~seqlab.exercises._core.Wrong` saying what is wrong.
"""
from __future__ import annotations

import torch

from seqlab.exercises._core import Wrong, compare, generator, random_weights, short

__all__ = ["seqlab_families", "refuse_seqlab_name", "check_decoding", "enter_arena"]


def seqlab_families() -> set[str]:
    """The families seqlab registers itself: each builder defined in ``seqlab.models``, and every family with an
    init rule of its own (:data:`seqlab.models.registry.INIT_RULES`), which still names one whose builder a
    notebook has replaced."""
    from seqlab.models import registry

    return {n for n in registry.names() if registry.builder(n).__module__.startswith("seqlab.models")} | set(
        registry.INIT_RULES)


def refuse_seqlab_name(name: str, example: str) -> None:
    """``Wrong`` where ``name`` is one of seqlab's own families (``example``: a name to suggest instead)."""
    from seqlab.models import registry

    if name not in seqlab_families():
        return
    built_by = registry.builder(name).__module__ if name in registry.names() else ""
    replaced = ("" if built_by.startswith("seqlab.models") else
                f"; your models.register({name!r}, replace=True) has replaced seqlab's own builder in this session "
                f"(restart the kernel to get it back)")
    raise Wrong(f"{name!r} is one of seqlab's own families{replaced}: register yours under a name of its own, "
                f"e.g. {example!r}, and answer that name")


def _built(name: str):
    """The registered family ``name`` at d_model 8, in float64 with every weight moved off its initial value, and
    two sequences of 11 tokens."""
    from seqlab import models

    if name not in models.names():
        raise Wrong(f"no family {name!r} is registered: put @models.register({name!r}, replace=True) above its "
                    f"builder and run that cell")
    try:
        model = models.build(name, vocab_size=13, d_model=8, n_layers=2)
    except Exception as err:
        raise Wrong(f"models.build({name!r}, vocab_size=13, d_model=8, n_layers=2) raised {type(err).__name__}: "
                    f"{short(err)} (a builder takes the shared keys d_model and n_layers)") from None
    missing = [m for m in ("init_state", "prefill", "step", "state_size") if not callable(getattr(model, m, None))]
    if missing:
        raise Wrong(f"{name}: the model has no {', '.join(missing)}: build it as seqlab.models.decoding."
                    f"DecodingModel(...) of blocks that define forward, init_state, step and state_size")
    g = generator(841)
    model = random_weights(model.double().eval(), g)
    return model, torch.randint(0, 13, (2, 11), generator=g)


def check_decoding(name: str) -> int:
    """The decoding protocol on the registered family (float64, 1e-9): ``step`` alone from ``init_state`` and
    ``prefill`` in two parts compute ``forward``'s logits; the state does not grow and ``state_size`` counts it.
    Returns the state size."""
    from seqlab.models.decoding import state_tensors

    model, x = _built(name)
    with torch.no_grad():
        want = model(x)
        state, rows = model.init_state(2), []
        for t in range(x.shape[1]):
            logits, state = model.step(x[:, t], state)
            rows.append(logits)
        compare(torch.stack(rows, 1), want, 1e-9, name=f"{name}: step() from init_state", against="forward()",
                axes="(batch, t, logit)")
        head, state = model.prefill(x[:, :5])
        tail, state = model.prefill(x[:, 5:], state)
    compare(torch.cat([head, tail], 1), want, 1e-9, name=f"{name}: prefill(x[:, :5]) then prefill(x[:, 5:], state)",
            against="forward()", axes="(batch, t, logit)")
    sizes = [model.state_size(t) for t in (1, 11, 1000)]
    held = sum(s[0].numel() * (2 if s.is_complex() else 1) for s in state_tensors(state["blocks"]))
    if len(set(sizes)) > 1:
        raise Wrong(f"{name}: state_size(1), (11), (1000) = {sizes}: a recurrent state is the same (dk x dv per "
                    f"head) whatever the length")
    if sizes[0] != held:
        raise Wrong(f"{name}: state_size(11) = {sizes[0]}, but the state after 11 tokens holds {held} floats per "
                    f"sequence")
    return held


def enter_arena(name: str) -> dict:
    """Two steps of MQAR in the quick arena at the budget of a d_model-16 Transformer: the family is matched, its
    loss before the first step is checked against ln(vocabulary), and its run's record is returned."""
    import random

    import numpy

    from seqlab import experiments

    saved = random.getstate(), numpy.random.get_state()          # the arena seeds Python's and NumPy's too
    try:
        result = experiments.run("arena", profile="quick", families=[name], tasks=["mqar"], widths=[16],
                                 mqar_lengths=[32], steps=2, train_size=64, validation_size=32, test_size=32,
                                 out=None, progress=False, verbose=False)
    except Exception as err:
        raise Wrong(f"the arena refused {name}: {type(err).__name__}: {short(err)}") from None
    finally:
        random.setstate(saved[0])
        numpy.random.set_state(saved[1])
    return result["runs"][0]
