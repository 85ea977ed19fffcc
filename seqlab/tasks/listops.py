"""ListOps as in the Long Range Arena (002 §3.1; Nangia & Bowman 2018; Tay et al. 2020).

An example is a nested list operation such as ``[MAX 2 9 [MIN 4 7 ] 0 ]`` and its label, the
single digit it evaluates to. The four operators of Long ListOps:

- ``[MIN`` / ``[MAX``: the smallest / largest argument;
- ``[MED``: the median, ``int(numpy.median(args))`` (the mean of the two middle values, rounded
  towards zero, when the count is even);
- ``[SM``: the sum modulo 10.

The generator follows the LRA recipe: a node is a digit with probability ``1 - op_prob`` (always
at ``max_depth``), otherwise an operator with between 2 and ``max_args`` arguments, each a fresh
node one level deeper; trees are drawn until their token count lies in ``[min_length,
max_length]``. The LRA pipeline writes round brackets around every partial application and its
input pipeline drops them; we never write them, so the model sees exactly the LRA tokens.

Tokens: ``0 = <pad>``, ``1..10`` = digits ``"0".."9"``, then ``[MIN [MAX [MED [SM ]`` — 16 ids, the
"input feature size of 16 tokens" of 002 §3.1. Every sequence has the fixed length
``seq_len = max_length`` and is padded **on the left** with ``<pad>``, so that the last position
always holds the closing ``]`` (or the lone digit) — the position a last-position classifier
reads (002 §3.2: "the target prediction is the output of the final element").

Splits are drawn from one seeded stream; an expression appears in at most one split. They are
cached under ``data/cache/`` (``seqlab.tasks._cache``): Long ListOps takes minutes to draw once.
"""
from __future__ import annotations

import random

import numpy as np

from seqlab.tasks._cache import cached_splits
from seqlab.tasks.base import Task, renamed_arguments

__all__ = ["listops", "OPERATORS", "ITOS", "generate_tree", "tree_tokens", "tree_value"]

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
CLOSE = "]"
PAD = "<pad>"
DIGITS = tuple(str(d) for d in range(10))
ITOS = [PAD, *DIGITS, *OPERATORS, CLOSE]
STOI = {s: i for i, s in enumerate(ITOS)}
GENERATOR_VERSION = 1   # part of the cache key: bump when the generator changes


def generate_tree(rng: random.Random, depth: int, max_depth: int, max_args: int, op_prob: float):
    """A random expression tree: an ``int`` leaf or a pair ``(operator, [children])``."""
    if depth < max_depth and rng.random() < op_prob:
        n_args = rng.randint(2, max_args)
        children = [generate_tree(rng, depth + 1, max_depth, max_args, op_prob) for _ in range(n_args)]
        return (rng.choice(OPERATORS), children)
    return rng.randrange(10)


def tree_tokens(tree) -> list[str]:
    """The LRA token strings of a tree (round brackets already dropped)."""
    if isinstance(tree, int):
        return [str(tree)]
    op, children = tree
    out = [op]
    for child in children:
        out.extend(tree_tokens(child))
    out.append(CLOSE)
    return out


def tree_value(tree) -> int:
    """The label by recursion over the tree (the generator's own definition of each operator)."""
    if isinstance(tree, int):
        return tree
    op, children = tree
    args = [tree_value(c) for c in children]
    if op == "[MIN":
        return min(args)
    if op == "[MAX":
        return max(args)
    if op == "[MED":
        return int(np.median(args))
    if op == "[SM":
        return sum(args) % 10
    raise ValueError(f"unknown operator {op!r}")


def _draw_examples(rng: random.Random, n: int, *, max_depth: int, max_args: int, op_prob: float,
                   min_length: int, max_length: int, seen: set, max_tries: int) -> list[tuple[list[str], int]]:
    out, tries = [], 0
    while len(out) < n:
        tries += 1
        if tries > max_tries:
            raise RuntimeError(f"listops: drew {tries} trees but found only {len(out)} of {n} distinct expressions "
                               f"with length in [{min_length}, {max_length}]; widen the bounds or ask for fewer")
        tree = generate_tree(rng, 1, max_depth, max_args, op_prob)
        tokens = tree_tokens(tree)
        if not (min_length <= len(tokens) <= max_length):
            continue
        key = " ".join(tokens)
        if key in seen:
            continue
        seen.add(key)
        out.append((tokens, tree_value(tree)))
    return out


def encode(tokens: list[str], seq_len: int) -> list[int]:
    """Token strings -> ids, left-padded with ``<pad>`` to ``seq_len``."""
    if len(tokens) > seq_len:
        raise ValueError(f"tokens: length {len(tokens)} exceeds seq_len={seq_len}")
    return [STOI[PAD]] * (seq_len - len(tokens)) + [STOI[t] for t in tokens]


def decode(ids) -> list[str]:
    """Ids -> token strings, padding removed."""
    return [ITOS[int(i)] for i in ids if int(i) != STOI[PAD]]


@renamed_arguments(n_train="train_size", n_validation="validation_size", n_test="test_size")
def listops(*, train_size: int = 4000, validation_size: int = 500, test_size: int = 500, max_depth: int = 4,
            max_args: int = 5, min_length: int = 8, max_length: int = 64, op_prob: float = 0.25,
            seed: int = 0) -> Task:
    """The ListOps task: classify an expression by its value (10 classes).

    Quick-profile defaults are small (lengths 8..64); LRA's Long ListOps is ``max_depth=10,
    max_args=10, min_length=500, max_length=2000`` (``op_prob=0.25`` as in LRA). Splits are
    HuggingFace ``Dataset``s with ``input_ids`` (``int64[max_length]``) and ``labels`` (``int64``).
    """
    from datasets import Dataset

    for name, value in (("train_size", train_size), ("validation_size", validation_size), ("test_size", test_size),
                        ("max_depth", max_depth), ("min_length", min_length), ("max_length", max_length)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if not isinstance(max_args, int) or max_args < 2:
        raise ValueError(f"max_args: expected an int >= 2, got {max_args!r}")
    if min_length > max_length:
        raise ValueError(f"min_length: expected <= max_length={max_length}, got {min_length}")
    if not 0.0 < op_prob < 1.0:
        raise ValueError(f"op_prob: expected a probability in (0, 1), got {op_prob!r}")
    # the cache key keeps the names the caches were made with
    params = {"n_train": train_size, "n_validation": validation_size, "n_test": test_size, "max_depth": max_depth,
              "max_args": max_args, "min_length": min_length, "max_length": max_length, "op_prob": op_prob,
              "seed": seed, "generator_version": GENERATOR_VERSION}

    def build() -> dict:
        rng, seen = random.Random(seed), set()
        sizes = {"train": train_size, "validation": validation_size, "test": test_size}
        max_tries = 200 * sum(sizes.values()) + 10_000
        splits = {}
        for split, n in sizes.items():
            examples = _draw_examples(rng, n, max_depth=max_depth, max_args=max_args, op_prob=op_prob,
                                      min_length=min_length, max_length=max_length, seen=seen, max_tries=max_tries)
            splits[split] = Dataset.from_dict({
                "input_ids": [encode(tokens, max_length) for tokens, _ in examples],
                "labels": [label for _, label in examples],
            })
        return splits

    splits = cached_splits("listops", params, build)
    info = {"max_depth": max_depth, "max_args": max_args, "min_length": min_length, "max_length": max_length,
            "op_prob": op_prob, "seed": seed, "padding": "left, with <pad> (id 0)"}
    return Task(name="listops", splits=splits, seq_len=max_length, vocab_size=len(ITOS), num_classes=10,
                itos=list(ITOS), info=info)
