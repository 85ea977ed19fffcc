"""Eq. 12-13: the parallel prefix scan of the pairs ``(a_n, k_n^T v_n)``, run by the scan engine."""
from __future__ import annotations


def _associative(q, k, v, a, h0, scan_mode: str = "associative"):
    """Eq. 12-13: the prefix 'sum' of ``(a_n, k_n^T v_n)`` under the GateLoop operator.

    ``(a, kv) . (a', kv') = (a a', a' kv + kv')`` is exactly the first-order linear recurrence
    ``S_n = a_n S_{n-1} + x_n`` on the flattened ``dk * dv`` state, so the scan engine's
    time-varying parallel scan computes it (associativity: Appendix B). ``scan_mode`` picks the
    engine's algorithm: ``"associative"`` is the paper's parallel prefix scan; ``"auto"`` (used by
    ``mode="auto"``) the engine's fastest one for the device (a blocked two-level scan on CPU).
    """
    from seqlab.ops.scan import linear_scan

    B, H, L, dk = q.shape
    dv = v.shape[-1]
    # time at dim -2 and every (head, row, column) of the states side by side in the last dim
    x = (k[..., :, None] * v[..., None, :]).permute(0, 2, 1, 3, 4).reshape(B, L, H * dk * dv)   # leaves k_n^T v_n
    a_full = a[..., :, None].expand(B, H, L, dk, dv).permute(0, 2, 1, 3, 4).reshape(B, L, H * dk * dv)  # diag(a_n)
    s0 = None if h0 is None else h0.reshape(B, H * dk * dv)
    S = linear_scan(a_full, x, s0, mode=scan_mode)                          # all states S_1..S_L   (B, L, H*dk*dv)
    S = S.reshape(B, L, H, dk, dv).permute(0, 2, 1, 3, 4)                  # (B, H, L, dk, dv)
    y = (q[..., :, None] * S).sum(-2)                                         # eq. 8, y_n = q_n S_n
    final = S[:, :, -1] if L else (h0 if h0 is not None else q.new_zeros(B, H, dk, dv))
    return y, final
