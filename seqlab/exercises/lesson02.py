"""Lesson 02 · The unrolled linear recurrence: the loop, the LRU's eigenvalue, and an associative scan broken on
purpose.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import math

import torch

from seqlab.exercises._core import (Wrong, at_lengths, call, close, compare, complex_randn, exercise, fmt, generator,
                                    output, pair, real_number, tensor, transitions)


def _complex_inputs(g, B, L, D):
    return transitions(g, B, L, D, lo=0.5, hi=1.0), complex_randn(g, B, L, D), complex_randn(g, B, D)


@exercise("02.1")
def _check_02_1(fn):
    from seqlab.ops import linear_scan_reference

    for g, L, where in at_lengths(21, (1, 4, 17)):
        a, x, h0 = _complex_inputs(g, 2, L, 3)
        got = output(fn, (a, x, h0), "h", (2, L, 3))
        want = linear_scan_reference(a, x, h0)
        if close(got, want, 1e-12):
            continue
        if close(got[:, 0], h0, 1e-10) or (L > 1 and close(got[:, 1:], want[:, :-1], 1e-10)):
            raise Wrong(f"your states are one step late{where}: position t holds h_(t-1); store h after the update")
        if close(got, linear_scan_reference(a.conj(), x, h0), 1e-10):
            raise Wrong(f"you multiplied by conj(a_t){where}: the recurrence uses a_t itself")
        if close(got, linear_scan_reference(a, x), 1e-10):
            raise Wrong(f"your scan ignores h0{where}: start from h = h0, not from zero")
        compare(got, want, 1e-12, name="h", against="ops.linear_scan_reference(a, x, h0)",
                axes="(batch, t, channel)", where=where)


@exercise("02.2")
def _check_02_2(answer):
    from seqlab.ops import linear_scan, lru_lambda

    pair(answer, "(nu, theta)")
    nu, theta = real_number(answer[0], "nu"), real_number(answer[1], "theta")
    lam = lru_lambda(torch.tensor([nu], dtype=torch.float64), torch.tensor([theta], dtype=torch.float64))
    impulse = torch.zeros(101, 1, dtype=torch.complex128)
    impulse[0] = 1
    h = linear_scan(lam, impulse, mode="sequential")[:, 0]          # h_t = lam^(t-1), measured
    fall = float(h[50].abs() / h[0].abs())                           # after 50 steps
    steps_to_e = -1 / math.log(abs(lam.item())) if abs(lam.item()) < 1 else math.inf
    if abs(fall - math.exp(-1)) > 1e-6:
        raise Wrong(f"|lam| = {fmt(abs(lam.item()))}: after 50 steps the impulse is at {fmt(fall)} of its start, not "
                    f"1/e = 0.3679 (it reaches 1/e after {steps_to_e:.4g} steps); |lam| = exp(-exp(nu)) so you need "
                    f"exp(nu) = 1/50")
    phase = math.remainder(float(torch.angle(h[1] / h[0])), 2 * math.pi)
    if abs(abs(phase) - 2 * math.pi / 10) > 1e-9:
        turn = 2 * math.pi / abs(phase) if phase else math.inf
        raise Wrong(f"arg lam = {phase:.4g} rad per step: one turn every {turn:.4g} steps, not 10; arg lam = exp(theta) "
                    f"so you need exp(theta) = 2 pi / 10")
    return (f"lam = {fmt(lam.item())}: measured on the impulse response, |h_51| / |h_1| = {fall:.4f} = 1/e and "
            f"h turns by 2 pi / 10 per step; any real nu, theta give |lam| < 1, so this memory can never blow up.")


def _tree_scan(combine, a, x):
    """Hillis-Steele inclusive scan: log2(L) rounds, each combining element i with element i - d (needs an
    associative operator to equal the left fold)."""
    d = 1
    while d < a.shape[0]:
        na, nx = combine((a[:-d], x[:-d]), (a[d:], x[d:]))
        a = torch.cat([a[:d], torch.as_tensor(na).expand_as(a[d:])])
        x = torch.cat([x[:d], torch.as_tensor(nx).expand_as(x[d:])])
        d *= 2
    return x


def _fold(combine, a, x):
    acc, out = (a[0], x[0]), [x[0]]
    for t in range(1, a.shape[0]):
        acc = combine(acc, (a[t], x[t]))
        out.append(torch.as_tensor(acc[1]))
    return torch.stack(out)


@exercise("02.3")
def _check_02_3(fn):
    from seqlab.ops import linear_scan_reference

    def combine(p, q):
        out = call(fn, p, q, what="your combine")
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise Wrong(f"combine must return a pair (a, x), got {type(out).__name__}")
        return out

    g = generator(23)
    L, D = 13, 3
    a = 0.5 + 0.5 * torch.rand(L, D, generator=g, dtype=torch.float64)
    x = torch.randn(L, D, generator=g, dtype=torch.float64)
    want = linear_scan_reference(a, x)
    fold = tensor(_fold(combine, a, x), "the left fold of your combine", (L, D))
    if not close(fold, want, 1e-10):
        compare(fold, want, 1e-10, name="the left fold of your combine",
                against="the recurrence (ops.linear_scan_reference)", axes="(t, channel)")
    tree = tensor(_tree_scan(combine, a, x), "the tree scan of your combine", (L, D))
    p, q, r = [(a[i], x[i]) for i in (0, 1, 2)]
    left, right = combine(combine(p, q), r), combine(p, combine(q, r))
    gap = max(float((torch.as_tensor(u) - torch.as_tensor(v)).abs().max()) for u, v in zip(left, right))
    if close(tree, want, 1e-10):
        raise Wrong("nothing is broken yet: the tree scan of your combine agrees with the loop "
                    f"(|(p.q).r - p.(q.r)| = {gap:.1e} on three pairs: your operator is associative)")
    first = int(((tree - want).abs() > 1e-10).any(-1).nonzero()[0])
    return (f"the left fold is still the recurrence, but the parallel scan goes wrong from t = {first + 1} on: "
            f"(p.q).r and p.(q.r) differ by {gap:.2g}, and a parallel scan regroups the pairs, so it is exact only for "
            f"an associative operator (eq. 13).")
