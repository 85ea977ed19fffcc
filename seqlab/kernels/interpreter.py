"""A faster ``tl.associative_scan`` for Triton's CPU interpreter, installed only where it is exact.

The interpreter scans element by element (``ScanOps.generic_scan``): one Python call of the combine function
per element of the tile, so a ``(BT, BD)`` tile costs ``BT * BD`` calls. :func:`scan_by_slices` makes one call
per step along the scanned axis instead, on whole slices: ``acc_i = combine(acc_{i-1}, in_i)``, the same
combine function on the same operands in the same order (the earlier element on the left), each result kept
in its input's dtype as Triton's own loop keeps it, so every element gets the same operations, ``BD`` times
fewer calls. ``tests/ops/test_scan_triton.py`` runs a kernel both ways and compares bit for bit.

:func:`vectorize_scan` installs it only over the ``generic_scan`` it was checked against: when the source of
Triton's ``ScanOps.generic_scan`` or ``apply_impl`` (which calls it) differs from the one recorded here, it
leaves the interpreter alone. Compiled kernels never see any of this.

:func:`interpret_preloaded_library` mends a process that imported Triton before the interpreter was switched on
(``torch.utils.flop_counter`` imports it, for one): Triton's own library functions are then compiled-kernel
``JITFunction``s, which an interpreted kernel cannot call."""
from __future__ import annotations

import hashlib
import inspect
import sys

import numpy as np

# sha256 of the source of ScanOps.generic_scan and ScanOps.apply_impl in the Triton this was checked against
# (3.7.1): another Triton keeps its own scan until this is checked against it again
CHECKED_SOURCES = {"generic_scan": "625569e90b9eda9a", "apply_impl": "0f6414663ff60046"}

triton_generic_scan = None  # Triton's own ScanOps.generic_scan, once replaced


def _as_slice(result, like):
    """A combine function's result (a tensor, or a constant) as an array shaped like the slice ``like`` and in
    its dtype, as Triton's loop stores each result into its output array."""
    value = np.asarray(result.handle.data if hasattr(result, "handle") else result, dtype=like.dtype)
    return np.broadcast_to(value.reshape(()) if value.size == 1 else value.reshape(np.shape(like)), np.shape(like))


def scan_by_slices(self, input):
    """``ScanOps.generic_scan`` by slices: ``acc_i = combine(acc_{i-1}, in_i)`` along ``self.axis``."""
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
            acc = [_as_slice(r, d[at(i)]) for r, d in zip(ret, datas)]
        for o, v in zip(outs, acc):
            o[at(i)] = v
    return [self.to_tensor(o, t) for o, t in zip(outs, dtypes)]


def _fingerprint(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def matches_checked_triton(scan_ops) -> bool:
    """Whether ``scan_ops`` (Triton's ``ScanOps`` class) has the ``generic_scan`` and ``apply_impl`` that
    :func:`scan_by_slices` was checked against."""
    try:
        return all(_fingerprint(getattr(scan_ops, name)) == digest for name, digest in CHECKED_SOURCES.items())
    except (AttributeError, OSError, TypeError):  # missing, or no source to read
        return False


def _install(scan_ops) -> bool:
    """Replace ``scan_ops.generic_scan`` by :func:`scan_by_slices` if its internals are the checked ones."""
    global triton_generic_scan
    if not matches_checked_triton(scan_ops):
        return False
    triton_generic_scan = scan_ops.generic_scan
    scan_ops.generic_scan = scan_by_slices
    return True


_installed = None  # whether Triton's interpreter scans by slices in this process (None: not tried yet)


def vectorize_scan(scan_ops=None) -> bool:
    """Install :func:`scan_by_slices` as ``scan_ops.generic_scan`` if its internals are the checked ones, and
    say whether it is installed. Without ``scan_ops``: Triton's interpreter ``ScanOps``, tried once per process
    (so a test that puts Triton's own scan back keeps it)."""
    global _installed
    if scan_ops is not None:
        return _install(scan_ops)
    if _installed is None:
        try:
            from triton.runtime.interpreter import ScanOps
        except ImportError:  # pragma: no cover - another Triton layout: keep its own scan
            _installed = False
        else:
            _installed = _install(ScanOps)
    return _installed


def _library_modules() -> list:
    """The modules of ``triton.language`` already imported (its library functions live there)."""
    return [module for name, module in list(sys.modules.items())
            if module is not None and (name == "triton.language" or name.startswith("triton.language."))]


def interpret_preloaded_library() -> int:
    """Make Triton's library functions (``tl.sum``, ``tl.max``, ``tl.cdiv``, ...) callable from interpreted kernels
    when ``triton.language`` was imported before ``TRITON_INTERPRET=1`` was set; returns how many it replaced.

    ``@triton.jit`` reads ``TRITON_INTERPRET`` when it decorates: a function decorated before the switch is a
    ``JITFunction`` for the compiler, and an interpreted kernel that calls it stops with ``Cannot call @triton.jit'd
    outside of the scope of a kernel``. Each such function in the loaded ``triton.language`` modules, and in the
    methods they add to ``tl.tensor`` (``x.sum()`` forwards to ``sum``), is replaced by the ``InterpretedFunction``
    that ``@triton.jit`` makes under the interpreter, from the same Python function. A process that imported Triton
    after the switch has none to replace."""
    modules = _library_modules()
    if not modules:
        return 0
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    made: dict[int, InterpretedFunction] = {}

    def interpreted(compiled):
        return made.setdefault(id(compiled), InterpretedFunction(compiled.fn))

    for module in modules:
        for attr, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                setattr(module, attr, interpreted(value))
    tensor = getattr(sys.modules.get("triton.language.core"), "tensor", None)
    for method in vars(tensor).values() if tensor is not None else ():
        for cell in getattr(method, "__closure__", None) or ():   # _tensor_member_fn's wrapper holds its function
            if isinstance(cell.cell_contents, JITFunction):
                cell.cell_contents = interpreted(cell.cell_contents)
    return len(made)
