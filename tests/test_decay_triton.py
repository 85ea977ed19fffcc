"""decay_attention(mode="triton"): eq. 7 forward and backward in Triton's CPU interpreter (small shapes),
and ahead-of-time compilation of both kernels for sm_80 and sm_90."""
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from conftest import check
from seqlab.kernels import HAVE_TRITON

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="Triton ships for Linux only")

from seqlab.ops import decay_attention, decay_attention_reference  # noqa: E402


def inputs(L, B=2, H=2, dk=5, dv=3, key_scale=1.0, dtype=torch.float32):
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
    q, _, v = inputs(40, dk=17, dv=20)           # widths that are not powers of two (masked lanes)
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
    weight = torch.randn(2, 2, 37, 3, dtype=torch.float64)

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


def test_triton_rejects_complex():
    q, k, v = inputs(4)
    with pytest.raises(TypeError, match="v: decay_attention\\(mode='triton'\\) takes real tensors"):
        decay_attention(q, k, torch.complex(v, v), mode="triton")


FWD_SIG = {"q_ptr": "*fp32", "m_ptr": "*fp32", "d_ptr": "*fp32", "v_ptr": "*fp32", "o_ptr": "*fp32", "lse_ptr": "*fp32",
           "L": "i32", "DK": "i32", "DV": "i32", "SHARED": "constexpr", "BLOCK_K": "constexpr", "BLOCK_V": "constexpr"}
BWD_SIG = {"q_ptr": "*fp32", "m_ptr": "*fp32", "d_ptr": "*fp32", "v_ptr": "*fp32", "do_ptr": "*fp32",
           "lse_ptr": "*fp32", "dq_ptr": "*fp32", "dm_ptr": "*fp32", "dd_ptr": "*fp32", "dv_ptr": "*fp32",
           "L": "i32", "DK": "i32", "DV": "i32", "SHARED": "constexpr", "BLOCK_K": "constexpr", "BLOCK_V": "constexpr"}


def test_kernels_compile_for_sm80_and_sm90():
    """The interpreter tolerates code the compiler rejects: compile both kernels (the shared-key forward and the
    separate-decay backward, which holds every branch) for A100 and H100, in parallel subprocesses."""
    from seqlab.kernels.aot import compile_for

    jobs = [("additive_decay_fwd_kernel", FWD_SIG, {"SHARED": True, "BLOCK_K": 32, "BLOCK_V": 32}, cap)
            for cap in (80, 90)]
    jobs += [("additive_decay_bwd_kernel", BWD_SIG, {"SHARED": False, "BLOCK_K": 64, "BLOCK_V": 16}, cap)
             for cap in (80, 90)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda j: compile_for("seqlab.ops.decay.triton", j[0], j[1], j[2], capability=j[3]), jobs))
    for (name, *_, cap), res in zip(jobs, results):
        assert "ptx" in res["asm"] and res["ptx_chars"] > 1000, f"{name} sm_{cap}: {res}"
