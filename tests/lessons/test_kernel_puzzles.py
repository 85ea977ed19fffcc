"""Lesson 10's kernel puzzles in Triton's CPU interpreter: every solution passes its checker, each checker names a
typical mistake (a wrong kernel is the solution's source with one mistake edited in), an untouched cell is "not
answered yet", and ``exercises.kernel_picture`` draws the learner's launch, or the intended one while blanks are
left."""
import contextlib
import importlib.util
import inspect
import io
import itertools
import linecache
import re
import textwrap

import pytest
import torch

from seqlab import exercises
from seqlab.kernels import HAVE_TRITON

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="Triton ships for Linux only")

IDS = [f"10.{n}" for n in range(1, 11)]


def run(exercise_id, answer):
    """``(returned, printed)`` of ``exercises.check``."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        ok = exercises.check(exercise_id, answer)
    return ok, buf.getvalue().strip()


_made = itertools.count()


def _variant(tmp_path_factory, kernel_name, edits, helpers=""):
    """The solution kernel ``kernel_name`` with each ``(old, new)`` of ``edits`` made once in its source (with the
    ``@triton.jit`` ``helpers`` beside it), written to a file and imported: Triton's interpreter reads a kernel's
    source, so a wrong kernel must live in a file as a learner's does in a notebook."""
    from seqlab.exercises import solutions

    source = textwrap.dedent(inspect.getsource(getattr(solutions, kernel_name).fn))
    for old, new in edits:
        assert source.count(old) == 1, f"{old!r} is not once in {kernel_name}"
        source = source.replace(old, new)
    path = tmp_path_factory.mktemp("wrong") / f"wrong_{next(_made)}.py"
    path.write_text("import triton\nimport triton.language as tl\n"
                    "from seqlab.exercises.solutions import complex_first_order, first_order\n\n"
                    f"{textwrap.dedent(helpers)}\n\n{source}")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, kernel_name)


SWAPPED = """
@triton.jit
def swapped(a1, x1, a2, x2):
    return a1 * a2, a1 * x2 + x1
"""
GATE_DROPPED = """
@triton.jit
def gate_dropped(a1, x1, a2, x2):
    return a2, a2 * x1 + x2
"""
CONJUGATED = """
@triton.jit
def conjugated(ar1, ai1, xr1, xi1, ar2, ai2, xr2, xi2):
    return (ar1 * ar2 - ai1 * ai2, ar1 * ai2 + ai1 * ar2,
            ar2 * xr1 + ai2 * xi1 + xr2, ar2 * xi1 - ai2 * xr1 + xi2)
"""
FACTORISED = ('decay = tl.exp(tl.where(causal, g[:, None] - g[None, :], -float("inf")))',
              "decay = tl.where(causal, tl.exp(g)[:, None] * tl.exp(-g)[None, :], 0.0)")

WRONG = [   # (id, kernel, edits into its source, helpers, a fragment the message must contain)
    ("10.1", "block_cumsum", [("mask = offs < L", "mask = offs <= L")], "",
     "at L = 1, BLOCK = 4: program 0 reads x[1] (x has 1 element: indices 0 .. 0): its mask lets these lanes through"),
    ("10.2", "scan_block", [("0, first_order)", "0, swapped)")], SWAPPED,
     "the operator's pairs are the wrong way round"),
    ("10.2", "scan_block", [("0, first_order)", "0, gate_dropped)")], GATE_DROPPED,
     "the gate part of the operator must be the product a1 a2"),
    ("10.2", "scan_block", [("A * h0 + X", "X")], "", "h0 is missing"),
    ("10.3", "scan_tiles", [("h = A * carry[None, :] + X", "h = X")], "", "each tile starts from 0"),
    ("10.3", "scan_tiles", [("other=1.0)", "other=0.0)")], "", "hL is 0 at B = 1, L = 1"),
    ("10.4", "scan_backward", [("mask=t + 1 < L", "mask=t + 1 <= L")], "",
     "program 1 reads 1 element past the end of a (shape (2, 1), 2 elements), the first at flat index 2"),
    ("10.4", "scan_backward", [(", reverse=True)", ")")], "", "the scan ran forwards"),
    ("10.4", "scan_backward", [("mask=(t >= 1) & (t < L)", "mask=t < L")], "",
     "program 0 reads 1 element before the start of h"),
    ("10.4", "scan_backward", [("base + t - 1, mask=(t >= 1) & (t < L)", "base + t, mask=t < L")], "",
     "you multiplied by h_t"),
    ("10.5", "complex_scan", [("0, complex_first_order)", "0, conjugated)")], CONJUGATED, "a conjugate"),
    ("10.5", "complex_scan", [("ai = tl.load(a_ptr + re + 1", "ai = tl.load(a_ptr + re + 2")], "",
     "past the end of a"),
    ("10.6", "linear_attention", [("rows[:, None] >= rows[None, :]", "rows[:, None] > rows[None, :]")], "",
     "the diagonal is missing"),
    ("10.6", "linear_attention", [(' + tl.dot(q, S, input_precision="ieee")', "")], "",
     "y ignores every earlier chunk"),
    ("10.6", "linear_attention", [("mk = (t < L)[:, None] & (ck < DK)[None, :]",
                                   "mk = (t < L)[:, None] & (ck < BK)[None, :]")], "", "past the end of q"),
    ("10.7", "decayed_scores", [FACTORISED], "",
     "non-finite values at BH = 2, L = 11, dk = 3, C = 4, BK = 4 with log a in [-40, -20], where the gates are sharp: "
     "exp(-g_j) overflows"),
    ("10.7", "decayed_scores", [('tl.where(causal, g[:, None] - g[None, :], -float("inf"))',
                                 "g[:, None] - g[None, :]")], "", "key j of the chunk comes after query t"),
    ("10.8", "subchunk_block", [("reverse=True) - la_j", "reverse=True)")], "",
     "the key's factor has one gate too many"),
    ("10.8", "subchunk_block", [("tl.cumsum(la_i, axis=0)", "tl.cumsum(la_i, axis=0) + tl.sum(la_j, axis=0)[None, :]"),
                                ("tl.cumsum(la_j, axis=0, reverse=True) - la_j", "-tl.cumsum(la_j, axis=0)")], "",
     "where the gates are sharp: exp(-g_j) overflows"),
    ("10.9", "gateloop_step", [("S = a[:, None] * S + k",
                                "y_old = tl.sum(q[:, None] * S, axis=0)\n    S = a[:, None] * S + k"),
                               ("tl.sum(q[:, None] * S, axis=0), mask=mv)", "y_old, mask=mv)")], "",
     "y_t is read from S_(t-1)"),
    ("10.9", "gateloop_step", [("S = a[:, None] * S + k", "S = S + k")], "", "the decay a_t is missing"),
    ("10.9", "gateloop_step", [("bh * DV + cv, mask=mv, other=0.0)", "bh * DV + cv)")], "", "past the end of v"),
    ("10.10", "ut_transform_kernel", [("beta[:, None] * gram", "gram * beta[None, :]")], "",
     "beta is on the wrong side of K K^T"),
    ("10.10", "ut_transform_kernel", [("a_r[:, None] * W, axis", "a_r[:, None] * beta[:, None] * k, axis"),
                                      ("a_r[:, None] * U, axis", "a_r[:, None] * beta[:, None] * v, axis")], "",
     "row r subtracts the right-hand sides of the rows before it, not their solutions"),
]


@pytest.mark.parametrize("exercise_id", IDS)
def test_solution_passes(exercise_id):
    from seqlab.exercises.solutions import solution

    ok, out = run(exercise_id, solution(exercise_id))
    assert ok is True, out
    assert out.startswith(f"Exercise {exercise_id}: correct — ") and "raised" not in out


@pytest.mark.parametrize("exercise_id, kernel, edits, helpers, fragment", WRONG,
                         ids=[f"{w[0]}-{i}" for i, w in enumerate(WRONG)])
def test_a_typical_mistake_is_named(tmp_path_factory, exercise_id, kernel, edits, helpers, fragment):
    wrong = _variant(tmp_path_factory, kernel, edits, helpers)
    if exercise_id == "10.1":
        from seqlab.exercises.solutions import block_cumsum_grid as grid

        wrong = (wrong, grid)
    ok, out = run(exercise_id, wrong)
    assert ok is False, out
    assert out.startswith(f"Exercise {exercise_id}: not yet — ") and "correct" not in out, out
    assert fragment in out, out
    assert "checking your answer raised" not in out, out


def test_every_puzzle_has_a_named_mistake():
    assert sorted({w[0] for w in WRONG}, key=IDS.index) == IDS
    assert exercises.ids(10) == IDS and all(task.strip() for _, task in exercises.list(10))


def test_the_launch_grid_and_the_answer_itself_are_checked():
    from seqlab.exercises.solutions import block_cumsum, block_cumsum_grid, first_order

    ok, out = run("10.1", (block_cumsum, lambda L, BLOCK: (L // BLOCK,)))
    assert not ok and "y[0] is never written at L = 1, BLOCK = 4" in out and "yours launched 0" in out, out
    ok, out = run("10.1", (block_cumsum, lambda L, BLOCK: L // BLOCK + 1))
    assert not ok and "a launch grid is a tuple, one count per axis" in out, out
    ok, out = run("10.1", block_cumsum)
    assert not ok and "expected answer = (block_cumsum, grid)" in out, out
    ok, out = run("10.1", (block_cumsum.fn, block_cumsum_grid))
    assert not ok and "a plain function: decorate it with @triton.jit" in out, out
    ok, out = run("10.2", first_order)                     # the operator, not the kernel: its parameters differ
    assert not ok and "your kernel's parameters are (a1, x1, a2, x2); the skeleton's are (a_ptr, x_ptr, h0_ptr, " \
                      "h_ptr, L, BLOCK)" in out, out


def test_a_kernel_that_raises_is_reported_not_raised(tmp_path_factory):
    broken = _variant(tmp_path_factory, "scan_block", [("tl.load(h0_ptr + row)", "tl.load(h0_ptr + row, bad=1)")])
    ok, out = run("10.2", broken)
    assert not ok and out.startswith("Exercise 10.2: not yet — at B = 2, L = 1, BLOCK = 1, h0 = 0: your kernel raised "
                                     "TypeError: load() got an unexpected keyword argument 'bad'"), out


def test_a_kernel_compiled_before_the_interpreter_was_on_still_runs():
    """A cell that imported triton before seqlab decorated a JITFunction: the checker interprets its Python."""
    from triton.runtime.jit import JITFunction

    from seqlab.exercises.solutions import scan_block

    ok, out = run("10.2", JITFunction(scan_block.fn))
    assert ok, out


def _cell(exercise_id):
    """The lesson's cell for a puzzle, run as a notebook runs it (its source in linecache, as IPython keeps it):
    ``(printed, namespace)``."""
    _, code = exercises.notebook_cells(10)[IDS.index(exercise_id)]
    name = f"<lesson 10 cell {exercise_id}>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    buf, namespace = io.StringIO(), {}
    with contextlib.redirect_stdout(buf):
        exec(compile(code, name, "exec"), namespace)
    return buf.getvalue().strip(), namespace


@pytest.mark.parametrize("exercise_id", IDS)
def test_untouched_cell_is_not_answered_yet_and_draws_the_intended_launch(exercise_id):
    out, namespace = _cell(exercise_id)
    _, code = exercises.notebook_cells(10)[IDS.index(exercise_id)]
    assert code.splitlines()[-1] == f'correct = exercises.check("{exercise_id}", answer)'    # a statement, for nbval
    assert out.startswith(f"Exercise {exercise_id}: not answered yet — ") and exercises.hint(exercise_id) in out, out
    assert re.search(r"the first in \w+: `[^`]*\.\.\.[^`]*`\. ", out), out           # quotes the blank's line
    fig = exercises.kernel_picture(exercise_id, namespace["answer"])
    assert fig.layout.title.text.startswith(f"Exercise {exercise_id}: the intended launch (your kernel still has "
                                            f"blanks), grid ")
    assert len(fig.data) >= 2 and all(t.type == "heatmap" for t in fig.data)


def test_the_picture_shows_the_learners_launch_and_what_a_mask_let_out(tmp_path_factory):
    from seqlab.exercises.solutions import block_cumsum, block_cumsum_grid

    fig = exercises.kernel_picture("10.1", (block_cumsum, block_cumsum_grid))
    assert fig.layout.title.text == "Exercise 10.1: your launch, grid (3,): 3 programs"
    x_read, y_written = fig.data
    assert list(x_read.z[0]) == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2] and y_written.z == x_read.z   # program 0 owns t = 0 .. 3
    loose = _variant(tmp_path_factory, "block_cumsum", [("mask = offs < L", "mask = offs <= L")])
    fig = exercises.kernel_picture("10.1", (loose, block_cumsum_grid))
    crosses = [t for t in fig.data if t.type == "scatter"]
    assert fig.layout.title.text.startswith("Exercise 10.1: your launch") and crosses
    assert list(crosses[0].customdata) == [10]                                         # x[10], one past the end
    assert exercises.kernel_picture("10.1", ...).layout.title.text.startswith(
        "Exercise 10.1: the intended launch (not answered yet)")
    with pytest.raises(ValueError, match="exercise 01.1 is no kernel puzzle; these are: 10.1, 10.10, 10.2"):
        exercises.kernel_picture("01.1", ...)


def test_without_the_interpreter_the_checker_and_the_picture_say_why(monkeypatch):
    from seqlab.exercises import _kernels
    from seqlab.exercises.solutions import solution

    monkeypatch.setattr(_kernels, "unavailable", lambda: "Triton not installed (darwin): the puzzles need Linux")
    ok, out = run("10.3", solution("10.3"))
    assert not ok and out == "Exercise 10.3: not yet — no kernel can run here: Triton not installed (darwin): the " \
                             "puzzles need Linux", out
    fig = exercises.kernel_picture("10.3", solution("10.3"))
    assert fig.layout.title.text == "Exercise 10.3: no picture"
    assert "Triton not installed" in fig.layout.annotations[0].text


def test_check_leaves_the_random_stream_and_the_interpreter_as_they_were():
    from triton.runtime import interpreter

    from seqlab.exercises.solutions import solution

    torch.manual_seed(5)
    before = torch.rand(3)
    torch.manual_seed(5)
    first = run("10.6", solution("10.6"))
    assert torch.equal(before, torch.rand(3)) and first == run("10.6", solution("10.6"))
    assert "create_masked_load" not in vars(interpreter.interpreter_builder)        # the watch is gone


def test_a_puzzle_cell_runs_where_triton_is_not_installed():
    """macOS and Windows have no Triton: the cell's import gives stand-ins, the kernel is still defined, the untouched
    cell prints 'not answered yet', and the picture says that there is none."""
    import subprocess
    import sys

    from seqlab.exercises.solutions import solution  # noqa: F401  (the stub text comes from the registry)

    _, stub = exercises.notebook_cells(10)[1]
    script = ("import sys\nsys.modules['triton'] = None\nsys.modules['triton.language'] = None\n"
              "from seqlab import exercises\n" + stub + "\n"
              "print('PICTURE', exercises.kernel_picture('10.2', answer).layout.title.text)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Exercise 10.2: not answered yet" in out.stdout
    assert "PICTURE Exercise 10.2: no picture" in out.stdout, out.stdout[-800:]
