"""How nbval runs the lessons: on the path a student's kernel takes, chosen by ``SEQLAB_LESSONS_TRITON``.

- ``interpreter`` (the default, and CI's first pass): the kernel starts as ``python3 workbench.py lab`` starts it on
  Linux without a GPU: neither ``SEQLAB_NO_TRITON`` nor ``TRITON_INTERPRET`` in its environment, so seqlab switches
  Triton's CPU interpreter on when it is imported and the lessons' ``mode="triton"`` cells run their kernels.
- ``off`` (CI's second pass): ``SEQLAB_NO_TRITON=1``, Triton unavailable, as on macOS or Windows.

Both paths compare the same committed outputs; a cell whose text depends on the path (what it says about the
machine's Triton) is tagged ``nbval-ignore-output`` and asserts its checks in code. The committed outputs come from
``python3 workbench.py execute``. The switches are set while nbval starts a lesson's kernel (the kernel inherits the
environment when it starts), and only then: the unit tests sharing this worker keep theirs.

Plotly figures are not compared as JSON: their data come from training or from floating-point reductions,
whose last digits differ from machine to machine (another vector path, another BLAS). That figures are
drawn is checked by the browser test and the book; what a figure shows is asserted in code beside it."""
import os

import pytest

PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"
PATHS = ("interpreter", "off")


def lesson_path() -> str:
    """The Triton path the lessons' kernels take here: ``SEQLAB_LESSONS_TRITON``, ``interpreter`` when unset."""
    path = os.environ.get("SEQLAB_LESSONS_TRITON", "") or "interpreter"
    if path not in PATHS:
        raise ValueError(f"SEQLAB_LESSONS_TRITON must be one of {PATHS}; got {path!r}")
    return path


def kernel_switches(path: str) -> dict:
    """The environment variables a lesson's kernel starts with on ``path`` (None: not set)."""
    if path == "off":
        return {"SEQLAB_NO_TRITON": "1"}
    return {"SEQLAB_NO_TRITON": None, "TRITON_INTERPRET": None}


def pytest_collectstart(collector):
    """nbval's notebook collector: add plotly's mimetype to the output keys it does not compare."""
    if hasattr(collector, "skip_compare") and PLOTLY_MIMETYPE not in collector.skip_compare:
        collector.skip_compare = (*collector.skip_compare, PLOTLY_MIMETYPE)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    """Set the path's switches while nbval starts a lesson's kernel, then put the worker's own back."""
    switches = kernel_switches(lesson_path())
    before = {name: os.environ.get(name) for name in switches}
    for name, value in switches.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
