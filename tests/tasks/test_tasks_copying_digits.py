"""Tasks copying and digits: layouts derived from their definitions, determinism, caching, the copying metrics."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from seqlab import tasks
from seqlab.tasks.base import IGNORE
from seqlab.tasks.copying import BOS, EOS, PAD, SEP, copying_autoregressive_accuracy


@pytest.fixture(scope="module")
def copy_task():
    return tasks.copying(min_len=3, max_len=7, alphabet=5, train_size=300, test_size=64, autoregressive_n=64)


# ----------------------------------------------------------------------------- copying


def test_copying_sequences_follow_the_definition(copy_task):
    assert copy_task.seq_len == 2 * 7 + 2 and copy_task.vocab_size == 4 + 5 and copy_task.num_classes is None
    assert copy_task.itos == ["<pad>", "<bos>", "<sep>", "<eos>", "a", "b", "c", "d", "e"]
    for split in ("train", "test"):
        data = copy_task.tensors(split)
        lengths = copy_task.splits[split]["length"]
        assert set(lengths) <= set(range(3, 8)) and len(set(lengths)) > 1
        for ids, labels, n in zip(data["input_ids"].tolist(), data["labels"].tolist(), lengths):
            x = ids[1:n + 1]
            assert all(4 <= t < 9 for t in x)
            full = [BOS, *x, SEP, *x, EOS] + [PAD] * (2 * 7 + 3 - (2 * n + 3))
            assert ids == full[:-1]                                  # inputs: the sequence without its last token
            want = [full[t + 1] if n + 1 <= t <= 2 * n + 1 else IGNORE for t in range(len(ids))]
            assert labels == want                                    # scored: the copy and <eos> only


def test_copying_is_deterministic_cached_and_keyed_by_every_parameter(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path))
    kw = dict(min_len=2, max_len=5, alphabet=4, train_size=50, test_size=10)
    a = tasks.copying(**kw)
    folders = list((tmp_path / "cache").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("copying-")
    b = tasks.copying(**kw)                                          # from the cache
    assert len(list((tmp_path / "cache").iterdir())) == 1
    for split in ("train", "test"):
        assert torch.equal(a.tensors(split)["input_ids"], b.tensors(split)["input_ids"])
    c = tasks.copying(**kw, seed=1)
    d = tasks.copying(**{**kw, "train_size": 51})
    assert len(list((tmp_path / "cache").iterdir())) == 3
    assert not torch.equal(a.tensors("train")["input_ids"], c.tensors("train")["input_ids"])
    assert d.size("train") == 51 and a.size("train") == 50


class CopyOracle(nn.Module):
    """Predicts the copy from the tokens it has seen (causal): after <sep> at position s = n + 1, position t
    predicts input[t - n] while the copy lasts, then <eos>. ``wrong_eos`` breaks only the final <eos>."""

    def __init__(self, vocab_size, wrong_eos=False):
        super().__init__()
        self.vocab_size, self.num_classes, self.wrong_eos = vocab_size, None, wrong_eos
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, tokens):
        B, L = tokens.shape
        pred = torch.full((B, L), PAD, dtype=torch.long)
        for b in range(B):
            row = tokens[b].tolist()
            if SEP not in row:
                continue
            n = row.index(SEP) - 1
            for t in range(n + 1, min(L, 2 * n + 2)):
                pred[b, t] = row[t - n] if t < 2 * n + 1 else (BOS if self.wrong_eos else EOS)
        return nn.functional.one_hot(pred, self.vocab_size).float() * 10


def test_copying_metrics_score_the_copy_only(copy_task):
    batch = copy_task.batch_at("test", torch.arange(16))
    oracle = CopyOracle(copy_task.vocab_size)
    logits = oracle(batch["input_ids"])
    m = copy_task.metrics(logits, batch)
    assert m["accuracy"][0] == m["accuracy"][1] == int((batch["labels"] != IGNORE).sum())
    assert m["sequence_accuracy"] == (16.0, 16)
    assert copy_task.loss(logits, batch) < 1e-3
    # garbage at every unscored position changes nothing
    noisy = torch.randn_like(logits) * 5
    scored = batch["labels"] != IGNORE
    noisy[scored] = logits[scored]
    assert copy_task.metrics(noisy, batch) == m
    assert torch.equal(copy_task.loss(noisy, batch), copy_task.loss(logits, batch))


def test_autoregressive_accuracy_decodes_greedily(copy_task):
    assert copying_autoregressive_accuracy(CopyOracle(copy_task.vocab_size), copy_task, "test", n=64) == 1.0
    bad_eos = CopyOracle(copy_task.vocab_size, wrong_eos=True)
    assert copying_autoregressive_accuracy(bad_eos, copy_task, "test", n=64) == 0.0   # every string misses <eos>
    from seqlab.train import evaluate

    out = evaluate(bad_eos, copy_task, "test", batch_size=10)
    lengths = np.array(copy_task.splits["test"]["length"])
    # teacher-forced: every letter right, every <eos> wrong -> accuracy sum(n) / sum(n + 1)
    assert out["accuracy"] == pytest.approx(lengths.sum() / (lengths + 1).sum(), rel=1e-12)
    assert out["sequence_accuracy"] == 0.0 and out["autoregressive_accuracy"] == 0.0


def test_copying_errors_name_the_argument():
    with pytest.raises(ValueError, match="min_len: expected <= max_len=4, got 5"):
        tasks.copying(min_len=5, max_len=4)
    with pytest.raises(ValueError, match="alphabet: expected at most 26 letters, got 30"):
        tasks.copying(alphabet=30)
    with pytest.raises(ValueError, match="train_size: expected an int >= 1, got 0"):
        tasks.copying(train_size=0)


# ----------------------------------------------------------------------------- digits


def test_digits_sequence_layout_is_the_row_major_pixels():
    from sklearn.datasets import load_digits

    task = tasks.digits()
    images, target = load_digits().images, load_digits().target
    assert (task.seq_len, task.vocab_size, task.num_classes, task.info["grid"]) == (64, 17, 10, (8, 8))
    idx = {s: np.array(task.splits[s]["index"]) for s in ("train", "test")}
    assert len(set(idx["train"]) & set(idx["test"])) == 0 and len(idx["train"]) + len(idx["test"]) == 1797
    assert len(idx["test"]) == math.ceil(0.2 * 1797)                  # sklearn rounds the test share up
    for split in ("train", "test"):
        data = task.tensors(split)
        assert np.array_equal(data["input_ids"].numpy(), images[idx[split]].reshape(-1, 64).astype(np.int64))
        assert np.array_equal(data["labels"].numpy(), target[idx[split]])
    # stratified: every class keeps its share of the test split (within one example)
    for c in range(10):
        share = (target == c).sum() * len(idx["test"]) / 1797
        assert abs((target[idx["test"]] == c).sum() - share) <= 1


def test_digits_patch_layout_decodes_back_to_the_quantised_image():
    from sklearn.datasets import load_digits

    task = tasks.digits(layout="patches", patch=2, levels=4)
    assert (task.seq_len, task.vocab_size, task.info["grid"]) == (16, 256, (4, 4))
    images = load_digits().images.astype(int)
    idx = task.splits["train"]["index"][:20]
    tokens = task.tensors("train")["input_ids"][:20].tolist()
    for i, row in zip(idx, tokens):
        for p, code in enumerate(row):
            gy, gx = divmod(p, 4)                                # the grid of patches, row-major
            digits_ = [(code // 4**j) % 4 for j in range(4)]      # mixed radix, least significant first
            for j, q in enumerate(digits_):
                py, px = divmod(j, 2)
                v = images[i, 2 * gy + py, 2 * gx + px]
                assert q == min(v * 4 // 17, 3)                   # v in 0..16 -> level floor(v * 4 / 17)


def test_digits_split_is_seeded_and_errors_are_clear():
    a, b, c = tasks.digits(), tasks.digits(), tasks.digits(seed=1)
    assert a.splits["test"]["index"] == b.splits["test"]["index"]
    assert a.splits["test"]["index"] != c.splits["test"]["index"]
    with pytest.raises(ValueError, match="layout: expected 'sequence' or 'patches', got 'grid'"):
        tasks.digits(layout="grid")
    with pytest.raises(ValueError, match="patch: expected a divisor of 8"):
        tasks.digits(layout="patches", patch=3)


def test_a_validation_split_leaves_train_and_test_as_they_were(tmp_path, monkeypatch):
    """The claims watch a validation split; the quick profile's tasks (no validation) keep their data and caches."""
    from seqlab.tasks._cache import cache_key

    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path))
    kw = dict(min_len=3, max_len=3, alphabet=5, train_size=40, test_size=10)
    plain, with_val = tasks.copying(**kw), tasks.copying(**kw, validation_size=12)
    assert "validation" not in plain.splits and with_val.size("validation") == 12
    for split in ("train", "test"):
        assert torch.equal(plain.tensors(split)["input_ids"], with_val.tensors(split)["input_ids"])
    assert not torch.equal(with_val.tensors("validation")["input_ids"][:10], plain.tensors("test")["input_ids"])
    assert cache_key("copying", {**kw, "seed": 0}) in {p.name for p in (tmp_path / "cache").iterdir()}
    with pytest.raises(ValueError, match="validation_size: expected an int >= 0, got -1"):
        tasks.copying(validation_size=-1)


def test_digits_validation_is_carved_out_of_the_training_images():
    plain, with_val = tasks.digits(), tasks.digits(validation_fraction=0.1)
    assert with_val.splits["test"]["index"] == plain.splits["test"]["index"]
    train, valid = set(with_val.splits["train"]["index"]), set(with_val.splits["validation"]["index"])
    assert not train & valid and train | valid == set(plain.splits["train"]["index"])
    assert len(valid) == round(0.1 * 1797)
    assert torch.bincount(with_val.tensors("validation")["labels"]).min() >= 17     # stratified: ~18 of each digit
    with pytest.raises(ValueError, match=r"validation_fraction: expected a number in \[0, 0.8\)"):
        tasks.digits(validation_fraction=0.8)
