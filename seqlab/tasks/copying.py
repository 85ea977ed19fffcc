"""The copying task of Jelassi et al. 2024 ("Repeat after me"), as set up in paper 001 §3 and App. D.

A random string ``x`` of letters is framed by three special tokens and the model must repeat it::

    <bos> x_1 ... x_n <sep> x_1 ... x_n <eos>

The model reads the sequence without its last token (``2n + 2`` inputs: string sizes 16..256 give
the paper's context windows 34..514) and predicts the next token at every position. Only the copy
and the closing ``<eos>`` are scored: the labels are ``IGNORE`` on ``<bos> x <sep>``'s predictions
(the string itself is random, nothing to learn there) and on padding. Strings shorter than
``max_len`` are padded on the right with ``<pad>`` (never scored; a causal model never sees them
from earlier positions).

Two accuracies:

- **parallel** (teacher-forced): every copied token predicted from the true prefix, all at once
  — the task's ``accuracy`` (per token) and ``sequence_accuracy`` (whole copy right);
- **autoregressive**: greedy decoding of the copy from ``<bos> x <sep>`` alone, each predicted
  token fed back in; a string counts when the ``n`` letters and ``<eos>`` all match
  (:func:`copying_autoregressive_accuracy`, reported by ``seqlab.train.evaluate`` as
  ``"autoregressive_accuracy"``).

Example (the quick profile's setting): a two-layer Transformer learns to copy strings of length 8::

    task = seqlab.tasks.copying()                      # strings of length 8, 26 letters
    model = seqlab.models.build("transformer", vocab_size=task.vocab_size,
                                d_model=64, n_layers=2, n_heads=4)
    history = seqlab.train.fit(model, task, steps=150, batch_size=64, lr=3e-3, seed=0, threads=1)
    history.final["accuracy"]                          # the parallel test accuracy per copied token
"""
from __future__ import annotations

import string

import numpy as np
import torch

from seqlab.config import model_device
from seqlab.tasks._cache import cached_splits
from seqlab.tasks.base import IGNORE, Task, split_sizes, validation_param

__all__ = ["copying", "CopyingTask", "copying_autoregressive_accuracy", "PAD", "BOS", "SEP", "EOS"]

PAD, BOS, SEP, EOS = 0, 1, 2, 3
SPECIALS = ["<pad>", "<bos>", "<sep>", "<eos>"]


class CopyingTask(Task):
    """A :class:`Task` whose evaluation adds the autoregressive (greedy decoding) accuracy."""

    def extra_metrics(self, model, split: str) -> dict:
        n = self.info.get("autoregressive_n", 256)
        if not n:
            return {}
        return {"autoregressive_accuracy": copying_autoregressive_accuracy(model, self, split, n=n)}

    def decode(self, ids) -> str:
        """Token ids -> a readable string (``<pad>`` dropped)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return " ".join(self.itos[i] for i in ids if i != PAD and i != IGNORE)


def _make_split(rng: np.random.Generator, size: int, min_len: int, max_len: int, alphabet: int) -> dict:
    """``size`` examples: ``input_ids`` and ``labels`` of length ``2 * max_len + 2``."""
    L = 2 * max_len + 2
    lengths = rng.integers(min_len, max_len + 1, size=size)
    letters = rng.integers(0, alphabet, size=(size, max_len)) + len(SPECIALS)
    full = np.full((size, L + 1), PAD, dtype=np.int64)            # the whole framed sequence
    labels = np.full((size, L), IGNORE, dtype=np.int64)
    for i, n in enumerate(lengths):
        x = letters[i, :n]
        full[i, : 2 * n + 3] = np.concatenate([[BOS], x, [SEP], x, [EOS]])
        # inputs are full[:-1], targets full[1:]: score the predictions of the copy and of <eos>,
        # i.e. the targets at positions n+1 .. 2n+1 (the input there is <sep>, x_1, ..., x_n)
        labels[i, n + 1: 2 * n + 2] = full[i, n + 2: 2 * n + 3]
    return {"input_ids": full[:, :-1].tolist(), "labels": labels.tolist(), "length": lengths.tolist()}


def copying(*, min_len: int = 8, max_len: int = 8, alphabet: int = 26, train_size: int = 20000,
            test_size: int = 1000, seed: int = 0, autoregressive_n: int = 256,
            validation_size: int = 0) -> CopyingTask:
    """The copying task: strings of ``min_len..max_len`` letters drawn from the first ``alphabet``
    lower-case letters; ``seq_len = 2 * max_len + 2``; ``vocab_size = 4 + alphabet``.

    ``train_size`` / ``test_size`` examples (disjoint streams of one generator seeded by ``seed``;
    a repeated string has probability ``~(size / alphabet**n)``). ``validation_size > 0`` adds a
    ``"validation"`` split drawn after the test split from the same stream, so the train and test
    splits are the same with or without it. ``autoregressive_n``: how many
    test strings ``evaluate`` decodes greedily for ``"autoregressive_accuracy"`` (0: skip).
    The paper's sizes (full profile): ``min_len = max_len`` in 16..256, ``alphabet=26``.
    """
    for name, v, lo in (("min_len", min_len, 1), ("max_len", max_len, 1), ("alphabet", alphabet, 2),
                        ("train_size", train_size, 1), ("test_size", test_size, 1), ("seed", seed, 0),
                        ("autoregressive_n", autoregressive_n, 0), ("validation_size", validation_size, 0)):
        if not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
    if min_len > max_len:
        raise ValueError(f"min_len: expected <= max_len={max_len}, got {min_len}")
    if alphabet > 26:
        raise ValueError(f"alphabet: expected at most 26 letters, got {alphabet}")
    params = dict(min_len=min_len, max_len=max_len, alphabet=alphabet, train_size=train_size,
                  test_size=test_size, seed=seed, **validation_param(validation_size))

    def build() -> dict:
        import datasets

        rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))   # 1: the copying task's stream
        out = {}
        for split, size in split_sizes(train_size, test_size, validation_size):
            out[split] = datasets.Dataset.from_dict(_make_split(rng, size, min_len, max_len, alphabet))
        return out

    splits = cached_splits("copying", params, build)
    itos = SPECIALS + list(string.ascii_lowercase[:alphabet])
    return CopyingTask(name="copying", splits=splits, seq_len=2 * max_len + 2, vocab_size=len(itos),
                       num_classes=None, itos=itos,
                       info={**params, "bos": BOS, "sep": SEP, "eos": EOS, "pad": PAD,
                             "layout": f"<bos> x <sep> x (x: {min_len}..{max_len} letters), the last <eos> the final "
                                       f"label, not an input; the copy and <eos> scored: input length "
                                       f"{2 * max_len + 2} (<pad> after shorter strings)",
                             "autoregressive_n": autoregressive_n})


@torch.no_grad()
def copying_autoregressive_accuracy(model, task: Task, split: str = "test", n: int = 256,
                                    batch_size: int = 256) -> float:
    """Fraction of the first ``n`` strings of ``split`` that greedy decoding copies exactly.

    The model sees ``<bos> x <sep>``, predicts one token, appends it, and so on ``len(x) + 1``
    times; a string counts when all ``len(x)`` letters and the final ``<eos>`` are right.
    """
    device = model_device(model)
    was_training = model.training
    model.eval()
    try:
        ds = task.splits[split]
        n = min(n, len(ds))
        data = task.tensors(split)
        lengths = torch.as_tensor(ds["length"][:n])
        fixed = getattr(model, "seq_len", None) is not None       # fixed-length models get the full buffer
        correct = 0
        for start in range(0, n, batch_size):
            idx = torch.arange(start, min(n, start + batch_size))
            target = data["input_ids"][idx].to(device)            # (b, L): <bos> x <sep> x (then pads)
            lens = lengths[idx].to(device)                         # (b,)
            rows = torch.arange(len(idx), device=device)
            buf = torch.full_like(target, PAD)
            prefix = torch.arange(target.shape[1], device=device) <= (lens + 1).unsqueeze(1)  # <bos> x <sep>
            buf[prefix] = target[prefix]
            ok = torch.ones(len(idx), dtype=torch.bool, device=device)
            for k in range(int(lens.max()) + 1):
                pos = lens + 1 + k                                 # (b,): last known token of each row
                active = k <= lens
                upto = buf.shape[1] if fixed else int(pos[active].max()) + 1
                pred = model(buf[:, :upto])[rows, pos.clamp(max=upto - 1)].argmax(-1)  # (b,)
                want = torch.where(k < lens, target[rows, (pos + 1).clamp(max=target.shape[1] - 1)],
                                   torch.full_like(pred, EOS))
                ok &= ~active | (pred == want)
                write = active & (k < lens) & (pos + 1 < buf.shape[1])
                buf[rows[write], pos[write] + 1] = pred[write]
            correct += int(ok.sum())
        return correct / max(1, n)
    finally:
        model.train(was_training)
