"""ops.relation(mode="triton"): the time-tiled log-domain prefix-sum kernels under TRITON_INTERPRET, forward and
backward, against the float64 references, across tile edges; and their launch plan. (``test_triton_spills.py``
compiles them for sm_80 / sm_90 at every width of features the plan may pick.)"""
import importlib

import pytest
import torch

from helpers import check
from seqlab.kernels import HAVE_TRITON
from seqlab.ops.relation import relation, relation_reference

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="Triton ships for Linux only")

NEG_INF = float("-inf")


def _kernels():
    return importlib.import_module("seqlab.ops.relation.triton")  # ``seqlab.ops.relation`` is also a function


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 16 steps and 16 features: L in {15, 16, 17, 100} and H = 17 or 20 cross tile edges in time and
    in features at interpreter speed (the GPU tiles are larger; the kernels' code is the same)."""
    rel = _kernels()
    monkeypatch.setattr(rel, "block_t", lambda BH, L: 16)
    monkeypatch.setattr(rel, "block_h", lambda B, H: 16)


# (L, causal, pre_norm, normalized): every length around a tile of 16 steps, each form of the op once or more
EDGES = [(1, True, "none", False), (15, False, "approx", True), (16, True, "approx", False),
         (17, True, "none", True), (100, True, "approx", True)]


@pytest.mark.parametrize("L, causal, pre_norm, normalized", EDGES, ids=str)
def test_triton_matches_reference_across_tile_edges(small_tiles, L, causal, pre_norm, normalized):
    """r and its gradients for p and q against the float64 reference; H = 20 over blocks of 16 features: the
    second block is mostly masked."""
    p = torch.randn(2, L, 20, requires_grad=True)
    q = torch.randn(2, L, 20, requires_grad=True)
    kw = dict(causal=causal, pre_norm=pre_norm, normalized=normalized)
    out = relation(p, q, mode="triton", **kw)
    ref = relation_reference(p, q, **kw)
    check(out, ref, 1e-5, f"triton forward {kw}")
    ct = torch.randn_like(out)
    got = torch.autograd.grad((out * ct).sum(), (p, q))
    want = torch.autograd.grad((ref * ct.double()).sum(), (p, q))
    for g, w, name in zip(got, want, "pq"):
        check(g, w.float(), 1e-5, f"triton grad {name} {kw}")


def test_triton_extreme_keys_and_float64(small_tiles):
    """Keys of +-80 (e^80 overflows float32) through the op, float64 and float32, over three tiles."""
    p = (torch.rand(2, 40, 8, dtype=torch.float64) * 160 - 80).requires_grad_(True)
    q = torch.rand(2, 40, 8, dtype=torch.float64) * 160 - 80
    out = relation(p, q, mode="triton", normalized=True)
    ref = relation_reference(p, q, normalized=True)
    check(out, ref, 1e-12, "float64 triton, keys +-80")
    g = torch.autograd.grad(out.sum(), p)[0]
    gr = torch.autograd.grad(ref.sum(), p)[0]
    check(g, gr, 1e-10, "float64 triton gradient, keys +-80")
    p32 = p.detach().float().requires_grad_(True)
    out32 = relation(p32, q.float(), mode="triton", normalized=True)
    check(out32, ref, 1e-5, "float32 triton, keys +-80")
    check(torch.autograd.grad(out32.sum(), p32)[0], gr.float(), 1e-5, "float32 triton gradient, keys +-80")


def test_triton_logcumsumexp_keys_beyond_exp_range():
    """Keys of +-1000 (e^1000 overflows float64 too) and keys that jump by 2000 from one step to the next, at the
    tile the launch plan picks (64 steps, 31 of them padding; blocks of 8 features, H = 17 over three): y and dp
    against torch's float64 logcumsumexp and its gradient."""
    assert _kernels().launch_plan(1, 33, 17)["BT"] == 64 and _kernels().launch_plan(1, 33, 17)["BH"] == 8
    p = torch.rand(1, 33, 17, dtype=torch.float64) * 2000 - 1000
    p[:, 16::2, :8] = 1000.0  # equal running maxima: the shift's tie
    p = p.requires_grad_(True)
    g = torch.randn(p.shape, dtype=torch.float64)
    y = _kernels().triton_logcumsumexp(p)
    yr = torch.logcumsumexp(p, dim=1)
    check(y, yr, 1e-14, "logcumsumexp, keys +-1000")
    check(torch.autograd.grad((y * g).sum(), p)[0], torch.autograd.grad((yr * g).sum(), p)[0], 1e-12,
          "logcumsumexp gradient, keys +-1000")


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)], ids=str)
def test_triton_minus_inf_keys_as_the_reference(small_tiles, dtype, tol):
    """Keys of -inf (e^{p_i} = 0) in the kernel: a feature whose keys are all -inf, one whose first 20 are (over
    a tile edge), scattered ones. The prefix sum is -inf exactly where torch's float64 logcumsumexp says so, and
    elsewhere equal to it; through the linear form, r and its gradients for p and q equal the float64
    reference's (000 eq. 8, which sums e^{p_i + q_j} itself: 0 for -inf keys), with no NaN."""
    from seqlab.ops.relation.linear import _linear

    p = torch.randn(2, 24, 3, dtype=torch.float64)
    p[:, :, 0] = NEG_INF
    p[:, :20, 1] = NEG_INF
    p[0, 3::4, 2] = NEG_INF
    q = torch.randn(2, 24, 3, dtype=torch.float64)
    y = _kernels().triton_logcumsumexp(p.to(dtype))
    yr = torch.logcumsumexp(p, dim=1)
    assert torch.equal(torch.isneginf(y), torch.isneginf(yr)) and not torch.isnan(y).any()
    check(y[torch.isfinite(yr)], yr[torch.isfinite(yr)], tol, f"{dtype} logcumsumexp with -inf keys")
    pk, qk = (t.to(dtype).requires_grad_(True) for t in (p, q))
    out = _linear(pk, qk, None, None, causal=True, pre_norm="none", normalized=False, eps=0.0, triton=True)
    pr, qr = (t.clone().requires_grad_(True) for t in (p, q))
    ref = relation_reference(pr, qr)
    check(out, ref, tol, f"{dtype} r with -inf keys")
    ct = torch.randn(out.shape, dtype=torch.float64)
    got = torch.autograd.grad((out * ct.to(dtype)).sum(), (pk, qk))
    want = torch.autograd.grad((ref * ct).sum(), (pr, qr))
    for gt, w, name in zip(got, want, "pq"):
        check(gt, w.to(dtype), tol, f"{dtype} grad {name} with -inf keys")
    assert torch.equal(got[0][torch.isneginf(p)], torch.zeros_like(got[0][torch.isneginf(p)]))


def test_triton_gradcheck_float64_across_tile_edges(small_tiles):
    """Finite differences through two tiles in time (L = 17) and two feature blocks (H = 17)."""
    p = (torch.randn(1, 17, 17, dtype=torch.float64) * 3).requires_grad_(True)
    # (the undefined-gradient pass is left out: it would only run the backward kernel once more, on zeros)
    assert torch.autograd.gradcheck(_kernels().triton_logcumsumexp, (p,), eps=1e-6, atol=1e-7, fast_mode=True,
                                    check_undefined_grad=False)


def test_triton_launch_plan_fills_an_h100_and_moves_each_element_once():
    """B = 8, H = 256, L = 16,384 (float32): at least one program per SM of an H100, at most L / BT tiles
    scanned one after another by a program, 8 bytes per element forward (p in; y out) and 16 backward (p, y, g
    in; dp out). The plan is what the launches use; no GPU needed."""
    rel = _kernels()
    B, L, H = 8, 16384, 256
    for backward, most_bytes in ((False, 8), (True, 16)):
        plan = rel.launch_plan(B, L, H, backward=backward)
        assert plan["programs"] >= 132, plan
        assert plan["grid"] == (B, -(-H // plan["BH"])) and plan["BT"] >= 16, plan
        assert plan["serial_steps"] <= L / plan["BT"], plan
        assert plan["bytes_per_element"] <= most_bytes, plan
    assert rel.launch_plan(B, L, H, itemsize=8)["bytes_per_element"] == 16  # float64


def test_triton_block_rule():
    """Wide blocks where the batch fills the GPU, narrow ones (down to 8 features) where it does not, never
    wider than H needs (or 8); tiles of 2048 elements, 16 to 256 steps, no longer than L needs; a warp per 512
    elements, so that no tile holds more than 16 elements a thread: the five full tiles, which
    ``test_triton_spills.py`` compiles, hold the most."""
    rel = _kernels()
    assert rel.block_h(1024, 256) == 128
    assert rel.block_h(8, 256) == 8
    assert rel.block_h(64, 256) == 64  # 64 rows * 4 blocks = 256 programs; 128 wide would give 128 < 132
    assert rel.block_h(4, 1) == 8 and rel.block_h(4, 5) == 8 and rel.block_h(1024, 3) == 8  # one sector a row
    assert [rel.block_t(bh, 16384) for bh in (8, 16, 32, 64, 128)] == [256, 128, 64, 32, 16]
    assert [rel.block_t(8, L) for L in (1, 17, 100, 200)] == [16, 32, 128, 256]
    plans = [rel.launch_plan(B, L, H) for B in (1, 8, 64, 1024) for H in (1, 8, 17, 64, 100, 256, 3072)
             for L in (1, 17, 100, 1000, 16384)]
    assert max(p["BT"] * p["BH"] / (32 * p["num_warps"]) for p in plans) == 16
    full = {(p["BT"], p["BH"], p["num_warps"]) for p in plans if p["BT"] * p["BH"] == rel.TILE_ELEMENTS}
    assert full == {(256, 8, 4), (128, 16, 4), (64, 32, 4), (32, 64, 4), (16, 128, 4)}


def test_triton_refusals():
    p = torch.randn(1, 4, 3)
    with pytest.raises(ValueError, match="mode='triton' runs the linear form"):
        relation(p, p, mode="triton", pre_norm="exact")
    with pytest.raises(ValueError, match="mode='triton' runs the linear form"):
        relation(p, p, mode="triton", activation="relu")
    with pytest.raises(TypeError, match="float32 or float64"):  # the op hands half precision over as float32
        _kernels().triton_logcumsumexp(p.half())
