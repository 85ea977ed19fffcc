"""Measure the largest single tensor an operation allocates (lesson 01 §4), deterministically and on any device.

:class:`LargestTensor` is a ``TorchDispatchMode``: every ATen op run inside it is seen once, and the byte size of
the largest tensor any op returned is kept. Unlike a wall-clock time, the number does not depend on the machine.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["LargestTensor", "largest_allocation"]


class LargestTensor(TorchDispatchMode):
    """``with LargestTensor() as watch: ...`` then ``watch.largest``: the bytes of the largest tensor created."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        sizes = [t.numel() * t.element_size() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.largest = max([self.largest] + sizes)
        return out


def largest_allocation(fn, *args, **kwargs) -> int:
    """Run ``fn(*args, **kwargs)`` once and return the bytes of the largest tensor it created."""
    with LargestTensor() as watch:
        fn(*args, **kwargs)
    return watch.largest
