"""``mode="associative"``: the parallel prefix scan with the associative operator of paper 004 eq. 13,
``(a1, x1) • (a2, x2) = (a1 a2, a2 x1 + x2)``."""
from __future__ import annotations

import torch

from seqlab.ops.scan._common import _fold_h0, _wide


def _forward_associative(a, x, h0, reverse):
    """Parallel prefix scan with paper 004 eq. 13, ``(a1, x1) • (a2, x2) = (a1 a2, a2 x1 + x2)``."""
    if reverse:
        a_r = a.flip(1) if a.shape[1] > 1 else a
        return _forward_associative(a_r, x.flip(1), h0, False).flip(1)
    x = _fold_h0(a, x, h0, False)
    if a.shape[1] == 1:  # time-invariant: one pair product per level, formed in float64 (see _wide)
        a = _wide(a)
    return _prefix_scan(a, x)


def _prefix_scan(a, x):
    """Inclusive scan of the ``x`` component of ``(a_t, x_t)`` under eq. 13, zero initial state."""
    L = x.shape[1]
    if L == 1:
        return x.clone()
    n_pairs = L // 2
    invariant = a.shape[1] == 1  # (Ba, 1, *F) float64: the same a at every position
    a_left, a_right = (a, a) if invariant else (a[:, 0:2 * n_pairs:2], a[:, 1:2 * n_pairs:2])
    x_left, x_right = x[:, 0:2 * n_pairs:2], x[:, 1:2 * n_pairs:2]
    # (a_left, x_left) • (a_right, x_right): one element per pair, half the length
    a_pair = _wide(a_left) * a_right  # pair products in float64 (see _wide), rounded once where used
    x_pair = torch.addcmul(x_right, a_right.to(x.dtype), x_left)
    out = x.new_empty(x.shape)  # (B, L, *F)
    out[:, 1:2 * n_pairs:2] = _prefix_scan(a_pair, x_pair)  # h at odd positions (ends of pairs)
    out[:, 0] = x[:, 0]
    # even positions 2k >= 2: h_{2k} = a_{2k} h_{2k-1} + x_{2k}
    if L > 2:
        a_even = a.to(x.dtype) if invariant else a[:, 2::2].to(x.dtype)
        torch.addcmul(x[:, 2::2], a_even, out[:, 1:L - 1:2], out=out[:, 2::2])
    return out
