"""The chunkwise form: the UT transform for all chunks at once, then one short pass over chunk states.

Cut the sequence into chunks of ``C`` tokens. Inside a chunk (local steps ``r = 1..C``, entering state ``S``,
``G_r = sum_{i<=r} g_i`` the chunk-local cumulative log decay) unroll the read-before-write recurrence: the
corrections ``u_r = beta_r (v_r - alpha_r k_r S_{r-1})`` obey (DeltaNet's WY representation, gated as in Gated
DeltaNet's chunkwise algorithm)::

    u_r + beta_r sum_{i<r} exp(G_r - G_i) (k_r . k_i) u_i = beta_r (v_r - exp(G_r) k_r S)

a unit lower triangular system. With ``Gamma_ri = exp(G_r - G_i)`` for ``i <= r`` (0 above the diagonal)::

    T = (I + tril(diag(beta) (K K^T . Gamma), -1))^-1 diag(beta)          the UT transform
    W = T (exp(G) . K),     U = T V                                       for every chunk at once
    u = U - W S                                                           the only step that needs S
    y = (exp(G) . Q) S + (Q K^T . Gamma) u                                inter- and intra-chunk outputs
    S_next = exp(G_C) S + (exp(G_C - G) . K)^T u

``T`` is never formed: ``[W | U]`` is one triangular solve with right-hand side ``diag(beta) [exp(G) . K | V]``,
batched over batch, heads and chunks. Only ``u = U - W S`` and ``S_next`` run chunk after chunk; the outputs are
again computed for all chunks at once. The decays are relative, ``exp(G_r - G_i)`` with the upper triangle masked
to ``-inf`` *before* ``exp`` (never ``exp(G_r) exp(-G_i)``, which overflows once the chunk decays past ~1e-38), the
exponent summed over the gates between ``i`` and ``r`` rather than subtracted, and the remaining factors
``exp(G_r)``, ``exp(G_C - G_r)`` are at most 1.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _to_chunks(x: torch.Tensor, C: int) -> torch.Tensor:
    """``(B, H, L, ...)`` -> ``(B, H, nC, C, ...)``, zero-padded at the end (padding: beta = 0 and k = v = 0 leave
    the state as it is, g = 0 decays nothing)."""
    L = x.shape[2]
    pad = -L % C
    if pad:
        widths = [0, 0] * (x.dim() - 3) + [0, pad]
        x = F.pad(x, widths)
    return x.reshape(*x.shape[:2], (L + pad) // C, C, *x.shape[3:])


def _relative_decays(gc) -> torch.Tensor:
    """``Gamma_ri = exp(G_r - G_i)`` for ``i <= r``, 0 above the diagonal: ``(..., C)`` gates -> ``(..., C, C)``.

    ``G_r - G_i`` is summed as ``sum_{i<j<=r} g_j``, the gates between the two steps (Mamba-2's "segment sum"),
    not subtracted: after a near-reset (``g = -1e4``) the two cumulative sums are large and their difference
    would keep only a few digits. Above the diagonal the sum is masked to ``-inf`` before ``exp``."""
    C = gc.shape[-1]
    later = torch.ones(C, C, dtype=torch.bool, device=gc.device).triu(1)                  # [i, j]: j > i
    between = gc[..., None, :].expand(*gc.shape, C).masked_fill(~later, 0.0).cumsum(-1)  # [i, r]: sum_{i<j<=r} g_j
    causal = torch.ones(C, C, dtype=torch.bool, device=gc.device).tril()                  # [r, i]: i <= r
    return torch.exp(between.transpose(-1, -2).masked_fill(~causal, float("-inf")))


def _chunk_gates(g, like: torch.Tensor, C: int) -> torch.Tensor:
    """The gates ``g`` cut into chunks, ``(B, H, nC, C)``; zeros when there is no gate (DeltaNet)."""
    return like.new_zeros(*like.shape[:4]) if g is None else _to_chunks(g, C)


def _ut_system(kc, bc, Gamma):
    """``I + tril(diag(beta) (K K^T . Gamma), -1)`` for every chunk: ``(B, H, nC, C, C)``."""
    C = kc.shape[-2]
    strictly_lower = torch.ones(C, C, dtype=torch.bool, device=kc.device).tril(-1)
    A = bc[..., :, None] * (kc @ kc.transpose(-1, -2)) * Gamma
    eye = torch.eye(C, dtype=kc.dtype, device=kc.device)
    return eye + A.masked_fill(~strictly_lower, 0.0)


def _ut_transform(kc, vc, bc, G, Gamma):
    """``W = T (exp(G) . K)`` and ``U = T V`` for all chunks, by one unit lower triangular solve."""
    dk = kc.shape[-1]
    system = _ut_system(kc, bc, Gamma)
    rhs = bc[..., None] * torch.cat([kc * torch.exp(G)[..., None], vc], dim=-1)    # diag(beta) [exp(G).K | V]
    WU = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    return WU[..., :dk], WU[..., dk:]


def _chunked(q, k, v, beta, g, h0, chunk_size: int):
    """The chunkwise form: ``(y (B, H, L, dv), S_L (B, H, dk, dv))``."""
    B, H, L, dk = q.shape
    dv = v.shape[-1]
    S = h0 if h0 is not None else q.new_zeros(B, H, dk, dv)
    if L == 0:
        return q.new_zeros(B, H, 0, dv), S
    C = max(1, min(chunk_size, L))
    qc, kc, vc, bc = (_to_chunks(t, C) for t in (q, k, v, beta))                 # (B, H, nC, C, d), (B, H, nC, C)
    gc = _chunk_gates(g, qc, C)                                                  # (B, H, nC, C)
    G = gc.cumsum(-1)                                                            # G_r, from the chunk's start
    Gamma = _relative_decays(gc)                                                 # (B, H, nC, C, C)
    W, U = _ut_transform(kc, vc, bc, G, Gamma)                                   # (B, H, nC, C, dk), (.., dv)

    # the sequential part: u = U - W S and the state update, chunk after chunk
    through = torch.exp(G[..., -1])                                              # exp(G_C)         (B, H, nC)
    k_to_end = kc * Gamma[..., -1, :, None]                                      # exp(G_C - G) . K
    entering, corrections = [], []
    for c in range(qc.shape[2]):
        entering.append(S)
        u = U[:, :, c] - W[:, :, c] @ S                                          # (B, H, C, dv)
        corrections.append(u)
        S = through[:, :, c, None, None] * S + k_to_end[:, :, c].transpose(-1, -2) @ u
    S_in = torch.stack(entering, dim=2)                                          # (B, H, nC, dk, dv)
    u = torch.stack(corrections, dim=2)                                          # (B, H, nC, C, dv)

    # the outputs of every chunk at once
    inter = (qc * torch.exp(G)[..., None]) @ S_in                                # exp(G) . Q S_in
    intra = ((qc @ kc.transpose(-1, -2)) * Gamma) @ u                            # (Q K^T . Gamma) u
    y = (inter + intra).reshape(B, H, -1, dv)[:, :, :L]
    return y, S


def ut_matrix(k, beta, g, chunk_size: int) -> torch.Tensor:
    """``I + tril(diag(beta) (K K^T . Gamma), -1)`` of every chunk, ``(B, H, nC, C, C)`` (for pictures and the
    conditioning checks; the chunked form solves with it, never inverts it)."""
    C = max(1, min(chunk_size, k.shape[2]))
    kc, bc = _to_chunks(k, C), _to_chunks(beta, C)
    return _ut_system(kc, bc, _relative_decays(_chunk_gates(g, kc, C)))
