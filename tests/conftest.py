"""Test set-up shared by every test file.

Triton's interpreter must be switched on before any ``@triton.jit`` runs, so it is set here,
before seqlab is imported (``seqlab.kernels`` would set it too on a machine without CUDA).
"""
import os

os.environ.setdefault("SEQLAB_PROFILE", "quick")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:  # pragma: no cover
    pass

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same seed: failures reproduce."""
    from seqlab.config import seed_everything

    seed_everything(0)
    yield
