"""Rows of a batch that decode at different positions (ragged prompts, ``seqlab.models.decoding``).

A masked decoding step advances only the rows where ``active`` is True: every other row keeps its state
exactly, ``state = where(active, new, old)``, so that a pad token never touches a state. A block whose state
has a fixed shape needs nothing more than its ``step`` and :func:`keep_rows`; a block whose state grows with
the tokens read (a KV cache) or counts them (a position) defines
``step_rows(x_t, state, t, active) -> (y_t, state)`` itself, ``t`` (B,) the tokens each row has read.

A growing cache of a ragged batch keeps row ``r``'s ``t_r`` entries first along its sequence axis and zeros
after them (:func:`write_rows`), so that row ``r`` of the cache is that sequence's own cache, padded.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["keep_rows", "write_rows"]


def keep_rows(active: torch.Tensor, new, old):
    """``new`` where ``active`` (B,) is True, ``old`` elsewhere, through tensors, tuples (named ones too),
    lists and dicts; a plain number (a count) must be the same in both (a block that counts per row defines
    ``step_rows``)."""
    if isinstance(new, torch.Tensor):
        if new.shape != old.shape:
            raise RuntimeError(f"keep_rows: a state tensor changed shape {tuple(old.shape)} -> {tuple(new.shape)}; "
                               "a block whose state grows defines step_rows")
        mask = active.to(new.device).view(-1, *([1] * (new.dim() - 1)))
        return torch.where(mask, new, old.to(new.dtype))
    if isinstance(new, dict):
        return {k: keep_rows(active, new[k], old[k]) for k in new}
    if isinstance(new, tuple) and hasattr(new, "_fields"):              # a named tuple
        return type(new)(*(keep_rows(active, a, b) for a, b in zip(new, old)))
    if isinstance(new, (tuple, list)):
        return type(new)(keep_rows(active, a, b) for a, b in zip(new, old))
    if new is None or new == old:
        return new
    raise RuntimeError(f"keep_rows: a state holds {old!r} -> {new!r}, which differs per row; a block that counts "
                       "per row defines step_rows")


def write_rows(cache: torch.Tensor, new: torch.Tensor, t: torch.Tensor, active: torch.Tensor, dim: int):
    """Append ``new`` (the cache's shape with 1 along ``dim``) to each active row ``r`` of ``cache`` at index
    ``t_r`` of ``dim`` (the entries it holds). Returns ``(the cache for reading, the cache to keep)``: the first
    is long enough for every row's index ``t_r`` (an inactive row reads its own entries and a zero there), the
    second is trimmed to the longest row after the step, ``max(t + active)``, and holds zeros past each row's
    entries."""
    B = cache.shape[0]
    size = max(cache.shape[dim], int(t.max()) + 1)
    pad = [0, 0] * (cache.dim() - 1 - dim) + [0, size - cache.shape[dim]]
    cache = F.pad(cache, pad)
    shape = [B] + [1] * (cache.dim() - 1)
    index = t.view(shape).expand(*new.shape)
    kept = cache.gather(dim, index)                                        # the zeros of inactive rows
    cache = cache.scatter(dim, index, torch.where(active.view(shape), new.to(cache.dtype), kept))
    return cache, cache.narrow(dim, 0, int((t + active.long()).max()))
