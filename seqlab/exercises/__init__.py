"""Exercises for lessons 01-10, in the spirit of Triton-Puzzles: a small task in code, and a checker that says
what is wrong.

In a lesson, an exercise cell looks like::

    from seqlab import exercises

    def reduce(p, q):
        ...                      # your code here

    answer = reduce
    exercises.check("01.1", answer)

``check(id, answer)`` prints one line and returns ``True`` only for a right answer:

- ``answer = ...`` or a function whose body is still ``...``: "Exercise 01.1: not answered yet — <hint>";
- a right answer: "Exercise 01.1: correct — <why>";
- a wrong one: "Exercise 01.1: not yet — <what is wrong>" (the shape expected and got, the first position
  that differs from the package's reference op, the property that fails).

Functions are called on fresh inputs (awkward lengths included) drawn from a generator seeded per exercise,
and compared with the package's reference in float64 at the tolerance the message states; the caller's
random state is left untouched, so a lesson's output is the same on every run.

Lesson 10's exercises are kernel puzzles: the answer is a ``@triton.jit`` kernel, run in Triton's CPU interpreter
with every load and store watched, and ``exercises.kernel_picture(id, answer)`` returns a plotly figure of which
program read and wrote which element (the intended launch while the kernel still has blanks).

``exercises.list(lesson)`` gives the ids and one-line tasks, ``exercises.hint(id)`` the hint. Solutions are
in :mod:`seqlab.exercises.solutions` (``solution(id)``), never in the lessons.
"""
from seqlab.exercises import lesson01, lesson02, lesson03, lesson04, lesson05, lesson06, lesson07  # noqa: F401
from seqlab.exercises import lesson08, lesson09, lesson10  # noqa: F401
from seqlab.exercises._core import check, get, hint, ids, list_exercises, notebook_cells
from seqlab.exercises._kernels import kernel_picture, triton_modules

triton, tl = triton_modules()       # the puzzle cells' Triton: itself, or a stand-in where it is not installed
from seqlab.exercises._core import texts as _texts

if set(_texts()) != set(ids()):     # every table of texts.toml has its checker (the reverse: @exercise says so)
    raise ImportError(f"texts.toml has exercises with no checker: {sorted(set(_texts()) - set(ids()))}")

list = list_exercises          # exercises.list(lesson): [(id, task), ...]

__all__ = ["check", "hint", "list", "ids", "get", "notebook_cells", "kernel_picture"]
