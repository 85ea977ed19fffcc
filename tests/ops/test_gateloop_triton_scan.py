"""GateLoop's small heads (``dk * dv <= 16``) on the Triton scan, in the CPU interpreter: eq. 7 as an elementwise
recurrence of the state's entries, ``y = q . scan(a, k . v)`` at the paper's ``d_h = 1``, against the float64
recurrence (values, final state, gradients), and the routing between the scan and the chunked kernels."""
import importlib

import pytest
import torch
from helpers import check

from seqlab.ops.decay import decay_attention, decay_attention_reference
from seqlab.ops.gateloop import gateloop
from test_gateloop import make_inputs, to64

pytest.importorskip("triton")
gateloop_triton = importlib.import_module("seqlab.ops.gateloop.triton")


def _run(inputs, mode, weights):
    """``(y, S_L, grads of q, k, v, a, h0)`` of a weighted sum of ``y`` and ``S_L``."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    y, S = gateloop(*leaves[:4], h0=leaves[4], mode=mode, return_state=True)
    sum((t * w.to(t.dtype).conj()).real.sum() for t, w in zip((y, S), weights)).backward()
    return y, S, [t.grad for t in leaves]


@pytest.mark.parametrize("B,L,dk,dv,kind,gates", [(2, 1, 1, 1, "complex", "any"), (1, 37, 1, 1, "complex", "near_zero"),
                                                  (1, 23, 4, 4, "real_negative", "any"),
                                                  (1, 17, 2, 3, "real", "near_one"), (1, 29, 3, 2, "complex", "big_keys")])
def test_small_heads_match_float64_recurrence(B, L, dk, dv, kind, gates):
    """The paper's d_h = 1 and heads up to 16 entries; real of either sign and complex a; h0 and S_L; |a| from
    1e-30 (and exact resets) to 1 - 1e-6, keys of +-50; values and every gradient to the scans' 1e-5."""
    kw = {"any": {}, "near_zero": dict(mag=(1e-30, 1e-3)), "near_one": dict(mag=(1 - 1e-6, 1.0)),
          "big_keys": dict(key_scale=50.0)}[gates]
    q, k, v, a = make_inputs(B, 3, L, dk, dv, complex_=kind == "complex", negative=kind == "real_negative", **kw)
    if gates == "near_zero":
        a[:, 1, L // 3] = 0.0                                     # exact resets: the scan's gradient stays exact
    h0 = torch.randn(B, 3, dk, dv, dtype=q.dtype)
    weights = [torch.randn(B, 3, n, dv, dtype=to64(q).dtype) for n in (L, dk)]
    y, S, grads = _run((q, k, v, a, h0), "triton", weights)
    y_ref, S_ref, refs = _run([to64(t) for t in (q, k, v, a, h0)], "recurrent", weights)
    what = f"{dk}x{dv} {kind} {gates} L={L}"
    assert y.dtype == q.dtype and S.dtype == q.dtype
    check(y, y_ref, 1e-5, f"scan heads y, {what}")
    check(S, S_ref, 1e-5, f"scan heads S_L, {what}")
    for name, g, r in zip(("q", "k", "v", "a", "h0"), grads, refs):
        check(g, r, 1e-5, f"scan heads grad {name}, {what}")


def test_small_heads_float64_in_the_layers_layout():
    """float64 (computed in float64: 1e-12) with h0 and S_L, the inputs viewed from (B, L, H, d) memory as the
    layer makes them; y comes back in that layout (no copy into heads-first order)."""
    B, L, H, dk, dv = 2, 9, 3, 2, 2
    lay = lambda t: t.unflatten(-1, (H, -1)).transpose(1, 2)        # noqa: E731  (B, L, H * d) -> (B, H, L, d)
    q, k = (torch.randn(B, L, H * dk, dtype=torch.complex128) for _ in range(2))
    v = torch.randn(B, L, H * dv, dtype=torch.complex128)
    a = torch.polar(torch.rand(B, L, H * dk, dtype=torch.float64), torch.randn(B, L, H * dk, dtype=torch.float64))
    h0 = torch.randn(B, H, dk, dv, dtype=torch.complex128)
    weights = [torch.randn(B, H, n, dv, dtype=torch.complex128) for n in (L, dk)]
    inputs = [lay(q), lay(k), lay(v), lay(a), h0]
    y, S, grads = _run(inputs, "triton", weights)
    assert y.transpose(1, 2).is_contiguous()
    y_ref, S_ref, refs = _run([t.contiguous() for t in inputs], "recurrent", weights)
    for name, got, want in zip(("y", "S_L", "grad q", "grad k", "grad v", "grad a", "grad h0"),
                               (y, S, *grads), (y_ref, S_ref, *refs)):
        check(got, want, 1e-12, f"float64 scan heads, {name}")


@pytest.mark.parametrize("dk,dv,on_scan", [(4, 4, True), (1, 16, True), (17, 1, False)])
def test_heads_route_by_state_size(monkeypatch, dk, dv, on_scan):
    """dk * dv <= 16 runs the scan and nothing else; bigger heads the chunked kernels and no scan."""
    from seqlab.ops.scan import triton as scan_triton

    calls = []
    scan = scan_triton.triton_linear_scan
    monkeypatch.setattr(scan_triton, "triton_linear_scan", lambda *a, **kw: calls.append("scan") or scan(*a, **kw))
    chunked = gateloop_triton._chunked_kernels
    monkeypatch.setattr(gateloop_triton, "_chunked_kernels", lambda *a: calls.append("chunks") or chunked(*a))
    q, k, v, a = make_inputs(1, 1, 3, dk, dv)
    check(gateloop(q, k, v, a, mode="triton"), gateloop(*(to64(t) for t in (q, k, v, a)), mode="recurrent"), 1e-5,
          f"{dk}x{dv}")
    assert calls == (["scan"] if on_scan else ["chunks"])


def test_decays_on_the_scan_with_a_reset_at_the_first_step():
    """The causal decays hand over log a (additive decay: -inf at t = 1, a full reset): small heads take
    a = exp(log a) on the scan; forward and gradients against the float64 loops of eq. 7 and eq. 2."""
    B, H, L, dk, dv = 2, 2, 23, 3, 4
    q, k, v = (torch.randn(B, H, L, d) for d in (dk, dk, dv))
    k = k * 20
    log_decay = torch.rand(B, H, L, dk) * 3
    weight = torch.randn(B, H, L, dv, dtype=torch.float64)
    for decay, kw in (("additive", {}), ("multiplicative", dict(log_decay=log_decay))):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        refs = [to64(t).requires_grad_() for t in (q, k, v)]
        out = decay_attention(*leaves, decay=decay, mode="triton", **kw)
        ref = decay_attention_reference(*refs, decay=decay, **{n: to64(t) for n, t in kw.items()})
        check(out, ref, 1e-5, f"{decay} decay on the scan")
        (out.double() * weight).sum().backward()
        (ref * weight).sum().backward()
        for name, t, r in zip("qkv", leaves, refs):
            check(t.grad, r.grad, 1e-5, f"{decay} decay on the scan, grad {name}")
