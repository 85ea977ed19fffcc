"""Data-parallel training on ``torch.distributed``, as ``torchrun`` launches it: what :func:`seqlab.train.fit`
does when ``WORLD_SIZE`` > 1 (``torchrun --nproc_per_node=N -m seqlab train ...``; several machines through
torchrun's rendezvous).

- Backend: ``nccl`` on CUDA (each process on ``cuda:LOCAL_RANK``), ``gloo`` on CPU. The process group is
  initialised from torchrun's environment (``init_process_group``), and the model wrapped in
  ``DistributedDataParallel``: nothing here replaces what ``torch.distributed`` provides.
- The batch: ``batch_size`` is the global batch. Every rank draws the same step's indices (a pure function of
  ``(seed, step)``) and takes its contiguous part (``tensor_split``), so the ranks together see exactly the
  batch one process sees.
- The gradient is that of the same global loss, the mean over every scored token of the global batch: each
  rank's loss sum is divided by the global count of scored tokens and multiplied by the world size, which
  ``DistributedDataParallel``'s gradient mean divides out again. Uneven label masks across ranks therefore
  change nothing.
- Evaluation is sharded: rank r takes every world-th batch of the split, and the sums and counts are
  reduced (a split of fewer batches than ranks is evaluated whole on every rank).
- Rank 0 alone prints, draws progress, writes checkpoints and histories.
"""
from __future__ import annotations

import atexit
import os

import torch

__all__ = ["launched", "setup", "shard", "all_sum", "all_max", "rank_world"]


def launched() -> bool:
    """True in a process that torchrun started as one of several (``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup(device: torch.device) -> tuple[int, int, torch.device]:
    """Join the process group torchrun describes; return ``(rank, world_size, device)``."""
    import torch.distributed as dist

    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        # left to the interpreter's exit, the group's threads can still run as the process ends, and C++ aborts
        # it ("terminate called without an active exception") after the run has finished
        atexit.register(_leave_group)
    return dist.get_rank(), dist.get_world_size(), device


def _leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def rank_world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process: ``(0, 1)`` outside a process group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard(index: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """This rank's contiguous part of one global batch's indices."""
    return index.tensor_split(world)[rank]


def all_sum(values: list[float], device: torch.device) -> list[float]:
    """Sums over the ranks, in float64."""
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def all_max(values: list[float], device: torch.device) -> list[float]:
    """Maxima over the ranks (a stop flag raised on one rank reaches every rank), in float64."""
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()
