"""How nbval runs the lessons: every lesson's kernel starts with Triton made unavailable
(``SEQLAB_NO_TRITON=1``), as on macOS or Windows, so a lesson that ran to its end here runs to its end
on every platform. The Triton kernels have their own tests (``tests/``); the committed outputs come from
the same switch (``python3 workbench.py execute``).

Plotly figures are not compared as JSON: their data come from training or from floating-point reductions,
whose last digits differ from machine to machine (another vector path, another BLAS). That figures are
drawn is checked by the browser test and the book; what a figure shows is asserted in code beside it."""
import os

import pytest

PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"


def pytest_collectstart(collector):
    """nbval's notebook collector: add plotly's mimetype to the output keys it does not compare."""
    if hasattr(collector, "skip_compare") and PLOTLY_MIMETYPE not in collector.skip_compare:
        collector.skip_compare = (*collector.skip_compare, PLOTLY_MIMETYPE)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    """Set the switch while nbval starts a lesson's kernel (the kernel inherits the environment when it
    starts), and only then: the unit tests sharing this worker keep Triton."""
    before = os.environ.get("SEQLAB_NO_TRITON")
    os.environ["SEQLAB_NO_TRITON"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SEQLAB_NO_TRITON", None)
        else:
            os.environ["SEQLAB_NO_TRITON"] = before
