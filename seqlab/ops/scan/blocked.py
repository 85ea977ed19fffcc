"""``mode="blocked"``: a two-level chunked scan for CPUs (chunks scanned side by side, their end states
carried across chunks by a short scan, then each chunk rescanned from its true initial state)."""
from __future__ import annotations

import torch

from seqlab.ops.scan._common import _forward_loop, _sequential_into, _wide, _zeros_or


def scan_chunk_size(L: int, width: int = 1) -> int:
    """Chunk length ``C`` of the blocked scan for ``L`` steps of ``width`` elements each.

    Each of the ~3C vectorised steps touches ``(L/C) * width`` elements: aim for ~64k of them (a step
    stays in cache and its Python overhead is amortised), with ``16 <= C <= 1024``
    (measured in benchmarks/scan.py).
    """
    chunks = max(2, 65536 // max(width, 1))
    return int(min(1024, max(16, L // chunks)))


def _forward_blocked(a, x, h0, reverse, chunk: int | None = None):
    """Two-level scan. Body: ``N`` chunks of ``C`` steps, viewed as ``(B, N, C, *F)``.

    pass 1: chunk-local scans from a zero state, all chunks at once: end states ``s_n`` and the
            chunk products ``P_n = Π_c a_{n,c}`` (loop over ``C``, each step on ``(B, N, *F)``);
    carry : the true initial state of chunk ``n`` is ``P_{n-1} init_{n-1} + s_{n-1}`` -- itself a
            linear scan over ``N`` items (recursively blocked);
    pass 2: rescan every chunk from its true initial state, writing the output.
    The ``L - N C`` leftover steps run sequentially after the body.
    """
    B, L = x.shape[:2]
    C = chunk or scan_chunk_size(L, x[0, 0].numel() * B)
    N = L // C
    out = torch.empty_like(x)
    if N < 2:
        return _forward_loop(a, x, h0, reverse)
    L0 = N * C
    body = slice(L - L0, L) if reverse else slice(0, L0)
    feat = x.shape[2:]
    xv = x[:, body].view(B, N, C, *feat)  # (B, N, C, *F)
    ov = out[:, body].view(B, N, C, *feat)
    varying = a.shape[1] > 1
    av = a[:, body].reshape(a.shape[0], N, C, *a.shape[2:]) if varying else a[:, :1]  # (Ba, N, C, *F) or (Ba, 1, *F)

    def a_c(c):  # a at in-chunk step c for every chunk: (Ba, N, *F) or (Ba, 1, *F)
        return av[:, :, c] if varying else av

    order = list(range(C - 1, -1, -1)) if reverse else list(range(C))
    # pass 1: local scans from zero, all N chunks at once
    s = xv[:, :, order[0]].clone()  # (B, N, *F)
    prod = _wide(a_c(order[0])).clone() if varying else None  # (Ba, N, *Fa), float64 (see _wide)
    for c in order[1:]:
        torch.addcmul(xv[:, :, c], a_c(c), s, out=s)  # s <- a_c s + x_c
        if varying:
            prod.mul_(a_c(c))  # P_n = Π_c a_{n,c}
    if not varying:
        prod = (_wide(a[:, 0]) ** C).unsqueeze(1)  # Λ^C, (Ba, 1, *F)
    # carry: init_n = P_{n-1} init_{n-1} + s_{n-1}, a scan over chunks (in float64: it is 1/C of the data)
    h0w = None if h0 is None else _wide(h0)
    carry = _forward_blocked if N >= 64 else _forward_loop
    ends = carry(prod, _wide(s), h0w, reverse).to(x.dtype)  # (B, N, *F)
    if reverse:
        init = torch.cat([ends[:, 1:], _zeros_or(h0, ends[:, :1])], 1)
    else:
        init = torch.cat([_zeros_or(h0, ends[:, :1]), ends[:, :-1]], 1)  # state before each chunk
    # pass 2: rescan each chunk from its true initial state
    torch.addcmul(xv[:, :, order[0]], a_c(order[0]), init, out=ov[:, :, order[0]])
    for prev, c in zip(order[:-1], order[1:]):
        torch.addcmul(xv[:, :, c], a_c(c), ov[:, :, prev], out=ov[:, :, c])
    # leftover steps after the body (forward) or before it (reverse)
    if L0 < L:
        last = out[:, L - L0] if reverse else out[:, L0 - 1]
        steps = range(L - L0 - 1, -1, -1) if reverse else range(L0, L)
        _sequential_into(out, a, x, last, steps)
    return out
