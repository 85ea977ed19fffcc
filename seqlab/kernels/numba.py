"""Numba, shared by the ops' compiled CPU loops (``mode="numba"``; each op's loop lives in its own folder,
``seqlab/ops/<op>/numba.py``).

A Python loop over time pays the interpreter on every step; the vectorised torch modes avoid that by
moving the data two or three times. A compiled loop does neither: it reads every input once and writes
every output once. The loops are the recurrences exactly as the papers write them (no reassociation,
no fused multiply-add: ``fastmath`` is off), so in float32 they round like a step-by-step loop. They run
in parallel over independent sequences (batch rows, blocks of channels, heads), on as many threads as
``torch.get_num_threads()`` allows; each sequence is computed by one thread, so the result does not
depend on the thread count. The machine code is cached next to each ``numba.py`` (``__pycache__``):
the first call with a new dtype compiles (2-8 s, once).

Numba is a dependency of seqlab; if it cannot be imported (an unsupported platform), ``HAVE_NUMBA``
is ``False``, ``mode="auto"`` uses the torch modes and ``mode="numba"`` raises :class:`NumbaUnavailable`
saying why.
"""
from __future__ import annotations

import torch

try:  # pragma: no cover - exercised on platforms without numba wheels
    import numba

    HAVE_NUMBA = True
    _IMPORT_ERROR = ""
except Exception as exc:  # noqa: BLE001 - any import failure means "no compiled mode"
    HAVE_NUMBA = False
    _IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

__all__ = ["HAVE_NUMBA", "NumbaUnavailable", "require_numba", "jit", "jit_reassoc", "jit_exact", "as_numpy", "use_threads", "MAX_ABS2"]

# |a| above 1 + 1e-6 is refused (the torch modes' bound), compared as |a|^2.
MAX_ABS2 = (1.0 + 1e-6) ** 2

if HAVE_NUMBA:
    # every compiled loop: parallel over independent sequences (prange), cached, exact IEEE arithmetic
    jit = numba.njit(parallel=True, cache=True, fastmath=False, nogil=True)
    # a loop whose floating-point sums may be reordered, so that a row sum vectorises (LLVM's ``reassoc`` flag
    # alone: no assumption about NaN, inf or signed zeros); every other operation stays exact
    jit_reassoc = numba.njit(parallel=True, cache=True, fastmath={"reassoc"}, nogil=True)
    # an exact helper called from a ``jit_reassoc`` loop (flags are per instruction: inlined, it stays exact)
    jit_exact = numba.njit(cache=True, fastmath=False, nogil=True)


class NumbaUnavailable(RuntimeError):
    """``mode="numba"`` was asked for where the Numba kernels cannot run."""




def require_numba(op: str, *tensors: torch.Tensor) -> None:
    """Raise a clear error if ``op``'s Numba mode cannot run on these tensors."""
    if not HAVE_NUMBA:
        raise NumbaUnavailable(f"{op}(mode='numba') needs numba, which failed to import ({_IMPORT_ERROR}); "
                               "use mode='auto' (the torch modes)")
    for t in tensors:
        if t is not None and t.device.type != "cpu":
            raise NumbaUnavailable(f"{op}(mode='numba') runs on CPU tensors; got a tensor on {t.device} "
                                   "(use mode='auto', which picks the Triton kernel on CUDA)")


def as_numpy(t: torch.Tensor):
    """A contiguous NumPy view (or copy) of a CPU tensor, lazy conjugation and negation resolved."""
    if t.is_contiguous() and not (t.is_conj() or t.is_neg()):
        return t.detach().numpy()                          # the common case, in a third of the time
    return t.detach().resolve_conj().resolve_neg().contiguous().numpy()


def use_threads() -> int:
    """Numba's threads for the next loop: torch's intra-op count (at most Numba's pool), torch's left as it was.

    Numba's OpenMP threading layer shares the OpenMP runtime with torch: launching its pool (the first call
    here) or resizing it resets the runtime's thread count, which torch's own parallel loops then use (a
    torch on one thread found itself on every core, and its sums rounded differently from then on). The
    count torch had is put back."""
    torch_threads = torch.get_num_threads()
    n = max(1, min(torch_threads, numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != n:   # (setting it costs more than asking)
        numba.set_num_threads(n)
    if torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)
    return n
