"""On a CUDA machine every lesson runs to its end in the quick profile, its tensors on the GPU and its
Triton cells running the compiled kernels (``-m cuda``; skipped where there is no GPU). The outputs are
not compared: the committed ones come from a CPU without Triton (``notebooks/conftest.py``)."""

import pytest
import torch
from helpers import REPO

LESSONS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_there_are_lessons():
    assert len(LESSONS) >= 6


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_to_its_end_on_the_gpu(path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("SEQLAB_PROFILE", "quick")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)     # compiled kernels, not the interpreter
    monkeypatch.delenv("SEQLAB_NO_TRITON", raising=False)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
