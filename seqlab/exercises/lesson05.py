"""Lesson 05 · GateLoop: the surrogate attention built stably, the gradient of the scan, a reset designed by hand.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import torch

from seqlab.exercises._core import (Wrong, at_lengths, close, compare, complex_randn, exercise, first_above_diagonal,
                                    fmt, output, refuse_nonfinite, seeded, tensor, transitions)


@exercise("05.1")
def _check_05_1(fn):
    from seqlab.ops import gateloop_attention_matrix

    for g, (L, lo, hi) in seeded(51, ((1, 0.5, 1.0), (6, 0.5, 1.0), (20, 0.5, 1.0), (600, 0.05, 0.5))):
        q, k = complex_randn(g, L, 2), complex_randn(g, L, 2)
        a = transitions(g, L, 2, lo=lo, hi=hi)
        where = f" at L = {L}" + (f" with |a| in [{lo}, {hi}]" if L > 100 else "")
        got = output(fn, (q, k, a), "A", (L, L))
        if L > 100:
            refuse_nonfinite(got, "A", where, "the prefix product |pi_n| falls below 1e-308 and 1/pi_n overflows "
                                              "(Fig. 3); use differences of cumulative logs, masked before exp")
        if above := first_above_diagonal(got):
            n, m = above
            raise Wrong(f"A[{n}, {m}] = {fmt(got[n, m].item())}{where}: query n reads only keys m <= n (eq. 20's mask)")
        want = gateloop_attention_matrix(q[None, None], k[None, None], a[None, None])[0, 0]
        if L > 1 and close(got, want.conj(), 1e-8):
            raise Wrong(f"A is conjugated{where}: GateLoop's k_n^T v_n and q_n S_n have no conjugation")
        compare(got, want, 1e-9, name="A", against="ops.gateloop_attention_matrix", axes="(query n, key m)",
                where=where)


@exercise("05.2")
def _check_05_2(fn):
    from seqlab.ops import linear_scan_reference

    for g, L, where in at_lengths(52, (1, 4, 19)):
        a = 0.3 + 0.7 * torch.rand(L, 3, generator=g, dtype=torch.float64)
        x, w = (torch.randn(L, 3, generator=g, dtype=torch.float64) for _ in range(2))
        got = output(fn, (a, x, w), "d loss / d a", (L, 3), complex_ok=False)
        with torch.enable_grad():
            a_ = a.clone().requires_grad_()
            h = linear_scan_reference(a_, x)
            (w * h).sum().backward()
        want, h = a_.grad, h.detach()
        if close(got, want, 1e-10):
            continue
        h_prev = torch.cat([torch.zeros_like(h[:1]), h[:-1]])
        g_true = linear_scan_reference(torch.cat([a[1:], torch.zeros_like(a[:1])]), w, reverse=True)
        if close(got, g_true * h, 1e-8):
            raise Wrong(f"you multiplied by h_t{where}: a_t multiplies h_(t-1) in h_t = a_t h_(t-1) + x_t, so "
                        f"d loss / d a_t = g_t h_(t-1)")
        if L > 1 and close(got, w * h_prev, 1e-8):
            raise Wrong(f"you used only w_t{where}: a_t reaches every later h through a_(t+1), a_(t+2), ..., so "
                        f"g_t = w_t + a_(t+1) g_(t+1), a reverse scan")
        compare(got, want, 1e-10, name="d loss / d a", against="autograd through ops.linear_scan_reference",
                axes="(t, channel)", where=where)


@exercise("05.3")
def _check_05_3(answer):
    from seqlab.ops import gateloop_attention_matrix

    try:
        a = torch.as_tensor(answer)
    except Exception:
        raise Wrong(f"expected a tensor of 24 transitions, got {type(answer).__name__}") from None
    a = tensor(a, "a", (24,))
    a = a.to(torch.complex128)
    if not torch.isfinite(a).all():
        raise Wrong("a has non-finite values")
    mag = a.abs()
    if float(mag.max()) > 1 + 1e-12:
        n = int(mag.argmax())
        raise Wrong(f"|a_{n}| = {fmt(mag[n])} > 1: every transition must have |a| <= 1 (a stable recurrence)")
    ones = torch.ones(1, 1, 24, 1, dtype=torch.complex128)
    A = gateloop_attention_matrix(ones, ones, a.view(1, 1, 24, 1))[0, 0].abs()
    cross = A[12:, :12]
    if float(cross.max()) >= 1e-6:
        n, m = (int(i) for i in (cross == cross.max()).nonzero()[0])
        raise Wrong(f"row {n + 12} still reads key {m} with |A| = {fmt(cross.max())}: A[{n + 12}, {m}] is the product "
                    f"of a_{m + 1} .. a_{n + 12} and none of them is near 0; every such product contains a_12")
    n_idx, m_idx = torch.meshgrid(torch.arange(24), torch.arange(24), indexing="ij")
    same_side = (n_idx < 12) == (m_idx < 12)
    near = (n_idx - m_idx > 0) & (n_idx - m_idx <= 5) & same_side
    weakest = float(A[near].min())
    if weakest < 0.5:
        n, m = (int(i) for i in ((A == weakest) & near).nonzero()[0])
        raise Wrong(f"|A[{n}, {m}]| = {fmt(weakest)} < 0.5: memory too short inside a segment ({n - m} steps); keep "
                    f"|a| >= 0.5^(1/5) = 0.871 away from the reset")
    return (f"rows n >= 12 keep at most {fmt(cross.max())} of any key before 12, and within each segment every key 5 "
            f"steps back keeps >= {fmt(weakest)}: a data-controlled a_n (near 0 at a reset token) forgets exactly "
            f"where the input says so, which no fixed a can do.")
