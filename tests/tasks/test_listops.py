"""ListOps (002 §3.1, LRA): every label is checked by an evaluator written independently of the generator."""
import pytest

from seqlab.tasks.listops import ITOS, decode, listops


def stack_machine(tokens: list[str]) -> int:
    """Evaluate LRA ListOps tokens left to right with a stack; no recursion, no numpy.

    An operator opens a frame; a digit is appended to the top frame; ``]`` closes the top frame,
    applies its operator and appends the result to the frame below.
    """
    frames = [["ROOT", []]]
    for tok in tokens:
        if tok.startswith("["):
            frames.append([tok, []])
        elif tok == "]":
            op, args = frames.pop()
            s = sorted(args)
            n = len(s)
            if op == "[MIN":
                v = s[0]
            elif op == "[MAX":
                v = s[-1]
            elif op == "[SM":
                v = 0
                for a in args:
                    v = (v + a) % 10
            elif op == "[MED":
                v = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2   # int() of a non-negative mean
            else:
                raise AssertionError(f"unknown operator {op}")
            frames[-1][1].append(v)
        else:
            assert tok.isdigit() and len(tok) == 1, tok
            frames[-1][1].append(int(tok))
    assert len(frames) == 1 and len(frames[0][1]) == 1, "unbalanced expression"
    return frames[0][1][0]


def test_evaluator_on_hand_worked_examples():
    # 002 §3.1: Max(2, Min(3, 9), SumMod(1, 1), Median(0, 1, 2), 0) = 3
    assert stack_machine("[MAX 2 [MIN 3 9 ] [SM 1 1 ] [MED 0 1 2 ] 0 ]".split()) == 3
    assert stack_machine("[MED 1 2 ]".split()) == 1            # int(median) = int(1.5)
    assert stack_machine("[MED 9 2 4 7 ]".split()) == 5        # int((4 + 7) / 2)
    assert stack_machine("[SM 9 9 9 ]".split()) == 7


@pytest.fixture(scope="module")
def task():
    return listops(train_size=1500, validation_size=300, test_size=300)


def test_every_label_agrees_with_independent_evaluator(task):
    for split, ds in task.splits.items():
        for ids, label in zip(ds["input_ids"], ds["labels"]):
            assert stack_machine(decode(ids)) == label, f"{split}: {' '.join(decode(ids))} labelled {label}"


def test_full_default_test_split_labels():
    t = listops()   # the defaults the lessons use: check EVERY test example
    for ids, label in zip(t.splits["test"]["input_ids"], t.splits["test"]["labels"]):
        assert stack_machine(decode(ids)) == label


def test_format_padding_and_bounds(task):
    assert task.vocab_size == 16 and task.num_classes == 10 and task.itos == ITOS
    assert ITOS[:1] == ["<pad>"] and ITOS[11:] == ["[MIN", "[MAX", "[MED", "[SM", "]"]
    for ds in task.splits.values():
        for ids in ds["input_ids"]:
            assert len(ids) == task.seq_len == 64
            body = decode(ids)
            assert 8 <= len(body) <= 64
            assert all(i == 0 for i in ids[: 64 - len(body)])     # left padding only
            assert "(" not in body and ")" not in body
            assert body[-1] == "]"


def test_splits_are_disjoint_and_seeded(task, tmp_path, monkeypatch):
    keys = {s: {tuple(x) for x in ds["input_ids"]} for s, ds in task.splits.items()}
    assert not keys["train"] & keys["test"] and not keys["train"] & keys["validation"]
    assert not keys["validation"] & keys["test"]
    # regenerate from scratch (two empty cache folders): the seed alone fixes the splits
    fresh = []
    for folder in ("a", "b"):
        monkeypatch.setenv("SEQLAB_DATA", str(tmp_path / folder))
        fresh.append(listops(train_size=300, validation_size=50, test_size=50))
        assert (tmp_path / folder / "cache").exists()
    assert fresh[0].splits["test"]["input_ids"] == fresh[1].splits["test"]["input_ids"]
    assert fresh[0].splits["train"]["labels"] == fresh[1].splits["train"]["labels"]
    other = listops(train_size=300, validation_size=50, test_size=50, seed=1)
    assert other.splits["test"]["input_ids"] != fresh[0].splits["test"]["input_ids"]


def test_longer_bounds_and_all_operators():
    t = listops(train_size=50, validation_size=10, test_size=40, max_depth=6, max_args=6, min_length=100, max_length=256)
    lengths = [len(decode(ids)) for ids in t.splits["test"]["input_ids"]]
    assert min(lengths) >= 100 and max(lengths) <= 256
    seen = set()
    for ids, label in zip(t.splits["test"]["input_ids"], t.splits["test"]["labels"]):
        toks = decode(ids)
        seen.update(tok for tok in toks if tok.startswith("["))
        assert stack_machine(toks) == label
    assert seen == {"[MIN", "[MAX", "[MED", "[SM"}


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_args: expected an int >= 2"):
        listops(max_args=1)
    with pytest.raises(ValueError, match="min_length: expected <= max_length"):
        listops(min_length=70, max_length=64)
    with pytest.raises(ValueError, match="test_size: expected a positive int"):
        listops(test_size=0)


@pytest.mark.parametrize("old,new", [("n_train", "train_size"), ("n_validation", "validation_size"),
                                     ("n_test", "test_size")])
def test_the_old_split_names_are_refused_naming_the_new_one(old, new):
    with pytest.raises(TypeError, match=f"listops\\(\\) got {old}: the argument is now {new}"):
        listops(**{old: 10})
