"""What the ops share about their backends: which one ``mode="auto"`` runs on (:func:`fast_backend`, written
once for every op), Triton's availability and its CPU interpreter, Numba (``seqlab.kernels.numba``) and
ahead-of-time compilation (``seqlab.kernels.aot``). The kernels themselves live beside the equations they
compute, in each op's folder: ``seqlab/ops/<op>/triton.py`` and ``numba.py``.

Triton ships for Linux only (``SEQLAB_NO_TRITON=1`` makes it unavailable anywhere). Without it every other mode works and ``mode="triton"`` raises
:class:`TritonUnavailable` saying why. Without CUDA, the kernels run in Triton's CPU interpreter:
``TRITON_INTERPRET=1`` is set here, before any ``@triton.jit`` runs (slow: ~20 ms a launch,
meant for checking small shapes, not for speed).
"""
from __future__ import annotations

import importlib.util
import os
import sys

import torch

# SEQLAB_NO_TRITON=1 makes Triton unavailable, as on macOS or Windows: the lessons are validated that way
SWITCHED_OFF = os.environ.get("SEQLAB_NO_TRITON", "0") not in ("", "0")
HAVE_TRITON = importlib.util.find_spec("triton") is not None and not SWITCHED_OFF

if HAVE_TRITON and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ["TRITON_INTERPRET"] not in ("", "0") and "triton.language" in sys.modules:
        # Triton came in before the switch (torch.utils.flop_counter imports it): its library functions were made
        # for the compiler, and an interpreted kernel could not call them
        from seqlab.kernels.interpreter import interpret_preloaded_library

        interpret_preloaded_library()


class TritonUnavailable(RuntimeError):
    """``mode="triton"`` was asked for on a machine that cannot run Triton."""


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def status() -> str:
    if SWITCHED_OFF:
        return "Triton switched off (SEQLAB_NO_TRITON=1): Triton modes are unavailable, as on macOS or Windows"
    if not HAVE_TRITON:
        return f"Triton not installed ({sys.platform}): Triton modes need Linux (and a GPU for speed)"
    if torch.cuda.is_available() and not interpreted():
        return f"Triton on GPU ({torch.cuda.get_device_name()})"
    return "Triton in the CPU interpreter (TRITON_INTERPRET=1): exact but slow, for small shapes"


def require_triton(op: str, *tensors: torch.Tensor) -> None:
    """Raise a clear error if ``op``'s Triton mode cannot run on these tensors here."""
    if SWITCHED_OFF:
        raise TritonUnavailable(f"{op}(mode='triton'): Triton is switched off (SEQLAB_NO_TRITON=1); unset it, "
                                "or use mode='auto'")
    if not HAVE_TRITON:
        raise TritonUnavailable(
            f"{op}(mode='triton') needs Triton, which ships only for Linux (and a CUDA GPU for speed); "
            f"this is {sys.platform}. Every other mode works here: use mode='auto'."
        )
    devices = {t.device.type for t in tensors}
    if "cuda" in devices and interpreted():
        raise TritonUnavailable(f"{op}(mode='triton'): TRITON_INTERPRET=1 is set but the tensors are on CUDA; unset it")
    if "cpu" in devices and not interpreted():
        raise TritonUnavailable(
            f"{op}(mode='triton'): CPU tensors need Triton's interpreter; set TRITON_INTERPRET=1 before importing seqlab, "
            "or move the tensors to a CUDA device"
        )
    if interpreted():
        from seqlab.kernels.interpreter import vectorize_scan

        vectorize_scan()


def fast_backend(device: torch.device | str) -> str | None:
    """The backend ``mode="auto"`` of every op runs on for tensors on ``device``: ``"triton"`` on CUDA (Triton
    installed and not interpreted), ``"numba"`` on CPU (Numba importable), else ``None`` (the op's best torch
    form). The measurements behind the choice are in ``benchmarks/``."""
    kind = torch.device(device).type
    if kind == "cuda" and HAVE_TRITON and not interpreted():
        return "triton"
    if kind == "cpu":
        from seqlab.kernels import numba as numba_backend

        if numba_backend.HAVE_NUMBA:
            return "numba"
    return None
