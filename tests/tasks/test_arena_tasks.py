"""The recall/memory tasks (MQAR of Zoology, five MAD tasks): every label of every split recomputed by an
independent plain-Python reading of the inputs, determinism and caching, argument errors, published sizes."""
import numpy as np
import pytest
import torch

from seqlab import tasks
from seqlab.tasks.base import IGNORE

SPLITS = ("train", "validation", "test")
SMALL = dict(train_size=40, test_size=12, validation_size=10)


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path))


def rows(task, split):
    t = task.tensors(split)
    return list(zip(t["input_ids"].tolist(), t["labels"].tolist()))


def inside(tok, bounds):
    return bounds[0] <= tok < bounds[1]


# ----------------------------------------------------------------------------- independent evaluators


def mqar_expected(ids, info, gaps=None):
    """Labels from the inputs: the first 2D tokens are the pairs; a key in the query region gets its value."""
    D, half, V = info["num_kv_pairs"], info["vocab_size"] // 2, info["vocab_size"]
    pairs = {}
    for t in range(0, 2 * D, 2):
        assert 1 <= ids[t] < half and half <= ids[t + 1] < V          # keys low half (no 0), values high half
        assert ids[t] not in pairs                                    # distinct keys
        pairs[ids[t]] = ids[t + 1]
    out = [IGNORE] * (2 * D)
    asked = []
    for t in range(2 * D, len(ids)):
        if ids[t] in pairs:
            assert (t - 2 * D) % 2 == 0                               # queries at 2D + 2 gap
            asked.append(ids[t])
            if gaps is not None:
                gaps.append((t - 2 * D) // 2)
            out.append(pairs[ids[t]])
        else:
            out.append(IGNORE)
    assert sorted(asked) == sorted(pairs)                             # each key asked exactly once
    return out


def recall_expected(ids, info, train):
    """(Noisy) in-context recall: scan the tokens by kind, remembering each key's value."""
    keys, values, noise = info["key_tokens"], info["value_tokens"], info["noise_tokens"]
    memory, out = {}, [IGNORE] * len(ids)
    for t, tok in enumerate(ids):
        if inside(tok, keys) and t + 1 < len(ids):
            v = ids[t + 1]
            assert inside(v, values) and memory.get(tok, v) == v      # a key keeps its value in a sequence
            if tok in memory and info["multi_query"]:
                out[t] = v
            memory[tok] = v
        elif inside(tok, noise):
            assert inside(ids[t + 1 - 2 * (t % 2)], noise)            # noise comes in pairs of slots
    probe = ids[-1]                                                   # the last input is the probe key
    assert inside(probe, keys) and probe in memory
    if not info["multi_query"]:
        assert ids[-2] == info["copy_token"] and info["copy_token"] not in ids[:-2]
    out[-1] = memory[probe]
    return ids[1:] + [memory[probe]] if train else out


def segments(ids, info):
    """Fuzzy recall: (kind, start, tokens) runs after the left padding; kinds 'k', 'v', 'copy'."""
    start = 0
    while ids[start] == info["pad_token"]:
        start += 1
    assert start >= 1 and info["pad_token"] not in ids[start:]
    runs = []
    for t in range(start, len(ids)):
        tok = ids[t]
        kind = "k" if inside(tok, info["key_tokens"]) else "v" if inside(tok, info["value_tokens"]) else "copy"
        assert kind != "copy" or tok == info["copy_token"]
        if runs and runs[-1][0] == kind != "copy":
            runs[-1][2].append(tok)
        else:
            runs.append((kind, t, [tok]))
    return runs


def fuzzy_expected(ids, info, train, key_sizes=None):
    runs = segments(ids, info)
    if runs[-1][0] == "k":                              # a one-token probe value: nothing of it is an input
        runs.append(("v", len(ids), []))
    *body, (kk, _, probe), (kv, v_at, partial) = runs
    assert kk == "k" and kv == "v"
    if not info["multi_query"]:
        assert body[-1][0] == "copy"
        body = body[:-1]
    memory, out = {}, [IGNORE] * len(ids)
    for (k1, _, key), (k2, at, value) in zip(body[0::2], body[1::2]):
        assert (k1, k2) == ("k", "v") and len(body) % 2 == 0
        assert len(set(key)) == len(key) <= info["k_motif_size"] and len(set(value)) == len(value) <= info["v_motif_size"]
        key, value = tuple(key), tuple(value)
        assert memory.get(key, value) == value
        if key in memory and info["multi_query"]:
            out[at - 1: at - 1 + len(value)] = value          # the last key token predicts the first value token
        memory[key] = value
        if key_sizes is not None:
            key_sizes.append(len(key))
    probe = tuple(probe)
    answer = memory[probe]                                    # the probe pair was shown in the context
    assert list(answer[:len(partial)]) == partial and len(partial) == len(answer) - 1
    out[v_at - 1: v_at - 1 + len(answer)] = answer
    assert len(out) == len(ids)
    if key_sizes is not None:
        key_sizes.append(len(probe))
    return ids[1:] + [answer[-1]] if train else out


def selective_expected(ids, info):
    N, blank, copy = info["num_tokens_to_copy"], info["blank_token"], info["copy_token"]
    c = ids.index(copy)
    assert c == len(ids) - N - 1 and ids[c + 1:] == [blank] * N and ids.count(copy) == 1
    data = [x for x in ids[:c] if x != blank]
    assert len(data) == N and all(0 <= x < blank for x in data)
    assert ids[c - 1] != blank                                # MAD's blanks always precede some data token
    return [IGNORE] * (c + 1) + data


def memorization_expected(ids, info):
    """Pairs ``k <insert>``: the label at ``<insert>`` is the fixed map's value of the key before it."""
    out = []
    for t, tok in enumerate(ids):
        assert (tok == info["insert_token"]) == (t % 2 == 1)
        out.append(info["kv_map"][ids[t - 1]] if t % 2 else IGNORE)
    return out


def check_task(task, expected):
    """``expected(ids, split) -> labels`` for every row of every split; the input length is ``task.seq_len``."""
    for split in task.splits:
        for ids, labels in rows(task, split):
            assert len(ids) == task.seq_len and all(0 <= x < task.vocab_size for x in ids)
            assert labels == expected(ids, split)
    name = task.itos
    assert len(name) == task.vocab_size and len(set(name)) == task.vocab_size


# ----------------------------------------------------------------------------- MQAR


def test_mqar_labels_follow_the_layout_and_gaps_follow_the_power_law():
    task = tasks.mqar(vocab_size=64, seq_len=48, num_kv_pairs=4, train_size=300, test_size=50, validation_size=20)
    assert (task.seq_len, task.vocab_size, task.name) == (48, 64, "mqar")
    assert task.itos[3] == "k3" and task.itos[40] == "v40"
    gaps = []
    check_task(task, lambda ids, split: mqar_expected(ids, task.info, gaps if split == "train" else None))
    space = (48 - 8) // 2
    counts = np.bincount(gaps, minlength=space)
    assert len(gaps) == 300 * 4 and counts.max() <= 300
    assert counts[: space // 4].sum() > 4 * counts[-(space // 4):].sum()   # early gaps far more frequent
    assert counts[0] > 150                                                  # p(gap 0) is the largest weight
    uniform = tasks.mqar(vocab_size=64, seq_len=48, num_kv_pairs=4, power_a=1.0, **SMALL)
    g = []
    for ids, _ in rows(uniform, "train"):
        mqar_expected(ids, uniform.info, g)
    assert np.bincount(g, minlength=space)[-(space // 4):].sum() > 0        # a = 1: late gaps do occur


def test_mqar_answers_count_by_pair_and_tell_a_confused_key_from_an_unread_value():
    from seqlab.tasks.recall import mqar_answers

    task = tasks.mqar(vocab_size=64, seq_len=48, num_kv_pairs=4, filler="zoology", **SMALL)
    t = task.tensors("test")
    ids, labels = t["input_ids"], t["labels"]
    pred = labels.clone()                                      # every query right, then three kinds of wrong answers
    gen = torch.Generator().manual_seed(0)
    expect_by_pair, expect_other, expect_wrong = [[0, 0] for _ in range(4)], 0, 0
    for b in range(ids.shape[0]):                              # a plain reading of each query, independent of the code
        keys, values = ids[b, 0:8:2].tolist(), ids[b, 1:8:2].tolist()
        for t_ in (labels[b] != IGNORE).nonzero().flatten().tolist():
            i = keys.index(int(ids[b, t_]))
            kind = int(torch.randint(0, 4, (1,), generator=gen))
            if kind == 1:                                      # another pair's value: a confused key
                pred[b, t_] = values[(i + 1) % 4]
            elif kind == 2:                                    # a value not in this sequence
                pred[b, t_] = next(v for v in range(32, 64) if v not in values)
            elif kind == 3:                                    # a key token
                pred[b, t_] = keys[i]
            expect_by_pair[i][1] += 1
            expect_by_pair[i][0] += kind == 0
            expect_wrong += kind != 0
            expect_other += kind == 1
    pred[labels == IGNORE] = 0
    got = mqar_answers(ids, labels, pred, 4)
    assert got == {"by_pair": expect_by_pair, "wrong": expect_wrong, "another_value": expect_other}
    assert 0 < expect_other < expect_wrong
    assert sum(c for c, _ in got["by_pair"]) + got["wrong"] == int((labels != IGNORE).sum())


def test_mqar_zoology_filler_is_token_0_and_keeps_the_layout():
    """Zoology's runs (random_non_queries=False): every position that is neither a pair nor a query holds 0."""
    task = tasks.mqar(vocab_size=64, seq_len=48, num_kv_pairs=4, filler="zoology", **SMALL)
    assert task.info["filler"] == "zoology" and "token 0" in task.info["layout"]
    check_task(task, lambda ids, split: mqar_expected(ids, task.info))
    for ids, labels in rows(task, "train"):
        rest = [tok for t, (tok, lab) in enumerate(zip(ids, labels)) if t >= 8 and lab == IGNORE]
        assert rest and set(rest) == {0}
    random = tasks.mqar(vocab_size=64, seq_len=48, num_kv_pairs=4, **SMALL)
    assert random.info["filler"] == "random" and len({tok for ids, _ in rows(random, "train") for tok in ids[8:]}) > 10
    with pytest.raises(ValueError, match="filler: expected one of"):
        tasks.mqar(filler="zeros")


def test_mqar_published_sizes():
    for L, D in ((64, 4), (256, 64), (1024, 256)):
        task = tasks.mqar(vocab_size=8192, seq_len=L, num_kv_pairs=D, train_size=4, test_size=4, validation_size=4)
        assert task.seq_len == L and task.vocab_size == 8192
        check_task(task, lambda ids, split: mqar_expected(ids, task.info))


# ----------------------------------------------------------------------------- in-context recall


@pytest.mark.parametrize("multi_query", [True, False])
def test_in_context_recall_labels(multi_query):
    task = tasks.in_context_recall(seq_len=32, multi_query=multi_query, **SMALL)
    assert task.seq_len == (31 if multi_query else 32) and task.vocab_size == 16
    assert task.info["key_tokens"] == ([0, 8] if multi_query else [0, 7])
    assert task.info["copy_token"] == (None if multi_query else 15)
    check_task(task, lambda ids, split: recall_expected(ids, task.info, split == "train"))
    scored = (task.tensors("test")["labels"] != IGNORE).sum(dim=1)
    assert (scored >= 1).all() and (scored.max() > 1) == multi_query


@pytest.mark.parametrize("multi_query", [True, False])
def test_noisy_in_context_recall_labels_and_noise(multi_query):
    task = tasks.noisy_in_context_recall(seq_len=40, multi_query=multi_query, **SMALL)
    info = task.info
    assert info["noise_tokens"] == ([16, 32] if multi_query else [15, 31]) and task.itos[20] == "<noise20>"
    check_task(task, lambda ids, split: recall_expected(ids, info, split == "train"))
    for split in ("validation", "test"):
        t = task.tensors(split)
        is_noise = (t["input_ids"] >= info["noise_tokens"][0]) & (t["input_ids"] < info["noise_tokens"][1])
        assert (t["labels"][is_noise] == IGNORE).all()                   # noise is never scored ...
        assert not ((t["labels"] >= info["noise_tokens"][0]) & (t["labels"] < info["noise_tokens"][1])).any()
    ids = task.tensors("train")["input_ids"]
    frac = ((ids >= info["noise_tokens"][0]) & (ids < info["noise_tokens"][1])).float().mean().item()
    assert 0.1 < frac < 0.3                                              # ~ frac_noise of the pair slots
    train_labels = task.tensors("train")["labels"]
    assert (train_labels >= info["noise_tokens"][0]).any()               # ... but predicted in training (MAD)


# ----------------------------------------------------------------------------- fuzzy in-context recall


@pytest.mark.parametrize("multi_query", [True, False])
def test_fuzzy_in_context_recall_labels_and_motif_sizes(multi_query):
    task = tasks.fuzzy_in_context_recall(seq_len=48, multi_query=multi_query, **SMALL)
    info = task.info
    assert task.seq_len == 48 and task.vocab_size == 16
    assert info["pad_token"] == (15 if multi_query else 14) and task.itos[info["pad_token"]] == "<pad>"
    sizes = {split: [] for split in task.splits}
    check_task(task, lambda ids, split: fuzzy_expected(ids, info, split == "train", sizes[split]))
    assert set(sizes["train"]) == {1, 2, 3}
    assert set(sizes["test"]) == set(sizes["validation"]) == {3}          # test keys: the largest motif


def test_fuzzy_repeated_keys_are_scored():
    task = tasks.fuzzy_in_context_recall(vocab_size=8, seq_len=64, k_motif_size=2, v_motif_size=2, **SMALL)
    check_task(task, lambda ids, split: fuzzy_expected(ids, task.info, split == "train"))
    scored = (task.tensors("test")["labels"] != IGNORE).sum(dim=1)
    assert scored.max() > 4                                               # more than the probe's value


# ----------------------------------------------------------------------------- selective copying, memorization


def test_selective_copying_labels():
    task = tasks.selective_copying(vocab_size=10, seq_len=30, num_tokens_to_copy=6, **SMALL)
    assert task.seq_len == 30 and task.vocab_size == 10 and task.itos[-2:] == ["<blank>", "<copy>"]
    check_task(task, lambda ids, split: selective_expected(ids, task.info))
    first = [ids.index(next(x for x in ids if x != 8)) for ids, _ in rows(task, "train")]
    assert len(set(first)) > 3                                            # blanks really are scattered


def test_memorization_labels_follow_the_fixed_map():
    task = tasks.memorization(vocab_size=21, seq_len=16, **SMALL)
    kv = task.info["kv_map"]
    assert len(kv) == 10 and sorted(kv) == sorted(set(kv)) and all(10 <= v < 20 for v in kv)
    assert task.info["insert_token"] == 20 and task.itos[20] == "<insert>"
    for split in task.splits:
        for ids, _ in rows(task, split):
            assert ids[1::2] == [20] * 8 and all(0 <= k < 10 for k in ids[0::2])
    check_task(task, lambda ids, split: memorization_expected(ids, task.info))
    learned = {}                                                          # the map as the train split shows it
    for ids, labels in rows(task, "train"):
        for k, v in zip(ids[0::2], labels[1::2]):
            assert learned.setdefault(k, v) == v
    for ids, labels in rows(task, "test"):
        assert all(learned.get(k, v) == v for k, v in zip(ids[0::2], labels[1::2]))
    other = tasks.memorization(vocab_size=21, seq_len=16, seed=3, **SMALL)
    assert other.info["kv_map"] == kv                                     # the map does not depend on the seed
    assert tasks.memorization(vocab_size=21, seq_len=16, kv_map_seed=1, **SMALL).info["kv_map"] != kv


# ----------------------------------------------------------------------------- every task: off-by-one, caching


EVALUATORS = {
    "mqar": (dict(vocab_size=32, seq_len=24, num_kv_pairs=3), lambda ids, s, i: mqar_expected(ids, i)),
    "in_context_recall": (dict(seq_len=24), lambda ids, s, i: recall_expected(ids, i, s == "train")),
    "noisy_in_context_recall": (dict(seq_len=24), lambda ids, s, i: recall_expected(ids, i, s == "train")),
    "fuzzy_in_context_recall": (dict(seq_len=40), lambda ids, s, i: fuzzy_expected(ids, i, s == "train")),
    "selective_copying": (dict(seq_len=24, num_tokens_to_copy=5), lambda ids, s, i: selective_expected(ids, i)),
    "memorization": (dict(vocab_size=31, seq_len=12), lambda ids, s, i: memorization_expected(ids, i)),
}


@pytest.mark.parametrize("name", sorted(EVALUATORS))
def test_a_label_off_by_one_position_is_caught(name):
    kw, expected = EVALUATORS[name]
    task = tasks.get(name, **kw, **SMALL)
    assert task.task_config == {**kw, **SMALL}
    for split in task.splits:
        wrong = 0
        for ids, labels in rows(task, split):
            want = expected(ids, split, task.info)
            assert labels == want
            wrong += labels[1:] + [IGNORE] != want                        # scored one position early
            wrong += [IGNORE] + labels[:-1] != want                       # one position late
        assert wrong == 2 * task.size(split)


VARIATIONS = {
    "mqar": dict(vocab_size=40, seq_len=28, num_kv_pairs=2, power_a=0.5),
    "in_context_recall": dict(vocab_size=12, seq_len=26, multi_query=False),
    "noisy_in_context_recall": dict(vocab_size=30, noise_vocab_size=8, frac_noise=0.4, seq_len=26, multi_query=False),
    "fuzzy_in_context_recall": dict(vocab_size=14, seq_len=42, k_motif_size=2, v_motif_size=2, multi_query=False),
    "selective_copying": dict(vocab_size=12, seq_len=26, num_tokens_to_copy=4),
    "memorization": dict(vocab_size=33, seq_len=14, kv_map_seed=7),
}


@pytest.mark.parametrize("name", sorted(EVALUATORS))
def test_deterministic_and_cached_by_every_parameter(name, tmp_path):
    kw = {**EVALUATORS[name][0], **SMALL}
    cache = tmp_path / "cache"
    a = tasks.get(name, **kw)
    assert [f.name.startswith(name + "-") for f in cache.iterdir()] == [True]
    b = tasks.get(name, **kw)                                             # from the cache
    assert len(list(cache.iterdir())) == 1
    for split in SPLITS:
        for col in ("input_ids", "labels"):
            assert torch.equal(a.tensors(split)[col], b.tensors(split)[col])
    changes = {**VARIATIONS[name], "seed": 1, "train_size": 41, "test_size": 13, "validation_size": 0}
    for i, (param, value) in enumerate(changes.items(), start=2):
        c = tasks.get(name, **{**kw, param: value})
        assert len(list(cache.iterdir())) == i, param                     # a new cache entry per parameter
        assert c.info.get(param, 0) == value
        check = EVALUATORS[name][1]
        assert all(labels == check(ids, "train", c.info) for ids, labels in rows(c, "train"))
    c = tasks.get(name, **{**kw, "seed": 1})
    assert not torch.equal(a.tensors("train")["input_ids"], c.tensors("train")["input_ids"])
    plain = tasks.get(name, **{**kw, "validation_size": 0})
    assert "validation" not in plain.splits
    for split in ("train", "test"):                                       # validation is drawn last
        assert torch.equal(plain.tensors(split)["input_ids"], a.tensors(split)["input_ids"])
    assert isinstance(a.info["layout"], str) and str(a.seq_len) in a.info["layout"]
    assert all(k in a.info for k in kw if k != "validation_size" or kw[k])


# ----------------------------------------------------------------------------- the recall sweep's MQAR


@pytest.mark.parametrize("pairs", [4, 8, 16])
def test_mqar_at_the_recall_sweeps_sizes(pairs):
    """configs/medium/recall-sweep.toml's task: 1024 tokens (511 key tokens), 64 tokens, Zoology's filler; 16 pairs
    fill the query region (each key asked once, the gaps a permutation); every label recomputed from the inputs."""
    kw = dict(vocab_size=1024, seq_len=64, num_kv_pairs=pairs, filler="zoology")
    task = tasks.mqar(**kw, train_size=1100, test_size=12, validation_size=10)      # two chunks of train rows
    info = task.info
    assert info["key_tokens"] == [1, 512] and info["key_tokens"][1] - info["key_tokens"][0] >= 256
    for split in SPLITS:
        for ids, labels in rows(task, split):
            gaps = []
            assert labels == mqar_expected(ids, info, gaps)
            assert all(t == 0 for t, y in zip(ids[2 * pairs:], labels[2 * pairs:]) if y == IGNORE)   # token 0 filler
            if pairs == 16:
                assert sorted(gaps) == list(range(16))
    keys = task.tensors("train")["input_ids"][:, 0:2 * pairs:2]
    assert len(torch.unique(keys)) > 400                                  # the whole key vocabulary is used
    again = tasks.mqar(**kw, train_size=2200, test_size=12, validation_size=10)
    assert torch.equal(again.tensors("train")["input_ids"][:1024], task.tensors("train")["input_ids"][:1024])


# ----------------------------------------------------------------------------- argument errors


BAD = [
    ("mqar", dict(seq_len=63), "seq_len"),
    ("mqar", dict(seq_len=64, num_kv_pairs=17), "num_kv_pairs"),
    ("mqar", dict(vocab_size=16, num_kv_pairs=8), "vocab_size"),
    ("mqar", dict(power_a=0.0), "power_a"),
    ("mqar", dict(num_kv_pairs=0), "num_kv_pairs"),
    ("mqar", dict(train_size=0), "train_size"),
    ("mqar", dict(seed=-1), "seed"),
    ("in_context_recall", dict(seq_len=63), "seq_len"),
    ("in_context_recall", dict(vocab_size=1), "vocab_size"),
    ("in_context_recall", dict(multi_query=1), "multi_query"),
    ("in_context_recall", dict(test_size=0), "test_size"),
    ("noisy_in_context_recall", dict(frac_noise=1.0), "frac_noise"),
    ("noisy_in_context_recall", dict(noise_vocab_size=0), "noise_vocab_size"),
    ("noisy_in_context_recall", dict(vocab_size=17), "vocab_size"),
    ("fuzzy_in_context_recall", dict(vocab_size=6), "vocab_size"),
    ("fuzzy_in_context_recall", dict(seq_len=12), "seq_len"),
    ("fuzzy_in_context_recall", dict(k_motif_size=0), "k_motif_size"),
    ("fuzzy_in_context_recall", dict(validation_size=-1), "validation_size"),
    ("selective_copying", dict(seq_len=17, num_tokens_to_copy=8), "seq_len"),
    ("selective_copying", dict(num_tokens_to_copy=0), "num_tokens_to_copy"),
    ("selective_copying", dict(vocab_size=2), "vocab_size"),
    ("memorization", dict(seq_len=31), "seq_len"),
    ("memorization", dict(vocab_size=2), "vocab_size"),
    ("memorization", dict(kv_map_seed=-5), "kv_map_seed"),
]


@pytest.mark.parametrize("name, kw, arg", BAD, ids=[f"{n}-{a}" for n, _, a in BAD])
def test_bad_arguments_name_the_argument(name, kw, arg):
    with pytest.raises(ValueError, match=f"^{arg}: "):
        tasks.get(name, **kw)


def test_unknown_name_suggests_a_task():
    with pytest.raises(ValueError, match="did you mean 'mqar'"):
        tasks.get("mqa")


# ----------------------------------------------------------------------------- MAD's sizes


TINY = dict(train_size=3, test_size=3, validation_size=3)
MAD_SIZES = [   # the baselines of configs/tasks/*.yml, then the hardest setting of each
    ("in_context_recall", dict(vocab_size=16, seq_len=128, multi_query=True), 127, 16),
    ("in_context_recall", dict(vocab_size=128, seq_len=1024), 1023, 128),
    ("noisy_in_context_recall", dict(vocab_size=32, noise_vocab_size=16, frac_noise=0.2, seq_len=128), 127, 32),
    ("noisy_in_context_recall", dict(vocab_size=144, noise_vocab_size=16, frac_noise=0.8, seq_len=1024), 1023, 144),
    ("fuzzy_in_context_recall", dict(vocab_size=16, seq_len=128, k_motif_size=3, v_motif_size=3), 128, 16),
    ("fuzzy_in_context_recall", dict(vocab_size=128, seq_len=1024), 1024, 128),
    ("selective_copying", dict(vocab_size=16, seq_len=256, num_tokens_to_copy=16), 256, 16),
    ("selective_copying", dict(vocab_size=128, seq_len=1024, num_tokens_to_copy=96), 1024, 128),
    ("memorization", dict(vocab_size=256, seq_len=32), 32, 256),
    ("memorization", dict(vocab_size=8192, seq_len=32), 32, 8192),
]


@pytest.mark.parametrize("name, kw, L, V", MAD_SIZES, ids=[f"{n}-{k['seq_len']}-{k['vocab_size']}" for n, k, _, _ in MAD_SIZES])
def test_mad_sizes_are_accepted(name, kw, L, V):
    task = tasks.get(name, **kw, **TINY)
    assert (task.seq_len, task.vocab_size) == (L, V)
    expected = EVALUATORS[name][1]
    check_task(task, lambda ids, split: expected(ids, split, task.info))


def test_defaults_sizes():
    want = {"mqar": (64, 256), "in_context_recall": (63, 16), "noisy_in_context_recall": (63, 32),
            "fuzzy_in_context_recall": (64, 16), "selective_copying": (64, 16), "memorization": (32, 256)}
    for name, (L, V) in want.items():
        task = tasks.get(name, train_size=2, test_size=2, validation_size=2)
        assert (task.seq_len, task.vocab_size) == (L, V), name
