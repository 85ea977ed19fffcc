"""Lesson 01 · Causal Relation Networks: the reduction as a loop, its exp form in the log domain, its state.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import torch

from seqlab.exercises._core import (Wrong, at_lengths, close, compare, exercise, generator, output, refuse_nonfinite,
                                    seeded, whole_number)
from seqlab.models.decoding import state_tensors  # every tensor inside a decoding state

_AXES = "(batch, query j, feature h)"


@exercise("01.1")
def _check_01_1(fn):
    from seqlab import ops

    for g, L, where in at_lengths(11, (1, 6, 13)):
        p, q = (torch.randn(2, L, 5, generator=g, dtype=torch.float64) for _ in range(2))
        got = output(fn, (p, q), "r", (2, L, 5), complex_ok=False)
        want = ops.relation_reference(p, q, activation="relu")
        if close(got, want, 1e-10):
            continue
        if close(got, ops.relation_reference(p, q, activation="relu", causal=False), 1e-8):
            raise Wrong(f"at L = {L} you averaged over every key i (BiRN, eq. 4); CausalRN keeps only i <= j (eq. 5)")
        count = torch.arange(1, L + 1, dtype=torch.float64)[None, :, None]
        if close(got, want * count, 1e-8):
            raise Wrong(f"at L = {L} row j is j times too large: a mean divides the sum by the number of keys i <= j")
        if L > 1 and not torch.isfinite(got[:, 0]).all() and torch.isfinite(got[:, 1:]).all():
            raise Wrong("row j = 0 is not finite: the mean over i <= j includes i = j itself (one key at j = 0)")
        compare(got, want, 1e-10, name="r", against="ops.relation_reference(p, q, activation='relu')",
                axes=_AXES, where=where)


@exercise("01.2")
def _check_01_2(fn):
    from seqlab import ops

    cases = [(L, 1.0, 0.0) for L in (1, 7, 20)] + [(16, 20.0, 730.0)]
    for g, (L, scale, shift) in seeded(12, cases):
        p = scale * torch.rand(2, L, 4, generator=g, dtype=torch.float64) + shift
        q = scale * torch.rand(2, L, 4, generator=g, dtype=torch.float64) - shift
        where = f" at L = {L}" + (f" with keys p near {shift:.0f}" if shift else "")
        got = output(fn, (p, q), "r", (2, L, 4), complex_ok=False)
        want = ops.relation_reference(p, q)                          # exp(p_i + q_j) is never large here
        if shift:
            refuse_nonfinite(got, "r", where, "exp(p) overflows float64 above ~709; keep log sum exp(p_i) "
                                              "(torch.logcumsumexp) and exponentiate q_j + log S_j - log j")
        count = torch.arange(1, L + 1, dtype=torch.float64)[None, :, None]
        if L > 1 and close(got, want * count, 1e-8):
            raise Wrong(f"row j is j times too large{where}: subtract log j (the mean over the j keys i <= j)")
        compare(got, want, 1e-9, name="r", against="ops.relation_reference(p, q)", axes=_AXES, where=where)


@exercise("01.3")
def _check_01_3(answer):
    from seqlab import models

    if not isinstance(answer, dict) or set(answer) != {"causalrn", "linear-causalrn"}:
        got = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        raise Wrong(f"expected a dict with the keys 'causalrn' and 'linear-causalrn', got {got}")
    tokens = torch.randint(0, 16, (1, 100), generator=generator(13))
    held = {}
    for name in ("causalrn", "linear-causalrn"):
        model = models.build(name, vocab_size=16, d_model=32, n_layers=2).double().eval()
        with torch.no_grad():
            _, state = model.prefill(tokens)                   # read 100 tokens and count what is kept
        held[name] = sum(t[0].numel() for t in state_tensors(state["blocks"]))   # every tensor of the state
    for name, why in (("causalrn", "exact pre-norm keeps every past p_i: 32 floats x 100 tokens x 2 layers"),
                      ("linear-causalrn", "the exp form keeps one running log-sum of d_h = 32 floats per layer, "
                                          "whatever t")):
        said = whole_number(answer[name], f"answer['{name}']")
        if said != held[name]:
            raise Wrong(f"{name}: you predicted {said}, it holds {held[name]} floats after 100 tokens "
                        f"(model.state_size(100)); {why}")
    return (f"measured after prefill of 100 tokens: causalrn {held['causalrn']} floats (every p_i, grows like a KV "
            f"cache), linear-causalrn {held['linear-causalrn']} (one log-sum per layer, the same at any t).")

