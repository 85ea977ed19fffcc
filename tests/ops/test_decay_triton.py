"""decay_attention(mode="triton"): eq. 7 forward and backward in Triton's CPU interpreter (small shapes),
run by GateLoop's chunked kernels (their compilation: test_triton_spills.py); heads of dk * dv <= 16 (the
gradcheck, complex q and v, keys of 80) by GateLoop's scan route instead (test_gateloop_triton_scan.py)."""

import pytest
import torch

from helpers import check
from seqlab.kernels import HAVE_TRITON

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="Triton ships for Linux only")

from seqlab.ops import decay_attention, decay_attention_reference  # noqa: E402


def inputs(L, B=2, H=2, dk=5, dv=4, key_scale=1.0, dtype=torch.float32):
    q = torch.randn(B, H, L, dk, dtype=dtype)
    k = (torch.randn(B, H, L, dk, dtype=dtype) * key_scale).clamp(-50, 50)
    v = torch.randn(B, H, L, dv, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("L", [1, 2, 7, 64])
@pytest.mark.parametrize("key_scale", [1.0, 50.0])
def test_triton_forward_equals_eq7_loop(L, key_scale):
    q, k, v = inputs(L, key_scale=key_scale)
    check(decay_attention(q, k, v, mode="triton"), decay_attention_reference(q, k, v), 1e-5,
          f"triton L={L} keys x{key_scale}")


def test_triton_forward_extreme_keys_and_separate_log_decay():
    q, _, v = inputs(40, B=1, dk=17, dv=20)      # widths that are not powers of two (masked lanes)
    k = torch.full_like(q, 50.0)
    k[..., 1::2, :] = -50.0
    check(decay_attention(q, k, v, mode="triton"), decay_attention_reference(q, k, v), 1e-5, "+-50 alternating")
    ld = torch.randn_like(q) * 20
    check(decay_attention(q, k / 50, v, log_decay=ld, mode="triton"),
          decay_attention_reference(q, k / 50, v, log_decay=ld), 1e-5, "separate log_decay")


def _grads(fn, tensors, weight):
    tensors = [t.detach().clone().requires_grad_(True) for t in tensors]
    (fn(*tensors) * weight.to(tensors[0].dtype)).sum().backward()
    return [t.grad for t in tensors]


@pytest.mark.parametrize("shared", [True, False])
def test_triton_backward_equals_reference_gradients(shared):
    q, k, v = inputs(37, key_scale=20.0)
    tensors = [q, k, v] if shared else [q, k, v, torch.randn_like(k) * 5]
    weight = torch.randn(2, 2, 37, 4, dtype=torch.float64)

    def fast(q, k, v, d=None):
        return decay_attention(q, k, v, log_decay=d, mode="triton")

    def ref(q, k, v, d=None):
        return decay_attention_reference(q, k, v, log_decay=d)

    got = _grads(fast, tensors, weight)
    want = _grads(ref, [t.double() for t in tensors], weight)
    for name, g, r in zip(("q", "k", "v", "log_decay"), got, want):
        check(g, r, 1e-5, f"triton d{name} shared={shared}")


def test_triton_gradcheck_float64():
    q, k, v = inputs(3, B=1, H=1, dk=2, dv=2, dtype=torch.float64)
    ld = torch.randn_like(k)
    args = [t.requires_grad_(True) for t in (q, k, v, ld)]
    assert torch.autograd.gradcheck(lambda q, k, v, d: decay_attention(q, k, v, log_decay=d, mode="triton"), args,
                                    fast_mode=True)
    assert torch.autograd.gradcheck(lambda q, k, v: decay_attention(q, k, v, mode="triton"), args[:3], fast_mode=True)


def test_triton_complex_q_v_and_every_decay_kind():
    """The engine carries complex queries and values, and the multiplicative and plain kinds too."""
    q, k, v = inputs(21, dk=3, dv=4)
    qc, vc = torch.complex(q, torch.randn_like(q)), torch.complex(v, torch.randn_like(v))
    check(decay_attention(qc, k, vc, mode="triton"), decay_attention_reference(qc, k, vc), 1e-5, "complex q, v")
    ld = torch.rand_like(k) * 3
    for decay, kw in (("multiplicative", dict(log_decay=ld)), ("multiplicative", dict(log_decay=ld[..., :1])),
                      ("none", {})):
        check(decay_attention(q, k, v, decay=decay, mode="triton", **kw),
              decay_attention_reference(q, k, v, decay=decay, **kw), 1e-5, f"triton {decay}")


def test_triton_keys_of_80_forward_and_backward():
    """Keys of +-80: the transitions reach the kernels as log a, and nothing overflows either way."""
    q, k, v = inputs(40, B=1, dk=4, dv=3)
    k = torch.where(torch.rand_like(k) < 0.5, 80.0, -80.0) * torch.rand_like(k).add(0.5).clamp(max=1.0)
    weight = torch.randn(1, 2, 40, 3, dtype=torch.float64)
    got = _grads(lambda q, k, v: decay_attention(q, k, v, mode="triton"), [q, k, v], weight)
    want = _grads(decay_attention_reference, [t.double() for t in (q, k, v)], weight)
    check(decay_attention(q, k, v, mode="triton"), decay_attention_reference(q, k, v), 1e-5, "keys +-80")
    for name, g, r in zip("qkv", got, want):
        check(g, r, 1e-5, f"keys +-80 d{name}")


@pytest.mark.parametrize("decay", ["additive", "multiplicative", "none"])
def test_triton_state_carries_a_sequence_read_in_parts(decay):
    """h0 / return_state on the Triton kernels (fed log a from the state's log-normaliser): a + b == a then b."""
    torch.manual_seed(11)
    q, k, v = inputs(37, dk=6, dv=5, key_scale=4.0, dtype=torch.float64)
    ld = torch.rand_like(k) * 3 if decay == "multiplicative" else None
    part = lambda t, a, b: None if t is None else t[..., a:b, :]  # noqa: E731
    whole, s_whole = decay_attention(q, k, v, decay=decay, log_decay=ld, mode="recurrent", return_state=True)
    outs, s = [], None
    for a, b in ((0, 13), (13, 14), (14, 37)):
        o, s = decay_attention(part(q, a, b), part(k, a, b), part(v, a, b), decay=decay, log_decay=part(ld, a, b),
                               mode="triton", h0=s, return_state=True)
        outs.append(o)
    check(torch.cat(outs, -2), whole, 1e-9, f"triton {decay} in parts")
    for x, y in zip(*((t if decay == "additive" else (t,)) for t in (s, s_whole))):
        check(x, y, 1e-9, f"triton {decay} final state")
