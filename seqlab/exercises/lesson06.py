"""Lesson 06 · The chunkwise-parallel form: a chunk's relative decays, the states handed between chunks, and
chunked GateLoop written by hand."""
from __future__ import annotations

import math

import torch

from seqlab.exercises._core import (Wrong, close, compare, complex_randn, exercise, first_nonfinite, generator,
                                    output, refuse_nonfinite, uniform)


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


@exercise("06.1", title="A chunk's relative decays",
          task="From one chunk's log-transitions log_a: (C, d) real float32, return D: (C, C, d) with "
               "D[i, j] = exp(g_i - g_j) = a_(j+1) ... a_i for j <= i and 0 above (g: the cumulative sum of log_a "
               "from the chunk's start), finite and right in float32 for gates as sharp as log a = -30.",
          hint="g = log_a.cumsum(0); g[:, None] - g[None, :] is <= 0 on and below the diagonal: set the entries above it "
               "to -inf with torch.where before exp (never exp(g_i) * exp(-g_j)).",
          signature="relative_decays(log_a) -> D", returns="D, shape (C, C, d)")
def _check_06_1(fn):
    g = generator(61)
    for C, lo, hi in ((1, -1.0, 0.0), (5, -1.0, 0.0), (16, -3.0, 0.0), (64, -30.0, -10.0)):
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
    return ("within 1e-5 of float64 at C = 1, 5, 16 and at C = 64 with log a down to -30, where exp(-g_j) would be "
            "exp(1900): every exponent you formed is <= 0, so nothing can overflow.")


@exercise("06.2", title="The states handed between chunks",
          task="Given k: (L, dk), v: (L, dv), log_a: (L, dk) real and a chunk size C, return h_in: (n, dk, dv) with "
               "n = ceil(L / C), the state entering each chunk (h_in[0] = 0), chunk by chunk by eq. (3): "
               "h_out = diag(exp(g_(C-1))) h_in + (K * exp(g_(C-1) - g))^T V, with gates as sharp as log a = -80.",
          hint="Pad L to n*C with log a = 0 and k = v = 0 (they change no state); per chunk g = log_a[chunk].cumsum(0), "
               "store h, then h = exp(g[-1])[:, None] * h + (k[chunk] * exp(g[-1] - g)).T @ v[chunk].",
          signature="chunk_states(k, v, log_a, C) -> h_in", returns="h_in, shape (n, dk, dv)")
def _check_06_2(fn):
    g = generator(62)
    for L, C, lo, hi in ((1, 4, -1.0, 0.0), (8, 8, -1.0, 0.0), (37, 8, -1.0, 0.0), (50, 16, -80.0, -40.0)):
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
    return ("equal to the recurrence's states at every chunk boundary (relative error <= 1e-9), for chunks that do "
            "not divide L and for gates of log a = -80: each chunk's update needs only exponents <= 0.")


@exercise("06.3", title="Chunked GateLoop in about 15 lines",
          task="Write chunked(q, k, v, a, C): GateLoop's y: (L, dv) for q, k, a: (L, dk) complex (|a| <= 1, a "
               "transition per channel) and v: (L, dv) complex, by the chunked form (1)-(3) with per-channel decays "
               "exp(g_i - g_j); checked against gateloop(mode='recurrent') for L not a multiple of C, L < C, and "
               "|a| down to 1e-30.",
          hint="torch.log(a) is complex: cumsum it inside each chunk; A[i, j] = sum_d q_id k_jd exp(g_id - g_jd) for "
               "j <= i (mask the log with -inf before exp; torch.einsum('id,jd,ijd->ij', ...)); y = A v + "
               "(q * exp(g)) h_in; h = exp(g[-1])[:, None] * h + (k * exp(g[-1] - g)).T @ v.",
          signature="chunked(q, k, v, a, C) -> y", returns="y, shape (L, dv)")
def _check_06_3(fn):
    from seqlab.ops.gateloop import gateloop

    g = generator(63)
    for L, C, lo, hi in ((1, 4, 0.5, 1.0), (7, 16, 0.5, 1.0), (37, 8, 0.5, 1.0), (40, 16, 1e-30, 1e-20)):
        q, k, v = complex_randn(g, L, 3), complex_randn(g, L, 3), complex_randn(g, L, 2)
        a = torch.polar(uniform(g, L, 3, lo=lo, hi=hi), uniform(g, L, 3, lo=-math.pi, hi=math.pi))
        where = f" at L = {L}, C = {C}" + (f" with |a| in [{lo:g}, {hi:g}]" if lo < 1e-3 else "")
        got = output(fn, (q, k, v, a, C), "y", (L, 2))
        if lo < 1e-3:
            _no_overflow(got, "y", where)
        first_nonfinite(got, "y", where)
        want = gateloop(q[None, None], k[None, None], v[None, None], a[None, None], mode="recurrent")[0, 0]
        conjugated = gateloop(q[None, None].conj(), k[None, None].conj(), v[None, None], a[None, None],
                              mode="recurrent")[0, 0]
        if close(got, conjugated, 1e-8):
            raise Wrong(f"y is computed with conjugated q and k{where}: GateLoop's k_n^T v_n and q_n S_n have no "
                        f"conjugation")
        compare(got, want, 1e-9, name="y", against="gateloop(mode='recurrent')", axes="(position, value channel)",
                where=where)
    return ("equal to GateLoop's recurrence (relative error <= 1e-9) for L = 1, L < C, chunks that do not divide L "
            "and |a| down to 1e-30: the chunked form of seqlab's mode='chunked' and its Triton kernel, in your hands.")
