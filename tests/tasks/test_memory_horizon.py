"""Memory Horizon (paper 004 Appendix A): the compression function on hand-worked examples, and the data."""
import torch

from seqlab.tasks import IGNORE, memory_horizon
from seqlab.tasks.memory_horizon import compress, memory_horizon_targets, memory_spans


def test_compress_hand_worked_examples():
    # []: nothing to add -> 0
    assert compress([]) == 0
    # [4]: odd length, the middle element with the first operation (+) -> 4
    assert compress([4]) == 4
    # [1, 2, 3]: +1*3 = 3, then the middle 2 with the next operation (-) -> 3 - 2 = 1
    assert compress([1, 2, 3]) == 1
    # [1, 2, 3, 4]: +1*4 - 2*3 = 4 - 6 = -2 -> -2 mod 50 = 48
    assert compress([1, 2, 3, 4]) == 48
    # [3, 4, 2, 1, 4]: +3*4 - 4*1 = 12 - 4 = 8, middle 2 with (+) -> 10
    assert compress([3, 4, 2, 1, 4]) == 10
    # [4, 4, 4, 4, 4, 4, 4, 4]: +16 - 16 + 16 - 16 = 0
    assert compress([4] * 8) == 0
    # [4,0,4,0,4,0,4,4,0,4,0,4,0,4]: pairs (4,4)+ (0,0)- (4,4)+ (0,0)- (4,4)+ (0,0)- (4,4)+ = 64 -> 64 mod 50 = 14
    assert compress([4, 0, 4, 0, 4, 0, 4, 4, 0, 4, 0, 4, 0, 4]) == 14
    # the modulus is a parameter: 64 mod 7 = 1
    assert compress([4, 0, 4, 0, 4, 0, 4, 4, 0, 4, 0, 4, 0, 4], max_output=7) == 1


def test_targets_restart_after_each_reset():
    R = 50
    tokens = [1, 2, R, 3, 4, 2, R, 4]
    # lists: [1] -> 1; [1,2] -> +1*2 = 2; reset; [3] -> 3; [3,4] -> 12; [3,4,2] -> +3*2 = 6, middle 4 (-) -> 2;
    # reset; [4] -> 4
    assert memory_horizon_targets(tokens, R) == [1, 2, IGNORE, 3, 12, 2, IGNORE, 4]
    spans = memory_spans(torch.tensor([tokens]), R)
    assert spans.tolist() == [[1, 2, 0, 1, 2, 3, 0, 1]]


def test_task_splits_follow_the_definition():
    task = memory_horizon(seq_len=40, resets=3, train_size=20, test_size=10, seed=3)
    assert task.vocab_size == 51 and task.info["reset"] == 50 and task.is_language_model
    data = task.tensors("train")
    ids, labels = data["input_ids"], data["labels"]
    assert ids.shape == (20, 40) and labels.shape == (20, 40)
    assert ((ids == 50).sum(dim=1) == 3).all()
    assert ((ids <= 4) | (ids == 50)).all()
    for row, lab in zip(ids, labels):
        assert lab.tolist() == memory_horizon_targets(row.tolist(), 50)
    assert (labels[ids == 50] == IGNORE).all()


def test_a_validation_split_comes_after_the_test_split():
    plain = memory_horizon(seq_len=24, train_size=20, test_size=6)
    with_val = memory_horizon(seq_len=24, train_size=20, test_size=6, validation_size=5)
    assert "validation" not in plain.splits and with_val.size("validation") == 5
    for split in ("train", "test"):
        assert torch.equal(plain.tensors(split)["labels"], with_val.tensors(split)["labels"])
