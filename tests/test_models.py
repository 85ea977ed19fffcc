"""Every registered model, in every precision a user trains in: float32, bfloat16 weights, CPU autocast."""
import pytest
import torch

from seqlab import models
from seqlab.ops import relative_error


def _variants():
    """(name, num_classes) for every model the registry can build: language model and classifier."""
    out = []
    for name in models.names():
        for num_classes in (None, 3):
            if name == "birn" and num_classes is None:
                continue  # bidirectional: a classifier only (its build refuses a language model)
            out.append((name, num_classes))
    return out


@pytest.mark.parametrize("name,num_classes", _variants())
def test_forward_in_bfloat16_and_under_cpu_autocast(name, num_classes):
    model = models.build(name, vocab_size=11, num_classes=num_classes, seq_len=16)
    x = torch.randint(0, 11, (2, 16))
    with torch.no_grad():
        ref = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = model(x)
        half = model.to(torch.bfloat16)(x)
    assert half.dtype == torch.bfloat16 and half.shape == ref.shape
    for what, out in (("bfloat16 weights", half), ("CPU autocast", auto)):
        assert torch.isfinite(out.float()).all(), f"{name}: {what} gave non-finite logits"
        # bfloat16 keeps 8 bits of mantissa: logits within a few percent of the float32 forward
        err = relative_error(out.float(), ref)
        assert err < 0.1, f"{name} ({what}): relative error {err:.3f} to the float32 forward"
