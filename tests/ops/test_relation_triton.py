"""ops.relation(mode="triton"): the log-domain prefix-sum kernels under TRITON_INTERPRET, forward and
backward, against the float64 reference; and an ahead-of-time compile for sm_80 / sm_90."""
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from helpers import check
from seqlab.kernels import HAVE_TRITON
from seqlab.ops.relation import relation, relation_reference

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="Triton ships for Linux only")


@pytest.mark.parametrize("L", [1, 7, 100])
@pytest.mark.parametrize("causal", [True, False])
def test_triton_matches_reference_forward_and_backward(L, causal):
    H = 20                                      # not a power of two: the last feature block is masked
    p = torch.randn(2, L, H, requires_grad=True)
    q = torch.randn(2, L, H, requires_grad=True)
    for pre_norm, normalized in (("none", False), ("approx", True)):
        kw = dict(causal=causal, pre_norm=pre_norm, normalized=normalized)
        out = relation(p, q, mode="triton", **kw)
        ref = relation_reference(p, q, **kw)
        check(out, ref, 1e-5, f"triton forward {kw}")
        ct = torch.randn_like(out)
        got = torch.autograd.grad((out * ct).sum(), (p, q))
        want = torch.autograd.grad((ref * ct.double()).sum(), (p, q))
        for g, w, name in zip(got, want, "pq"):
            check(g, w.float(), 1e-5, f"triton grad {name} {kw}")


def test_triton_extreme_keys_and_float64():
    p = (torch.rand(2, 48, 8, dtype=torch.float64) * 160 - 80).requires_grad_(True)   # keys of +-80
    q = torch.rand(2, 48, 8, dtype=torch.float64) * 160 - 80
    out = relation(p, q, mode="triton", normalized=True)
    ref = relation_reference(p, q, normalized=True)
    check(out, ref, 1e-12, "float64 triton, keys +-80")
    g = torch.autograd.grad(out.sum(), p)[0]
    gr = torch.autograd.grad(ref.sum(), p)[0]
    check(g, gr, 1e-10, "float64 triton gradient, keys +-80")
    p32 = p.detach().float().requires_grad_(True)
    out32 = relation(p32, q.float(), mode="triton", normalized=True)
    check(out32, ref, 1e-5, "float32 triton, keys +-80")
    assert torch.isfinite(torch.autograd.grad(out32.sum(), p32)[0]).all()


def test_triton_refusals():
    p = torch.randn(1, 4, 3)
    with pytest.raises(ValueError, match="mode='triton' runs the linear form"):
        relation(p, p, mode="triton", pre_norm="exact")
    with pytest.raises(ValueError, match="mode='triton' runs the linear form"):
        relation(p, p, mode="triton", activation="relu")
    from seqlab.ops.relation.triton import triton_logcumsumexp

    with pytest.raises(TypeError, match="float32 or float64"):  # the op hands half precision over as float32
        triton_logcumsumexp(p.half())


SIG = {"p_ptr": "*fp32", "y_ptr": "*fp32", "L": "i32", "H": "i32", "stride_b": "i32", "stride_l": "i32",
       "stride_h": "i32", "BLOCK_H": "constexpr", "STATE_FP64": "constexpr"}
BWD_SIG = {"p_ptr": "*fp32", "y_ptr": "*fp32", "g_ptr": "*fp32", "dp_ptr": "*fp32", "L": "i32", "H": "i32",
           "stride_b": "i32", "stride_l": "i32", "stride_h": "i32", "BLOCK_H": "constexpr", "STATE_FP64": "constexpr"}


def test_kernels_compile_for_sm80_and_sm90():
    from seqlab.kernels.aot import compile_for

    jobs = [(k, sig, cap) for k, sig in (("logcumsumexp_fwd_kernel", SIG), ("logcumsumexp_bwd_kernel", BWD_SIG))
            for cap in (80, 90)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda j: compile_for("seqlab.ops.relation.triton", j[0], j[1],
                                                      {"BLOCK_H": 64, "STATE_FP64": False}, capability=j[2]), jobs))
    for (name, _, cap), res in zip(jobs, results):
        assert "ptx" in res["asm"] and res["ptx_chars"] > 500, f"{name} sm_{cap}: {res}"
