"""Small pieces every experiment module uses: profile-sized settings and a best-of-n clock."""
from __future__ import annotations

import time

from seqlab import config


def profile_sizes(table: dict, profile: str | None, overrides: dict, *, strict: bool = True) -> dict:
    """The settings of ``table[profile]`` (``None``: the active profile) with ``overrides`` applied.

    ``strict``: an override must name a known setting, and ``None`` means "keep the default".
    """
    prof = profile or config.profile()
    if prof not in table:
        raise ValueError(f"profile: expected one of {tuple(table)}, got {prof!r}")
    sizes = dict(table[prof])
    if not strict:
        sizes.update(overrides)
        return sizes
    unknown = set(overrides) - set(sizes)
    if unknown:
        raise TypeError(f"unexpected keyword(s) {sorted(unknown)}; sizes are {sorted(sizes)}")
    sizes.update({k: v for k, v in overrides.items() if v is not None})
    return sizes


def min_seconds(fn, repeats: int, *, warmup: bool = False) -> float:
    """The fastest of ``repeats`` calls (the least disturbed run on a shared machine), in seconds."""
    if warmup:
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
