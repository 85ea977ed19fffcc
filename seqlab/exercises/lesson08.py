"""Lesson 08 · The arena: MQAR labels from the tokens, the parameters that are matched, which states grow, and the
capstone: the delta rule as a new family, through the decoding protocol and into the arena.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import numpy as np
import torch

from seqlab.exercises._core import (Wrong, call, chosen_names, close, compare, exercise, generator, need_function,
                                    random_weights, seeded, short, tensor, whole_number)


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


# ----------------------------------------------------------------------------------------------- 08.4, the capstone
#
# The delta rule (DeltaNet: Schlag et al. 2021, arXiv 2102.11174; Yang et al. 2024, arXiv 2406.06484), in the
# papers' layout, S (dv x dk) mapping a key to a value, queries and keys L2-normalised:
#     S_t = S_{t-1} - beta_t (S_{t-1} k_t - v_t) k_t^T = S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T
#     o_t = S_t q_t

def _delta_reference(q, k, v, beta, S, *, normalise="qk", beta_on="both", erase=True, read="after"):
    """The delta rule one token at a time, as the papers write it (float64). The keywords switch one part off, to
    name a learner's mistake: ``normalise`` (which of "q", "k" are L2-normalised), ``beta_on`` ("both": the erase
    and the write; "erase", "write", or "outside": beta times the whole new state), ``erase`` (False: the
    outer-product rule), ``read`` ("before": o_t from S_{t-1})."""
    q = q / q.norm(dim=-1, keepdim=True) if "q" in normalise else q
    k = k / k.norm(dim=-1, keepdim=True) if "k" in normalise else k
    eye = torch.eye(k.shape[-1], dtype=k.dtype)
    outs = []
    for t in range(q.shape[2]):
        q_t, k_t, v_t = q[:, :, t, :, None], k[:, :, t, :, None], v[:, :, t, :, None]      # column vectors
        b = beta[:, :, t, None, None]
        b_erase, b_write = (b if beta_on in ("both", "erase") else 1.0), (b if beta_on in ("both", "write") else 1.0)
        before = S
        kept = S @ (eye - b_erase * k_t @ k_t.mT) if erase else S                  # S_{t-1} (I - beta k k^T)
        S = kept + b_write * v_t @ k_t.mT                                             # + beta v k^T
        S = b * S if beta_on == "outside" else S
        outs.append(((S if read == "after" else before) @ q_t)[..., 0])              # o_t = S_t q_t
    return torch.stack(outs, 2), S


_SWAPPED_BETA = ("beta_t must multiply both the erase and the write: S_t = S_{t-1} - beta_t (S_{t-1} k_t - v_t) "
                 "k_t^T, so that S_t k_t = (1 - beta_t) S_{t-1} k_t + beta_t v_t")
_MISTAKES = (   # (switches of _delta_reference, what the learner did)
    (dict(normalise="q"), "the keys are not L2-normalised: with |k_t| != 1, I - beta_t k_t k_t^T has the "
                          "eigenvalue 1 - beta_t |k_t|^2, which can exceed 1 in size and blow the state up"),
    (dict(normalise="k"), "the queries are not L2-normalised (q_t / |q_t|, as the keys)"),
    (dict(normalise=""), "neither queries nor keys are L2-normalised: divide each by its norm over dk"),
    (dict(erase=False), "this is the outer-product rule of linear attention (S_t = S_{t-1} + beta_t v_t k_t^T): "
                        "nothing is erased; the delta rule first removes what S_{t-1} stored at k_t, "
                        "beta_t S_{t-1} k_t k_t^T"),
    (dict(erase=False, beta_on="neither"), "this is linear attention's update (S_t = S_{t-1} + v_t k_t^T): "
                                            "nothing is erased and beta_t is not used"),
    (dict(beta_on="erase"), f"beta_t scales the erase but not the write; {_SWAPPED_BETA}"),
    (dict(beta_on="write"), f"beta_t scales the write but not the erase; {_SWAPPED_BETA}"),
    (dict(beta_on="outside"), f"beta_t multiplies the whole new state, outside the update; {_SWAPPED_BETA}"),
    (dict(beta_on="neither"), "beta_t is not used (every token overwrites completely, as with beta_t = 1)"),
    (dict(read="before"), "o_t is read from S_{t-1}, one token late: write token t first, then read "
                          "o_t = S_t q_t"),
)


def _mixer_inputs(g, B, H, L, dk, dv):
    """q, k, v of size ~3 (so that the normalisation matters), beta over (0, 1) with values near 0 and near 1, and
    a state that is not zero."""
    q, k = (3 * torch.randn(B, H, L, dk, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(B, H, L, dv, generator=g, dtype=torch.float64)
    beta = torch.sigmoid(4 * torch.randn(B, H, L, generator=g, dtype=torch.float64))
    beta[..., ::3] = 1 - 1e-9                                   # near 1: the old value at k_t is overwritten
    beta[..., 1::5] = 1e-9                                      # near 0: the token is almost not written
    S = torch.randn(B, H, dv, dk, generator=g, dtype=torch.float64)
    return q, k, v, beta, S


def _mixer_output(out, B, H, L, dk, dv, where):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Wrong(f"expected (o, S) from your delta_rule{where}, got {type(out).__name__}")
    if isinstance(out[1], torch.Tensor) and tuple(out[1].shape) == (B, H, dk, dv) != (B, H, dv, dk):
        raise Wrong(f"S: expected shape {(B, H, dv, dk)}, that is (B, H, dv, dk), got {(B, H, dk, dv)}{where}: keep "
                    f"the papers' layout, S maps a key to a value (S k_t is a value)")
    return tensor(out[0], "o", (B, H, L, dv), complex_ok=False), tensor(out[1], "S", (B, H, dv, dk), complex_ok=False)


def _check_mixer(fn) -> None:
    """The learner's delta_rule against :func:`_delta_reference` (float64, 1e-10), from a zero state and from a
    random one, at lengths 13 and 1; a known mistake is named."""
    B, H, dk, dv = 2, 3, 4, 5
    for g, (L, zero) in seeded(84, ((13, True), (13, False), (1, False))):
        q, k, v, beta, S0 = _mixer_inputs(g, B, H, L, dk, dv)
        S0 = torch.zeros_like(S0) if zero else S0
        where = f" (L = {L}, {'a zero' if zero else 'a random'} initial state)"
        out = call(fn, q.clone(), k.clone(), v.clone(), beta.clone(), S0.clone(), what="your delta_rule")
        o, S = _mixer_output(out, B, H, L, dk, dv, where)
        want_o, want_S = _delta_reference(q, k, v, beta, S0)
        if close(o, want_o, 1e-10) and close(S, want_S, 1e-10):
            continue
        for switches, mistake in _MISTAKES:
            if close(o, _delta_reference(q, k, v, beta, S0, **switches)[0], 1e-8):
                raise Wrong(f"{mistake}{where}")
        if close(o, want_o, 1e-5):
            raise Wrong(f"o is within float32 rounding of the delta rule but not within 1e-10{where}: compute in the "
                        f"inputs' dtype (float64 here)")
        compare(o, want_o, 1e-10, name="o", against="the delta rule", axes="(batch, head, t, channel)", where=where)
        compare(S, want_S, 1e-10, name="the final S", against="the delta rule's", axes="(batch, head, dv, dk)",
                where=where)


def _built(name: str):
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
    model = random_weights(model.double().eval(), g)     # every weight moved off its initial value
    return model, torch.randint(0, 13, (2, 11), generator=g)


def _check_decoding(name: str) -> int:
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
        raise Wrong(f"{name}: state_size(1), (11), (1000) = {sizes}: a delta-rule state is (dv x dk) per head "
                    f"whatever the length")
    if sizes[0] != held:
        raise Wrong(f"{name}: state_size(11) = {sizes[0]}, but the state after 11 tokens holds {held} floats per "
                    f"sequence")
    return held


def _enter_arena(name: str) -> dict:
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


@exercise("08.4")
def _check_08_4(answer):
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2 and isinstance(answer[1], str)):
        raise Wrong(f"expected answer = (delta_rule, 'family name'), got a {type(answer).__name__}")
    fn, name = need_function(answer[0], "delta_rule(q, k, v, beta, S) -> (o, S)"), answer[1]
    _check_mixer(fn)
    state = _check_decoding(name)
    run = _enter_arena(name)
    return (f"delta_rule equals the papers' recurrence (float64, 1e-10; from a zero and a random state, beta near 0 "
            f"and 1); {name} decodes as it computes in parallel, with a state of {state} floats at any length; and "
            f"it entered the arena: MQAR at the budget of a d_model-16 Transformer, d_model={run['d_model']} with "
            f"{run['params']} parameters (target {run['target_params']}), state {run['state_size']} floats. To "
            f"train it beside LightNet: experiments.run('arena', families=['{name}', 'lightnet'], tasks=['mqar'], "
            f"out=None).")
