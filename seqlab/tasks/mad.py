"""Five synthetic tasks of MAD, the Mechanistic Architecture Design suite (Poli et al. 2024, ``athms/mad-lab``).

Each follows MAD's generator (``mad/data/instances.py``): MAD's arguments, vocabulary layout, sequence
lengths and label convention (the label at a position is the next token to predict there; ``IGNORE``
where nothing is scored). The defaults are the quick profile: MAD's vocabularies and arguments with
shorter sequences and fewer examples; MAD's baseline values (``configs/tasks/*.yml``) all work.

- :func:`in_context_recall`, :func:`noisy_in_context_recall`, :func:`fuzzy_in_context_recall`: MAD
  trains on the whole next-token sequence (``is_training=True``: labels = inputs shifted by one) and tests
  on the recall targets only (``is_training=False``). Here the train split has MAD's training labels and
  the validation and test splits MAD's test labels.
- :func:`selective_copying`, :func:`memorization`: one convention for every split, MAD's.

MAD's compression task is left out: it needs an encoder-decoder model, not a causal language model.

Differences from MAD, each to make every label a function of the inputs (and of the fixed key-value map for
memorization) and every split reproducible from ``seed``:

- all randomness comes from one seeded ``np.random.Generator`` per task (MAD's selective copying inserts
  its blanks with the unseeded global ``np.random``); the draws are vectorised, so the sequences are
  distributed as MAD's but are not MAD's sequences for the same seed;
- (noisy) in-context recall: the pair that is never noise is drawn among the pairs before the probe (MAD
  draws it among all ``seq_len // 2`` slots, the probe's included, and then fails when every pair came
  out noise);
- fuzzy in-context recall: the probe pair goes in at MAD's random position or, where MAD's loop would end
  before reaching it, in place of the loop's last pair (MAD then leaves the final query never answered in
  the context).
"""
from __future__ import annotations

import numpy as np

from seqlab.tasks._cache import cached_splits
from seqlab.tasks.base import IGNORE, Task, split_sizes, validation_param
from seqlab.tasks.recall import check_ints

__all__ = ["in_context_recall", "noisy_in_context_recall", "fuzzy_in_context_recall", "selective_copying",
           "memorization"]

# each task's random stream (copying uses 1, memory horizon 4, MQAR 5)
ICR_STREAM, NOISY_STREAM, FUZZY_STREAM, SELECTIVE_STREAM, MEMORIZATION_STREAM = 6, 7, 8, 9, 10

def _check_common(train_size, test_size, validation_size, seed, vocab_size=None, vocab_lo=3):
    check_ints(("train_size", train_size, 1), ("test_size", test_size, 1),
               ("validation_size", validation_size, 0), ("seed", seed, 0))
    if vocab_size is not None:
        check_ints(("vocab_size", vocab_size, vocab_lo))


def _check_bool(name, v):
    if not isinstance(v, bool):
        raise ValueError(f"{name}: expected a bool, got {v!r}")


def _build(name: str, params: dict, stream: int, seed: int, sizes, make) -> dict:
    """Cached splits; ``make(rng, size, split)`` returns ``{"input_ids": array, "labels": array}``."""
    def build() -> dict:
        import datasets

        rng = np.random.default_rng(np.random.SeedSequence([seed, stream]))
        return {split: datasets.Dataset.from_dict({k: np.asarray(v).tolist() for k, v in make(rng, n, split).items()})
                for split, n in sizes}

    return cached_splits(name, params, build)


def _kv_itos(vocab_size: int, key_range, value_range, specials: dict) -> list[str]:
    """``k3``/``v11`` for key/value tokens, ``<noise20>`` for noise, ``<name>`` for the special tokens."""
    itos = [f"<noise{i}>" for i in range(vocab_size)]
    for i in range(*key_range):
        itos[i] = f"k{i}"
    for i in range(*value_range):
        itos[i] = f"v{i}"
    for name, tok in specials.items():
        if tok is not None:
            itos[tok] = f"<{name}>"
    return itos


# ----------------------------------------------------------------------------- (noisy) in-context recall


def _recall_vocab(vocab_size, multi_query, noise_vocab_size):
    """MAD's layout: keys, values, noise, then (single query only) the copy token ``vocab_size - 1``."""
    n = vocab_size - (0 if multi_query else 1) - noise_vocab_size     # key and value tokens
    return dict(key_tokens=[0, n // 2], value_tokens=[n // 2, n], noise_tokens=[n, n + noise_vocab_size],
                copy_token=None if multi_query else vocab_size - 1)


def _recall_example_rows(rng, size, seq_len, multi_query, frac_noise, vocab):
    """Full sequences (``seq_len`` tokens, one more with a copy token) and MAD's test targets, both unshifted.

    ``seq_len // 2 - 1`` slots of two tokens, each a key-value pair or (probability ``frac_noise``) two
    noise tokens, then ``[<copy>] k_probe v_probe`` with ``k_probe`` one of the keys shown."""
    n = seq_len // 2 - 1
    (k0, k1), (v0, v1), (z0, z1) = vocab["key_tokens"], vocab["value_tokens"], vocab["noise_tokens"]
    rows = np.arange(size)
    keys = rng.integers(k0, k1, size=(size, n))
    table = rng.integers(v0, v1, size=(size, k1))                    # each key's value in each sequence
    values = np.take_along_axis(table, keys, axis=1)
    noise = rng.random((size, n)) < frac_noise
    noise[rows, rng.integers(0, n, size=size)] = False               # at least one pair before the probe
    noise_tokens = rng.integers(z0, z1, size=(size, n, 2)) if z1 > z0 else np.zeros((size, n, 2), np.int64)
    # a pair is a query when its key was shown in an earlier pair: the first occurrence of (row, key) is not
    code = (np.where(noise, k1, keys) + (k1 + 1) * rows[:, None]).ravel()
    repeat = np.ones(code.size, dtype=bool)
    repeat[np.unique(code, return_index=True)[1]] = False
    repeat = repeat.reshape(size, n) & ~noise
    shown = np.zeros((size, k1), dtype=bool)
    shown[np.nonzero(~noise)[0], keys[~noise]] = True
    probe = np.argmax(np.where(shown, rng.random((size, k1)), -1.0), axis=1)   # uniform among the keys shown
    probe_value = table[rows, probe]

    pairs = np.where(noise[..., None], noise_tokens, np.stack([keys, values], axis=2)).reshape(size, 2 * n)
    targets = np.full((size, n, 2), IGNORE, dtype=np.int64)
    if multi_query:
        targets[..., 1] = np.where(repeat, values, IGNORE)
    tail = [probe, probe_value] if multi_query else [np.full(size, vocab["copy_token"]), probe, probe_value]
    tail_targets = [np.full(size, IGNORE)] * (len(tail) - 1) + [probe_value]
    full = np.concatenate([pairs, np.stack(tail, axis=1)], axis=1)
    return full, np.concatenate([targets.reshape(size, 2 * n), np.stack(tail_targets, axis=1)], axis=1)


def _recall_task(name, stream, *, vocab_size, seq_len, multi_query, noise_vocab_size, frac_noise, train_size,
                 test_size, validation_size, seed, extra_params) -> Task:
    _check_common(train_size, test_size, validation_size, seed)
    check_ints(("vocab_size", vocab_size, 1), ("seq_len", seq_len, 4), ("noise_vocab_size", noise_vocab_size, 0))
    _check_bool("multi_query", multi_query)
    if seq_len % 2:
        raise ValueError(f"seq_len: expected an even length (pairs of tokens), got {seq_len}")
    vocab = _recall_vocab(vocab_size, multi_query, noise_vocab_size)
    if vocab["key_tokens"][1] < 1:
        raise ValueError(f"vocab_size: expected >= {noise_vocab_size + 2 + (not multi_query)} (a key, a value"
                         f"{', the copy token' if not multi_query else ''} and {noise_vocab_size} noise tokens), "
                         f"got {vocab_size}")
    params = dict(vocab_size=vocab_size, seq_len=seq_len, multi_query=multi_query, **extra_params,
                  train_size=train_size, test_size=test_size, seed=seed, **validation_param(validation_size))

    def make(rng, size, split):
        full, targets = _recall_example_rows(rng, size, seq_len, multi_query, frac_noise, vocab)
        # MAD returns inputs[:-1]; train labels inputs[1:] (is_training=True), else targets[1:]
        return {"input_ids": full[:, :-1], "labels": full[:, 1:] if split == "train" else targets[:, 1:]}

    splits = _build(name, params, stream, seed, split_sizes(train_size, test_size, validation_size), make)
    L = seq_len - 1 if multi_query else seq_len
    query = "k_probe" if multi_query else "<copy> k_probe"
    layout = (f"{seq_len // 2 - 1} two-token slots 'k v' (a key and its value in this sequence"
              f"{', or two noise tokens' if frac_noise else ''}), then {query}; the final v_probe is the last "
              f"label, not an input: input length {L}. Train labels: the next token everywhere; "
              f"validation/test labels: the value after " + ("every key shown before" if multi_query else
                                                            "k_probe only"))
    itos = _kv_itos(vocab_size, vocab["key_tokens"], vocab["value_tokens"], {"copy": vocab["copy_token"]})
    return Task(name=name, splits=splits, seq_len=L, vocab_size=vocab_size, num_classes=None, itos=itos,
                info={**params, **vocab, "layout": layout})


def in_context_recall(*, vocab_size: int = 16, seq_len: int = 64, multi_query: bool = True,
                      train_size: int = 2000, test_size: int = 256, validation_size: int = 256,
                      seed: int = 0) -> Task:
    """MAD's in-context recall: ``seq_len // 2`` key-value pairs, keys drawn with replacement from the lower
    half of the non-special vocabulary (``0 .. n//2 - 1``), each key's value fixed within a sequence (upper
    half); the last pair is a probe of a key already shown. ``multi_query``: every repeated key is a query
    (test labels at the values of all repeated keys); otherwise a ``<copy>`` token (``vocab_size - 1``)
    precedes the probe and only it is scored.

    Input length: ``seq_len - 1`` with ``multi_query`` (MAD's ``inputs[:-1]`` of ``seq_len`` tokens),
    ``seq_len`` without (the copy token adds one). ``vocab_size`` as given. MAD baseline: ``vocab_size=16,
    seq_len=128``, 12800 train examples, ``multi_query=True``.

    Splits train, test, then validation (``validation_size=0``: none) come from one stream seeded by ``seed``.
    """
    return _recall_task("in_context_recall", ICR_STREAM, vocab_size=vocab_size, seq_len=seq_len,
                        multi_query=multi_query, noise_vocab_size=0, frac_noise=0.0, train_size=train_size,
                        test_size=test_size, validation_size=validation_size, seed=seed, extra_params={})


def noisy_in_context_recall(*, vocab_size: int = 32, noise_vocab_size: int = 16, frac_noise: float = 0.2,
                            seq_len: int = 64, multi_query: bool = True, train_size: int = 2000,
                            test_size: int = 256, validation_size: int = 256, seed: int = 0) -> Task:
    """MAD's noisy in-context recall: :func:`in_context_recall` where each pair slot before the probe is, with
    probability ``frac_noise``, two tokens of the noise vocabulary (``noise_vocab_size`` tokens after the
    keys and values, taken out of ``vocab_size``). Noise is never scored in validation/test; the train
    labels (MAD's: the next token everywhere) include it.

    Input length as :func:`in_context_recall`. MAD baseline: ``vocab_size=32, noise_vocab_size=16,
    frac_noise=0.2, seq_len=128``.

    Splits train, test, then validation (``validation_size=0``: none) come from one stream seeded by ``seed``.
    """
    if isinstance(frac_noise, bool) or not isinstance(frac_noise, (int, float)) or not 0 <= frac_noise < 1:
        raise ValueError(f"frac_noise: expected a number in [0, 1), got {frac_noise!r}")
    check_ints(("noise_vocab_size", noise_vocab_size, 1 if frac_noise > 0 else 0))
    return _recall_task("noisy_in_context_recall", NOISY_STREAM, vocab_size=vocab_size, seq_len=seq_len,
                        multi_query=multi_query, noise_vocab_size=noise_vocab_size, frac_noise=float(frac_noise),
                        train_size=train_size, test_size=test_size, validation_size=validation_size, seed=seed,
                        extra_params=dict(noise_vocab_size=noise_vocab_size, frac_noise=float(frac_noise)))


# ----------------------------------------------------------------------------- fuzzy in-context recall


def _fuzzy_example(rng, seq_len, K, V, multi_query, train, vocab):
    """One full sequence (``seq_len + 1`` tokens, left-padded) and its MAD test targets, following MAD's loop:
    pairs (key motif of 1..K tokens, value motif of 1..V tokens; test keys always K tokens) are added while
    the sequence is shorter than ``seq_len - |probe pair| - (K + V)``; the probe pair goes in at a random
    position; then ``[<copy>] k_probe v_probe``."""
    (k0, k1), (v0, v1) = vocab["key_tokens"], vocab["value_tokens"]
    P = seq_len // 2 + 1                                  # more pairs than the loop can add (each >= 2 tokens)
    k_sizes = rng.integers(1, K + 1, size=P) if train else np.full(P, K)
    v_sizes = rng.integers(1, V + 1, size=P)
    # a motif of s tokens: the first s of a random permutation (ordered, no repeated token: MAD's permutations)
    k_motifs = np.argsort(rng.random((P + 1, k1 - k0)), axis=1)[:, :K] + k0
    v_motifs = np.argsort(rng.random((P + 1, v1 - v0)), axis=1)[:, :V] + v0
    probe_k = tuple(k_motifs[P, :int(rng.integers(1, K + 1)) if train else K].tolist())
    probe_v = tuple(v_motifs[P, :int(rng.integers(1, V + 1))].tolist())
    bound = seq_len - len(probe_k) - len(probe_v) - (K + V)
    probe_at = int(rng.integers(0, seq_len - 2 * (len(probe_k) + len(probe_v))))
    value_of = {probe_k: probe_v}                          # MAD's kv_map: a key's value, once decided
    shown, tokens, targets, j = set(), [], [], 0
    while len(tokens) < bound:
        if probe_k not in shown and (len(tokens) >= probe_at or len(tokens) + k_sizes[j] + v_sizes[j] >= bound):
            k, v = probe_k, probe_v                        # the probe pair, at MAD's place or instead of the last
        else:
            k = tuple(k_motifs[j, :k_sizes[j]].tolist())
            v = value_of.setdefault(k, tuple(v_motifs[j, :v_sizes[j]].tolist()))
            j += 1
        scored = multi_query and k in shown
        tokens += [*k, *v]
        targets += [IGNORE] * len(k) + (list(v) if scored else [IGNORE] * len(v))
        shown.add(k)
    head = [] if multi_query else [vocab["copy_token"]]
    tokens += [*head, *probe_k, *probe_v]
    targets += [IGNORE] * (len(head) + len(probe_k)) + list(probe_v)
    pad = seq_len + 1 - len(tokens)                        # >= 1: the loop stops short of seq_len
    return [vocab["pad_token"]] * pad + tokens, [IGNORE] * pad + targets


def fuzzy_in_context_recall(*, vocab_size: int = 16, seq_len: int = 64, k_motif_size: int = 3,
                            v_motif_size: int = 3, multi_query: bool = True, train_size: int = 2000,
                            test_size: int = 256, validation_size: int = 256, seed: int = 0) -> Task:
    """MAD's fuzzy in-context recall: keys and values are *motifs* of 1..``k_motif_size`` /
    1..``v_motif_size`` adjacent tokens (no token repeated within a motif); validation/test keys always have
    ``k_motif_size`` tokens. Tokens: keys ``0 .. n//2 - 1``, values ``n//2 .. n - 1``, then ``<pad>``
    (and ``<copy>`` = ``vocab_size - 1`` without ``multi_query``), ``n = vocab_size - 1`` (``- 2``).

    Input length ``seq_len`` (MAD: pairs while they fit, then ``[<copy>] k_probe v_probe``, left-padded with
    ``<pad>`` to ``seq_len + 1`` tokens, inputs the first ``seq_len``). ``vocab_size`` as given. Train
    labels are the next token everywhere (pads included, as MAD); validation/test labels are the values of
    repeated keys (``multi_query``) and the probe's value. MAD baseline: ``vocab_size=16, seq_len=128,
    k_motif_size=3, v_motif_size=3``.

    Splits train, test, then validation (``validation_size=0``: none) come from one stream seeded by ``seed``.
    """
    _check_common(train_size, test_size, validation_size, seed)
    check_ints(("vocab_size", vocab_size, 1), ("k_motif_size", k_motif_size, 1), ("v_motif_size", v_motif_size, 1))
    _check_bool("multi_query", multi_query)
    n = vocab_size - (1 if multi_query else 2)
    vocab = dict(key_tokens=[0, n // 2], value_tokens=[n // 2, n], pad_token=n,
                 copy_token=None if multi_query else vocab_size - 1)
    if n // 2 < k_motif_size or n - n // 2 < v_motif_size:
        need = max(2 * k_motif_size, 2 * v_motif_size - 1) + vocab_size - n
        raise ValueError(f"vocab_size: expected >= {need} for key motifs of {k_motif_size} and value motifs of "
                         f"{v_motif_size} distinct tokens, got {vocab_size}")
    check_ints(("seq_len", seq_len, 2 * (k_motif_size + v_motif_size) + 1))
    params = dict(vocab_size=vocab_size, seq_len=seq_len, k_motif_size=k_motif_size, v_motif_size=v_motif_size,
                  multi_query=multi_query, train_size=train_size, test_size=test_size, seed=seed,
                  **validation_param(validation_size))

    def make(rng, size, split):
        rows = [_fuzzy_example(rng, seq_len, k_motif_size, v_motif_size, multi_query, split == "train", vocab)
                for _ in range(size)]
        full, targets = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        return {"input_ids": full[:, :-1], "labels": full[:, 1:] if split == "train" else targets[:, 1:]}

    splits = _build("fuzzy_in_context_recall", params, FUZZY_STREAM, seed,
                    split_sizes(train_size, test_size, validation_size), make)
    query = "k_probe v_probe" if multi_query else "<copy> k_probe v_probe"
    layout = (f"<pad>.. then pairs 'key motif, value motif' (1..{k_motif_size} key tokens, {k_motif_size} in "
              f"validation/test; 1..{v_motif_size} value tokens), then {query} without its last token: input "
              f"length {seq_len}. Train labels: the next token everywhere; validation/test labels: the value "
              f"motif after " + ("every repeated key and after k_probe" if multi_query else "k_probe only"))
    itos = _kv_itos(vocab_size, vocab["key_tokens"], vocab["value_tokens"],
                    {"pad": vocab["pad_token"], "copy": vocab["copy_token"]})
    return Task(name="fuzzy_in_context_recall", splits=splits, seq_len=seq_len, vocab_size=vocab_size,
                num_classes=None, itos=itos, info={**params, **vocab, "layout": layout})


# ----------------------------------------------------------------------------- selective copying


def _selective_rows(rng, size, vocab_size, seq_len, N):
    blank, copy = vocab_size - 2, vocab_size - 1
    B = seq_len - 2 * N - 1                                         # blanks among the tokens to copy
    data = rng.integers(0, vocab_size - 2, size=(size, N))
    # MAD: np.insert(data, randint(0, N, B), blank): each blank lands before a random data token (never
    # after the last), so data token i sits after the blanks aimed at tokens 0..i
    aim = rng.integers(0, N, size=(size, B)) + N * np.arange(size)[:, None]
    before = np.bincount(aim.ravel(), minlength=size * N).reshape(size, N).cumsum(axis=1)
    ids = np.full((size, seq_len), blank, dtype=np.int64)           # the N positions after <copy> stay blank
    ids[np.arange(size)[:, None], before + np.arange(N)] = data
    ids[:, N + B] = copy
    labels = np.full((size, seq_len), IGNORE, dtype=np.int64)
    labels[:, N + B + 1:] = data                                   # the i-th blank after <copy> outputs data i
    return {"input_ids": ids, "labels": labels}


def selective_copying(*, vocab_size: int = 16, seq_len: int = 64, num_tokens_to_copy: int = 8,
                      train_size: int = 2000, test_size: int = 256, validation_size: int = 256,
                      seed: int = 0) -> Task:
    """MAD's selective copying: ``num_tokens_to_copy`` random tokens (``0 .. vocab_size - 3``, with
    repeats) scattered among ``<blank>`` (``vocab_size - 2``) tokens, then ``<copy>`` (``vocab_size - 1``)
    and ``num_tokens_to_copy`` blanks, at which the model outputs the tokens in order.

    Input length ``seq_len``: ``seq_len - num_tokens_to_copy - 1`` tokens of data and blanks (MAD's blanks
    always precede some data token: the last one before ``<copy>`` is data), ``<copy>``, the blanks.
    Labels (MAD's, every split): the copied tokens at the final blanks, ``IGNORE`` elsewhere. MAD inserts its
    blanks with the unseeded global ``np.random``; here the task's seeded generator draws them. MAD
    baseline: ``vocab_size=16, seq_len=256, num_tokens_to_copy=16``.

    Splits train, test, then validation (``validation_size=0``: none) come from one stream seeded by ``seed``.
    """
    _check_common(train_size, test_size, validation_size, seed, vocab_size)
    check_ints(("num_tokens_to_copy", num_tokens_to_copy, 1))
    check_ints(("seq_len", seq_len, 2 * num_tokens_to_copy + 2))      # MAD: seq_len > 2 N + 1
    params = dict(vocab_size=vocab_size, seq_len=seq_len, num_tokens_to_copy=num_tokens_to_copy,
                  train_size=train_size, test_size=test_size, seed=seed, **validation_param(validation_size))
    N = num_tokens_to_copy
    splits = _build("selective_copying", params, SELECTIVE_STREAM, seed,
                    split_sizes(train_size, test_size, validation_size),
                    lambda rng, size, split: _selective_rows(rng, size, vocab_size, seq_len, N))
    layout = (f"{N} data tokens among {seq_len - 2 * N - 1} <blank> (the last before <copy> is data), <copy>, "
              f"{N} <blank> labelled with the data tokens in order: input length {seq_len}")
    itos = [str(i) for i in range(vocab_size - 2)] + ["<blank>", "<copy>"]
    return Task(name="selective_copying", splits=splits, seq_len=seq_len, vocab_size=vocab_size, num_classes=None,
                itos=itos, info={**params, "blank_token": vocab_size - 2, "copy_token": vocab_size - 1,
                                 "layout": layout})


# ----------------------------------------------------------------------------- memorization


def memorization_kv_map(vocab_size: int, kv_map_seed: int = 12345) -> list[int]:
    """The fixed key -> value map: ``kv_map[k]`` for the keys ``k = 0 .. (vocab_size - 1)//2 - 1``.

    MAD's: a random permutation of the keys paired with a random permutation of the values
    (``(vocab_size - 1)//2 .. vocab_size - 2``; one value left over when there is one more value than keys).
    Drawn from ``np.random.default_rng(kv_map_seed)``; MAD's benchmark uses seed 12345."""
    n = vocab_size - 1
    rng = np.random.default_rng(kv_map_seed)
    keys, values = rng.permutation(n // 2), rng.permutation(np.arange(n // 2, n))
    kv = np.empty(n // 2, dtype=np.int64)
    kv[keys] = values[: n // 2]
    return kv.tolist()


def memorization(*, vocab_size: int = 256, seq_len: int = 32, train_size: int = 256, test_size: int = 256,
                 validation_size: int = 256, kv_map_seed: int = 12345, seed: int = 0) -> Task:
    """MAD's memorization: ``seq_len // 2`` pairs ``k <insert>``, keys drawn with replacement; the label at
    ``<insert>`` (``vocab_size - 1``) is the key's value under one fixed map (:func:`memorization_kv_map`,
    seeded by ``kv_map_seed``, shared by every split and in ``info["kv_map"]``): nothing in the sequence
    tells it, the model must learn it into its weights. Labels: ``IGNORE`` at keys (MAD's, every split).

    Input length ``seq_len`` (even, as MAD's pairs need). ``vocab_size`` as given. MAD baseline:
    ``vocab_size=256, seq_len=32``, 256 train examples.

    Splits train, test, then validation (``validation_size=0``: none) come from one stream seeded by ``seed``.
    """
    _check_common(train_size, test_size, validation_size, seed, vocab_size)
    check_ints(("seq_len", seq_len, 2), ("kv_map_seed", kv_map_seed, 0))
    if seq_len % 2:
        raise ValueError(f"seq_len: expected an even length (pairs 'k <insert>'), got {seq_len}")
    kv = memorization_kv_map(vocab_size, kv_map_seed)
    insert = vocab_size - 1
    params = dict(vocab_size=vocab_size, seq_len=seq_len, kv_map_seed=kv_map_seed, train_size=train_size,
                  test_size=test_size, seed=seed, **validation_param(validation_size))

    def make(rng, size, split):
        keys = rng.integers(0, len(kv), size=(size, seq_len // 2))
        ids = np.full((size, seq_len), insert, dtype=np.int64)
        ids[:, 0::2] = keys
        labels = np.full((size, seq_len), IGNORE, dtype=np.int64)
        labels[:, 1::2] = np.asarray(kv)[keys]
        return {"input_ids": ids, "labels": labels}

    splits = _build("memorization", params, MEMORIZATION_STREAM, seed,
                    split_sizes(train_size, test_size, validation_size), make)
    n = vocab_size - 1
    layout = (f"{seq_len // 2} pairs 'k <insert>', the label at <insert> the key's value under the fixed map "
              f"info['kv_map']: input length {seq_len}")
    itos = _kv_itos(vocab_size, (0, n // 2), (n // 2, n), {"insert": insert})
    return Task(name="memorization", splits=splits, seq_len=seq_len, vocab_size=vocab_size, num_classes=None,
                itos=itos, info={**params, "insert_token": insert, "key_tokens": [0, n // 2],
                                 "value_tokens": [n // 2, n], "kv_map": kv, "layout": layout})
