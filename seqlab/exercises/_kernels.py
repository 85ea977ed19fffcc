"""The machinery of the kernel puzzles (lesson 10): a learner's ``@triton.jit`` kernel run in Triton's CPU interpreter
with every load and store watched, and the picture of which program touched which element.

- :func:`kernel_of` takes an answer: a ``@triton.jit`` kernel. A ``...`` left in it, or in a ``@triton.jit`` helper
  it calls (a scan's combine function), is a blank: the answer is not answered yet, and the message names the first.
- :func:`launch` runs the kernel on the checker's tensors, laid out in one arena, each between gaps of NaN. Every
  load and store is checked against the tensors *before* it runs: a lane that its mask lets through outside its
  tensor is out of bounds, a :class:`~seqlab.exercises._core.Wrong` naming the program, the tensor and the index
  (checking), or a lane left out and drawn in red (drawing); it never touches memory. Outputs start as NaN, and the
  trace knows which elements no program wrote.
- :func:`picture` draws a trace as Triton-Puzzles does: each tensor a grid of its elements, coloured by the program
  that read (or wrote) them. :func:`kernel_picture` draws the learner's launch of an exercise, or the intended one
  (the solution's) while the kernel has blanks, so that a lesson shows a picture for every puzzle, answered or not.

The interpreter is required: it alone lets Python watch each memory access. On a GPU machine (or wherever
``TRITON_INTERPRET`` is off) the checkers say so instead of launching a kernel.
"""
from __future__ import annotations

import dis
import functools
import inspect
import linecache
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from seqlab.exercises._core import NotAnswered, Wrong, get, short

__all__ = ["triton_modules", "kernel_of", "blanks", "unavailable", "launch", "Trace", "output", "picture", "kernel_picture",
           "picture_case"]

GAP = 1024          # elements of NaN between two tensors of the arena, and before the first and after the last


# ----------------------------------------------------------------------------------------------- the answer


class _NotInstalled:
    """A name of Triton where Triton is not installed: an annotation (``tl.constexpr``) may name it; calling it says
    why nothing runs."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name}: Triton is not installed here (it ships for Linux only)")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _NotInstalled(f"{self.name}.{name}")


class _StandInKernel:
    """What ``@triton.jit`` makes where Triton is not installed: the function, for the checker to read (its blanks),
    never launched."""

    def __init__(self, fn):
        self.fn = fn
        self.arg_names = list(inspect.signature(fn).parameters)
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid):
        raise RuntimeError(f"{self.fn.__name__}: Triton is not installed here (it ships for Linux only), so no kernel "
                           f"can be launched")


def _stand_in_jit(fn=None, **options):
    return _StandInKernel(fn) if fn is not None else _StandInKernel


def triton_modules():
    """``(triton, triton.language)`` for a puzzle cell: Triton itself, or where it is not installed (macOS, Windows)
    stand-ins under which the cell still defines its kernel (``@triton.jit`` keeps the function, ``tl.constexpr``
    annotates) and the checker says that no kernel can run here."""
    try:
        import seqlab.kernels  # noqa: F401  (the interpreter is switched on before Triton decorates anything)
        import triton
        import triton.language as tl
        return triton, tl
    except ImportError:
        triton, tl = types.ModuleType("triton"), types.ModuleType("triton.language")
        triton.jit, triton.cdiv = _stand_in_jit, _NotInstalled("triton.cdiv")
        triton.language = tl
        tl.__getattr__ = lambda name: _NotInstalled(f"tl.{name}")    # module-level __getattr__ (PEP 562)
        return triton, tl


def _is_kernel(obj) -> bool:
    """A ``@triton.jit`` function: compiled (``JITFunction``) or interpreted (``InterpretedFunction``)."""
    return callable(getattr(obj, "fn", None)) and hasattr(obj, "arg_names") and hasattr(obj, "__getitem__")


def _has_ellipsis(value) -> bool:
    return value is Ellipsis or (isinstance(value, tuple) and any(_has_ellipsis(v) for v in value))


def _blank_lines(code) -> list[int]:
    """The line of every ``...`` in ``code`` and in the code nested in it (a comprehension, a lambda)."""
    lines = []
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_CONST", "RETURN_CONST") and _has_ellipsis(ins.argval):
            lines.append(ins.positions.lineno if ins.positions and ins.positions.lineno else code.co_firstlineno)
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            lines += _blank_lines(const)
    return lines


def blanks(*functions) -> list[tuple[str, str]]:
    """``[(function name, source line), ...]`` for every blank (``...``) left in ``functions`` (kernels or plain
    functions) and in the ``@triton.jit`` helpers they call (looked up in their globals); the line is ``""`` where
    the source cannot be read."""
    found, seen = [], set()

    def visit(obj):
        fn = getattr(obj, "fn", obj)
        code = getattr(fn, "__code__", None)
        if code is None or id(fn) in seen or (getattr(fn, "__module__", None) or "").startswith("triton"):
            return
        seen.add(id(fn))
        for line in _blank_lines(code):
            found.append((fn.__name__, linecache.getline(code.co_filename, line).split("#")[0].strip()))
        for name in code.co_names:                                       # helpers the kernel calls by name
            helper = fn.__globals__.get(name)
            if _is_kernel(helper):
                visit(helper)

    for f in functions:
        visit(f)
    return found


def _not_answered(found: list[tuple[str, str]]) -> NotAnswered:
    name, line = found[0]
    where = f"in {name}: `{line}`" if line else f"in {name}"
    return NotAnswered(f"blanks (...) are left in your kernel, the first {where}." if len(found) > 1 else
                       f"a blank (...) is left in your kernel, {where}.")


def kernel_of(answer, name: str, *plain) -> Any:
    """The learner's kernel: ``Wrong`` unless ``answer`` is a ``@triton.jit`` function, ``NotAnswered`` while it,
    a helper it calls or one of the ``plain`` functions given with it (a launch grid) still has a blank; ``Wrong``
    saying why where no kernel can run (:func:`unavailable`)."""
    if not _is_kernel(answer):
        what = "a plain function: decorate it with @triton.jit" if callable(answer) else type(answer).__name__
        raise Wrong(f"expected the kernel {name} (a @triton.jit function), got {what}")
    found = blanks(answer, *plain)
    if found:
        raise _not_answered(found)
    reason = unavailable()
    if reason:
        raise Wrong(f"no kernel can run here: {reason}")
    return answer


def unavailable() -> str | None:
    """Why no kernel can run here (``None`` where Triton's CPU interpreter is on)."""
    from seqlab import kernels

    if not kernels.HAVE_TRITON:
        return f"{kernels.status()}; the kernel puzzles run in Triton's CPU interpreter, on Linux"
    if not kernels.interpreted():
        return ("Triton is not in its CPU interpreter here (TRITON_INTERPRET is off): the puzzles run every kernel "
                "in the interpreter, which lets the checker watch each load and store; set TRITON_INTERPRET=1 "
                "before the first import of triton or seqlab, and restart the kernel")
    return None


# ----------------------------------------------------------------------------------------------- the launch


@dataclass
class _Slot:
    name: str
    tensor: torch.Tensor           # the view the kernel sees, inside the arena
    start: int                     # its first byte's address
    written: np.ndarray            # (numel,) bool: stored to by some program

    @property
    def end(self) -> int:
        return self.start + self.tensor.numel() * self.tensor.element_size()


@dataclass
class Access:
    """One masked load or store of one program: the elements of one tensor it touched (flat indices) and the
    offsets its mask let through outside the tensor (negative: before its start)."""
    program: tuple
    kind: str                      # "read" or "write"
    tensor: str
    inside: np.ndarray
    outside: np.ndarray


class _OutOfBounds(Exception):
    def __init__(self, access: Access):
        super().__init__(access.tensor)
        self.access = access


@dataclass
class Trace:
    """A launch: its grid, the tensors after it (float32 views of the arena, by name) and every access."""
    grid: tuple
    tensors: dict[str, torch.Tensor]
    accesses: list[Access] = field(default_factory=list)
    written: dict[str, np.ndarray] = field(default_factory=dict)

    def __getitem__(self, name: str) -> torch.Tensor:
        """Tensor ``name`` after the launch, in float64."""
        return self.tensors[name].detach().clone().to(torch.float64)

    def unwritten(self, name: str) -> torch.Tensor:
        """Where no program stored into tensor ``name``: a bool tensor of its shape."""
        return torch.from_numpy(~self.written[name]).reshape(self.tensors[name].shape)

    @property
    def programs(self) -> int:
        return int(np.prod(self.grid))


def program_label(program: tuple, grid: tuple) -> str:
    """``"2"`` on a one-axis grid, ``"(1, 0)"`` on a grid of two (the axes the launch used)."""
    used = program[: max(1, len(grid))]
    return str(used[0]) if len(used) == 1 else "(" + ", ".join(map(str, used)) + ")"


class _Watch:
    """Checks (and records) each masked load and store of Triton's interpreter against the arena's tensors."""

    def __init__(self, slots: list[_Slot], grid: tuple, strict: bool):
        self.slots, self.grid, self.strict, self.accesses = slots, grid, strict, []
        self.starts = np.array([s.start for s in slots], dtype=np.int64)
        self.ends = np.array([s.end for s in slots], dtype=np.int64)

    def lanes(self, ptrs, mask, kind: str, program: tuple):
        """The mask with the lanes outside their tensor removed (``strict``: ``_OutOfBounds`` at the first)."""
        addr = ptrs.data.astype(np.int64).reshape(-1)
        on = np.broadcast_to(np.asarray(mask.data, dtype=bool), ptrs.data.shape).reshape(-1)
        size = np.dtype(_np_dtype(ptrs.get_element_ty())).itemsize
        live = addr[on]
        # the tensor each address belongs to, or is nearest to (past the end of one, before the start of the next)
        before = np.clip(np.searchsorted(self.starts, live, side="right") - 1, 0, len(self.slots) - 1)
        after = np.clip(before + 1, 0, len(self.slots) - 1)
        past = live - self.ends[before]
        ahead = self.starts[after] - live
        owner = np.where((live >= self.ends[before]) & (ahead < past), after, before)
        owner = np.where(live < self.starts[0], 0, owner)
        offset = (live - self.starts[owner]) // size
        numel = (self.ends[owner] - self.starts[owner]) // size
        inside = (offset >= 0) & (offset < numel)
        for i in np.unique(owner):
            mine = owner == i
            access = Access(program, kind, self.slots[i].name, np.unique(offset[mine & inside]),
                            np.unique(offset[mine & ~inside]))
            if self.strict and access.outside.size:
                raise _OutOfBounds(access)
            self.accesses.append(access)
            if kind == "write":
                self.slots[i].written[access.inside] = True
        if inside.all():
            return mask
        keep = on.copy()
        keep[np.flatnonzero(on)[~inside]] = False
        from triton.runtime.interpreter import TensorHandle

        return TensorHandle(keep.reshape(ptrs.data.shape), mask.dtype)

    def __enter__(self):
        from triton.runtime import interpreter

        builder = interpreter.interpreter_builder
        load, store = builder.create_masked_load, builder.create_masked_store

        def masked_load(ptrs, mask, other, *rest):
            return load(ptrs, self.lanes(ptrs, mask, "read", builder.grid_idx), other, *rest)

        def masked_store(ptrs, value, mask, *rest):
            return store(ptrs, value, self.lanes(ptrs, mask, "write", builder.grid_idx), *rest)

        builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
        self.builder = builder
        return self

    def __exit__(self, *exc):
        for name in ("create_masked_load", "create_masked_store"):
            self.builder.__dict__.pop(name, None)


def _np_dtype(tt_dtype):
    from triton.runtime.interpreter import _get_np_dtype

    return _get_np_dtype(tt_dtype)


def output(*shape) -> torch.Tensor:
    """An output tensor for :func:`launch`: float32, every element NaN until a program writes it."""
    return torch.full(shape, float("nan"), dtype=torch.float32)


def _arena(tensors: dict[str, torch.Tensor]) -> list[_Slot]:
    """The tensors copied into one float32 arena of NaN, each after a gap of :data:`GAP` elements."""
    sizes = [t.numel() for t in tensors.values()]
    arena = torch.full((GAP * (len(sizes) + 1) + sum(sizes),), float("nan"), dtype=torch.float32)
    slots, at = [], GAP
    for (name, t), n in zip(tensors.items(), sizes):
        view = arena[at: at + n].view(t.shape)
        view.copy_(t.detach())
        slots.append(_Slot(name, view, view.data_ptr(), np.zeros(n, dtype=bool)))
        at += n + GAP
    return slots


def _display(param: str) -> str:
    return param[: -len("_ptr")] if param.endswith("_ptr") else param


def _describe(access: Access, shape: tuple, grid: tuple) -> str:
    """What an out-of-bounds access did, for the message: the program, the tensor and the offsets."""
    numel = int(np.prod(shape))
    verb = "reads" if access.kind == "read" else "writes"
    past = access.outside[access.outside >= numel]
    side = past if past.size else access.outside
    n = len(side)
    if len(shape) == 1:
        first = ", ".join(f"{access.tensor}[{int(i)}]" for i in side[:3]) + (", ..." if n > 3 else "")
        where = f"{first} ({access.tensor} has {numel} element{'s' if numel != 1 else ''}"
        where += f": indices 0 .. {numel - 1})" if numel else ")"
    else:
        where = (f"{n} element{'s' if n > 1 else ''} {'past the end' if past.size else 'before the start'} of "
                 f"{access.tensor} (shape {tuple(shape)}, {numel} elements), the first at flat index "
                 f"{int(side[0]) if past.size else int(side[-1])}")
    return (f"program {program_label(access.program, grid)} {verb} {where}: its mask lets these lanes through; "
            f"mask every {'load' if access.kind == 'read' else 'store'} to the positions that exist")


def launch(kernel, grid: tuple, *, strict: bool = True, **args) -> Trace:
    """Run ``kernel[grid](**args)`` in Triton's interpreter on copies of the tensors in ``args`` (float32, by the
    kernel's parameter names), every load and store watched; returns the :class:`Trace`.

    ``strict``: an access outside its tensor is ``Wrong`` (naming the program, the tensor and the index); else the
    lane is left out, recorded and drawn. A kernel that raises, or names its parameters otherwise than the
    skeleton, is ``Wrong``; no interpreter is ``Wrong`` saying why (:func:`unavailable`)."""
    reason = unavailable()
    if reason:
        raise Wrong(f"no kernel can run here: {reason}")
    from triton.runtime.errors import InterpreterError
    from triton.runtime.interpreter import InterpretedFunction

    from seqlab.kernels.interpreter import vectorize_scan

    vectorize_scan()
    if not isinstance(kernel, InterpretedFunction):       # decorated before TRITON_INTERPRET was set
        kernel = InterpretedFunction(kernel.fn)
    expected = list(args)
    if list(kernel.arg_names) != expected:
        raise Wrong(f"your kernel's parameters are ({', '.join(kernel.arg_names)}); the skeleton's are "
                    f"({', '.join(expected)}): keep its names and order, the checker launches the kernel with them")
    grid = tuple(int(g) for g in grid)
    tensors = {_display(k): v for k, v in args.items() if isinstance(v, torch.Tensor)}
    slots = _arena(tensors)
    views = iter(s.tensor for s in slots)
    call = {k: next(views) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    trace = Trace(grid, {s.name: s.tensor for s in slots}, written={s.name: s.written for s in slots})
    watch = _Watch(slots, grid, strict)
    try:
        with watch, np.errstate(all="ignore"):      # an overflow is the checker's to name, not numpy's to warn of
            kernel[grid](**call)
    except InterpreterError as err:
        cause = err.__cause__
        if isinstance(cause, _OutOfBounds):
            raise Wrong(_describe(cause.access, tuple(tensors[cause.access.tensor].shape), grid)) from None
        raise Wrong(f"your kernel raised {type(cause or err).__name__}: {short(cause or err)}") from None
    except Exception as err:
        raise Wrong(f"launching your kernel raised {type(err).__name__}: {short(err)}") from None
    finally:
        trace.accesses = watch.accesses
    return trace


# ----------------------------------------------------------------------------------------------- the picture

_PICTURES: dict[str, Callable[[Any], tuple[Trace, dict]]] = {}


def picture_case(exercise_id: str):
    """Decorator registering ``case(answer) -> (trace, axes)``: the answer (kernel) run without ``strict`` on the
    picture's small shapes, and the names of each tensor's dimensions (``{"x": ("t",)}``)."""
    def wrap(fn):
        _PICTURES[exercise_id] = fn
        return fn
    return wrap


def _cells(shape: tuple) -> tuple[int, int]:
    """A tensor drawn as a grid: its last dimension across, every other one down (a vector is one row)."""
    cols = shape[-1] if shape else 1
    return max(1, int(np.prod(shape[:-1])) if len(shape) > 1 else 1), max(1, cols)


def picture(trace: Trace, axes: dict[str, tuple], title: str):
    """A plotly figure of ``trace``: a panel for every tensor read and every tensor written (in the kernel's order,
    four panels a row), each element coloured by the first program that touched it; ``xN`` marks an element N
    programs touched (the hover lists them), and a red cross beyond a tensor's edge a lane a mask let through
    outside it."""
    from seqlab.viz.style import COLORS, new_figure

    panels = [(name, kind) for name in trace.tensors for kind in ("read", "write")
              if any(a.tensor == name and a.kind == kind for a in trace.accesses)]
    n, grid3 = trace.programs, trace.grid + (1,) * (3 - len(trace.grid))
    labels = [program_label(np.unravel_index(i, grid3), trace.grid) for i in range(n)]
    across = min(4, max(1, len(panels)))
    down = -(-max(1, len(panels)) // across)
    tall = [max([_cells(tuple(trace.tensors[p].shape))[0] for p, _ in panels[r * across: (r + 1) * across]] or [1])
            for r in range(down)]
    gap, plots = 90, sum(40 + 18 * t for t in tall)              # pixels: between two rows of panels, in panels
    fig = new_figure(down, across, title=title,
                     subplot_titles=[f"{name}: {'read' if kind == 'read' else 'written'}" for name, kind in panels],
                     horizontal_spacing=0.06, vertical_spacing=gap / (plots + gap * (down - 1)) if down > 1 else 0,
                     row_heights=[40 + 18 * t for t in tall])
    for i, (name, kind) in enumerate(panels):
        row, col = i // across + 1, i % across + 1
        shape = tuple(trace.tensors[name].shape)
        rows, cols = _cells(shape)
        who = [[[] for _ in range(cols)] for _ in range(rows)]
        outside = set()
        for a in trace.accesses:
            if a.tensor == name and a.kind == kind:
                pid = int(np.ravel_multi_index(a.program[:3], grid3))
                for e in a.inside.tolist():
                    if pid not in who[e // cols][e % cols]:
                        who[e // cols][e % cols].append(pid)
                outside.update(a.outside.tolist())
        z = [[cell[0] if cell else None for cell in line] for line in who]
        count = [[f"x{len(cell)}" if len(cell) > 1 else "" for cell in line] for line in who]
        by = [[", ".join(labels[p] for p in cell) or "none" for cell in line] for line in who]
        element = (f"{name}[%{{x}}]" if len(shape) == 1 else
                   f"{name}[row %{{y}}, %{{x}}]")
        fig.add_heatmap(z=z, text=count, customdata=by, texttemplate="%{text}", textfont=dict(size=10),
                        coloraxis="coloraxis", xgap=2, ygap=2,
                        hovertemplate=f"{element}: program %{{customdata}}<extra></extra>", row=row, col=col)
        if outside:
            pos = sorted(outside)
            flat = len(shape) == 1                                 # a vector runs on along its row
            fig.add_scatter(x=[p if flat else p % cols for p in pos], y=[0 if flat else p // cols for p in pos],
                            mode="markers",
                            marker=dict(symbol="x", size=10, color="#D62728"), showlegend=False, customdata=pos,
                            hovertemplate=f"outside {name}: flat index %{{customdata}}<extra></extra>",
                            row=row, col=col)
        dims = axes.get(name, ())
        ticks = [", ".join(map(str, np.unravel_index(r, shape[:-1]))) for r in range(rows)] if len(shape) > 1 else []
        fig.update_xaxes(title_text=dims[-1] if dims else "", showgrid=False, dtick=1, row=row, col=col)
        fig.update_yaxes(title_text=", ".join(dims[:-1]), showgrid=False, autorange="reversed", row=row, col=col,
                         showticklabels=len(shape) > 1, tickmode="array", tickvals=list(range(len(ticks))),
                         ticktext=ticks)
    bands = []
    for i in range(n):
        bands += [[i / n, COLORS[i % len(COLORS)]], [(i + 1) / n, COLORS[i % len(COLORS)]]]
    fig.update_layout(coloraxis=dict(colorscale=bands, cmin=-0.5, cmax=n - 0.5,
                                     colorbar=dict(title="program", tickvals=list(range(n)), ticktext=labels)),
                      height=max(300, 110 + plots + gap * (down - 1)))
    return fig


def _message(exercise_id: str, note: str):
    from seqlab.viz.style import new_figure

    fig = new_figure(title=f"Exercise {exercise_id}: no picture")
    fig.add_annotation(text=note, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def kernel_picture(exercise_id: str, answer=...):
    """The loads and stores of a kernel puzzle's launch, drawn (:func:`picture`): the learner's ``answer`` where it
    runs, else the intended launch (the solution's), with the title saying why (blanks left, an error). Where no
    kernel can run, a figure that says so. ``ValueError`` for an exercise that is no kernel puzzle."""
    ex = get(exercise_id)
    if ex.id not in _PICTURES:
        raise ValueError(f"exercise {ex.id} is no kernel puzzle; these are: {', '.join(sorted(_PICTURES))}")
    reason = unavailable()
    if reason:
        return _message(ex.id, f"no kernel can run here: {reason}")
    case = _PICTURES[ex.id]
    why = "your kernel still has blanks" if answer is not ... else "not answered yet"
    trace = None
    if answer is not ...:
        try:
            trace, axes = case(answer)
        except NotAnswered:
            pass
        except Wrong as err:
            why = f"yours: {short(err, 120)}"
        except Exception as err:          # a picture never leaves a traceback in a lesson
            why = f"yours raised {type(err).__name__}: {short(err, 100)}"
    if trace is not None:
        head = f"Exercise {ex.id}: your launch"
    else:
        from seqlab.exercises.solutions import solution

        trace, axes = case(solution(ex.id))
        head = f"Exercise {ex.id}: the intended launch ({why})"
    grid = trace.grid if len(trace.grid) > 1 else f"({trace.grid[0]},)"
    return picture(trace, axes, f"{head}, grid {grid}: {trace.programs} program{'s' if trace.programs > 1 else ''}")

