"""scikit-learn's bundled 8x8 handwritten digits (1797 images, offline) as a sequence classification task.

Two layouts of the same images:

- ``"sequence"``: the pixel-by-pixel sequence (the pixel-MNIST setting of paper 002, at 8x8): the
  64 intensities ``0..16`` in row-major order are the tokens (``vocab_size = 17``, ``seq_len = 64``);
- ``"patches"``: for 2-D grid models (LightNet's MD-TPE / MD-LRPE): the image is cut into
  non-overlapping ``patch x patch`` squares, each pixel quantised to ``levels`` levels
  ``q = floor(v * levels / 17)``, and a patch becomes one token, the mixed-radix number of its
  quantised pixels read row-major, ``sum_i q_i * levels**i`` (``vocab_size = levels**(patch**2)``;
  ``seq_len = (8 / patch)**2``, the grid ``(8 / patch, 8 / patch)`` in ``task.info["grid"]``).

The train/test split is a fixed, seeded, stratified 80/20 split (``seed``, ``test_fraction``).
``validation_fraction > 0`` carves a ``"validation"`` split of that fraction of all the images out of the
training part (stratified, seeded), leaving the test split as it is.
"""
from __future__ import annotations

import numpy as np

from seqlab.tasks._cache import cached_splits
from seqlab.tasks.base import Task

__all__ = ["digits", "image_to_patch_tokens"]

SIDE = 8
MAX_INTENSITY = 16


def image_to_patch_tokens(images: np.ndarray, patch: int = 2, levels: int = 4) -> np.ndarray:
    """``(N, 8, 8)`` intensities 0..16 -> ``(N, (8/patch)**2)`` patch tokens (row-major grid of patches)."""
    images = np.asarray(images)
    N, H, W = images.shape
    q = np.minimum(images.astype(np.int64) * levels // (MAX_INTENSITY + 1), levels - 1)   # 0..levels-1
    g = H // patch
    # (N, gy, py, gx, px) -> (N, gy, gx, py, px) -> (N, g*g, patch*patch), pixels row-major inside a patch
    blocks = q.reshape(N, g, patch, g, patch).transpose(0, 1, 3, 2, 4).reshape(N, g * g, patch * patch)
    radix = levels ** np.arange(patch * patch, dtype=np.int64)                          # (patch*patch,)
    return blocks @ radix


def _split_indices(labels: np.ndarray, test_fraction: float, seed: int,
                   validation_fraction: float = 0.0) -> dict[str, np.ndarray]:
    """``{"train", "test"[, "validation"]}`` -> sorted image indices; the test split does not depend on
    ``validation_fraction``."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(labels))
    train, test = train_test_split(idx, test_size=test_fraction, random_state=seed, stratify=labels)
    out = {"train": train, "test": test}
    if validation_fraction:
        size = round(validation_fraction * len(labels))
        out["train"], out["validation"] = train_test_split(train, test_size=size, random_state=seed,
                                                           stratify=labels[train])
    return {split: np.sort(i) for split, i in out.items()}


def digits(*, layout: str = "sequence", patch: int = 2, levels: int = 4, test_fraction: float = 0.2,
           seed: int = 0, validation_fraction: float = 0.0) -> Task:
    """The 8x8 digits as a 10-class task; ``layout`` ``"sequence"`` (64 intensity tokens) or ``"patches"``."""
    if layout not in ("sequence", "patches"):
        raise ValueError(f"layout: expected 'sequence' or 'patches', got {layout!r}")
    if layout == "patches":
        if not isinstance(patch, int) or patch < 1 or SIDE % patch:
            raise ValueError(f"patch: expected a divisor of {SIDE} (1, 2, 4 or 8), got {patch!r}")
        if not isinstance(levels, int) or not 2 <= levels <= MAX_INTENSITY + 1:
            raise ValueError(f"levels: expected an int in [2, {MAX_INTENSITY + 1}], got {levels!r}")
        if levels ** (patch * patch) > 2**20:
            raise ValueError(f"levels/patch: a vocabulary of levels**(patch**2) = {levels}**{patch * patch} "
                             f"tokens is too large; use a smaller patch or fewer levels")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction: expected a number in (0, 1), got {test_fraction!r}")
    if not 0 <= validation_fraction < 1 - test_fraction:
        raise ValueError(f"validation_fraction: expected a number in [0, {1 - test_fraction:g}) (what the test split "
                         f"leaves), got {validation_fraction!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    params = dict(layout=layout, test_fraction=test_fraction, seed=seed,
                  **({"patch": patch, "levels": levels} if layout == "patches" else {}),
                  **({"validation_fraction": validation_fraction} if validation_fraction else {}))

    def build() -> dict:
        import datasets
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images, labels = bunch.images.astype(np.int64), bunch.target.astype(np.int64)   # (1797, 8, 8), (1797,)
        tokens = images.reshape(len(images), -1) if layout == "sequence" else image_to_patch_tokens(images, patch, levels)
        out = {}
        for split, idx in _split_indices(labels, test_fraction, seed, validation_fraction).items():
            out[split] = datasets.Dataset.from_dict({"input_ids": tokens[idx].tolist(), "labels": labels[idx].tolist(),
                                                     "index": idx.tolist()})
        return out

    splits = cached_splits("digits", params, build)
    if layout == "sequence":
        seq_len, vocab, grid = SIDE * SIDE, MAX_INTENSITY + 1, (SIDE, SIDE)
        itos = [str(v) for v in range(vocab)]
    else:
        g = SIDE // patch
        seq_len, vocab, grid = g * g, levels ** (patch * patch), (g, g)
        itos = [str(v) for v in range(vocab)]
    return Task(name="digits", splits=splits, seq_len=seq_len, vocab_size=vocab, num_classes=10, itos=itos,
                info={**params, "grid": grid, "image_shape": (SIDE, SIDE)})
