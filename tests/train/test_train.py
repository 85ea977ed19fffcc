"""seqlab.train: schedule, batches, evaluate's exact aggregation, callbacks, checkpoint + resume, mismatch errors."""
import math
import os

import pytest
import torch

from seqlab import models, tasks, train
from seqlab.config import seed_everything
from seqlab.tasks.base import IGNORE




@pytest.fixture(scope="module")
def small_copy():
    # 40 training strings, batch 8: epochs wrap every 5 steps, so resumption crosses an epoch boundary
    return tasks.copying(min_len=2, max_len=4, alphabet=6, train_size=40, test_size=24, autoregressive_n=8)


def tiny(task, seed=0, **kw):
    seed_everything(seed)
    cfg = dict(d_model=16, n_layers=1, n_heads=2, mlp_ratio=2.0)
    cfg.update(kw)
    return models.build("transformer", vocab_size=task.vocab_size, **cfg)


def test_lr_schedule_warmup_then_cosine():
    lrs = [train.lr_at(s, lr=1.0, steps=50, warmup=10, final_lr_ratio=0.1) for s in range(50)]
    assert lrs[:10] == [(s + 1) / 10 for s in range(10)]            # linear warm-up to the peak
    assert lrs[10] == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(0.1)                            # cosine down to final_lr_ratio * lr
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))          # monotone decay
    mid = 10 + (50 - 10 - 1) / 2                                    # cosine is halfway at the middle step
    assert train.lr_at(int(mid), lr=1.0, steps=50, warmup=10) == pytest.approx(
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (int(mid) - 10) / 39)))


def test_batches_are_a_pure_function_of_seed_and_step_and_cover_each_epoch():
    n, B = 10, 4
    first = [train.batch_indices(n, B, seed=3, step=s) for s in range(5)]
    again = [train.batch_indices(n, B, seed=3, step=s) for s in reversed(range(5))][::-1]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    stream = torch.cat(first)                                       # 20 indices = two epochs of 10
    assert sorted(stream[:10].tolist()) == list(range(10))
    assert sorted(stream[10:].tolist()) == list(range(10))
    assert not torch.equal(stream[:10], stream[10:])                # each epoch has its own permutation
    assert not torch.equal(train.batch_indices(n, B, seed=4, step=0), first[0])


def test_evaluate_aggregates_exactly_over_batches(small_copy):
    model = tiny(small_copy)
    a = train.evaluate(model, small_copy, "test", batch_size=5)
    b = train.evaluate(model, small_copy, "test", batch_size=1000)
    for key in ("loss", "accuracy", "sequence_accuracy", "autoregressive_accuracy"):
        assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), key
    # the same numbers from the whole split at once, computed directly
    data = small_copy.tensors("test")
    with torch.no_grad():
        logits = model(data["input_ids"])
    mask = data["labels"] != IGNORE
    loss = torch.nn.functional.cross_entropy(logits[mask], data["labels"][mask])
    acc = (logits.argmax(-1)[mask] == data["labels"][mask]).float().mean()
    assert a["loss"] == pytest.approx(float(loss), rel=1e-5)
    assert a["accuracy"] == pytest.approx(float(acc), rel=1e-6)
    assert model.training                                           # evaluate restores the mode


def test_fit_records_callbacks_and_final(small_copy):
    model = tiny(small_copy)
    seen, hooks = [], []

    class Recorder:
        def __call__(self, history, record):
            assert history.records[-1] is record                   # called after the record is appended
            seen.append(record["split"])

        def on_fit_start(self, model_, task_):
            hooks.append(("start", model_ is model, task_ is small_copy))

        def on_fit_end(self, history):
            hooks.append(("end", len(history.records)))

    h = train.fit(model, small_copy, steps=6, batch_size=8, lr=1e-2, eval_every=3, callbacks=[Recorder()],
                  progress=False)
    assert seen == ["train"] * 3 + ["test"] + ["train"] * 3 + ["test"]
    assert hooks == [("start", True, True), ("end", 8)]
    assert [r["step"] for r in h.split("train")] == list(range(1, 7))
    for r in h.split("train"):
        assert set(r) >= {"step", "split", "loss", "accuracy", "lr", "tokens_per_s"}
        assert math.isfinite(r["loss"]) and 0 <= r["accuracy"] <= 1 and r["tokens_per_s"] > 0
    assert h.final == {k: v for k, v in h.records[-1].items() if k not in ("step", "split")}
    assert h.final == train.evaluate(model, small_copy, "test")
    assert h.last("loss") == h.train_loss()[-1] and len(h.train_loss()) == 6


def test_fit_without_final_eval_and_threads_are_restored(small_copy):
    model = tiny(small_copy)
    before = torch.get_num_threads()
    h = train.fit(model, small_copy, steps=4, batch_size=8, lr=1e-2, eval_every=2, final_eval=False,
                  progress=False, threads=2, callbacks=lambda hist, rec: None)
    assert torch.get_num_threads() == before
    assert h.final is None and [r["step"] for r in h.split("test")] == [2, 4]
    with pytest.raises(ValueError, match="threads: expected None or a positive int, got 0"):
        train.fit(model, small_copy, steps=1, batch_size=2, lr=1e-3, threads=0)


def test_training_reduces_the_loss(small_copy):
    model = tiny(small_copy)
    before = train.evaluate(model, small_copy, "train")["loss"]
    h = train.fit(model, small_copy, steps=30, batch_size=8, lr=1e-2, progress=False, eval_split=None)
    assert h.final is None
    assert train.evaluate(model, small_copy, "train")["loss"] < 0.8 * before


def test_resume_reproduces_the_uninterrupted_run_exactly(small_copy, tmp_path):
    N = 12
    kw = dict(steps=N, batch_size=8, lr=1e-2, seed=5, progress=False, eval_every=4)
    # dropout on: the torch RNG state must be saved and restored too
    full_model = tiny(small_copy, dropout=0.1)
    full = train.fit(full_model, small_copy, **kw)

    def ctrl_c_half_way(history, record):
        if record["split"] == "train" and record["step"] == N // 2:
            raise KeyboardInterrupt

    path = tmp_path / "run.pt"
    with pytest.raises(train.TrainingInterrupted) as stop:
        train.fit(tiny(small_copy, dropout=0.1), small_copy, checkpoint=path, callbacks=[ctrl_c_half_way], **kw)
    assert stop.value.step == N // 2 and stop.value.checkpoint == str(path)
    assert os.listdir(tmp_path) == ["run.pt"]                      # atomic write: no temporary files left

    fresh = tiny(small_copy, seed=123, dropout=0.1)                  # different initial weights: all come from the file
    resumed = train.fit(fresh, small_copy, checkpoint=path, resume=True, **kw)
    assert resumed.train_loss() == full.train_loss()                 # exact equality, every step
    assert [r["lr"] for r in resumed.split("train")] == [r["lr"] for r in full.split("train")]
    assert resumed.final == full.final
    for (name, a), (_, b) in zip(full_model.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), name


def test_eval_at_start_records_step_zero_and_leaves_the_training_unchanged(small_copy):
    kw = dict(steps=6, batch_size=8, lr=1e-2, seed=3, progress=False, eval_every=3)
    model = tiny(small_copy, dropout=0.1)
    before = train.evaluate(model, small_copy, "test")
    plain = train.fit(tiny(small_copy, dropout=0.1), small_copy, **kw)
    started = train.fit(model, small_copy, eval_at_start=True, **kw)
    first = started.split("test")[0]
    assert first["step"] == 0 and first["loss"] == before["loss"] and first["accuracy"] == before["accuracy"]
    assert started.train_loss() == plain.train_loss()               # the evaluation draws nothing from the RNG
    assert [r["step"] for r in started.split("test")] == [0, 3, 6]
    assert [r["step"] for r in plain.split("test")] == [3, 6]


def test_observe_summarises_every_run_and_refuses_a_wrong_initial_scale(small_copy, tmp_path):
    with train.observe() as outer:
        with train.observe() as inner:
            train.fit(tiny(small_copy), small_copy, steps=4, batch_size=8, lr=1e-2, progress=False, eval_every=2,
                      desc="one")
        train.fit(tiny(small_copy), small_copy, steps=2, batch_size=8, lr=1e-2, progress=False, desc="two",
                  checkpoint=tmp_path / "two.pt")
    assert [r["name"] for r in inner] == ["one"] and [r["name"] for r in outer] == ["one", "two"]
    run = inner[0]
    assert run["num_targets"] == small_copy.vocab_size and run["eval_split"] == "test"
    assert abs(run["initial_loss"] - math.log(run["num_targets"])) <= train.INITIAL_LOSS_TOLERANCE
    assert [step for step, _ in run["curve"]] == [0, 2, 4]
    assert run["steps_to_0.9"] == train.first_step_at(run["curve"], 0.9)
    # resumed from its finished checkpoint, a run keeps the start it recorded
    with train.observe() as again:
        train.fit(tiny(small_copy, seed=9), small_copy, steps=2, batch_size=8, lr=1e-2, progress=False,
                  checkpoint=tmp_path / "two.pt", resume=True)
    assert again[0]["initial_loss"] == outer[1]["initial_loss"] is not None
    loud = tiny(small_copy)
    with torch.no_grad():
        loud.head.weight.mul_(300.0)                                 # logits far from zero: a confident wrong start
    with train.observe() as runs, pytest.raises(ValueError, match=r"loud: initial validation loss .* nats from ln"):
        train.fit(loud, small_copy, steps=2, batch_size=8, lr=1e-2, progress=False, desc="loud")
    assert runs == []
    trained = train.fit(loud, small_copy, steps=1, batch_size=8, lr=1e-2, progress=False)   # not observed: trained
    assert [(r["split"], r["step"]) for r in trained.records] == [("train", 1), ("test", 1)]   # no check at step 0
    assert abs(trained.train_loss()[0] - math.log(train.num_targets(small_copy))) > train.INITIAL_LOSS_TOLERANCE


def test_resume_refuses_a_different_run(small_copy, tmp_path):
    path = tmp_path / "run.pt"
    train.fit(tiny(small_copy), small_copy, steps=2, batch_size=8, lr=1e-2, checkpoint=path, progress=False)
    with pytest.raises(ValueError, match=r"batch_size: checkpoint 8, now 4"):
        train.fit(tiny(small_copy), small_copy, steps=2, batch_size=4, lr=1e-2, checkpoint=path, resume=True,
                  progress=False)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 truncated zip", b"garbage \x00\x01\x02" * 10, "truncated",
                                     "a_list"])
def test_resume_from_an_unreadable_checkpoint_names_the_file(small_copy, tmp_path, content):
    path = tmp_path / "run.pt"
    if content == "truncated":   # a real checkpoint cut in half (a run killed while copying it, a full disk)
        train.fit(tiny(small_copy), small_copy, steps=2, batch_size=8, lr=1e-2, checkpoint=path, progress=False)
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2])
    elif content == "a_list":   # a readable torch file that is not a checkpoint
        torch.save([torch.zeros(2)], path)
    else:
        path.write_bytes(content)
    with pytest.raises(train.CheckpointError, match=rf"{path} is not a readable seqlab checkpoint: "):
        train.fit(tiny(small_copy), small_copy, steps=2, batch_size=8, lr=1e-2, checkpoint=path, resume=True,
                  progress=False)


def test_checkpoint_that_never_ran_code_loads_weights_only(tmp_path):
    """A pickle that would run code on loading is refused, not executed."""
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + os.fspath(tmp_path / "pwned"),))

    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"model": Evil()}))
    with pytest.raises(train.CheckpointError, match="is not a readable seqlab checkpoint"):
        train.load_checkpoint(path)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("where", ["read_only_folder", "a_folder", "under_a_file"])
def test_unwritable_checkpoint_fails_before_the_first_step(small_copy, tmp_path, where):
    if where == "read_only_folder":
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
        path = folder / "run.pt"
        if os.access(folder, os.W_OK):   # root ignores permission bits
            folder.chmod(0o700)
            pytest.skip("running as root: a read-only folder is still writable")
    elif where == "a_folder":
        path = tmp_path
    else:
        (tmp_path / "file").write_text("x")
        path = tmp_path / "file" / "run.pt"
    steps_run = []
    with pytest.raises(train.CheckpointError, match=rf"checkpoint: {path}"):
        train.fit(tiny(small_copy), small_copy, steps=3, batch_size=8, lr=1e-2, checkpoint=path, progress=False,
                  callbacks=[lambda history, record: steps_run.append(record)])
    assert steps_run == []


def test_mismatched_vocabulary_names_both_sizes():
    task = tasks.copying()                                           # vocab 30
    model = models.build("transformer", vocab_size=20, d_model=16, n_layers=1, n_heads=2)
    msg = r"task 'copying' has vocab_size 30 but model 'transformer' was built with vocab_size 20"
    with pytest.raises(ValueError, match=msg):
        train.fit(model, task, steps=1, batch_size=2, lr=1e-3, progress=False)
    with pytest.raises(ValueError, match=msg):
        train.evaluate(model, task)


def test_mismatched_classes_and_lengths_name_both_sizes():
    copy_task, digit_task = tasks.copying(), tasks.digits()
    clf3 = models.build("transformer", vocab_size=30, num_classes=3, d_model=16, n_layers=1, n_heads=2)
    with pytest.raises(ValueError, match=r"language-model task .* classifier with num_classes 3"):
        train.fit(clf3, copy_task, steps=1, batch_size=2, lr=1e-3, progress=False)
    with pytest.raises(ValueError, match=r"task 'digits' has num_classes 10 but model 'transformer' was built "
                                         r"with num_classes 3"):
        train.fit(clf3, digit_task, steps=1, batch_size=2, lr=1e-3, progress=False)
    lm = models.build("transformer", vocab_size=17, d_model=16, n_layers=1, n_heads=2)
    with pytest.raises(ValueError, match=r"classification task with num_classes 10 .* language model"):
        train.fit(lm, digit_task, steps=1, batch_size=2, lr=1e-3, progress=False)
    short = models.build("linear-transformer", vocab_size=30, d_model=16, n_layers=1, n_heads=2, max_len=10,
                         positions="learned")
    with pytest.raises(ValueError, match=r"task 'copying' has seq_len 18 but model 'linear-transformer' accepts "
                                         r"at most max_len 10"):
        train.fit(short, copy_task, steps=1, batch_size=2, lr=1e-3, progress=False)


def test_bad_arguments_are_named(small_copy):
    model = tiny(small_copy)
    with pytest.raises(ValueError, match="steps: expected a positive int, got 0"):
        train.fit(model, small_copy, steps=0, batch_size=2, lr=1e-3)
    with pytest.raises(ValueError, match="eval_split: .* got 'valid'"):
        train.fit(model, small_copy, steps=1, batch_size=2, lr=1e-3, eval_split="valid")
    with pytest.raises(ValueError, match="resume=True needs checkpoint"):
        train.fit(model, small_copy, steps=1, batch_size=2, lr=1e-3, resume=True)


def test_a_language_models_head_runs_on_its_labelled_tokens_alone_with_the_same_training(small_copy):
    """fit runs a seqlab language model's head on the labelled rows only (loop.head_on_features): the same losses,
    accuracies and weights, up to float rounding, as the head over every position (a model whose forward is its
    own, so fit cannot take the shortcut)."""
    from seqlab.models.common import SequenceModel
    from seqlab.train.loop import head_on_features

    class EveryPosition(SequenceModel):
        def forward(self, tokens):                         # the same function; fit must call it whole
            return super().forward(tokens)

    fast = tiny(small_copy)
    full = tiny(small_copy)
    full.__class__ = type("EveryPosition", (EveryPosition, type(full)), {})
    assert head_on_features(fast) and not head_on_features(full)
    labels = small_copy.tensors("train")["labels"]
    assert 0 < int((labels != IGNORE).sum()) < labels.numel()        # some positions are not scored
    kw = dict(steps=12, batch_size=8, lr=3e-3, progress=False)
    a, b = train.fit(fast, small_copy, **kw), train.fit(full, small_copy, **kw)
    train_a = [r for r in a.records if r["split"] == "train"]
    train_b = [r for r in b.records if r["split"] == "train"]
    assert [r["loss"] for r in train_a] == pytest.approx([r["loss"] for r in train_b], rel=1e-5)
    assert [r["accuracy"] for r in train_a] == [r["accuracy"] for r in train_b]
    # (the weights are compared through what they compute: Adam turns the rounding noise of a gradient that is 0
    # in exact arithmetic, such as the keys' bias, into steps of size lr, which the function does not see)
    x = small_copy.tensors("test")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(fast(x), full(x), rtol=1e-4, atol=1e-4)
    classifier = models.build("transformer", vocab_size=small_copy.vocab_size, num_classes=3, d_model=16,
                              n_layers=1, n_heads=2)
    assert not head_on_features(classifier)                          # a classifier pools: every position
