"""MQAR with fresh training data (``mqar(fresh=True)``): the batch of a step is a pure function of (seed, step), no
validation or test sequence is ever drawn into it, the held-out splits are fixed, and ``fit`` trains on the stream (a
run stopped and resumed reads the batches it would have read, bit for bit on CPU)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from seqlab import models, tasks, train
from seqlab.tasks.base import IGNORE
from seqlab.tasks.recall import MAX_REDRAWS, mqar_fresh_batch

SMALL = dict(vocab_size=64, seq_len=16, num_kv_pairs=3, test_size=24, validation_size=16, filler="zoology")


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path / "data"))


def _rows(batch) -> set:
    return {row.numpy().astype(np.int64).tobytes() for row in batch["input_ids"]}


def test_the_batch_of_a_step_is_a_pure_function_of_the_seed_and_the_step():
    task, again = (tasks.get("mqar", **SMALL, seed=3, fresh=True) for _ in range(2))
    assert type(task).__name__ == "StreamTask" and sorted(task.splits) == ["test", "validation"]
    first = task.train_batch(7, 32)
    assert first["input_ids"].shape == first["labels"].shape == (32, 16)
    assert torch.equal(first["input_ids"], again.train_batch(7, 32)["input_ids"])              # another build, same
    assert torch.equal(first["labels"], task.train_batch(7, 32)["labels"])                      # asked again, same
    assert not torch.equal(first["input_ids"], task.train_batch(8, 32)["input_ids"])           # the next step: new
    other = tasks.get("mqar", **SMALL, seed=4, fresh=True)
    assert not torch.equal(first["input_ids"], other.train_batch(7, 32)["input_ids"])          # another seed: new
    ids, labels = first["input_ids"], first["labels"]                    # every label: the value of its key
    for row, lab in zip(ids.tolist(), labels.tolist()):
        pairs = dict(zip(row[0:6:2], row[1:6:2]))
        asked = [(t, y) for t, y in zip(row, lab) if y != IGNORE]
        assert len(asked) == 3 and all(pairs[t] == y for t, y in asked)
    fixed = tasks.get("mqar", **SMALL, seed=3, fresh=True).tensors("test")["input_ids"]
    assert torch.equal(fixed, task.tensors("test")["input_ids"])                               # held-out splits fixed
    with pytest.raises(ValueError, match="draws its training sequences fresh at every step"):
        task.size("train")
    with pytest.raises(ValueError, match="fresh: expected True or False"):
        tasks.mqar(**SMALL, fresh=1)


def test_no_validation_or_test_sequence_is_ever_drawn_into_the_stream():
    """A task with only 3 x 4 x 1 = 12 possible sequences (keys 1-3, values 4-7, one query place): its held-out
    splits hold most of them, and 2 000 fresh rows never repeat one of those; where the held-out splits hold all 12,
    the stream says so instead of looping."""
    kw = dict(vocab_size=8, seq_len=4, num_kv_pairs=1, filler="zoology")
    task = tasks.mqar(**kw, test_size=8, validation_size=8, seed=0, fresh=True)
    held = {row.astype(np.int64).tobytes() for split in ("test", "validation")
            for row in task.tensors(split)["input_ids"].numpy()}
    assert 4 <= len(held) < 12
    drawn = set().union(*(_rows(task.train_batch(step, 100)) for step in range(20)))
    assert drawn and not drawn & held and len(drawn | held) <= 12
    everything = {np.array([k, v, k, 0], dtype=np.int64).tobytes() for k in (1, 2, 3) for v in (4, 5, 6, 7)}
    args = dict(seed=0, vocab_size=8, seq_len=4, num_kv_pairs=1, power_a=0.01, filler="zoology")
    one_left = everything - {np.array([1, 4, 1, 0], dtype=np.int64).tobytes()}
    ids, _ = mqar_fresh_batch(0, 16, **args, held_out=frozenset(one_left))
    assert (ids == np.array([1, 4, 1, 0])).all()                                                # the one sequence left
    with pytest.raises(ValueError, match=f"fresh: {MAX_REDRAWS} draws at step 0 all equal a validation or test"):
        mqar_fresh_batch(0, 4, **args, held_out=frozenset(everything))


def test_fit_trains_on_the_stream_and_a_resumed_run_reads_the_same_batches(tmp_path):
    def run(**kw):
        task = tasks.get("mqar", **SMALL, seed=1, fresh=True)
        torch.manual_seed(0)
        model = models.build("transformer", vocab_size=64, d_model=16, n_layers=1)
        history = train.fit(model, task, steps=6, batch_size=8, lr=3e-3, eval_split="validation", eval_every=3,
                            progress=False, threads=1, **kw)
        return model, history

    whole, history = run()
    assert history.steps == 6 and history.final is not None
    path = tmp_path / "run.pt"

    def stop_at_3(h, record):
        if record["split"] == "train" and record["step"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(train.TrainingInterrupted):
        run(checkpoint=str(path), callbacks=[stop_at_3])
    resumed, _ = run(checkpoint=str(path), resume=True)
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)
