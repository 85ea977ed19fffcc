"""The learning rate and the batches of a step, pure functions of the step: a resumed run takes the same ones."""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

__all__ = ["lr_at", "batch_indices"]


def lr_at(step: int, *, lr: float, steps: int, warmup: int, final_lr_ratio: float = 0.1) -> float:
    """Learning rate of (0-based) ``step``: linear warm-up over ``warmup`` steps, then cosine decay
    from ``lr`` to ``final_lr_ratio * lr`` at the last step."""
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    span = max(1, steps - warmup - 1)
    progress = min(1.0, (step - warmup) / span)
    return lr * (final_lr_ratio + (1 - final_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@lru_cache(maxsize=4)
def _epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    # A 64-bit seed mixed from (seed, epoch): independent streams, no collisions between pairs.
    mixed = int(np.random.SeedSequence([seed, epoch]).generate_state(2, dtype=np.uint32).view(np.uint64)[0])
    g = torch.Generator().manual_seed(mixed & 0x7FFF_FFFF_FFFF_FFFF)
    return torch.randperm(n, generator=g)


def batch_indices(n: int, batch_size: int, seed: int, step: int) -> torch.Tensor:
    """Example indices of the batch at (0-based) ``step``: a pure function of ``(seed, step)``.

    The split is read as an endless stream of epochs, each a permutation seeded by
    ``(seed, epoch)``; step ``s`` takes the examples ``s*B ... s*B + B - 1`` of that stream.
    """
    parts, pos, need = [], step * batch_size, batch_size
    while need > 0:
        epoch, offset = divmod(pos, n)
        take = _epoch_permutation(n, seed, epoch)[offset:offset + need]
        parts.append(take)
        pos, need = pos + len(take), need - len(take)
    return torch.cat(parts)
