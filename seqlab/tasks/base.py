"""The task contract every data set follows.

A task holds HuggingFace ``Dataset`` splits with two columns:

- ``input_ids``: ``int64[L]`` tokens (the model's input);
- ``labels``: for a language-model task ``int64[L]``, the next token to predict at each position
  (``IGNORE = -100`` where nothing is scored); for a classification task one ``int64`` class.

``num_classes is None`` marks a language-model task. ``loss`` and ``metrics`` work on model logits
and a batch from ``batches``; ``evaluate`` in ``seqlab.train`` aggregates them exactly.

A :class:`StreamTask` has no train split: ``fit`` asks it for the batch of each step
(``train_batch(step, batch_size)``), drawn fresh from a seeded stream; its validation and test splits are fixed.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

IGNORE = -100


def split_sizes(train_size: int, test_size: int, validation_size: int = 0) -> list[tuple[str, int]]:
    """The order a generated task draws its splits from one stream: train, test, then validation (when asked
    for), so that adding a validation split leaves the train and test splits as they were."""
    return [("train", train_size), ("test", test_size)] + ([("validation", validation_size)] if validation_size else [])


def renamed_arguments(**renames: str):
    """Decorator: the task refuses the names its arguments had before every task spelled its splits one way
    (counts ``train_size, validation_size, test_size``; fractions ``validation_fraction, test_fraction``), with
    a ``TypeError`` naming the new one."""
    def wrap(fn):
        @functools.wraps(fn)
        def task(*args, **kwargs):
            for old in sorted(renames.keys() & kwargs.keys()):
                raise TypeError(f"{fn.__name__}() got {old}: the argument is now {renames[old]}")
            return fn(*args, **kwargs)
        return task
    return wrap


def validation_param(validation_size: int) -> dict:
    """The cache-key entry of a validation split: none without one (the caches made before it stay valid)."""
    return {"validation_size": validation_size} if validation_size else {}


@dataclass
class Task:
    name: str
    splits: dict                     # split name -> datasets.Dataset
    seq_len: int
    vocab_size: int
    num_classes: int | None = None   # None: language-model task
    itos: list[str] | None = None    # token id -> string, for display
    info: dict = field(default_factory=dict)
    _tensors: dict = field(default_factory=dict, repr=False)

    @property
    def is_language_model(self) -> bool:
        return self.num_classes is None

    def tensors(self, split: str) -> dict[str, torch.Tensor]:
        """The whole split as tensors (cached): ``{"input_ids": (N, L), "labels": (N, L) or (N,)}``."""
        if split not in self.splits:
            raise ValueError(f"split: expected one of {sorted(self.splits)}, got {split!r}")
        if split not in self._tensors:
            ds = self.splits[split].with_format("torch")
            self._tensors[split] = {"input_ids": ds["input_ids"][:].long(), "labels": ds["labels"][:].long()}
        return self._tensors[split]

    def size(self, split: str) -> int:
        return self.tensors(split)["input_ids"].shape[0]

    def batch_at(self, split: str, index: torch.Tensor) -> dict[str, torch.Tensor]:
        t = self.tensors(split)
        return {"input_ids": t["input_ids"][index], "labels": t["labels"][index]}

    def batches(self, split: str, batch_size: int, *, shuffle: bool = False,
                generator: torch.Generator | None = None) -> Iterator[dict[str, torch.Tensor]]:
        n = self.size(split)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        for start in range(0, n, batch_size):
            yield self.batch_at(split, order[start:start + batch_size])

    def loss(self, logits: torch.Tensor, batch: dict) -> torch.Tensor:
        labels = batch["labels"].to(logits.device)
        if self.is_language_model:
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE)
        return F.cross_entropy(logits.float(), labels)

    def scored(self, batch: dict) -> int:
        """How many targets ``loss`` averages over in ``batch``: the labelled tokens of a language model, the
        examples of a classifier."""
        labels = batch["labels"]
        return int((labels != IGNORE).sum()) if self.is_language_model else int(labels.shape[0])

    def metrics(self, logits: torch.Tensor, batch: dict) -> dict[str, tuple[float, int]]:
        """Sums and counts, so that metrics over many batches aggregate exactly."""
        labels = batch["labels"].to(logits.device)
        pred = logits.argmax(-1)
        if self.is_language_model:
            mask = labels != IGNORE
            correct = (pred == labels) & mask
            seq_ok = (correct | ~mask).all(dim=-1)
            return {"accuracy": (float(correct.sum()), int(mask.sum())),
                    "sequence_accuracy": (float(seq_ok.sum()), int(labels.shape[0]))}
        return {"accuracy": (float((pred == labels).sum()), int(labels.shape[0]))}


@dataclass
class StreamTask(Task):
    """A task whose training sequences are drawn fresh at every step, its held-out splits (``splits``: test and
    validation) fixed. ``draw(step, batch_size) -> (input_ids, labels)`` (arrays ``(batch_size, seq_len)``) is a
    pure function of the step (and of what the task was built with: its seed), so that a resumed run reads the
    batches it would have read; ``fit`` calls :meth:`train_batch` in place of indexing a train split."""

    draw: Callable | None = field(default=None, repr=False)

    def train_batch(self, step: int, batch_size: int) -> dict[str, torch.Tensor]:
        """The training batch of (0-based) ``step``: ``{"input_ids", "labels"}``, each ``(batch_size, seq_len)``."""
        ids, labels = self.draw(step, batch_size)
        return {"input_ids": torch.as_tensor(ids, dtype=torch.long),
                "labels": torch.as_tensor(labels, dtype=torch.long)}

    def tensors(self, split: str) -> dict[str, torch.Tensor]:
        if split == "train":
            raise ValueError(f"split: task {self.name!r} draws its training sequences fresh at every step "
                             "(train_batch(step, batch_size)); it has no train split to read whole")
        return super().tensors(split)


def model_name(model) -> str:
    """A model's registry name (its class name when it has none)."""
    return getattr(model, "model_name", type(model).__name__)


def check_compatible(model, task: "Task") -> None:
    """Raise a ``ValueError`` naming both sizes when ``model`` cannot be trained on ``task``.

    Checked: the input vocabulary, language model vs classifier and the number of classes, and
    the sequence length against a model's fixed ``seq_len`` or its longest ``max_len``.
    """
    name, tname = model_name(model), task.name
    m_vocab = getattr(model, "vocab_size", None)
    if m_vocab is not None and task.vocab_size > m_vocab:
        raise ValueError(f"task {tname!r} has vocab_size {task.vocab_size} but model {name!r} was built with "
                         f"vocab_size {m_vocab}; build the model with vocab_size={task.vocab_size}")
    m_classes = getattr(model, "num_classes", None)
    if task.is_language_model and m_classes is not None:
        raise ValueError(f"task {tname!r} is a language-model task (num_classes None: a token to predict at every "
                         f"position) but model {name!r} is a classifier with num_classes {m_classes}; "
                         f"build it with num_classes=None")
    if not task.is_language_model:
        if m_classes is None and hasattr(model, "num_classes"):
            raise ValueError(f"task {tname!r} is a classification task with num_classes {task.num_classes} but "
                             f"model {name!r} is a language model (num_classes None); "
                             f"build it with num_classes={task.num_classes}")
        if m_classes is not None and m_classes != task.num_classes:
            raise ValueError(f"task {tname!r} has num_classes {task.num_classes} but model {name!r} was built with "
                             f"num_classes {m_classes}")
    m_seq = getattr(model, "seq_len", None)
    if m_seq is not None and m_seq != task.seq_len:
        raise ValueError(f"task {tname!r} has seq_len {task.seq_len} but model {name!r} was built for a fixed "
                         f"seq_len {m_seq}; build it with seq_len={task.seq_len}")
    m_max = getattr(model, "max_len", None)
    if m_max is not None and task.seq_len > m_max:
        raise ValueError(f"task {tname!r} has seq_len {task.seq_len} but model {name!r} accepts at most "
                         f"max_len {m_max}; build it with max_len>={task.seq_len}")
