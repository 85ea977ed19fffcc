"""The exercise framework: a registry of small tasks, each with a checker that says what is wrong.

A checker takes the learner's answer and either returns the one-line reason it is right (nothing, where that line is
fixed text), or raises :class:`Wrong` with what is wrong (a shape, the first position that differs, a property that
fails). ``check`` wraps it: the untouched answer ``...`` (and a function stub whose body is ``...``) is
"not answered yet", never an error, so a lesson with untouched exercise cells runs top to bottom and
prints the same text every time (nbval compares it).

What the learner reads (title, task, hint, the starting code, a fixed success line) is data, in ``texts.toml`` beside
this file, one table per exercise id; a lesson's module holds only its checkers: ``@exercise("02.1")`` registers one
with the texts of "02.1".

Every check runs in float64 (complex128 for complex inputs) on inputs drawn from a generator seeded
per exercise, inside ``torch.random.fork_rng``: the output is deterministic and the caller's random
stream is left as it was.
"""
from __future__ import annotations

import builtins
import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Callable, Iterable, Iterator

import torch

from seqlab.ops import relative_error  # the one metric of the ops' tests, in float64
from seqlab.registry import Registry

__all__ = ["Exercise", "Wrong", "NotAnswered", "exercise", "check", "hint", "list_exercises", "get", "ids",
           "notebook_cells"]

_REGISTRY = Registry("exercise")


class Wrong(Exception):
    """Raised by a checker: the answer is not right, and the message says why."""


class NotAnswered(Exception):
    """Raised when the learner's function is still a stub (it returns ``None`` or ``...``)."""


@dataclass(frozen=True)
class Exercise:
    id: str                       # "01.1": lesson 01, exercise 1
    title: str                    # a few words, for the heading "Exercise 1 · <title>"
    task: str                     # the task in one line
    hint: str                     # one line, printed while the cell is untouched
    stub: str                     # the code the learner starts from (before the check line)
    checker: Callable[[Any], str | None]
    correct: str | None = None    # the success line where the checker returns none of its own

    @property
    def lesson(self) -> str:
        return self.id.split(".")[0]

    @property
    def number(self) -> int:
        return int(self.id.split(".")[1])

    @property
    def seed(self) -> int:
        return int(self.id.replace(".", ""))       # "05.2" -> 52: one fixed stream per exercise


@cache
def texts() -> dict[str, dict[str, str]]:
    """``{id: {"title": ..., "task": ..., "hint": ..., ...}}``, read from ``texts.toml`` (see its head)."""
    return tomllib.loads(resources.files(__package__).joinpath("texts.toml").read_text(encoding="utf-8"))


def exercise(id: str):
    """Decorator registering ``checker(answer)`` under ``id``, with the texts of ``id`` in ``texts.toml``.

    The checker returns the one-line reason the answer is right, or nothing where that line is the exercise's fixed
    ``correct`` text. An exercise whose answer is a function gives its ``signature`` (``"reduce(p, q) -> r"``) and
    what it ``returns`` (``"r, shape (B, L, H)"``) instead of a ``stub``: the learner starts from
    :func:`function_stub`, an answer that is no function is ``Wrong`` (naming the signature), and the checker is
    given the function."""
    text = texts().get(id, {})
    starts = {"stub"} if "stub" in text else {"signature", "returns"}
    if set(text) - {"correct"} != {"title", "task", "hint"} | starts:
        raise ValueError(f"texts.toml: [\"{id}\"] needs title, task, hint, then a stub or a signature and returns, "
                         f"and may give correct; it has {sorted(text)}")
    signature = text.get("signature")

    def wrap(fn):
        checker = fn if signature is None else given_a_function(fn, signature)
        code = text["stub"] if signature is None else function_stub(signature, text["returns"])
        _REGISTRY.register(id, Exercise(id=id, title=text["title"], task=text["task"], hint=text["hint"],
                                        stub=code.strip("\n"), checker=checker, correct=text.get("correct")))
        return fn
    return wrap


def given_a_function(check: Callable, signature: str) -> Callable:
    """A checker that calls ``check`` with the answer once it is a function (``Wrong`` naming ``signature`` else)."""
    return lambda answer: check(need_function(answer, signature))


def function_stub(signature: str, returns: str) -> str:
    """The code a function exercise starts from: ``def <signature>:`` with the body ``...``, then
    ``answer = <name>``."""
    head = signature.split(" -> ")[0]
    return f"def {head}:\n    ...          # your code here: return {returns}\n\nanswer = {head.split('(')[0]}"


def ids(lesson=None) -> builtins.list[str]:
    """Every exercise id (``"01.1"`` ...), or those of one lesson (``1``, ``"1"`` or ``"01"``)."""
    if lesson is None:
        return builtins.list(_REGISTRY)
    key = _lesson_key(lesson)
    return [i for i in _REGISTRY if i.split(".")[0] == key]


def _lesson_key(lesson) -> str:
    try:
        n = int(str(lesson))
    except ValueError:
        raise ValueError(f"lesson: expected a lesson number such as 1 or '01', got {lesson!r}") from None
    return f"{n:02d}"


def get(exercise_id: str) -> Exercise:
    """The exercise ``exercise_id``; ``ValueError`` naming it and listing the valid ids when there is none."""
    return _REGISTRY.lookup(str(exercise_id).strip())


def list_exercises(lesson=None) -> builtins.list[tuple[str, str]]:
    """``[(id, one-line task), ...]`` for every exercise, or for one lesson."""
    return [(i, _REGISTRY[i].task) for i in ids(lesson)]


def hint(exercise_id: str) -> str:
    """The one-line hint of an exercise."""
    return get(exercise_id).hint


def check(exercise_id: str, answer) -> bool:
    """Check ``answer`` for exercise ``exercise_id``: print one line saying so and return whether it is right.

    ``...`` (the untouched cell) prints "not answered yet" with the hint and returns False; a wrong answer
    prints what is wrong and returns False; only an unknown ``exercise_id`` raises (``ValueError``).
    """
    ex = get(exercise_id)
    head = f"Exercise {ex.id}"
    if answer is ...:
        print(f"{head}: not answered yet — {ex.hint}")
        return False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ex.seed)
        try:
            reason = ex.checker(answer)
        except NotAnswered as err:
            print(f"{head}: not answered yet — {err} {ex.hint}")
            return False
        except Wrong as err:
            print(f"{head}: not yet — {err}")
            return False
        except Exception as err:                       # a checker must never leave a traceback in a lesson
            print(f"{head}: not yet — checking your answer raised {type(err).__name__}: {short(err)}")
            return False
    if reason is None and ex.correct is None:
        raise RuntimeError(f"the checker of {ex.id} returned no reason and texts.toml gives it no 'correct' line")
    print(f"{head}: correct — {ex.correct if reason is None else reason}")
    return True


def notebook_cells(lesson) -> builtins.list[tuple[str, str]]:
    """``[(markdown, code), ...]``: the cells that pose the exercises of one lesson (untouched: each prints
    "not answered yet")."""
    cells = []
    for i in ids(lesson):
        ex = _REGISTRY[i]
        md = f"### Exercise {ex.number} · {ex.title}\n\n{ex.task}"
        # an assignment, not a trailing ";": nbval's kernel shows the value of a last expression even after ";"
        code = (f"from seqlab import exercises\n\n# Exercise {ex.number}: {ex.task}\n{ex.stub}\n\n"
                f"correct = exercises.check(\"{ex.id}\", answer)")
        cells.append((md, code))
    return cells


# ----------------------------------------------------------------------------------------------- helpers


def short(err: BaseException, limit: int = 160) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def need_function(answer, signature: str):
    if not callable(answer):
        raise Wrong(f"expected a function {signature}, got {type(answer).__name__}")
    return answer


def call(fn, *args, what: str = "your function"):
    """``fn(*args)``; a stub (returns ``None`` or ``...``) is not answered yet, an exception is reported."""
    try:
        out = fn(*args)
    except (Wrong, NotAnswered):
        raise
    except Exception as err:
        raise Wrong(f"{what} raised {type(err).__name__}: {short(err)}") from None
    if out is None or out is ...:
        raise NotAnswered(f"{what} returned {'None' if out is None else '...'} (no `return` yet?).")
    return out


def output(fn, args, name: str, shape: tuple, *, complex_ok: bool = True) -> torch.Tensor:
    """What ``fn`` returns for copies of ``args`` (tensors cloned: the learner cannot change the checker's inputs),
    as a float64 (or complex128) tensor of ``shape`` (:func:`call`, then :func:`tensor`)."""
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    return tensor(call(fn, *copies), name, shape, complex_ok=complex_ok)


def tensor(out, name: str, shape: tuple, *, complex_ok: bool = True) -> torch.Tensor:
    """``out`` as a float64 (or complex128) tensor of ``shape``, or ``Wrong`` saying what came instead."""
    if not isinstance(out, torch.Tensor):
        try:
            out = torch.as_tensor(out)
        except Exception:
            raise Wrong(f"{name}: expected a tensor of shape {tuple(shape)}, got {type(out).__name__}") from None
    if tuple(out.shape) != tuple(shape):
        raise Wrong(f"{name}: expected shape {tuple(shape)}, got {tuple(out.shape)}")
    out = out.detach()
    if out.is_complex():
        if not complex_ok:
            raise Wrong(f"{name}: expected a real tensor, got {out.dtype}")
        return out.to(torch.complex128)
    return out.to(torch.float64)


def fmt(z) -> str:
    """A number for a message: 4 significant digits, complex as a+bi."""
    if isinstance(z, torch.Tensor):
        z = z.item()
    if isinstance(z, complex):
        return f"{z.real:.4g}{z.imag:+.4g}i"
    return f"{z:.4g}"


def first_nonfinite(got: torch.Tensor, name: str, where: str = "") -> None:
    bad = ~torch.isfinite(got)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise Wrong(f"{name} has {int(bad.sum())} non-finite values{where} (the first at index {idx}: "
                    f"{fmt(got[idx])})")


def close(got: torch.Tensor, want: torch.Tensor, tol: float) -> bool:
    return got.shape == want.shape and bool(torch.isfinite(got).all()) and relative_error(got, want) <= tol


def compare(got: torch.Tensor, want: torch.Tensor, tol: float, *, name: str, against: str,
            axes: str = "", where: str = "", absolute: bool = False) -> float:
    """``Wrong`` naming the first index (with the axes' names) where ``got`` and ``want`` differ most, unless the
    relative error ``||got - want|| / ||want||`` (``absolute``: the largest ``|got - want|``) is within ``tol``;
    returns that error."""
    first_nonfinite(got, name, where)
    err = float((got - want).abs().max()) if absolute else relative_error(got, want)
    if err <= tol:
        return err
    diff = (got - want).abs()
    worst = float(diff.max())
    first = tuple(int(i) for i in (diff > 0.1 * worst).nonzero()[0])
    label = f"{axes} = {first}" if axes else f"index {first}"
    measure = "largest difference" if absolute else "relative error"
    raise Wrong(f"{name} differs from {against}{where} first at {label}: got {fmt(got[first])}, expected "
                f"{fmt(want[first])} ({measure} {err:.1e} > {tol:.0e})")


def choice(answer, options, name: str = "answer") -> str:
    """A string among ``options``, forgiving case, spaces and '-'/'_'."""
    if not isinstance(answer, str):
        raise Wrong(f"{name}: expected one of {', '.join(repr(o) for o in options)}, got {answer!r}")
    norm = lambda s: s.strip().lower().replace("_", "-").replace(" ", "-")  # noqa: E731
    for o in options:
        if norm(answer) == norm(o):
            return o
    raise Wrong(f"{name}: expected one of {', '.join(repr(o) for o in options)}, got {answer!r}")


def whole_number(answer, name: str = "answer") -> int:
    if isinstance(answer, bool):
        raise Wrong(f"{name}: expected a whole number, got {answer!r}")
    if isinstance(answer, torch.Tensor) and answer.numel() == 1:
        answer = answer.item()
    if isinstance(answer, float) and answer.is_integer():
        answer = int(answer)
    if not isinstance(answer, int):
        raise Wrong(f"{name}: expected a whole number, got {answer!r}")
    return answer


def real_number(answer, name: str) -> float:
    if isinstance(answer, torch.Tensor) and answer.numel() == 1:
        answer = answer.item()
    if isinstance(answer, bool) or not isinstance(answer, (int, float)) or not math.isfinite(answer):
        raise Wrong(f"{name}: expected a finite real number, got {answer!r}")
    return float(answer)


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def seeded(seed: int, cases: Iterable) -> Iterator[tuple[torch.Generator, Any]]:
    """``(g, case)`` for each case of a checker's loop, all inputs drawn from the one generator ``g`` seeded with
    ``seed``: the same inputs on every run, whatever the caller's random state."""
    g = generator(seed)
    for case in cases:
        yield g, case


def at_lengths(seed: int, lengths: Iterable[int]) -> Iterator[tuple[torch.Generator, int, str]]:
    """``(g, L, where)`` for each length ``L`` (:func:`seeded`); ``where`` is ``" at L = <L>"``, for the messages."""
    for g, L in seeded(seed, lengths):
        yield g, L, f" at L = {L}"


def uniform(g: torch.Generator, *shape, lo: float, hi: float) -> torch.Tensor:
    """Float64 values drawn uniformly from ``[lo, hi)``."""
    return lo + (hi - lo) * torch.rand(*shape, generator=g, dtype=torch.float64)


def complex_randn(g: torch.Generator, *shape) -> torch.Tensor:
    """Complex128 values with standard normal real and imaginary parts."""
    return torch.complex(torch.randn(*shape, generator=g, dtype=torch.float64),
                         torch.randn(*shape, generator=g, dtype=torch.float64))


def transitions(g: torch.Generator, *shape, lo: float, hi: float) -> torch.Tensor:
    """Complex128 transitions: magnitudes uniform in ``[lo, hi)``, phases uniform in ``[-pi, pi)``."""
    return torch.polar(uniform(g, *shape, lo=lo, hi=hi),
                       (2 * torch.rand(*shape, generator=g, dtype=torch.float64) - 1) * math.pi)


def refuse_nonfinite(got: torch.Tensor, name: str, where: str, why: str) -> None:
    """``Wrong`` counting the non-finite values of ``got`` and saying ``why`` they appeared, if there are any."""
    if not torch.isfinite(got).all():
        raise Wrong(f"{name} has {int((~torch.isfinite(got)).sum())} non-finite values{where}: {why}")


def first_above_diagonal(got: torch.Tensor) -> tuple[int, int] | None:
    """The first ``(row, column)`` above the diagonal of a square matrix that is not 0; None where it is lower
    triangular."""
    if got.shape[0] < 2 or not float(got.triu(1).abs().max()) > 0:
        return None
    return tuple(int(i) for i in (got.triu(1) != 0).nonzero()[0])


def pair(answer, what: str) -> None:
    """``Wrong`` unless ``answer`` is a tuple or list of two (``what`` names them: ``"(nu, theta)"``)."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Wrong(f"expected a pair {what}, got {answer!r}")


def chosen_names(answer, options, *, what: str = "names", one: str = "name") -> set:
    """The set of names the learner chose, each among ``options``, or ``Wrong`` saying what came instead."""
    listed = ", ".join(options)
    if isinstance(answer, str) or not isinstance(answer, (set, frozenset, list, tuple)):
        raise Wrong(f"expected a set of {what} from {listed}, got {answer!r}")
    chosen = set(answer)
    unknown = sorted(str(c) for c in chosen if c not in options)
    if unknown:
        raise Wrong(f"unknown {one} {unknown[0]!r}: choose from {listed}")
    return chosen


def random_weights(model, g: torch.Generator | None = None):
    """``model`` with 0.3 of standard normal noise added to every weight (drawn from ``g``, else the global
    stream): no token or path is right by luck. Returns the model."""
    with torch.no_grad():
        for prm in model.parameters():
            noise = torch.randn_like(prm) if g is None else torch.randn(prm.shape, generator=g, dtype=prm.dtype)
            prm.add_(0.3 * noise)
    return model
