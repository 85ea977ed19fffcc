"""The one timing rule of the benchmarks: one untimed call (compilation, allocation, caches), then the
minimum over ``repeats`` calls, in milliseconds (the machine is shared: the minimum is the least disturbed)."""
from __future__ import annotations

import math
import time


def best_ms(fn, repeats: int) -> float:
    fn()                                                   # warm-up
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3
