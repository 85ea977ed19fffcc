"""flash-linear-attention's chunked kernels (``fla.ops.delta_rule.chunk_delta_rule``,
``fla.ops.gated_delta_rule.chunk_gated_delta_rule``), where they are installed: an optional backend, never a
dependency (``pip install fla-core``; nothing here downloads). The same algorithm as ``chunked.py``, as fused
Triton kernels for CUDA.

fla's conventions differ from seqlab's and are converted here: fla takes ``(B, L, H, d)`` tensors (seqlab
``(B, H, L, d)``), scales queries by ``dk ** -0.5`` unless told ``scale=1.0``, and stores its state ``(dk, dv)``
as seqlab does. Its kernels are written for half precision (bfloat16 / float16 operands, float32
accumulation; ``chunk_delta_rule`` refuses float32), so this mode takes half-precision inputs only and refuses
float32 and float64 with an error naming the dtype rather than computing them at a lower precision.
"""
from __future__ import annotations

import importlib.util

import torch

from seqlab.ops._checks import describe

HAVE_FLA = importlib.util.find_spec("fla") is not None
FLA_DTYPES = (torch.float16, torch.bfloat16)


class FlaUnavailable(RuntimeError):
    """``mode="fla"`` was asked for where flash-linear-attention cannot run (not installed, or not CUDA)."""


def require_fla(q: torch.Tensor, dtype: torch.dtype) -> None:
    """Raise a clear error if fla's kernels cannot compute inputs like ``q`` (promoted ``dtype``) here."""
    if not HAVE_FLA:
        raise FlaUnavailable("delta_rule(mode='fla') needs flash-linear-attention (pip install fla-core), which is "
                             "not installed; mode='chunked' computes the same function in torch")
    if q.device.type != "cuda":
        raise FlaUnavailable(f"delta_rule(mode='fla'): fla's kernels run on CUDA tensors, got q on {q.device}; "
                             "use mode='chunked' (or 'auto') on this device")
    if dtype not in FLA_DTYPES:
        raise TypeError(f"delta_rule(mode='fla'): fla's kernels compute in half precision (bfloat16 / float16 "
                        f"operands), got inputs of dtype {dtype} (q: {describe(q)}); mode='chunked' keeps "
                        f"{dtype}")


def _heads_second(t: torch.Tensor) -> torch.Tensor:
    """seqlab's ``(B, H, L, ...)`` <-> fla's ``(B, L, H, ...)``."""
    return t.transpose(1, 2).contiguous()


def _fla(q, k, v, beta, g, h0):
    """fla's chunked kernel on half-precision CUDA tensors: ``(y (B, H, L, dv), S_L (B, H, dk, dv) float32)``."""
    q, k, v, beta = map(_heads_second, (q, k, v, beta))
    h0 = None if h0 is None else h0.float()
    if g is None:
        from fla.ops.delta_rule import chunk_delta_rule

        y, S = chunk_delta_rule(q, k, v, beta, scale=1.0, initial_state=h0, output_final_state=True)
    else:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        y, S = chunk_gated_delta_rule(q, k, v, _heads_second(g.float()), beta, scale=1.0, initial_state=h0,
                                      output_final_state=True)
    return y.transpose(1, 2), S
