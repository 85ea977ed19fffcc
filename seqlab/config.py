"""Device, dtype, profile and seeding: the few global choices a lesson makes.

`SEQLAB_PROFILE` picks how big the live training runs are:

- ``quick``:  CPU-sized, every lesson runs in under 3 minutes on 2 cores;
- ``medium``: CPU-sized between the two, for reproducing the papers' claims over several seeds
  (``python -m seqlab reproduce``: each claim in at most 20 minutes on 2 cores); its sizes live in
  ``configs/medium/``, and an experiment that no claim uses runs its quick sizes there;
- ``full``:   the papers' sizes, meant for a GPU.

The default is ``full`` when CUDA is available and ``quick`` otherwise.
"""
from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch

PROFILES = ("quick", "medium", "full")


def cuda_available() -> bool:
    return torch.cuda.is_available()


def device(name: str | torch.device = "auto") -> torch.device:
    """``"auto"`` is CUDA when present, else CPU; anything else is passed to ``torch.device``."""
    if isinstance(name, torch.device):
        return name
    if name == "auto":
        return torch.device("cuda" if cuda_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"device: expected 'auto', 'cpu', 'cuda' or 'cuda:N', got {name!r}") from err
    if dev.type == "cuda" and not cuda_available():
        raise ValueError(f"device: {name!r} was asked for but CUDA is not available on this machine; use 'auto' or 'cpu'")
    return dev


def model_device(model: torch.nn.Module) -> torch.device:
    """The device a model's parameters (or, without any, its buffers) live on; CPU for an empty model."""
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def dtype(name: str | torch.dtype = "auto", device_: str | torch.device = "auto") -> torch.dtype:
    """Training dtype: ``"auto"`` is bfloat16 on a CUDA device that supports it, else float32."""
    if isinstance(name, torch.dtype):
        return name
    if name == "auto":
        dev = device(device_)
        if dev.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    table = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in table:
        raise ValueError(f"dtype: expected 'auto' or one of {sorted(table)}, got {name!r}")
    return table[name]


def profile() -> str:
    """The active profile: ``$SEQLAB_PROFILE`` if set, else ``full`` with CUDA and ``quick`` without."""
    value = os.environ.get("SEQLAB_PROFILE", "").strip().lower()
    if not value:
        return "full" if cuda_available() else "quick"
    if value not in PROFILES:
        raise ValueError(f"SEQLAB_PROFILE: expected one of {PROFILES}, got {value!r}")
    return value


def pick(quick, full, medium=None):
    """Return ``quick``, ``medium`` or ``full`` according to the active profile (for sizes in lessons).

    Without a ``medium`` value the medium profile takes ``quick``'s: a lesson stays CPU-sized."""
    prof = profile()
    if prof == "full":
        return full
    return medium if prof == "medium" and medium is not None else quick


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and torch (CPU and CUDA) and make CPU runs reproducible.

    In the quick and medium profiles on a machine without CUDA this also sets torch to one math thread: the
    bits of a parallel reduction depend on how many threads share it, so only a fixed thread count
    makes a lesson's numbers the same on every run and every machine (and small models train no
    slower on one thread). Returns a ``torch.Generator`` seeded the same way.
    """
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    if profile() in ("quick", "medium") and not cuda_available():
        torch.set_num_threads(1)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if cuda_available():
        torch.cuda.manual_seed_all(seed)
    return torch.Generator().manual_seed(seed)


def triton_status() -> str:
    """One line on how Triton modes run here: on a GPU, in the CPU interpreter, or not at all."""
    from seqlab import kernels

    return kernels.status()


@contextlib.contextmanager
def one_math_thread():
    """Every run of the block on one CPU math thread, from its first step to its last, whatever ran before.

    Numba's OpenMP pool, launched by the first call of a Numba kernel, sets OpenMP's thread count to its own
    size (the cores), torch's included: a run that met its first Numba kernel would go on with more threads
    than the one ``seed_everything`` set, and its bits would depend on what the process ran before. So the pool
    is launched here first, then torch is set to one thread (restored afterwards). Nothing changes on CUDA."""
    import torch

    from seqlab.kernels import numba as numba_kernels

    if torch.cuda.is_available():
        yield
        return
    before = torch.get_num_threads()
    if numba_kernels.HAVE_NUMBA:
        numba_kernels.numba.get_num_threads()     # launches the pool (once per process)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
