"""On a CUDA GPU (``-m cuda``, run by ``python3 workbench.py gpu-check``; skipped elsewhere): the compiled
Triton kernels, forward and backward, against float64 references at sizes the interpreter cannot reach:
GateLoop's chunked kernels at the head sizes ``auto`` tiles differently (1, 16, 64, 128), ragged lengths,
complex and real transitions, bfloat16 inputs; the causal decays and linear attention on them; the scan."""
import pytest
import torch

from helpers import check
from seqlab.ops import decay_attention, decay_attention_reference, gateloop, linear_scan, linear_scan_reference

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
DEV = "cuda"


def _grads(fn, inputs, weight):
    inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*inputs)
    (torch.view_as_real(out).sum(-1) if out.is_complex() else out).mul(weight).sum().backward()
    return out.detach(), [t.grad for t in inputs]


@pytest.mark.parametrize("d", [1, 16, 64, 128])
@pytest.mark.parametrize("kind", ["complex", "real"])
def test_gateloop_kernels_at_every_tiling(d, kind):
    g = torch.Generator(device=DEV).manual_seed(d)
    B, H, L = 1, 2, 1000                                             # 1000: a ragged last chunk
    shape = (B, H, L, d)
    q, k, v = (torch.randn(shape, device=DEV, generator=g) for _ in range(3))
    mag = torch.rand(shape, device=DEV, generator=g) * 0.2 + 0.8
    if kind == "complex":
        q, k = torch.complex(q, torch.randn_like(q)), torch.complex(k, torch.randn_like(k))
        a = torch.polar(mag, torch.rand(shape, device=DEV, generator=g) * 6.28 - 3.14)
    else:
        a = mag
    weight = torch.randn(B, H, L, d, device=DEV, dtype=torch.float64, generator=g)
    y, grads = _grads(lambda *t: gateloop(*t, mode="triton"), [q, k, v, a], weight.float())
    to64 = (lambda t: t.to(torch.complex128 if t.is_complex() else torch.float64))
    y_ref, refs = _grads(lambda *t: gateloop(*t, mode="associative"), [to64(t) for t in (q, k, v, a)], weight)
    check(y, y_ref, 1e-4, f"triton y d={d} {kind}")
    for name, got, want in zip("qkva", grads, refs):
        check(got, want, 1e-4, f"triton d{name} d={d} {kind}")


def test_gateloop_bfloat16_inputs():
    g = torch.Generator(device=DEV).manual_seed(0)
    q, k, v = (torch.randn(2, 4, 512, 64, device=DEV, generator=g) for _ in range(3))
    a = torch.rand(2, 4, 512, 64, device=DEV, generator=g) * 0.1 + 0.9
    y = gateloop(*(t.bfloat16() for t in (q, k, v, a)), mode="triton")
    ref = gateloop(*(t.bfloat16().double() for t in (q, k, v, a)), mode="associative")
    assert y.dtype == torch.bfloat16
    check(y.double(), ref, 2e-2, "bf16 inputs, float32 kernels")


@pytest.mark.parametrize("decay", ["additive", "multiplicative", "none"])
def test_causal_decays_on_the_kernels_with_keys_of_80(decay):
    g = torch.Generator(device=DEV).manual_seed(1)
    q, v = (torch.randn(1, 2, 300, 32, device=DEV, generator=g) for _ in range(2))
    k = (torch.randn(1, 2, 300, 32, device=DEV, generator=g) * 80).clamp(-80, 80)
    ld = torch.rand(1, 2, 300, 32, device=DEV, generator=g) * 2 if decay == "multiplicative" else None
    weight = torch.randn(1, 2, 300, 32, device=DEV, dtype=torch.float64, generator=g)
    kw = dict(decay=decay, log_decay=ld)
    out, grads = _grads(lambda q, k, v: decay_attention(q, k, v, mode="triton", **kw), [q, k, v], weight.float())
    ref, refs = _grads(lambda q, k, v: decay_attention_reference(q, k, v, decay=decay,
                                                                 log_decay=None if ld is None else ld.double()),
                       [t.double() for t in (q, k, v)], weight)
    check(out, ref, 1e-4, f"{decay} on the kernels")
    for name, got, want in zip("qkv", grads, refs):
        check(got, want, 1e-4, f"{decay} d{name}")


def test_scan_kernel_long_and_wide():
    g = torch.Generator(device=DEV).manual_seed(2)
    a = torch.polar(torch.rand(2, 4096, 256, device=DEV, generator=g) * 0.1 + 0.9,
                    torch.rand(2, 4096, 256, device=DEV, generator=g))
    x = torch.randn(2, 4096, 256, device=DEV, dtype=torch.complex64, generator=g)
    check(linear_scan(a, x, mode="triton"), linear_scan_reference(a.to(torch.complex128), x.to(torch.complex128)),
          1e-4, "scan triton, L=4096 D=256")
