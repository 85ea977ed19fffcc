"""Input checks shared by every op: errors name the argument, what was expected and what came."""
from __future__ import annotations

import os
from typing import Iterable

import torch


def describe(t: torch.Tensor) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"


def check_tensor(name: str, t, *, ndim: int | Iterable[int] | None = None, min_ndim: int | None = None,
                 floating: bool = True) -> torch.Tensor:
    """``t`` must be a tensor (real floating or complex when ``floating``) of the given rank."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if floating and not (t.is_floating_point() or t.is_complex()):
        raise TypeError(f"{name}: expected a floating-point or complex tensor, got {describe(t)}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in allowed:
            raise ValueError(f"{name}: expected {' or '.join(map(str, allowed))} dimensions, got {describe(t)}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{name}: expected at least {min_ndim} dimensions, got {describe(t)}")
    return t


def check_same_device(**tensors) -> None:
    items = {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)}
    devices = {v.device for v in items.values()}
    if len(devices) > 1:
        listing = ", ".join(f"{k} on {v.device}" for k, v in items.items())
        raise ValueError(f"all tensors must be on one device, got {listing}")


def check_shape(name: str, t: torch.Tensor, expected: tuple, what: str = "") -> None:
    """``expected`` may hold ``None`` for a free dimension."""
    ok = t.dim() == len(expected) and all(e is None or e == s for e, s in zip(expected, t.shape))
    if not ok:
        shown = tuple("*" if e is None else e for e in expected)
        raise ValueError(f"{name}: expected shape {shown}{' (' + what + ')' if what else ''}, got {describe(t)}")


def check_mode(op: str, mode: str, modes: Iterable[str]) -> str:
    """``mode`` if it is one of ``modes``; ``ValueError`` listing them otherwise."""
    modes = tuple(modes)
    if mode not in modes:
        raise ValueError(f"{op}: mode must be one of {modes}, got {mode!r}")
    return mode


def has_values(*tensors) -> bool:
    """False when any tensor lives on the ``meta`` device: it has a shape but no values, so value checks
    (finiteness, ranges) are skipped and shape-only tracing works."""
    return not any(isinstance(t, torch.Tensor) and t.is_meta for t in tensors)


_HALF = (torch.float16, torch.bfloat16)


def at_least_float32(t):
    """The dtype policy's working precision: float16 / bfloat16 tensors become float32, others stay."""
    return t.float() if isinstance(t, torch.Tensor) and t.dtype in _HALF else t


def traceable_mode(mode: str, torch_form: str, *tensors) -> str:
    """On ``meta`` tensors a backend mode (``"numba"``, ``"triton"``) has no data to run on: trace the
    shapes through ``torch_form``, which computes the same function."""
    return torch_form if mode in ("numba", "triton") and not has_values(*tensors) else mode


def first_nonfinite(t: torch.Tensor) -> tuple | None:
    """The index of the first NaN or inf of ``t`` (row-major order), or ``None`` when every value is finite."""
    if not has_values(t) or t.numel() == 0:
        return None
    t = t.detach()
    if (t.is_floating_point() or t.is_complex()) and torch.isfinite(t.sum()):
        return None      # one reduction: a sum is finite only if every term is (an overflowing sum looks below)
    bad = ~torch.isfinite(t)
    if not bad.any():
        return None
    first = bad.flatten().nonzero()[0, 0]
    return tuple(int(i) for i in torch.unravel_index(first, t.shape))


def check_finite_inputs(op: str, **tensors) -> None:
    """Non-finite inputs raise ``FloatingPointError`` naming the argument, the index of its first bad value
    and that value (``None`` entries are skipped, and so are ``meta`` tensors)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            continue
        index = first_nonfinite(t)
        if index is not None:
            raise FloatingPointError(f"{op}: {name} holds a non-finite value ({t.detach()[index].item()}) at index "
                                     f"{index} ({describe(t)}); inputs must be finite")


def check_finite(name: str, t: torch.Tensor) -> torch.Tensor:
    """Numerics never produce NaN or inf silently: raise, naming the output (``meta`` tensors pass)."""
    if has_values(t) and t.numel() and not torch.isfinite(t.detach().sum()) and not torch.isfinite(t).all():
        raise FloatingPointError(f"{name}: produced non-finite values (NaN or inf); see the op's docstring for its valid range")
    return t


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``|out - ref| / |ref|`` in the Frobenius norm, computed in float64 (the metric every op's tests compare with)."""
    out64 = out.detach().to(torch.complex128 if (out.is_complex() or ref.is_complex()) else torch.float64)
    ref64 = ref.detach().to(out64.dtype)
    denom = torch.linalg.vector_norm(ref64)
    num = torch.linalg.vector_norm(out64 - ref64)
    if denom == 0:
        return float(num)
    return float(num / denom)


def below(value: float, bound: float) -> str:
    """How a lesson prints a rounding-level error: the bound it argues from (``'below 1e-12'``), never the
    error's last digits, which differ from machine to machine (another vector path, another BLAS). Raises
    ``AssertionError`` naming the value when it is not below ``bound`` (NaN included)."""
    if not float(value) < bound:
        raise AssertionError(f"{float(value):.3e} is not below {bound:.0e}")
    return f"below {bound:.0e}"


CHECK_VALUES = "SEQLAB_CHECK_VALUES"   # the debug switch: =1 makes the GPU path check values on the host


def on_gpu(t: torch.Tensor) -> bool:
    """Whether ``t`` lives on a CUDA device, where reading a value on the host waits for the whole queue of
    kernels before it (a host synchronisation)."""
    return t.device.type == "cuda"


def host_checks(t: torch.Tensor) -> bool:
    """Whether the op may read values on the host: off the GPU always; on it only under the debug switch
    ``SEQLAB_CHECK_VALUES=1``, which brings back the named errors (the argument and the index of the first bad
    value) at the price of a synchronisation for each check."""
    return not on_gpu(t) or os.environ.get(CHECK_VALUES, "0") not in ("", "0")
