"""seqlab.ops.relation: every mode against the float64 reference of 000 eq. 5/8 (and eq. 9)."""
import pytest
import torch
import torch.nn.functional as F

from helpers import check
import sys

import seqlab.ops  # noqa: F401  (the package re-exports the function `relation`, so fetch the module itself)
rel = sys.modules["seqlab.ops.relation.quadratic"]   # where the quadratic form looks its budget up
from seqlab.ops.relation import (relation, relation_attention_matrix, relation_pairs, relation_query,
                                 relation_reference, relation_state, relation_step)

ACTS = ("exp", "relu", "elu", "gelu")
NORMS = ("none", "approx", "exact")


def _inputs(B, L, H, scale=1.0, dtype=torch.float32, grad=False):
    p = (torch.randn(B, L, H, dtype=dtype) * scale).requires_grad_(grad)
    q = (torch.randn(B, L, H, dtype=dtype) * scale).requires_grad_(grad)
    return p, q


def _affine(H, pre_norm):
    if pre_norm == "none":
        return None, None
    return 1.0 + 0.5 * torch.randn(H), 0.3 * torch.randn(H)


def ln0(x):
    """LayerNorm without eps: exactly invariant to a positive per-token scale."""
    return F.layer_norm(x.double(), (x.shape[-1],), eps=0.0)


@pytest.mark.parametrize("L", [1, 2, 7, 64])
@pytest.mark.parametrize("causal", [True, False])
def test_quadratic_matches_reference(L, causal):
    p, q = _inputs(3, L, 5)
    for act in ACTS:
        for pre_norm in NORMS:
            w, b = _affine(5, pre_norm)
            # normalized=True on two activations (exp: log-domain rescale, relu: max-abs rescale)
            for normalized in ((False, True) if act in ("exp", "relu") else (False,)):
                kw = dict(causal=causal, activation=act, pre_norm=pre_norm, normalized=normalized, weight=w, bias=b)
                ref = relation_reference(p, q, **kw)
                check(relation(p, q, mode="quadratic", **kw), ref, 1e-4, f"quadratic {kw}")
                check(relation(p, q, mode="quadratic", chunk=3, **kw), ref, 1e-4, f"chunked {kw}")


@pytest.mark.parametrize("L", [1, 2, 7, 64])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pre_norm", ["none", "approx"])
def test_linear_matches_reference_and_quadratic(L, causal, pre_norm):
    p, q = _inputs(2, L, 6)
    w, b = _affine(6, pre_norm)
    for normalized in (False, True):
        kw = dict(causal=causal, pre_norm=pre_norm, normalized=normalized, weight=w, bias=b)
        lin = relation(p, q, mode="linear", **kw)
        check(lin, relation_reference(p, q, **kw), 1e-5, f"linear vs reference {kw}")
        check(lin, relation(p, q, mode="quadratic", **kw), 1e-5, f"linear vs quadratic-exp {kw}")


def test_long_lengths_linear_vs_reference_and_quadratic():
    p, q = _inputs(1, 1000, 4)
    w, b = _affine(4, "approx")
    ref = relation_reference(p, q, causal=True, pre_norm="approx", weight=w, bias=b)
    lin = relation(p, q, causal=True, mode="linear", pre_norm="approx", weight=w, bias=b)
    check(lin, ref, 1e-5, "L=1000 linear vs float64 reference")
    p, q = _inputs(1, 2051, 4)
    for causal in (True, False):
        lin = relation(p, q, causal=causal, mode="linear", normalized=True)
        quad = relation(p, q, causal=causal, mode="quadratic", normalized=True)
        check(lin, quad, 1e-5, f"L=2051 causal={causal}")


def test_quadratic_never_materialises_more_than_the_budget(monkeypatch):
    seen = []
    original = rel._pair_preactivations

    def spy(p, q, *args):
        z = original(p, q, *args)
        seen.append(z.numel())
        return z

    monkeypatch.setattr(rel, "_PAIR_BUDGET", 4096)
    monkeypatch.setattr(rel, "_pair_preactivations", spy)
    p, q = _inputs(2, 150, 4, grad=True)
    out = relation(p, q, activation="relu", mode="quadratic")
    out.sum().backward()
    assert len(seen) > 1 and max(seen) <= 4096, f"pair tensors of {max(seen)} entries > budget 4096 (full: {2*150*150*4})"
    check(out, relation_reference(p, q, activation="relu"), 1e-4, "budgeted quadratic")


@pytest.mark.parametrize("mode,act,pre_norm", [("quadratic", "exp", "exact"), ("quadratic", "gelu", "approx"),
                                               ("quadratic", "elu", "none"), ("linear", "exp", "none"),
                                               ("linear", "exp", "approx"), ("quadratic", "exp", "approx")])
@pytest.mark.parametrize("chunk", [None, 4])
def test_gradients_match_reference(mode, act, pre_norm, chunk):
    p, q = _inputs(2, 9, 5, grad=True)
    w, b = _affine(5, pre_norm)
    if w is not None:
        w.requires_grad_(True)
        b.requires_grad_(True)
    leaves = [t for t in (p, q, w, b) if t is not None]
    for causal in (True, False):
        for normalized in (False, True):
            kw = dict(causal=causal, activation=act, pre_norm=pre_norm, normalized=normalized, weight=w, bias=b)
            ct = torch.randn(2, 9, 5)
            ref_grads = torch.autograd.grad((relation_reference(p, q, **kw) * ct.double()).sum(), leaves)
            got = torch.autograd.grad((relation(p, q, mode=mode, chunk=chunk, **kw) * ct).sum(), leaves)
            for g, r, name in zip(got, ref_grads, "pqwb"):
                check(g, r.float(), 1e-4, f"grad {name} {mode} {kw}")


@pytest.mark.parametrize("mode", ["linear", "quadratic"])
@pytest.mark.parametrize("causal", [True, False])
def test_normalized_is_finite_and_exact_after_layernorm_at_scale_80(mode, causal):
    p = (torch.rand(2, 33, 8) * 160 - 80)       # uniform in [-80, 80]
    q = (torch.rand(2, 33, 8) * 160 - 80)
    out = relation(p, q, causal=causal, mode=mode, normalized=True)
    assert torch.isfinite(out).all()
    ref = relation_reference(p, q, causal=causal)   # float64: exp(160) ~ 3e69 is representable
    check(ln0(out), ln0(ref), 1e-5, f"LN(normalized {mode}) vs LN(exact r)")
    # without the trick the same inputs overflow float32, and the op says so instead of returning inf
    with pytest.raises(FloatingPointError, match="relation"):
        relation(p, q, causal=causal, mode=mode, normalized=False)


def test_keys_of_plus_minus_50():
    p, q = _inputs(2, 40, 6, scale=50.0)
    for causal in (True, False):
        ref = relation_reference(p, q, causal=causal, normalized=True)
        check(relation(p, q, causal=causal, mode="linear", normalized=True), ref, 1e-5, "linear, keys ±50")
        check(relation(p, q, causal=causal, mode="quadratic", normalized=True), ref, 1e-4, "quadratic, keys ±50")


def test_auto_mode_picks_the_exact_form():
    p, q = _inputs(1, 5, 3)
    for act, pre_norm in (("exp", "none"), ("exp", "approx"), ("exp", "exact"), ("relu", "none")):
        check(relation(p, q, activation=act, pre_norm=pre_norm), relation_reference(p, q, activation=act, pre_norm=pre_norm),
              1e-5, f"auto {act} {pre_norm}")


def test_refusals_explain_themselves():
    p, q = _inputs(2, 4, 3)
    with pytest.raises(ValueError, match="exp\\(p_i \\+ q_j\\) = exp\\(p_i\\) \\* exp\\(q_j\\)"):
        relation(p, q, activation="relu", mode="linear")
    with pytest.raises(ValueError, match="does not split"):
        relation(p, q, pre_norm="exact", mode="linear")
    with pytest.raises(ValueError, match=r"q: expected shape \(2, 4, 3\)"):
        relation(p, q[:, :3])
    with pytest.raises(ValueError, match="p: expected 3 dimensions"):
        relation(p[0], q[0])
    with pytest.raises(TypeError, match="q: expected a real tensor"):
        relation(p, torch.complex(q, q))
    with pytest.raises(ValueError, match="activation"):
        relation(p, q, activation="tanh")
    with pytest.raises(ValueError, match="pre_norm"):
        relation(p, q, pre_norm="post")
    with pytest.raises(ValueError, match="mode must be one of"):
        relation(p, q, mode="fast")
    with pytest.raises(ValueError, match=r"weight: expected shape \(3,\)"):
        relation(p, q, pre_norm="exact", weight=torch.ones(4))
    with pytest.raises(ValueError, match="weight: the pre-activation affine map needs"):
        relation(p, q, weight=torch.ones(3))


@pytest.mark.parametrize("pre_norm", ["none", "approx"])
@pytest.mark.parametrize("normalized", [False, True])
def test_streaming_step_equals_parallel_linear(pre_norm, normalized):
    p, q = _inputs(3, 50, 7, scale=3.0)
    w, b = _affine(7, pre_norm)
    full = relation(p, q, mode="linear", pre_norm=pre_norm, normalized=normalized, weight=w, bias=b)
    state = relation_state(3, 7)
    rows = []
    for t in range(50):
        r_t, state = relation_step(p[:, t], q[:, t], state, pre_norm=pre_norm, normalized=normalized, weight=w, bias=b)
        rows.append(r_t)
        assert state.log_sum.shape == (3, 7)      # O(1) state, whatever t is
    check(torch.stack(rows, 1), full, 1e-5, "streamed rows")


@pytest.mark.parametrize("act,pre_norm", [("exp", "exact"), ("relu", "none"), ("gelu", "approx")])
def test_query_step_equals_quadratic_rows(act, pre_norm):
    p, q = _inputs(2, 12, 5)
    w, b = _affine(5, pre_norm)
    full = relation(p, q, activation=act, pre_norm=pre_norm, mode="quadratic", normalized=True, weight=w, bias=b)
    rows = [relation_query(p[:, : t + 1], q[:, t], activation=act, pre_norm=pre_norm, normalized=True, weight=w, bias=b)
            for t in range(12)]
    check(torch.stack(rows, 1), full, 1e-5, "query rows")


def test_pairs_and_attention_matrix():
    p, q = _inputs(2, 6, 4)
    pairs = relation_pairs(p, q, causal=True, pre_norm="exact")        # (B, Lq, Lk, H)
    assert pairs.shape == (2, 6, 6, 4)
    assert (pairs[:, 0, 1:] == 0).all()
    counts = torch.arange(1, 7.0)[:, None]
    check(pairs.sum(2) / counts, relation_reference(p, q, pre_norm="exact"), 1e-5, "mean of the pairs")
    A = relation_attention_matrix(p, q, causal=True, pre_norm="exact")
    check(A.sum(-1), torch.ones(2, 6), 1e-6, "rows sum to one")
    check(A, pairs.sum(-1) / pairs.sum((-1, -2))[..., None], 1e-5, "mass shares")
    assert (A.triu(1) == 0).all()


def test_exact_pre_norm_when_keys_cancel_queries():
    """p_i ~ -q_j makes var(p_i + q_j) a small difference of large terms: still accurate."""
    p = torch.randn(2, 20, 16)
    q = (-p + 1e-3 * torch.randn(2, 20, 16)).requires_grad_(True)
    ref = relation_reference(p, q, pre_norm="exact")
    out = relation(p, q, pre_norm="exact", mode="quadratic")
    check(out, ref, 1e-4, "exact pre-norm, cancelling pairs")
    check(torch.autograd.grad(out.sum(), q)[0], torch.autograd.grad(ref.sum(), q)[0].float(), 1e-4, "its gradient")


@pytest.mark.parametrize("L", [1, 2, 7, 64, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_shifted_prefix_logsumexp_matches_float64_values_and_gradients(L, dtype):
    from seqlab.ops.relation.linear import prefix_logsumexp

    p = (torch.randn(3, L, 5, dtype=dtype) * 4).requires_grad_(True)
    g = torch.randn(3, L, 5, dtype=dtype)
    ref_p = p.detach().double().requires_grad_(True)
    ref = torch.logcumsumexp(ref_p, dim=1)
    got = prefix_logsumexp(p)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    check(got, ref.to(dtype), tol, f"prefix log-sum-exp, L={L}")
    (grad,), (ref_grad,) = torch.autograd.grad((got * g).sum(), p), torch.autograd.grad((ref * g.double()).sum(), ref_p)
    check(grad, ref_grad.to(dtype), tol, f"its gradient, L={L}")


@pytest.mark.parametrize("gap", [59.0, 61.0, 1000.0])
def test_the_shifted_prefix_logsumexp_is_exact_on_either_side_of_its_range(gap):
    """First keys ``gap`` below the channel's largest: within SHIFT_RANGE (60) the shifted sums, past it the
    sequential log-add; both exact, the prefixes far below the maximum included."""
    from seqlab.ops.relation.linear import SHIFT_RANGE, prefix_logsumexp

    p = torch.randn(2, 50, 4)
    p[:, 0] = -gap / 2
    p[:, -1] = gap / 2                                   # the last key sets the channel's maximum
    ref = torch.logcumsumexp(p.double(), dim=1)
    got = prefix_logsumexp(p)
    assert torch.isfinite(got).all()
    assert (gap > SHIFT_RANGE[torch.float32]) == bool((got == torch.logcumsumexp(p, dim=1)).all())   # which form ran
    check(got, ref.float(), 1e-5, f"prefix log-sum-exp, first keys {gap} below the maximum")
