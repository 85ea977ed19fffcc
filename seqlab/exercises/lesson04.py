"""Lesson 04 · Additive vs multiplicative decay: LightNet's decay from keys, Theorem 3.1's matrix, a bump in delta.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import torch

from seqlab.exercises._core import (Wrong, choice, close, compare, exercise, first_above_diagonal, fmt, output, pair,
                                    refuse_nonfinite, seeded)


def _additive_truth(k: torch.Tensor) -> torch.Tensor:
    log_s = torch.logcumsumexp(k, dim=0)
    a = torch.zeros_like(k)
    a[1:] = torch.exp(log_s[:-1] - log_s[1:])
    return a


@exercise("04.1")
def _check_04_1(fn):
    for g, (L, scale) in seeded(41, ((1, 1.0), (6, 1.0), (20, 3.0), (20, 1000.0))):
        k = scale * (2 * torch.rand(L, 3, generator=g, dtype=torch.float64) - 1)
        where = f" at L = {L}" + (f" with keys of size {scale:.0f}" if scale > 10 else "")
        got = output(fn, (k,), "a", (L, 3), complex_ok=False)
        if scale > 10:
            refuse_nonfinite(got, "a", where, "exp(k) overflows; use log s_t = logcumsumexp(k) and "
                                              "a_t = exp(log s_(t-1) - log s_t)")
        want = _additive_truth(k)
        if torch.isfinite(got).all() and (got.min() < -1e-12 or got.max() > 1 + 1e-12):
            bad = tuple(int(i) for i in ((got < -1e-12) | (got > 1 + 1e-12)).nonzero()[0])
            raise Wrong(f"your decay is not in [0, 1]{where}: a{bad} = {fmt(got[bad])} (min {fmt(got.min())}, max "
                        f"{fmt(got.max())}); s_t only grows, so s_(t-1) / s_t <= 1")
        if float(got[0].abs().max()) > 1e-12:
            raise Wrong(f"a_1 = {fmt(got[0, 0])}{where}, expected 0: s_0 = 0, nothing comes before the first token")
        compare(got, want, 1e-12, name="a", against="s_(t-1) / s_t", axes="(t, channel)", where=where,
                absolute=True)
    k = 3 * (2 * torch.rand(20, 3, generator=g, dtype=torch.float64) - 1)
    a = _additive_truth(k)
    return (f"a_1 = 0 and 0 < a_t <= 1 after it (here between {fmt(a[1:].min())} and {fmt(a[1:].max())}), finite for "
            f"keys of 1000: a_t depends on every key so far (Prop. 3.2, additive), unlike exp(-delta_t).")


@exercise("04.2")
def _check_04_2(fn):
    from seqlab import ops

    for g, (L, hi) in seeded(42, ((1, 1.0), (5, 1.0), (16, 1.0), (400, 5.0))):
        delta = hi * torch.rand(L, generator=g, dtype=torch.float64)
        where = f" at L = {L}"
        got = output(fn, (delta,), "C", (L, L), complex_ok=False)
        want = ops.decay_coefficients(delta, "multiplicative")
        if L > 1:
            refuse_nonfinite(got, "C", f"{where} (log g_L = {float(delta.sum()):.0f})",
                             "exp(log g) overflows; take exp(G_s - G_t), masked before exp")
        if above := first_above_diagonal(got):
            t, s = above
            if close(got, want.T, 1e-10):
                raise Wrong(f"C is transposed{where}: row t is the output y_t, column s the input x_s (s <= t)")
            raise Wrong(f"C[{t}, {s}] = {fmt(got[t, s])}{where}: C must be lower-triangular, output t reads only s <= t")
        compare(got, want, 1e-12, name="C", against="ops.decay_coefficients(delta, 'multiplicative')",
                axes="(t, s)", where=where, absolute=True)
        x = torch.randn(L, 1, generator=g, dtype=torch.float64)
        y = ops.linear_scan_reference(torch.exp(-delta)[:, None], x)
        compare(got @ x, y, 1e-10, name="C @ x", against="the scan y_t = exp(-delta_t) y_(t-1) + x_t", where=where)


@exercise("04.3")
def _check_04_3(answer):
    from seqlab import ops

    pair(answer, "(kind that wipes, kind that keeps)")
    kinds = ("additive", "multiplicative")
    wipes, keeps = choice(answer[0], kinds, "answer[0]"), choice(answer[1], kinds, "answer[1]")
    delta = torch.full((24,), 0.2, dtype=torch.float64)
    delta[12] = 5.0
    C = {kind: ops.decay_coefficients(delta, kind) for kind in kinds}
    past = {kind: float(C[kind][12, :12].max()) for kind in kinds}      # what row 12 keeps of tokens before 12
    bump = {kind: float(C[kind][23, 12]) for kind in kinds}             # what the last row keeps of token 12
    true_wipes = min(kinds, key=past.get)
    true_keeps = max(kinds, key=bump.get)
    if wipes != true_wipes:
        raise Wrong(f"the bump wipes the past in the {true_wipes} matrix: row 12 keeps at most {fmt(past[true_wipes])} "
                    f"of any earlier token there, {fmt(past[wipes])} in the {wipes} one: exp(-delta_12) against "
                    f"g_11 / g_12 = 2.4 / 7.4")
    if keeps != true_keeps:
        raise Wrong(f"token 12 survives longest in the {true_keeps} matrix: c_(23,12) = {fmt(bump[true_keeps])} there, "
                    f"{fmt(bump[keeps])} in the {keeps} one")
    return (f"multiplicative decay turns a large delta into a wall (row 12 keeps <= {fmt(past['multiplicative'])} of "
            f"the past); additive decay divides the past by g_t once and keeps the important token itself "
            f"(c_(23,12) = {fmt(bump['additive'])} vs {fmt(bump['multiplicative'])}).")
