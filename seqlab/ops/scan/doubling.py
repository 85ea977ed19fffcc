"""``mode="doubling"``: Algorithm 1 of paper 002 (recursive doubling, time-invariant ``a``)."""
from __future__ import annotations

import math

import torch

from seqlab.ops._checks import describe
from seqlab.ops.scan._common import _canonical, _check_inputs, _real_view, _wide


def _forward_doubling(a, x, h0, reverse):
    """Algorithm 1 of paper 002 (recursive doubling, Yue et al. 2024) for a time-invariant ``a = Λ``.

    1. sequence padding: ``x`` is left-padded with zeros to ``2^⌈log2 L⌉`` (zeros in front of a
       zero state leave it zero);
    2. for ``i = 1..log2 L``, ``l = 2^i``: view ``h`` as blocks of ``l`` steps, split each into
       halves ``h1, h2``; ``Λ <- cat(Λ, Λ·Λ[-1])`` holds ``Λ^1..Λ^{l/2}``; ``h2 += Λ ⊙ h1[-1]``.
    After level ``i`` every block of ``l`` steps holds its own exact scan.
    """
    if a.shape[1] != 1:
        raise ValueError("linear_scan(mode='doubling'): Algorithm 1 of paper 002 needs a time-invariant a "
                         f"(shape (D,) or with time length 1), got a with time length {a.shape[1]}; "
                         "use mode='blocked' or 'associative' for a time-varying a")
    if reverse:
        return _forward_doubling(a, x.flip(1), h0, False).flip(1)
    L = x.shape[1]
    h = None
    for h in _doubling_steps(a, x, h0):
        pass
    return h[:, h.shape[1] - L:].contiguous()


def _doubling_steps(a, x, h0):
    """Yield the padded ``h`` after the padding and after each level ``i`` of Algorithm 1 (in place)."""
    B, L = x.shape[:2]
    levels = max(0, math.ceil(math.log2(L))) if L > 0 else 0
    L2 = 2 ** levels
    h = x.new_zeros((B, L2) + tuple(x.shape[2:]))
    h[:, L2 - L:] = x  # 1. sequence padding (in front)
    if h0 is not None:
        h[:, L2 - L] += a[:, 0] * h0
    yield h
    lam = _wide(a)  # (Ba, 1, *F): Λ^1, powers formed in float64 (see _wide)
    for i in range(1, levels + 1):
        l = 2 ** i
        hv = h.view(B, L2 // l, l, *h.shape[2:])  # (B, L/l, l, *F)
        if i > 1:
            lam = torch.cat([lam, lam * lam[:, -1:]], 1)  # (Ba, l/2, *F): Λ^1 .. Λ^{l/2}
        h1_last = hv[:, :, l // 2 - 1: l // 2]  # (B, L/l, 1, *F): last state of each left half
        hv[:, :, l // 2:].addcmul_(lam.unsqueeze(1).to(h.dtype), h1_last)  # 3. h2 += Λ^{1..l/2} h1[-1]
        yield h


def doubling_levels(lam: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
    """The state after each level of Algorithm 1 (paper 002), for pictures: ``[h after padding, level 1, ...]``.

    ``lam``: ``(D,)``; ``x``: ``(..., L, D)``. Each entry is ``(..., L, D)`` (the padding cut off):
    after level ``i`` every block of ``2^i`` steps (counted on the padded sequence) holds its own scan,
    and the last entry equals ``linear_scan(lam, x)``.
    """
    _check_inputs(lam, x, None)
    if lam.dim() != 1:
        raise ValueError(f"lam: doubling_levels needs a time-invariant lam of shape (D,), got {describe(lam)}")
    a3, x3, _ = _canonical(lam, x, None)
    ar, xr, _, viewed = _real_view(a3, x3, None)
    L = x.shape[-2]
    out = []
    for h in _doubling_steps(ar, xr, None):
        h = h[:, h.shape[1] - L:].clone()
        out.append((torch.view_as_complex(h) if viewed else h).reshape(x.shape))
    return out
