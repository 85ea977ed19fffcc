"""Lesson 08 · The arena: MQAR labels from the tokens, the parameters that are matched, and which states grow.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import numpy as np
import torch

from seqlab.exercises._core import Wrong, call, chosen_names, exercise, whole_number


@exercise("08.1")
def _check_08_1(fn):
    from seqlab.tasks.base import IGNORE
    from seqlab.tasks.recall import mqar_rows

    rng = np.random.default_rng(71)
    for vocab, L, D in ((64, 32, 4), (20, 16, 2), (256, 64, 8)):
        ids, labels = mqar_rows(rng, 3, vocab, L, D, 0.01)
        ids, want = torch.as_tensor(ids), torch.as_tensor(labels)
        out = call(fn, ids.clone(), D)
        got = torch.as_tensor(out) if not isinstance(out, torch.Tensor) else out
        if tuple(got.shape) != tuple(want.shape):
            raise Wrong(f"expected labels of shape {tuple(want.shape)}, got {tuple(got.shape)}")
        if got.is_floating_point() or got.is_complex():
            if not torch.equal(got, got.round()):
                raise Wrong("labels must be whole token ids (or -100), got fractions")
        got = got.long()
        bad = (got != want).nonzero()
        if not len(bad):
            continue
        b, t = (int(i) for i in bad[0])
        tok, g_, w_ = int(ids[b, t]), int(got[b, t]), int(want[b, t])
        case = f"sequence {b} (length {L}, {D} pairs), position {t}"
        if t < 2 * D:
            raise Wrong(f"{case}: you gave {g_}, expected {IGNORE}: the first 2 D = {2 * D} tokens are the key-value "
                        f"region, never scored")
        if w_ == IGNORE:
            raise Wrong(f"{case} holds token {tok}, which is not one of the {D} keys: expected {IGNORE}, you gave {g_}")
        shown = int((ids[b, : 2 * D: 2] == tok).nonzero()[0]) * 2
        raise Wrong(f"{case} holds key {tok}, shown with value {int(ids[b, shown + 1])} at position {shown + 1}: "
                    f"expected {w_}, you gave {g_}")


_EXCLUDED = ("embed.", "pos", "head.")


@exercise("08.2")
def _check_08_2(fn):
    from seqlab import models
    from seqlab.experiments import arena

    for family in arena.FAMILIES:
        model = models.build(family, vocab_size=64, **arena.family_config(family, 16, 2))
        got = whole_number(call(fn, model), f"core({family} model)")
        want = arena.core_parameters(model)
        if got == want:
            continue
        parts = {prefix: sum(p.numel() for n, p in model.named_parameters() if n.startswith(prefix))
                 for prefix in _EXCLUDED}
        total = sum(p.numel() for p in model.parameters())
        if got == total:
            raise Wrong(f"{family}: you counted every parameter ({total}); leave out the embedding ({parts['embed.']}), "
                        f"the position table ({parts['pos']}) and the head ({parts['head.']}), which grow with the "
                        f"vocabulary and the length, not with the mixer: {want}")
        for prefix, n in parts.items():
            if n and got == want + n:
                raise Wrong(f"{family}: you counted '{prefix}' ({n} parameters) too; expected {want}")
        raise Wrong(f"{family}: you counted {got}, expected {want} (arena.core_parameters)")


@exercise("08.3")
def _check_08_3(answer):
    from seqlab import models
    from seqlab.experiments import arena

    chosen = chosen_names(answer, arena.FAMILIES, what="family names", one="family")
    sizes = {}
    for family in arena.FAMILIES:
        model = models.build(family, vocab_size=64, **arena.family_config(family, 16, 2))
        sizes[family] = (model.state_size(64), model.state_size(128))
    grows = {f for f, (a, b) in sizes.items() if b > a}
    for family in arena.FAMILIES:
        a, b = sizes[family]
        if family in chosen and family not in grows:
            raise Wrong(f"{family}: state_size(64) = {a} = state_size(128): constant, its recurrence overwrites a "
                        f"fixed state")
        if family in grows and family not in chosen:
            raise Wrong(f"{family}: state_size(64) = {a}, state_size(128) = {b}: it keeps something for every token")
    listed = ", ".join(f"{f} {sizes[f][0]} -> {sizes[f][1]}" for f in sorted(grows))
    return (f"measured with model.state_size at 64 and 128 tokens: {listed} (caches that keep every token); the "
            f"five others hold the same fixed state at any length, which is what MQAR at longer lengths tests.")
