"""Helpers the tests share (imported as ``from helpers import check``: a module named ``conftest`` would clash
with ``notebooks/conftest.py`` when pytest collects both folders; ``tests/conftest.py`` puts this folder on the
path of every test folder)."""
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parent          # tests/: the shared data (tiny_profile/, fixtures/)
REPO = TESTS.parent


def check(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str = "") -> None:
    """The one comparison helper: finite, same shape, relative error ``|out-ref|/|ref|`` under ``tol``."""
    from seqlab.ops import relative_error

    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    assert torch.isfinite(torch.view_as_real(out) if out.is_complex() else out).all(), f"{what}: non-finite output"
    err = relative_error(out, ref)
    assert err < tol, f"{what}: relative error {err:.3e} >= {tol:.0e}"


def ctrl_c_at_step(monkeypatch, step: int) -> None:
    """Make ``seqlab.train.fit`` meet a Ctrl-C (``KeyboardInterrupt``) as it starts the step with index ``step``
    (0-based: ``step`` optimizer steps are done). ``monkeypatch.undo()`` ends it."""
    from seqlab.train import loop as train

    real_lr_at = train.lr_at

    def lr_at(s, **kw):
        if s == step:
            raise KeyboardInterrupt
        return real_lr_at(s, **kw)

    monkeypatch.setattr(train, "lr_at", lr_at)
