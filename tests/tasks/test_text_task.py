"""The character-level text task: ASCII tokenizer, local files, a HF loader on a local file, and
the default corpus (data/corpus/shakespeare.txt)."""
import hashlib

import pytest
import torch
from helpers import REPO

from seqlab.tasks import text as text_task
from seqlab.tasks.text import CORPUS, decode, encode, shakespeare

FIXTURE = REPO / "data" / "fixtures" / "tiny_corpus.txt"


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path))


def test_tokenizer_round_trip_and_ascii_folding():
    s = "Relation networks, eq. 9: exp(p + q)!\n"
    assert decode(encode(s)) == s
    assert encode("café") == encode("cafe")           # decomposed, the accent dropped
    assert encode("→") == []                           # no ASCII form: dropped
    assert max(encode(s)) < 128
    with pytest.raises(ValueError, match="ids: expected ASCII codes"):
        decode([65, 300])


def test_local_files_windows_and_splits():
    corpus = FIXTURE.read_text()
    task = text_task(files=[FIXTURE], seq_len=32)
    assert task.vocab_size == 128 and task.num_classes is None and task.seq_len == 32
    assert set(task.splits) == {"train", "validation", "test"}
    tr = task.tensors("train")
    assert tr["input_ids"].shape[1] == 32
    # next-character targets, and the first window is the start of the file
    assert torch.equal(tr["input_ids"][:, 1:], tr["labels"][:, :-1])
    assert decode(tr["input_ids"][0]) == corpus[:32]
    assert decode(tr["labels"][0]) == corpus[1:33]
    # contiguous, non-overlapping windows: train is 90% of the stream
    n_train_windows = (len(corpus) - 2 * int(len(corpus) * 0.05) - 1) // 32
    assert tr["input_ids"].shape[0] == n_train_windows
    assert task.size("validation") >= 1 and task.size("test") >= 1


def test_huggingface_loader_on_a_local_file():
    task = text_task(dataset="text", data_files={"train": str(FIXTURE)}, seq_len=16)
    direct = text_task(files=[FIXTURE], seq_len=16)
    # the `text` loader splits lines; joined again they give the same characters up to newlines
    assert task.vocab_size == 128 and task.size("train") > 10
    got = decode(task.tensors("train")["input_ids"][0])
    assert got.replace("\n", "") == decode(direct.tensors("train")["input_ids"][0]).replace("\n", "")[: len(got.replace("\n", ""))]
    with pytest.raises(ValueError, match="text_column"):
        text_task(dataset="text", data_files={"train": str(FIXTURE)}, text_column="body")


def test_the_default_corpus_is_the_fixed_shakespeare_file():
    corpus = shakespeare()
    assert corpus == CORPUS.read_text(encoding="ascii") and corpus.isascii() and 1_000_000 < len(corpus) < 2_000_000
    assert corpus.startswith("HAMLET") and "Shall I compare thee to a summer's day?" in corpus
    assert "Project Gutenberg" not in corpus                          # header and footer stripped
    assert shakespeare(20_000) == corpus[:20_000]
    task = text_task(max_chars=20_000, seq_len=64)
    assert task.info["source"] == "shakespeare"
    assert task.info["digest"] == hashlib.sha256(corpus[:20_000].encode("ascii")).hexdigest()[:16]
    assert decode(task.tensors("train")["input_ids"][0]) == corpus[:64]
    readme = (CORPUS.parent / "README.md").read_text()
    assert f"({len(corpus) / 1e6:.2f} MB" in readme and "public domain" in readme


def test_errors():
    with pytest.raises(ValueError, match="seq_len"):
        text_task(files=[FIXTURE], seq_len=0)
    with pytest.raises(FileNotFoundError, match="files"):
        text_task(files=["/nonexistent/corpus.txt"])
    with pytest.raises(ValueError, match="too few"):
        text_task(files=[FIXTURE], seq_len=100_000)
    with pytest.raises(ValueError, match="one source"):
        text_task(files=[FIXTURE], dataset="text")
    with pytest.raises(TypeError, match=r"text\(\) got valid_fraction: the argument is now validation_fraction"):
        text_task(files=[FIXTURE], valid_fraction=0.1)


def test_every_task_spells_its_splits_one_way():
    """Counts ``train_size, validation_size, test_size``; fractions ``validation_fraction, test_fraction``."""
    import inspect

    from seqlab import tasks

    split_words = ("train", "valid", "test", "n_")
    for name in tasks.NAMES:
        params = inspect.signature(tasks.TASKS.lookup(name)).parameters
        splits = {p for p in params if p.startswith(split_words)}
        assert splits <= {"train_size", "validation_size", "test_size", "validation_fraction", "test_fraction"}, \
            (name, splits)
