"""The lessons' kernels under nbval take the Triton path ``notebooks/conftest.py`` chooses: on CI's first pass
(``SEQLAB_LESSONS_TRITON=interpreter``) a kernel starts as ``python3 workbench.py lab`` starts one on Linux, and
seqlab runs its Triton modes in the CPU interpreter; on the second (``off``) Triton is unavailable.

A small notebook stands in for a lesson: it imports Triton before seqlab, as lesson 06 does through
``torch.utils.flop_counter``, and runs a ``mode="triton"`` op."""
import importlib.util
import os

import nbformat
import pytest
from nbclient import NotebookClient

from helpers import REPO

pytest.importorskip("triton")

CELLS = [
    "from torch.utils.flop_counter import FlopCounterMode\nimport torch\nfrom seqlab import kernels\n"
    "from seqlab.ops.gateloop import gateloop\nprint(kernels.status())",
    "q, k, v = (torch.randn(1, 1, 37, d) for d in (8, 8, 6))\na = torch.rand(1, 1, 37, 8) * 0.5 + 0.5\n"
    "try:\n    gateloop(q, k, v, a, mode='triton')\n    print('triton ran')\n"
    "except kernels.TritonUnavailable:\n    print('triton unavailable')",
]


def _lessons_conftest():
    spec = importlib.util.spec_from_file_location("lessons_conftest", REPO / "notebooks" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_as_a_lesson(path: str) -> list[str]:
    """The two cells' printed lines, in a kernel started with the switches of ``path``."""
    env = dict(os.environ)
    for name, value in _lessons_conftest().kernel_switches(path).items():
        env.pop(name, None) if value is None else env.__setitem__(name, value)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO)}})
    client.km = client.create_kernel_manager()
    client.start_new_kernel(env=env)
    try:
        client.start_new_kernel_client()
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
    finally:
        client._cleanup_kernel()
    return ["".join(o.get("text", "")).strip() for cell in nb.cells for o in cell.outputs]


@pytest.mark.slow       # two Jupyter kernels
@pytest.mark.parametrize("path, status, ran", [("interpreter", "CPU interpreter", "triton ran"),
                                              ("off", "switched off", "triton unavailable")])
def test_a_lesson_kernel_takes_the_chosen_triton_path(path, status, ran):
    said = _run_as_a_lesson(path)
    assert status in said[0] and said[1] == ran, said
