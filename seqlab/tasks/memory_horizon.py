"""The Memory Horizon task of GateLoop (paper 004 §5.1, Appendix A, Table 2).

A sequence of input numbers in ``[0, input_max]`` with ``resets`` reset tokens at random positions.
At every position the target is a *compression* of the numbers seen since the most recent reset
token (or since the start when there is none), so that solving it needs memory back exactly to
the last reset, and none beyond: a model that can forget input-dependently is favoured.

The compression function (Appendix A): "an alternating sum of products by multiplying pairs of
numbers from opposite ends of the list. The operation alternates between addition and subtraction
for each pair. [With] an odd number of elements, the middle element is either added or subtracted,
depending on the current operation. Finally, the result is taken modulo" ``max_output``::

    [x_1, ..., x_n] -> (+ x_1 x_n - x_2 x_{n-1} + x_3 x_{n-2} - ...  (+/-) x_middle)  mod max_output

Tokens: ``0 .. max_output - 1`` are numbers (inputs use ``0 .. input_max``), ``RESET = max_output``;
``vocab_size = max_output + 1``. Labels: the target number at every number position; ``IGNORE``
on the reset tokens themselves (an empty list, nothing to predict). The *required memory span* at
position t is the length of its list (Fig. 7): :func:`memory_spans`.

Table 2 (full profile): inputs ``[0, 4]``, ``seq_len=1024``, 3 resets, ``max_output=50``, 2000 samples.
"""
from __future__ import annotations

import numpy as np
import torch

from seqlab.tasks._cache import cached_splits
from seqlab.tasks.base import IGNORE, Task, split_sizes, validation_param

__all__ = ["memory_horizon", "compress", "memory_spans", "memory_horizon_targets"]


def compress(numbers, max_output: int = 50) -> int:
    """Appendix A's compression of one list: alternating sum of products of opposite ends, mod ``max_output``."""
    xs = [int(x) for x in numbers]
    total, sign = 0, 1
    i, j = 0, len(xs) - 1
    while i < j:                          # pairs from opposite ends: +x_1 x_n, -x_2 x_{n-1}, ...
        total += sign * xs[i] * xs[j]
        sign = -sign
        i, j = i + 1, j - 1
    if i == j:                            # odd length: the middle element with the current operation
        total += sign * xs[i]
    return total % max_output             # Python's % is non-negative: -2 % 50 = 48


def memory_horizon_targets(tokens, reset: int, max_output: int = 50) -> list[int]:
    """Targets of one sequence: ``compress`` of the numbers since the last reset, ``IGNORE`` at resets."""
    out, current = [], []
    for t in tokens:
        t = int(t)
        if t == reset:
            current = []
            out.append(IGNORE)
        else:
            current.append(t)
            out.append(compress(current, max_output))
    return out


def memory_spans(input_ids: torch.Tensor, reset: int) -> torch.Tensor:
    """Required memory span at each position: how many numbers since the last reset (0 at a reset)."""
    ids = torch.as_tensor(input_ids)
    is_reset = ids == reset
    pos = torch.arange(ids.shape[-1]).expand_as(ids)
    last_reset = torch.where(is_reset, pos, torch.full_like(pos, -1)).cummax(dim=-1).values
    return pos - last_reset               # numbers since the reset (t + 1 with no reset yet; 0 at a reset)


def _make_split(rng: np.random.Generator, size: int, seq_len: int, resets: int, input_max: int,
                max_output: int) -> dict:
    reset = max_output
    ids = rng.integers(0, input_max + 1, size=(size, seq_len))
    for i in range(size):
        where = rng.choice(seq_len, size=min(resets, seq_len), replace=False)
        ids[i, where] = reset
    labels = [memory_horizon_targets(row, reset, max_output) for row in ids]
    return {"input_ids": ids.tolist(), "labels": labels}


def memory_horizon(*, seq_len: int = 128, resets: int = 3, input_max: int = 4, max_output: int = 50,
                   train_size: int = 2000, test_size: int = 500, seed: int = 0, validation_size: int = 0) -> Task:
    """The Memory Horizon task (Appendix A). Quick-profile defaults; Table 2 has ``seq_len=1024``.

    ``vocab_size = max_output + 1`` (numbers and the reset token ``info["reset"] = max_output``).
    ``validation_size > 0`` adds a ``"validation"`` split drawn after the test split from the same stream
    (the train and test splits stay the same).
    """
    for name, v, lo in (("seq_len", seq_len, 1), ("resets", resets, 0), ("input_max", input_max, 1),
                        ("max_output", max_output, 2), ("train_size", train_size, 1), ("test_size", test_size, 1),
                        ("seed", seed, 0), ("validation_size", validation_size, 0)):
        if not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
    if input_max >= max_output:
        raise ValueError(f"input_max: expected < max_output={max_output}, got {input_max}")
    params = dict(seq_len=seq_len, resets=resets, input_max=input_max, max_output=max_output,
                  train_size=train_size, test_size=test_size, seed=seed, **validation_param(validation_size))

    def build() -> dict:
        import datasets

        rng = np.random.default_rng(np.random.SeedSequence([seed, 4]))   # 4: the memory-horizon stream
        return {split: datasets.Dataset.from_dict(_make_split(rng, size, seq_len, resets, input_max, max_output))
                for split, size in split_sizes(train_size, test_size, validation_size)}

    splits = cached_splits("memory_horizon", params, build)
    itos = [str(i) for i in range(max_output)] + ["<reset>"]
    return Task(name="memory_horizon", splits=splits, seq_len=seq_len, vocab_size=max_output + 1, num_classes=None,
                itos=itos, info={**params, "reset": max_output,
                                                 "layout": f"numbers 0..{input_max} with {resets} <reset> tokens; "
                                                           f"at each number the compression (mod {max_output}) of "
                                                           f"the numbers since the last reset: input length {seq_len}"})
