"""Character-level language modelling (paper 000 §4.3): ASCII tokens, vocabulary 128.

Text comes from one of three places, all offline-capable:

- ``text()``: the default corpus, ``data/corpus/shakespeare.txt`` (1.25 MB): nine plays and the
  Sonnets by Shakespeare as transcribed by Project Gutenberg, public domain (``data/corpus/README.md``).
  It ships with the repository, so every machine and every Python version reads the same characters.
- ``text(files=[...])``: local text files, concatenated in the given order.
- ``text(dataset="wikitext", dataset_config="wikitext-103-raw-v1")``: any HuggingFace dataset
  through ``datasets.load_dataset`` (needs the data set locally or a network; the paper used
  WikiText-103). ``data_files=`` is passed through, so ``text(dataset="text", data_files=...)``
  reads local files with the ``datasets`` text loader.

Tokenizer: a character is its ASCII code (``encode``/``decode``); other characters are mapped to
ASCII by Unicode decomposition (``é -> e``) and dropped when that fails. The stream is cut into
contiguous train / validation / test parts and each part into non-overlapping windows of
``seq_len + 1`` characters: ``input_ids = window[:-1]``, ``labels = window[1:]`` (every position
scored).
"""
from __future__ import annotations

import hashlib
import os
import unicodedata
from pathlib import Path

import numpy as np

from seqlab.tasks._cache import cached_splits
from seqlab.tasks.base import Task, renamed_arguments

__all__ = ["text", "encode", "decode", "shakespeare", "CORPUS", "VOCAB_SIZE"]

VOCAB_SIZE = 128


def to_ascii(s: str) -> str:
    """Unicode -> ASCII by decomposition (accents dropped); characters without an ASCII form vanish."""
    return unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode("ascii")


def encode(s: str) -> list[int]:
    """Text -> token ids (ASCII codes, 0..127)."""
    return list(to_ascii(s).encode("ascii"))


def decode(ids) -> str:
    """Token ids (0..127) -> text."""
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    bad = [i for i in ids if not 0 <= int(i) < VOCAB_SIZE]
    if bad:
        raise ValueError(f"ids: expected ASCII codes in [0, {VOCAB_SIZE}), got {bad[:5]}")
    return "".join(chr(int(i)) for i in ids)


# ----------------------------------------------------------------------------- the default corpus


CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus" / "shakespeare.txt"


def shakespeare(max_chars: int | None = None) -> str:
    """The default corpus (``data/corpus/shakespeare.txt``, its README says what it holds and where it comes
    from): nine plays and the Sonnets, public domain, ASCII, the same on every machine. ``max_chars``: the
    first characters only."""
    if not CORPUS.is_file():
        raise FileNotFoundError(f"the default corpus {str(CORPUS)!r} is missing: it ships in the repository's "
                                "data/corpus/ (install seqlab editable from a clone), or pass files=... or dataset=...")
    corpus = CORPUS.read_text(encoding="ascii")
    return corpus[:max_chars] if max_chars else corpus


# ----------------------------------------------------------------------------- other sources


def _read_files(files) -> str:
    files = [files] if isinstance(files, (str, os.PathLike)) else list(files)
    if not files:
        raise ValueError("files: expected at least one path")
    chunks = []
    for f in files:
        p = Path(f)
        if not p.is_file():
            raise FileNotFoundError(f"files: {str(p)!r} is not a file")
        chunks.append(p.read_text(encoding="utf-8", errors="replace"))
    return to_ascii("\n".join(chunks))


def _read_dataset(name: str, config: str | None, data_files, text_column: str) -> str:
    import datasets

    loaded = datasets.load_dataset(name, config, data_files=data_files)
    parts = []
    for split in sorted(loaded.keys(), key=lambda s: (s != "train", s)):   # train first, then the others
        ds = loaded[split]
        if text_column not in ds.column_names:
            raise ValueError(f"text_column: {text_column!r} is not a column of {name!r}; columns: {ds.column_names}")
        parts.append("\n".join(ds[text_column]))
    return to_ascii("\n".join(parts))


# ----------------------------------------------------------------------------- the task


def _windows(ids: np.ndarray, seq_len: int) -> dict:
    n = (len(ids) - 1) // seq_len
    if n < 1:
        return {"input_ids": [], "labels": []}
    starts = np.arange(n) * seq_len
    idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
    w = ids[idx]
    return {"input_ids": w[:, :-1].tolist(), "labels": w[:, 1:].tolist()}


@renamed_arguments(valid_fraction="validation_fraction")
def text(files=None, *, dataset: str | None = None, dataset_config: str | None = None, data_files=None,
         text_column: str = "text", seq_len: int = 128, max_chars: int | None = 2_000_000,
         validation_fraction: float = 0.05, test_fraction: float = 0.05) -> Task:
    """A character-level language-modelling task (``vocab_size = 128``).

    ``files``: local text file(s); ``dataset``: a HuggingFace dataset name (see the module doc);
    neither: the default corpus (:func:`shakespeare`). ``max_chars``: keep only the first characters
    (``None``: everything). Splits ``train`` / ``validation`` / ``test`` are contiguous parts of
    the character stream (fractions ``1 - v - t``, ``v``, ``t``), windows of ``seq_len`` tokens.
    """
    if files is not None and dataset is not None:
        raise ValueError("files / dataset: give one source, not both")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len: expected a positive int, got {seq_len!r}")
    if max_chars is not None and (not isinstance(max_chars, int) or max_chars < 2):
        raise ValueError(f"max_chars: expected None or an int >= 2, got {max_chars!r}")
    for name, v in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
        if not 0 < v < 0.5:
            raise ValueError(f"{name}: expected a number in (0, 0.5), got {v!r}")

    if files is not None:
        corpus, source = _read_files(files), "files"
    elif dataset is not None:
        corpus, source = _read_dataset(dataset, dataset_config, data_files, text_column), f"hf:{dataset}"
    else:
        corpus, source = shakespeare(max_chars), "shakespeare"
    if max_chars is not None:
        corpus = corpus[:max_chars]
    if len(corpus) < 3 * (seq_len + 1):
        raise ValueError(f"the corpus ({source}) has {len(corpus)} characters, too few for three splits of "
                         f"windows of seq_len + 1 = {seq_len + 1}")
    digest = hashlib.sha256(corpus.encode("ascii")).hexdigest()[:16]
    # the cache key keeps the names the caches were made with
    params = dict(source=source, digest=digest, seq_len=seq_len, valid_fraction=validation_fraction,
                  test_fraction=test_fraction)

    def build() -> dict:
        import datasets

        ids = np.frombuffer(corpus.encode("ascii"), dtype=np.uint8).astype(np.int64)
        n = len(ids)
        n_valid = max(seq_len + 1, int(n * validation_fraction))
        n_test = max(seq_len + 1, int(n * test_fraction))
        n_train = n - n_valid - n_test
        parts = {"train": ids[:n_train], "validation": ids[n_train:n_train + n_valid], "test": ids[n_train + n_valid:]}
        return {k: datasets.Dataset.from_dict(_windows(v, seq_len)) for k, v in parts.items()}

    splits = cached_splits("text", params, build)
    return Task(name="text", splits=splits, seq_len=seq_len, vocab_size=VOCAB_SIZE, num_classes=None,
                itos=[chr(i) for i in range(VOCAB_SIZE)],
                info={"source": source, "digest": digest, "seq_len": seq_len,
                      "validation_fraction": validation_fraction, "test_fraction": test_fraction,
                      "characters": len(corpus)})
