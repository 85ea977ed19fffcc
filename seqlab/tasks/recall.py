"""Multi-query associative recall (MQAR), the recall task of Zoology (Arora, Eyuboglu et al. 2023).

A sequence opens with ``D = num_kv_pairs`` key-value pairs and then asks for each key once::

    k_1 v_1 k_2 v_2 ... k_D v_D | f f k_3 f f f k_1 f ... f      (length exactly seq_len)
                                        ^ label v_3   ^ label v_1

- the key-value region is the first ``2D`` tokens; the ``D`` keys are distinct, drawn from the lower half
  of the vocabulary without token 0 (``1 .. vocab_size//2 - 1``), the values from the upper half
  (``vocab_size//2 .. vocab_size - 1``, distinct within a sequence, as in Zoology);
- the query region is the other ``seq_len - 2D`` tokens. Key ``k_i`` is asked at position
  ``2D + 2 * gap_i``; the ``D`` gaps are drawn without replacement from ``range((seq_len - 2D) // 2)``
  with Zoology's power law ``p(gap = i - 1) ∝ a * i**(a - 1)`` (``i = 1 .. space``, ``a = power_a``), so
  most queries come soon after the context. ``gap_i`` is the ``i``-th gap drawn, as in Zoology: the
  first pair tends to be asked first;
- the label at a query position is the paired value; every other label is ``IGNORE``. Every split
  (train, validation, test) scores only the queries.

The other query-region positions are *filler*, chosen by ``filler``:

- ``"random"`` (the default of this function, the harder variant): random tokens drawn from the vocabulary
  minus this sequence's keys (about half of them values), so a label is a function of the inputs alone: the
  value paired with the token at that position when it is one of the keys, ``IGNORE`` otherwise. Zoology's
  code has a random filler too (``random_non_queries=True``, drawn from every token, so a filler can equal a
  key and yet be unlabelled), but its Fig. 2 runs do not use it;
- ``"zoology"``: token 0, as in Zoology's published runs (``random_non_queries=False``, its Fig. 2): the
  model only has to find the keys among zeros. Token 0 is never a key. The arena uses this one by default.

Zoology's ``vocab_size > seq_len`` check is not needed here and is not made.

Zoology's published sweep: ``vocab_size=8192``, ``seq_len`` 64..1024, 4..256 pairs.

Training data (the recall sweep, ``configs/medium/recall-sweep.toml``). A run reads ``steps * batch_size``
training sequences. With a fixed train split of ``train_size`` sequences the loop visits them in epochs (each a
permutation, ``seqlab.train.batch_indices``): the sweep's 6000 steps of 32 read 192 000 from 100 000, so every
sequence about 1.9 times (each once, 92 % of them twice). Zoology trains on 100 000. ``fresh=True`` draws every
training batch new instead (:func:`mqar_fresh_batch`): the batch of step ``s`` comes from its own generator,
``SeedSequence([seed, 5, 1, s])``, so a run never reads a training sequence twice but by chance, and the batches
are a pure function of ``(seed, step, batch size)`` (a resumed run reads the same ones). The fixed splits are then
the test and validation splits alone, drawn from the task's stream as before but without a train split first (so
they differ from those of ``fresh=False``). A fresh row equal to a validation or test sequence (a chance of about
``1 / (keys!/(keys-D)! * values!/(values-D)!)`` per pair of rows: below 1e-20 at the sweep's sizes) is drawn again
from the same generator, so no held-out sequence is ever trained on; :data:`MAX_REDRAWS` draws that all collide
(a task whose few possible sequences its held-out splits nearly exhaust) raise an error.

The fixed splits are drawn in chunks of 1 024 rows from one stream (train, test, then validation) and cached under
``data/cache`` by every argument: the sweep's ``vocab_size=1024, seq_len=64, num_kv_pairs=16, train_size=100_000``
took 7.5 s to draw and save on a loaded 2-core machine (75 MB), 0.02 s to open again and 0.7 s to read as tensors.
Its validation and test splits are fixed by the seed, drawn after the train split. ``vocab_size=1024`` gives 511
key tokens, more than any family's key channels in the sweep, so that no table indexed by key fits in a state.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from seqlab.tasks._cache import cached_splits
from seqlab.tasks.base import IGNORE, StreamTask, Task, split_sizes, validation_param

__all__ = ["mqar", "mqar_rows", "mqar_answers", "mqar_fresh_batch", "MAX_REDRAWS"]

MQAR_STREAM = 5          # this task's random stream (copying uses 1, memory horizon 4, the MAD tasks 6..10)
FRESH_STREAM = 1         # within it, the fresh training batches: SeedSequence([seed, MQAR_STREAM, FRESH_STREAM, step])
MAX_REDRAWS = 100        # draws of a row that keeps equalling a held-out sequence before the stream gives up
FILLERS = ("random", "zoology")
_CHUNK = 1024            # rows generated at once (bounds the (rows, vocab) scratch arrays)


def check_ints(*specs) -> None:
    """``specs``: ``(name, value, lowest)``; a ValueError naming the argument when a value is no such int."""
    for name, v, lo in specs:
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")


def _distinct(rng, rows: int, lo: int, hi: int, D: int) -> np.ndarray:
    """(rows, D): per row ``D`` distinct tokens of ``lo .. hi - 1``, in random order."""
    score = rng.random((rows, hi - lo))
    pick = np.argpartition(score, D - 1, axis=1)[:, :D]                  # the D smallest scores: a uniform subset
    order = np.argsort(np.take_along_axis(score, pick, axis=1), axis=1)  # ... in the order of their scores
    return np.take_along_axis(pick, order, axis=1) + lo


def _power_law_gaps(rng, rows: int, space: int, D: int, power_a: float) -> np.ndarray:
    """(rows, D) gaps drawn without replacement, weights ``a * i**(a-1)``, in the order they were drawn.

    Gumbel top-k: sorting ``log p + Gumbel noise`` (largest first) is successive sampling without
    replacement, the distribution of ``np.random.choice(space, D, replace=False, p=p)``."""
    i = np.arange(1, space + 1, dtype=np.float64)
    log_p = math.log(power_a) + (power_a - 1.0) * np.log(i)
    score = log_p - np.log(-np.log(rng.random((rows, space))))
    return np.argsort(-score, axis=1, kind="stable")[:, :D]


def _filler(rng, keys: np.ndarray, vocab_size: int, seq_len: int) -> np.ndarray:
    """(rows, seq_len) tokens uniform on the vocabulary minus each row's keys (redrawn until no key is hit)."""
    rows = np.arange(keys.shape[0])[:, None]
    is_key = np.zeros((keys.shape[0], vocab_size), dtype=bool)
    is_key[rows, keys] = True
    out = rng.integers(0, vocab_size, size=(keys.shape[0], seq_len))
    bad = is_key[rows, out]
    while bad.any():
        out[bad] = rng.integers(0, vocab_size, size=int(bad.sum()))
        bad = is_key[rows, out]
    return out


def mqar_rows(rng, rows: int, vocab_size: int, seq_len: int, D: int, power_a: float, filler: str = "random"):
    """``rows`` MQAR examples ``(input_ids, labels)`` drawn from ``rng`` (numpy): ``D`` key-value pairs, then the
    queries at distances drawn with ``power_a``, the rest ``filler`` (:func:`mqar`)."""
    half = vocab_size // 2
    keys = _distinct(rng, rows, 1, half, D)                      # lower half without token 0
    values = _distinct(rng, rows, half, vocab_size, D)           # upper half
    gaps = _power_law_gaps(rng, rows, (seq_len - 2 * D) // 2, D, power_a)
    if filler == "zoology":                                      # Zoology's runs: the non-queries are token 0
        ids = np.zeros((rows, seq_len), dtype=np.int64)
    else:
        ids = _filler(rng, keys, vocab_size, seq_len)
    r = np.arange(rows)[:, None]
    ids[:, 0:2 * D:2], ids[:, 1:2 * D:2] = keys, values          # the key-value region
    where = 2 * D + 2 * gaps                                     # query i asks key i at 2D + 2 gap_i
    ids[r, where] = keys
    labels = np.full((rows, seq_len), IGNORE, dtype=np.int64)
    labels[r, where] = values
    return ids, labels


def mqar_answers(input_ids, labels, predictions, num_kv_pairs: int) -> dict:
    """How a model answered MQAR's queries (the layout above: pair ``i`` at positions ``2i, 2i + 1``), as sums and
    counts so that batches add up: ``"by_pair"``, ``[correct, asked]`` for each pair in the order it was written
    (a state that forgets scores its early pairs lower); ``"wrong"``, the queries answered wrongly, and
    ``"another_value"``, those of them answered with the value of another pair of the same sequence (the value was
    read, its key confused: crosstalk between bindings, not a failure to read the values). Tensors ``(B, L)``."""
    D = num_kv_pairs
    asked = labels != IGNORE
    keys, values = input_ids[:, 0:2 * D:2], input_ids[:, 1:2 * D:2]                  # (B, D)
    which = (input_ids.unsqueeze(-1) == keys.unsqueeze(1)) & asked.unsqueeze(-1)     # (B, L, D): query t asks pair i
    correct = (predictions == labels) & asked
    by_pair = [[int((which[..., i] & correct).sum()), int(which[..., i].sum())] for i in range(D)]
    wrong = asked & ~correct
    in_sequence = (predictions.unsqueeze(-1) == values.unsqueeze(1)).any(-1)         # the answer is one of the values
    return {"by_pair": by_pair, "wrong": int(wrong.sum()), "another_value": int((wrong & in_sequence).sum())}


def mqar_fresh_batch(step: int, batch_size: int, *, seed: int, vocab_size: int, seq_len: int, num_kv_pairs: int,
                     power_a: float, filler: str, held_out: frozenset = frozenset()) -> tuple:
    """The training batch of (0-based) ``step`` of a fresh MQAR stream: ``batch_size`` rows ``(input_ids, labels)``
    drawn from ``SeedSequence([seed, MQAR_STREAM, FRESH_STREAM, step])`` (a pure function of its arguments). A row
    whose ``input_ids`` bytes are in ``held_out`` (the task's validation and test sequences) is drawn again from
    the same generator; a ValueError after :data:`MAX_REDRAWS` draws that all collide."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, MQAR_STREAM, FRESH_STREAM, step]))
    args = (vocab_size, seq_len, num_kv_pairs, power_a, filler)
    ids, labels = mqar_rows(rng, batch_size, *args)
    for _ in range(MAX_REDRAWS):
        again = [i for i, row in enumerate(ids) if row.astype(np.int64).tobytes() in held_out]
        if not again:
            return ids, labels
        ids[again], labels[again] = mqar_rows(rng, len(again), *args)
    raise ValueError(f"fresh: {MAX_REDRAWS} draws at step {step} all equal a validation or test sequence; this "
                     f"task (vocab_size={vocab_size}, seq_len={seq_len}, num_kv_pairs={num_kv_pairs}) has too few "
                     "sequences for a training stream disjoint from its held-out splits")


def _held_out(splits: dict) -> frozenset:
    """The ``input_ids`` of every row of ``splits``, as bytes of int64 (what :func:`mqar_fresh_batch` avoids)."""
    return frozenset(row.tobytes() for ds in splits.values()
                     for row in np.asarray(ds["input_ids"], dtype=np.int64))


def _mqar_split(rng, size: int, vocab_size: int, seq_len: int, D: int, power_a: float, filler: str) -> dict:
    parts = [mqar_rows(rng, min(_CHUNK, size - s), vocab_size, seq_len, D, power_a, filler)
             for s in range(0, size, _CHUNK)]
    return {"input_ids": np.concatenate([p[0] for p in parts]).tolist(),
            "labels": np.concatenate([p[1] for p in parts]).tolist()}


def mqar(*, vocab_size: int = 256, seq_len: int = 64, num_kv_pairs: int = 4, power_a: float = 0.01,
         train_size: int = 2000, test_size: int = 256, validation_size: int = 256, seed: int = 0,
         filler: str = "random", fresh: bool = False) -> Task:
    """Multi-query associative recall (Zoology's layout, see the module docstring); quick-profile defaults.

    Inputs are exactly ``seq_len`` tokens; ``vocab_size`` as given (keys ``1 .. vocab_size//2 - 1``,
    values ``vocab_size//2 ..``). Needs ``seq_len`` even, ``4 * num_kv_pairs <= seq_len`` and
    ``vocab_size//2 - 1 >= num_kv_pairs``. Splits train, test, then validation are drawn from one stream
    seeded by ``seed`` (``validation_size=0``: no validation split); all score only the queries. ``filler``:
    ``"random"`` or ``"zoology"`` (token 0), the non-query tokens of the query region (module docstring).
    ``fresh``: True gives no train split (train_size is not used) but a :class:`~seqlab.tasks.base.StreamTask`
    whose training batches are drawn new at every step, never equal to a test or validation sequence, the test and
    validation splits drawn from the same seeded stream (module docstring, "Training data").
    """
    check_ints(("vocab_size", vocab_size, 4), ("seq_len", seq_len, 4), ("num_kv_pairs", num_kv_pairs, 1),
               ("train_size", train_size, 1), ("test_size", test_size, 1),
               ("validation_size", validation_size, 0), ("seed", seed, 0))
    if isinstance(power_a, bool) or not isinstance(power_a, (int, float)) or not 0 < power_a < math.inf:
        raise ValueError(f"power_a: expected a positive finite number, got {power_a!r}")
    if seq_len % 2:
        raise ValueError(f"seq_len: expected an even length, got {seq_len}")
    if 4 * num_kv_pairs > seq_len:
        raise ValueError(f"num_kv_pairs: expected 4 * num_kv_pairs <= seq_len={seq_len}, got {num_kv_pairs}")
    if vocab_size // 2 - 1 < num_kv_pairs:
        raise ValueError(f"vocab_size: expected >= {2 * num_kv_pairs + 2} for {num_kv_pairs} distinct keys "
                         f"(1 .. vocab_size//2 - 1) and values, got {vocab_size}")
    if filler not in FILLERS:
        raise ValueError(f"filler: expected one of {FILLERS}, got {filler!r}")
    if not isinstance(fresh, bool):
        raise ValueError(f"fresh: expected True or False, got {fresh!r}")
    power_a = float(power_a)
    params = dict(vocab_size=vocab_size, seq_len=seq_len, num_kv_pairs=num_kv_pairs, power_a=power_a,
                  train_size=train_size, test_size=test_size, seed=seed, **validation_param(validation_size),
                  **({} if filler == "random" else {"filler": filler}))   # the random variant keeps its old key
    if fresh:                                     # no train split: its size is not part of what was drawn
        params = {**{k: v for k, v in params.items() if k != "train_size"}, "fresh": True}
    sizes = split_sizes(train_size, test_size, validation_size)[1 if fresh else 0:]

    def build() -> dict:
        import datasets

        rng = np.random.default_rng(np.random.SeedSequence([seed, MQAR_STREAM]))
        return {split: datasets.Dataset.from_dict(_mqar_split(rng, size, vocab_size, seq_len, num_kv_pairs, power_a,
                                                              filler))
                for split, size in sizes}

    splits = cached_splits("mqar", params, build)
    half = vocab_size // 2
    itos = [f"k{i}" for i in range(half)] + [f"v{i}" for i in range(half, vocab_size)]
    D = num_kv_pairs
    layout = (f"{2 * D} tokens k1 v1 .. k{D} v{D}, then {seq_len - 2 * D} query-region tokens: each key once at "
              f"{2 * D} + 2*gap (power-law gaps), labelled with its value, the rest filler "
              + ("(token 0, as in Zoology's runs, " if filler == "zoology" else "(random tokens, never a key, ")
              + f"unlabelled); input length {seq_len}")
    info = {**params, "filler": filler, "key_tokens": [1, half], "value_tokens": [half, vocab_size], "layout": layout}
    if not fresh:
        return Task(name="mqar", splits=splits, seq_len=seq_len, vocab_size=vocab_size, num_classes=None,
                    itos=itos, info=info)
    draw = functools.partial(mqar_fresh_batch, seed=seed, vocab_size=vocab_size, seq_len=seq_len,
                             num_kv_pairs=num_kv_pairs, power_a=power_a, filler=filler, held_out=_held_out(splits))
    info["train"] = (f"drawn fresh at every step: SeedSequence([{seed}, {MQAR_STREAM}, {FRESH_STREAM}, step]), "
                     "never a test or validation sequence")
    return StreamTask(name="mqar", splits=splits, seq_len=seq_len, vocab_size=vocab_size, num_classes=None,
                      itos=itos, info=info, draw=draw)
