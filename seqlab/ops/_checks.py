"""Input checks shared by every op: errors name the argument, what was expected and what came."""
from __future__ import annotations

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
    modes = tuple(modes)
    if mode not in modes:
        raise ValueError(f"{op}: mode must be one of {modes}, got {mode!r}")
    return mode


def check_finite(name: str, t: torch.Tensor) -> torch.Tensor:
    """Numerics never produce NaN or inf silently: raise, naming the output."""
    if not torch.isfinite(t).all():
        raise FloatingPointError(f"{name}: produced non-finite values (NaN or inf); see the op's docstring for its valid range")
    return t


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``|out - ref| / |ref|`` in the Frobenius norm, computed in float64 (the metric of design.md §4)."""
    out64 = out.detach().to(torch.complex128 if (out.is_complex() or ref.is_complex()) else torch.float64)
    ref64 = ref.detach().to(out64.dtype)
    denom = torch.linalg.vector_norm(ref64)
    num = torch.linalg.vector_norm(out64 - ref64)
    if denom == 0:
        return float(num)
    return float(num / denom)
