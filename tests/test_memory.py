import torch

from seqlab import memory, ops


def test_largest_tensor_sees_the_biggest_output():
    a = torch.randn(10, 20)
    with memory.LargestTensor() as watch:
        b = a @ a.T              # 10 x 10 floats
        c = a.repeat(3, 1)       # 30 x 20 floats: the largest
        _ = b.sum() + c.sum()
    assert watch.largest == 30 * 20 * 4


def test_largest_allocation_quadratic_vs_linear():
    p, q = torch.randn(1, 64, 8), torch.randn(1, 64, 8)
    quad = memory.largest_allocation(ops.relation, p, q, mode="quadratic")
    lin = memory.largest_allocation(ops.relation, p, q, mode="linear")
    assert quad >= 64 * 64 * 8 * 4 // 2      # pairs (at least the causal half) are materialised
    assert lin == 64 * 8 * 4                  # the linear mode never goes beyond (B, L, H)


def test_fresh_watch_starts_at_zero():
    with memory.LargestTensor() as watch:
        pass
    assert watch.largest == 0
