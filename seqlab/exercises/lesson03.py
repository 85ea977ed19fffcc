"""Lesson 03 · LRNN and the Feature-Sequence Twist: the layer by hand, the block by hand, the causal masks.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import torch

from seqlab.exercises._core import (Wrong, at_lengths, call, chosen_names, close, compare, exercise, generator,
                                    random_weights, tensor)


def _lrnn(seed: int):
    from seqlab.layers import LRNN

    torch.manual_seed(seed)
    lrnn = LRNN(3, 6, r_min=0.5, r_max=0.95, mode="sequential").double()
    with torch.no_grad():
        lrnn.h0_re.normal_()
        lrnn.h0_im.normal_()                       # a trained h0 is not zero
    return lrnn


@exercise("03.1")
def _check_03_1(fn):
    from seqlab import ops

    lrnn = _lrnn(31)
    for g, L, where in at_lengths(31, (1, 5, 23)):
        x = torch.randn(2, L, 3, generator=g, dtype=torch.float64)
        with torch.no_grad():
            want = lrnn(x)
            out = call(fn, lrnn, x.clone())
            if isinstance(out, torch.Tensor) and out.is_complex():
                raise Wrong(f"your output is complex{where}: the layer returns the real part Re(h)")
            got = tensor(out, "y", (2, L, 6), complex_ok=False)
            if close(got, want, 1e-10):
                continue
            w = lrnn.input_weight()
            from_zero = ops.linear_scan(lrnn.lam(), x.to(w.dtype) @ w, mode="sequential").real
            if close(got, from_zero, 1e-8):
                raise Wrong(f"your states start from zero{where}: the LRNN starts from its trained h_0 = lrnn.h0()")
            with_h0 = ops.linear_scan(lrnn.lam(), x.to(w.dtype) @ w, lrnn.h0(), mode="sequential")
            if close(got, with_h0.abs(), 1e-8):
                raise Wrong(f"you returned |h|{where}: the output is the real part Re(h)")
        compare(got, want, 1e-10, name="y", against="lrnn(x)", axes="(batch, t, state)", where=where)


@exercise("03.2")
def _check_03_2(fn):
    from seqlab.layers import FSTBlock

    torch.manual_seed(32)
    L, D = 10, 6
    block = FSTBlock(D, L, mode="sequential").double()
    with torch.no_grad():
        block.p1.fill_(0.4)
        block.p2.fill_(-0.7)                       # alpha1 != alpha2 != 1/2: a mix-up shows
    x = torch.randn(2, L, D, generator=generator(32), dtype=torch.float64)
    with torch.no_grad():
        want = block(x)
        out = call(fn, block, x.clone())
        if isinstance(out, torch.Tensor) and tuple(out.shape) == (2, D, L):
            raise Wrong(f"your output has shape {(2, D, L)}: transpose the twisted half back to (B, L, D)")
        got = tensor(out, "x2", (2, L, D), complex_ok=False)
        a1, a2 = block.alpha1, block.alpha2
        x1 = (1 - a1) * x + a1 * block.mlp1(block.lrnn1(block.norm1(x)))
        if close(got, x1, 1e-8):
            raise Wrong("you returned x1: the block goes on with the twisted half, x2 = (1 - a2) x1 + a2 twist(x1)")
        if close(got, (1 - a2) * x + a2 * block.twisted_half(x1), 1e-8):
            raise Wrong("the second residual starts from x: the twisted half is added to x1 (the first half's output)")
        if close(got, (1 - a2) * x1 + a2 * block.mlp2(block.lrnn2(x1.transpose(1, 2))).transpose(1, 2), 1e-8):
            raise Wrong("you skipped norm2: the twisted half normalises each position (over its features) first")
    compare(got, want, 1e-10, name="x2", against="block(x)", axes="(batch, position, feature)")


_PARTS = ("lrnn1.W_in", "mlp1", "norm2", "lrnn2.W_in", "lrnn2.lambda", "mlp2")
_WHY_NOT = {
    "lrnn1.W_in": "lrnn1.W_in maps features to states at one position (d_model -> d_state); it never mixes positions",
    "mlp1": "mlp1 acts on each position's features alone; it never mixes positions",
    "norm2": "norm2 normalises each position over its own features before the twist; it never mixes positions",
    "lrnn2.lambda": "lrnn2's recurrence is diagonal in its channel (= position) index: lam_t only scales channel t, "
                    "so it cannot move information between positions",
}


def _unmask(block, part):
    if part == "lrnn2.W_in":
        block.lrnn2.input_mask = None
    else:
        block.mlp2.fc1.mask = None
        block.mlp2.fc2.mask = None


def _leak(parts_unmasked) -> float:
    """How far the logits at position 0 move when the last token changes, with the named masks removed."""
    from seqlab import models

    torch.manual_seed(33)
    lm = models.build("fst", vocab_size=11, seq_len=12, d_model=8, n_layers=1, mode="sequential").double().eval()
    random_weights(lm)                                # the masks are applied on every call
    for part in parts_unmasked:
        _unmask(lm.blocks[0], part)
    tokens = torch.randint(0, 11, (2, 12), generator=generator(33))
    changed = tokens.clone()
    changed[:, -1] = (tokens[:, -1] + 1) % 11
    with torch.no_grad():
        return float((lm(changed)[:, 0] - lm(tokens)[:, 0]).abs().max())


@exercise("03.3")
def _check_03_3(answer):
    chosen = chosen_names(answer, _PARTS)
    needed = {"lrnn2.W_in", "mlp2"}
    for part in sorted(needed - chosen):
        leak = _leak([part])
        raise Wrong(f"without masking {part}, changing the last token moves the logits at position 0 by {leak:.2g} "
                    f"(measured): {part} maps positions to positions (L -> L) in the twisted half")
    extra = sorted(chosen - needed)
    if extra:
        raise Wrong(f"{extra[0]} needs no mask: {_WHY_NOT[extra[0]]}")
    return (f"measured: with both masks the logits at position 0 do not move when the last token changes "
            f"(max change {_leak([]):.1g}); without them they move by {_leak(sorted(needed)):.2g}. Only the twisted "
            f"half's maps along the position axis (W_in of LRNN 2, both layers of MLP 2) can carry the future "
            f"backwards.")
