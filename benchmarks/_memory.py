"""The memory regime of the benchmarks (see ``benchmarks/scan.py``'s docstring, "Memory regime")."""
from __future__ import annotations

import ctypes


def steady_allocation() -> bool:
    """glibc stops serving big blocks from fresh mmaps and stops returning freed memory: freed blocks are reused.

    Without this, an output of 32 MiB or more is a fresh ``mmap`` on every call (and blocks between
    128 KiB and 32 MiB often are, after glibc trims its heap), and the kernel's page faults cost more
    than the arithmetic. PyTorch's caching allocator gives a GPU the steady state this restores.
    Returns ``False`` where it cannot be set (not glibc).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        # M_MMAP_MAX = -4: no mmap; M_TRIM_THRESHOLD = -1: never shrink the heap (2 GiB - 1 of free top)
        return bool(libc.mallopt(-4, 0)) and bool(libc.mallopt(-1, 2 ** 31 - 1))
    except (OSError, AttributeError):
        return False
