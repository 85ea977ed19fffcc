"""The LightNet experiments of paper 003, as functions (lesson 04 and ``benchmarks/decay.py`` call them).

- ``decay-speed`` (:func:`scan_speed`): Fig. 2 on CPU, non-causal 1 scan (additive, eq. 8) against
  2 scans (multiplicative, forward + backward chunked scans), forward and backward.
- ``lightnet-digits`` (:func:`digits_classifier`): the non-causal LightNet classifier on the 8x8
  digits as a 2-D grid (MD-TPE, MD-LRPE, additive decay in one scan).
- ``lightnet-ablation`` (:func:`ablation`): the same without TPE / LRPE / decay (Tables 1, 5-7).
- ``lightnet-copying`` (:func:`causal_lm`): the causal LightNet LM (1-D TPE/LRPE, eq. 7) on copying.

``profile=None`` means ``seqlab.config.profile()``; ``quick`` sizes train on a busy 2-core CPU in
tens of seconds on one intra-op thread (``threads=1``), ``full`` sizes are GPU-sized. Any size can
be overridden by keyword. Every experiment returns a plain dict.
"""
from __future__ import annotations

import time

import torch

from seqlab import config
from seqlab.experiments import experiment

__all__ = ["scan_speed", "digits_classifier", "ablation", "causal_lm", "DIGITS_SIZES", "COPYING_SIZES"]


# ----------------------------------------------------------------------------------------------
# Fig. 2: one scan against two scans
# ----------------------------------------------------------------------------------------------

def _min_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _backward_time(fn, inputs, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        for t in inputs:
            t.grad = None
        out = fn()
        weight = torch.ones_like(out)
        t0 = time.perf_counter()
        out.backward(weight)
        best = min(best, time.perf_counter() - t0)
    return best


@experiment("decay-speed")
def scan_speed(*, lengths=(512, 1024, 2048, 4096, 8192), heads: int = 4, dim: int = 64, repeats: int = 5,
               threads: int | None = 1, loop_max: int = 0, seed: int = 0, progress: bool = False) -> list[dict]:
    """Times (ms, min over ``repeats``) of non-causal decay attention, ``B=1, H=heads, dk=dv=dim``.

    ``one``: additive decay, eq. 8 (``decay_attention(q, k, v, causal=False)``); ``two``: multiplicative
    decay with one decay per head, forward + backward chunked scans; ``loop``: the eq. 7 recurrence run
    to the end (the sequential reference, for ``L <= loop_max``); ``floor``: one elementwise pass
    reading q, k, v and writing o (``addcmul``). Returns one dict per length.
    """
    from tqdm.auto import tqdm

    from seqlab.ops.decay import decay_attention

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(seed)
    rows = []
    try:
        for L in tqdm(list(lengths), desc="1 scan vs 2 scans", disable=not progress):
            q, k, v = (torch.randn(1, heads, L, dim, generator=gen) for _ in range(3))
            ld = torch.rand(1, heads, L, 1, generator=gen) * 0.1

            def one(q=q, k=k, v=v):
                return decay_attention(q, k, v, decay="additive", causal=False)

            def two(q=q, k=k, v=v):
                return decay_attention(q, k, v, decay="multiplicative", log_decay=ld, causal=False)

            with torch.no_grad():
                one(), two()                                                        # warm-up
                row = {"L": L, "one_fwd_ms": 1e3 * _min_time(one, repeats), "two_fwd_ms": 1e3 * _min_time(two, repeats),
                       "floor_ms": 1e3 * _min_time(lambda: torch.addcmul(q, k, v), repeats)}
                row["loop_fwd_ms"] = (1e3 * _min_time(lambda: decay_attention(q, k, v, causal=False, mode="recurrent"), 1)
                                      if L <= loop_max else None)
            leaves = [t.requires_grad_(True) for t in (q, k, v)]
            row["one_bwd_ms"] = 1e3 * _backward_time(one, leaves, repeats)
            row["two_bwd_ms"] = 1e3 * _backward_time(two, leaves, repeats)
            row["ratio_fwd"] = row["two_fwd_ms"] / row["one_fwd_ms"]
            row["ratio_bwd"] = row["two_bwd_ms"] / row["one_bwd_ms"]
            rows.append(row)
    finally:
        torch.set_num_threads(before)
    return rows
