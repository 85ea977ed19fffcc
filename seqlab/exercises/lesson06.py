"""Lesson 06 · The chunkwise-parallel form: a chunk's relative decays, the states handed between chunks, and
chunked GateLoop written by hand.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import math

import torch

from seqlab.exercises._core import (Wrong, close, compare, complex_randn, exercise, first_nonfinite, output,
                                    refuse_nonfinite, seeded, uniform)


def _no_overflow(got: torch.Tensor, name: str, where: str) -> None:
    """``Wrong`` if the answer for sharp gates has inf or NaN: the factorised ``exp(g_i) exp(-g_j)`` overflowed."""
    refuse_nonfinite(got, name, f"{where}, where the gates are sharp", "exp(-g_j) overflows once -g_j passes ~88.7 "
                     "(float32) or ~709.8 (float64); form exp(g_i - g_j) from the difference, masked before exp")


def _states_by_recurrence(k, v, log_a, C):
    """The state entering and leaving each chunk, by h_t = diag(a_t) h_(t-1) + k_t^T v_t one step at a time."""
    h = torch.zeros(k.shape[1], v.shape[1], dtype=torch.float64)
    entering, leaving = [], []
    for t in range(k.shape[0]):
        if t % C == 0:
            entering.append(h)
        h = torch.exp(log_a[t])[:, None] * h + k[t, :, None] * v[t, None, :]
        if t % C == C - 1 or t == k.shape[0] - 1:
            leaving.append(h)
    return torch.stack(entering), torch.stack(leaving)


@exercise("06.1")
def _check_06_1(fn):
    for g, (C, lo, hi) in seeded(61, ((1, -1.0, 0.0), (5, -1.0, 0.0), (16, -3.0, 0.0), (64, -30.0, -10.0))):
        log_a = uniform(g, C, 3, lo=lo, hi=hi).float()
        where = f" at C = {C}" + (f" with log a in [{lo:g}, {hi:g}]" if lo < -5 else "")
        got = output(fn, (log_a,), "D", (C, C, 3), complex_ok=False)
        if lo < -5:
            _no_overflow(got, "D", where)
        if C > 1 and float(got[torch.ones(C, C, dtype=torch.bool).triu(1)].abs().max()) > 0:
            raise Wrong(f"D[i, j] is not 0 for some j > i{where}: step i reads only steps j <= i of its chunk")
        cum = log_a.double().cumsum(0)
        causal = torch.ones(C, C, dtype=torch.bool).tril()[..., None]
        want = torch.exp((cum[:, None] - cum[None, :]).masked_fill(~causal, -math.inf))
        if close(got, want * torch.exp(log_a.double())[None, :, :], 1e-5) and not close(got, want, 1e-5):
            raise Wrong(f"D[i, i] is a_i, not 1{where}: the product runs over r = j+1 .. i (g_i - g_j leaves a_j out)")
        compare(got, want, 1e-5, name="D", against="exp(g_i - g_j) in float64", axes="(i, j, channel)", where=where,
                absolute=True)


@exercise("06.2")
def _check_06_2(fn):
    for g, (L, C, lo, hi) in seeded(62, ((1, 4, -1.0, 0.0), (8, 8, -1.0, 0.0), (37, 8, -1.0, 0.0),
                                         (50, 16, -80.0, -40.0))):
        k, v = torch.randn(L, 3, generator=g, dtype=torch.float64), torch.randn(L, 2, generator=g, dtype=torch.float64)
        log_a = uniform(g, L, 3, lo=lo, hi=hi)
        n = -(-L // C)
        where = f" at L = {L}, C = {C}" + (f" with log a in [{lo:g}, {hi:g}]" if lo < -5 else "")
        got = output(fn, (k, v, log_a, C), "h_in", (n, 3, 2), complex_ok=False)
        if lo < -5:
            _no_overflow(got, "h_in", where)
        want, leaving = _states_by_recurrence(k, v, log_a, C)
        if close(got, leaving, 1e-9) and not close(got, want, 1e-9):
            raise Wrong(f"you returned the state leaving each chunk{where}: h_in[c] is the state entering chunk c, "
                        f"so h_in[0] = 0 and h_in[c] is the state after step c*C - 1")
        compare(got, want, 1e-9, name="h_in", against="the recurrence's state at each chunk's start",
                axes="(chunk, key, value)", where=where)


def _recurrent(q, k, v, a):
    """GateLoop's y: (L, dv) for one sequence and head, by its recurrence (gateloop(mode='recurrent'))."""
    from seqlab.ops.gateloop import gateloop

    return gateloop(q[None, None], k[None, None], v[None, None], a[None, None], mode="recurrent")[0, 0]


@exercise("06.3")
def _check_06_3(fn):
    for g, (L, C, lo, hi) in seeded(63, ((1, 4, 0.5, 1.0), (7, 16, 0.5, 1.0), (37, 8, 0.5, 1.0),
                                         (40, 16, 1e-30, 1e-20))):
        q, k, v = complex_randn(g, L, 3), complex_randn(g, L, 3), complex_randn(g, L, 2)
        a = torch.polar(uniform(g, L, 3, lo=lo, hi=hi), uniform(g, L, 3, lo=-math.pi, hi=math.pi))
        where = f" at L = {L}, C = {C}" + (f" with |a| in [{lo:g}, {hi:g}]" if lo < 1e-3 else "")
        got = output(fn, (q, k, v, a, C), "y", (L, 2))
        if lo < 1e-3:
            _no_overflow(got, "y", where)
        first_nonfinite(got, "y", where)
        want = _recurrent(q, k, v, a)
        if close(got, _recurrent(q.conj(), k.conj(), v, a), 1e-8):
            raise Wrong(f"y is computed with conjugated q and k{where}: GateLoop's k_n^T v_n and q_n S_n have no "
                        f"conjugation")
        compare(got, want, 1e-9, name="y", against="gateloop(mode='recurrent')", axes="(position, value channel)",
                where=where)
