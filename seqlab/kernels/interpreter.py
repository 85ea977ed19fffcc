"""A faster ``tl.associative_scan`` for Triton's CPU interpreter.

The interpreter scans element by element: one call of the combine function per element of the tile, so a
``(BT, BD)`` tile costs ``BT * BD`` calls (~0.3 ms each). :func:`vectorize_scan` replaces that loop by one
call per step along the scanned axis, on whole slices: the same combine function applied in the same
order (sequentially, the first element on the left), so each element gets the same operations as before,
``BD`` times fewer Python calls. Compiled kernels never see this; it changes only the interpreter."""
from __future__ import annotations

import numpy as np

_done = False


def _scan_slices(self, input):
    """``ScanOps.generic_scan`` by slices: ``acc_i = combine(acc_{i-1}, in_i)`` over the scanned axis."""
    datas = [arg.handle.data for arg in input]
    dtypes = [arg.dtype for arg in input]
    outs = [np.empty_like(d) for d in datas]

    def at(i):  # index of slice i along the scanned axis
        return (slice(None),) * self.axis + (i,)

    acc = [d[at(0)] for d in datas]
    for i in range(datas[0].shape[self.axis]):
        if i > 0:
            ret = self.combine_fn.fn(*(self.to_tensor(np.asarray(v), t) for v, t in zip(acc, dtypes)),
                                     *(self.to_tensor(np.asarray(d[at(i)]), t) for d, t in zip(datas, dtypes)))
            ret = ret if isinstance(ret, tuple) else (ret,)
            acc = [r.handle.data.reshape(np.shape(d[at(i)])) for r, d in zip(ret, datas)]
        for o, v in zip(outs, acc):
            o[at(i)] = v
    return [self.to_tensor(o, t) for o, t in zip(outs, dtypes)]


def vectorize_scan() -> None:
    """Install :func:`_scan_slices` in the interpreter once (a no-op where its internals differ)."""
    global _done
    if _done:
        return
    _done = True
    try:
        from triton.runtime.interpreter import ScanOps
    except ImportError:  # pragma: no cover - another Triton layout: keep its own scan
        return
    if hasattr(ScanOps, "generic_scan"):
        ScanOps.generic_scan = _scan_slices
