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


def check(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str = "") -> None:
    """The one comparison helper: finite, same shape, relative error ``|out-ref|/|ref|`` under ``tol``."""
    from seqlab.ops import relative_error

    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    assert torch.isfinite(torch.view_as_real(out) if out.is_complex() else out).all(), f"{what}: non-finite output"
    err = relative_error(out, ref)
    assert err < tol, f"{what}: relative error {err:.3e} >= {tol:.0e}"
