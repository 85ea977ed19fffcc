"""Lesson 10 · Kernel puzzles: the scans and chunked forms of lessons 02-09 as Triton kernels, one step at a time, in
the spirit of Triton-Puzzles.

Every answer is a ``@triton.jit`` kernel completed from a skeleton (10.1 adds its launch grid). The checker launches it
in Triton's CPU interpreter on small awkward shapes (lengths that are no multiple of the block, heads narrower than
their tile), every load and store watched (:mod:`seqlab.exercises._kernels`): a mask that lets a lane out of its
tensor, an output element no program writes, and the first position that differs from seqlab's float64 reference op
are named, and typical mistakes (a missing carry, a conjugate, a factorisation that overflows) get their own message.
``exercises.kernel_picture(id, answer)`` draws which program read and wrote which element.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import contextlib
import math

import torch

import seqlab.kernels  # noqa: F401  (switches Triton's CPU interpreter on where there is no GPU, before a lesson's
#                                    @triton.jit runs: the lesson's cells import seqlab.exercises first)
from seqlab.exercises._core import Wrong, close, compare, exercise, generator, seeded, uniform
from seqlab.exercises._kernels import Trace, kernel_of, launch, output, picture_case
from seqlab.exercises.lesson06 import _no_overflow
from seqlab.exercises.lesson09 import _UT_MISTAKES, _betas, _unit, _ut_reference


def _randn(g, *shape) -> torch.Tensor:
    """Float32 standard normal values (float32-exact, so the float64 reference sees the kernel's very inputs)."""
    return torch.randn(*shape, generator=g, dtype=torch.float64).float()


def _gates(g, *shape) -> torch.Tensor:
    """Float32 real gates in (-1, 1): some of size near 1 (long memory), some near 0 (a reset), either sign."""
    size = uniform(g, *shape, lo=0.0, hi=1.0)
    flat = size.view(-1)
    flat[::3] = 1 - 1e-3 * flat[::3]
    flat[1::4] = 1e-3 * flat[1::4]
    sign = torch.where(torch.rand(*shape, generator=g, dtype=torch.float64) < 0.2, -1.0, 1.0)
    return (sign * size).float()


def _cdiv(n: int, d: int) -> int:
    return -(-n // d)


def _all_written(trace: Trace, name: str, axes: str, where: str, why: str = "") -> None:
    """``Wrong`` naming the first element of ``name`` that no program stored to."""
    missing = trace.unwritten(name)
    if bool(missing.any()):
        first = tuple(int(i) for i in missing.nonzero()[0])
        label = f"{name}[{first[0]}]" if len(first) == 1 else f"{name} at ({axes}) = {first}"
        raise Wrong(f"{label} is never written{where} ({int(missing.sum())} of {missing.numel()} elements are not): "
                    f"no program of your launch (grid {trace.grid}) stores there{why}")


def _named(got, candidates, tol: float, where: str) -> None:
    """``Wrong`` with the message of the first ``(values, message)`` in ``candidates`` that ``got`` equals."""
    for values, message in candidates:
        if all(close(a, b, tol) for a, b in zip(got, values)):
            raise Wrong(f"{where.strip()}: {message}")


@contextlib.contextmanager
def _at(where: str):
    """A launch's ``Wrong`` (a lane out of bounds, a kernel that raised) said with the case it happened at."""
    try:
        yield
    except Wrong as err:
        raise Wrong(f"{where.strip()}: {err}") from None


# ----------------------------------------------------------------------------------------------- 10.1


def _cumsum_answer(answer):
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Wrong(f"expected answer = (block_cumsum, grid), the kernel and its launch grid; got "
                    f"{type(answer).__name__}")
    kernel, grid = answer
    if not callable(grid):
        raise Wrong(f"grid: expected a function grid(L, BLOCK) returning the launch grid, got {type(grid).__name__}")
    return kernel_of(kernel, "block_cumsum", grid), grid


def _grid_of(grid, L: int, BLOCK: int) -> tuple:
    try:
        out = grid(L, BLOCK)
    except Exception as err:
        raise Wrong(f"grid({L}, {BLOCK}) raised {type(err).__name__}: {err}") from None
    if isinstance(out, int):
        raise Wrong(f"grid({L}, {BLOCK}) returned {out}: a launch grid is a tuple, one count per axis: ({out},)")
    if not (isinstance(out, (tuple, list)) and 1 <= len(out) <= 3 and all(isinstance(n, int) and n >= 0 for n in out)):
        raise Wrong(f"grid({L}, {BLOCK}) returned {out!r}: expected a tuple of 1 to 3 program counts (ints >= 0)")
    return tuple(out)


def _run_10_1(answer, g, L, BLOCK, strict=True):
    kernel, grid = _cumsum_answer(answer)
    x = _randn(g, L)
    return launch(kernel, _grid_of(grid, L, BLOCK), strict=strict, x_ptr=x, y_ptr=output(L), L=L, BLOCK=BLOCK), x


@exercise("10.1")
def _check_10_1(answer):
    _cumsum_answer(answer)                                 # the answer itself, before any case
    from seqlab.ops import linear_scan_reference

    for g, (L, BLOCK) in seeded(101, ((1, 4), (8, 8), (13, 4), (37, 8))):
        where = f" at L = {L}, BLOCK = {BLOCK}"
        with _at(where):
            trace, x = _run_10_1(answer, g, L, BLOCK)
        _all_written(trace, "y", "t", where, f": blocks of {BLOCK} need cdiv(L, BLOCK) = {_cdiv(L, BLOCK)} programs "
                     f"to cover L = {L}, and yours launched {trace.programs}")
        restart = torch.ones(L, 1, dtype=torch.float64)
        restart[::BLOCK] = 0                                   # a_t = 0 where a block starts: the sum starts again
        want = linear_scan_reference(restart, x.double()[:, None])[:, 0]
        compare(trace["y"], want, 1e-5, name="y", against="each block's cumulative sum", axes="t", where=where)


@picture_case("10.1")
def _picture_10_1(answer):
    return _run_10_1(answer, generator(1), 10, 4, strict=False)[0], {"x": ("t",), "y": ("t",)}


# ----------------------------------------------------------------------------------------------- 10.2


def _eq13(a1, x1, a2, x2):
    """GateLoop's operator (paper 004, eq. 13): ``(a1, x1) . (a2, x2) = (a1 a2, a2 x1 + x2)``."""
    return a1 * a2, a2 * x1 + x2


def _fold(a, x, h0, combine=_eq13):
    """``h_t = A_t h0 + X_t`` along the last axis, the prefixes ``(A_t, X_t)`` of ``combine`` taken left to right
    (as the interpreter scans), in float64: for naming a wrong operator."""
    A, X, hs = a[..., 0], x[..., 0], []
    for t in range(a.shape[-1]):
        if t:
            A, X = combine(A, X, a[..., t], x[..., t])
        hs.append(A * h0 + X)
    return torch.stack(hs, -1)


def _scan_mistakes(a, x, h0):
    """What a wrong operator, or a wrong use of h0, gives: ``[(h, what the learner did), ...]``."""
    from_zero = _fold(a, x, 0 * h0)
    return [
        ([_fold(a, x, h0, lambda a1, x1, a2, x2: (a1 * a2, a1 * x2 + x1))],
         "the operator's pairs are the wrong way round: (a1, x1) is the earlier pair and (a2, x2) the later, so the "
         "later gate scales the earlier state: (a1 a2, a2 x1 + x2)"),
        ([_fold(a, x, h0, lambda a1, x1, a2, x2: (a2, a2 * x1 + x2))],
         "the gate part of the operator must be the product a1 a2: A_t = a_1 ... a_t is what carries h0 into h_t = "
         "A_t h0 + X_t"),
        ([from_zero], "h0 is missing: h_t = A_t h0 + X_t, the scan's prefixes applied to the state before the "
                      "sequence"),
        ([from_zero + h0[..., None]], "h0 must be scaled by A_t = a_1 ... a_t, the scan's first component: h_t = "
                                      "A_t h0 + X_t, not X_t + h0"),
    ]


def _run_10_2(kernel, g, B, L, BLOCK, zero, strict=True):
    a, x = _gates(g, B, L), _randn(g, B, L)
    h0 = torch.zeros(B) if zero else _randn(g, B)
    trace = launch(kernel_of(kernel, "scan_block"), (B,), strict=strict, a_ptr=a, x_ptr=x, h0_ptr=h0,
                   h_ptr=output(B, L), L=L, BLOCK=BLOCK)
    return trace, a.double(), x.double(), h0.double()


@exercise("10.2")
def _check_10_2(kernel):
    kernel_of(kernel, "scan_block")                        # the answer itself, before any case
    from seqlab.ops import linear_scan_reference

    cases = ((2, 1, 1, True), (3, 13, 16, True), (2, 32, 32, True), (3, 13, 16, False), (1, 7, 8, False))
    for g, (B, L, BLOCK, zero) in seeded(102, cases):
        where = f" at B = {B}, L = {L}, BLOCK = {BLOCK}, {'h0 = 0' if zero else 'a random h0'}"
        with _at(where):
            trace, a, x, h0 = _run_10_2(kernel, g, B, L, BLOCK, zero)
        _all_written(trace, "h", "row, t", where)
        got = trace["h"]
        want = linear_scan_reference(a[..., None], x[..., None], h0[:, None])[..., 0]
        if not close(got, want, 1e-5):
            _named([got], _scan_mistakes(a, x, h0), 1e-5, where)
        compare(got, want, 1e-5, name="h", against="linear_scan_reference", axes="row, t", where=where)


@picture_case("10.2")
def _picture_10_2(kernel):
    return _run_10_2(kernel, generator(2), 3, 6, 8, False, strict=False)[0], {
        "a": ("row", "t"), "x": ("row", "t"), "h0": ("row",), "h": ("row", "t")}


# ----------------------------------------------------------------------------------------------- 10.3


def _tiles(a, x, BT, carried="A"):
    """The time-tiled scan along dim -2 in float64, the carry ``c`` applied as ``A c + X`` ("A"), as ``c + X``
    ("plain") or not at all ("none"): ``(h, the last state)``."""
    c, hs = torch.zeros_like(x[..., 0, :]), []
    for start in range(0, x.shape[-2], BT):
        a_t, x_t = a[..., start: start + BT, :], x[..., start: start + BT, :]
        A, X = a_t.cumprod(-2), _fold(a_t.transpose(-1, -2), x_t.transpose(-1, -2), 0 * c).transpose(-1, -2)
        h = {"A": A * c[..., None, :] + X, "plain": c[..., None, :] + X, "none": X}[carried]
        hs.append(h)
        c = h[..., -1, :]
    return torch.cat(hs, -2), c


def _run_10_3(kernel, g, B, L, D, BT, BD, strict=True):
    a, x = _gates(g, B, L, D), _randn(g, B, L, D)
    trace = launch(kernel_of(kernel, "scan_tiles"), (B, _cdiv(D, BD)), strict=strict, a_ptr=a, x_ptr=x,
                   h_ptr=output(B, L, D), hL_ptr=output(B, D), L=L, D=D, BT=BT, BD=BD)
    return trace, a.double(), x.double()


@exercise("10.3")
def _check_10_3(kernel):
    kernel_of(kernel, "scan_tiles")                        # the answer itself, before any case
    from seqlab.ops import linear_scan_reference

    for g, (B, L, D, BT, BD) in seeded(103, ((1, 1, 1, 4, 2), (2, 13, 5, 4, 4), (2, 16, 3, 8, 4), (1, 37, 6, 8, 4))):
        where = f" at B = {B}, L = {L}, D = {D}, BT = {BT}, BD = {BD}"
        with _at(where):
            trace, a, x = _run_10_3(kernel, g, B, L, D, BT, BD)
        for name in ("h", "hL"):
            _all_written(trace, name, "batch, t, channel" if name == "h" else "batch, channel", where)
        h, hL = trace["h"], trace["hL"]
        want = linear_scan_reference(a, x)
        if not close(h, want, 1e-5):
            _named([h], [([_tiles(a, x, BT, "none")[0]], "each tile starts from 0: the state carried from the tile "
                                                           "before is missing, h = A c + X"),
                         ([_tiles(a, x, BT, "plain")[0]], "the carried state must be scaled by A_t, the product of the "
                                                            "tile's gates up to t: h = A c + X, not c + X")],
                   1e-5, where)
        compare(h, want, 1e-5, name="h", against="linear_scan_reference", axes="batch, t, channel", where=where)
        if L % BT and not close(hL, want[:, -1], 1e-5) and float(hL.abs().max()) == 0:
            raise Wrong(f"hL is 0{where}: the rows past L must load the identity pair (a, x) = (1, 0), so that the "
                        f"last row of the last tile is the last valid state (other=1.0 for a, other=0.0 for x)")
        compare(hL, want[:, -1], 1e-5, name="hL", against="the state after the last step", axes="batch, channel",
                where=where)


@picture_case("10.3")
def _picture_10_3(kernel):
    dims = ("batch", "t", "channel")
    return _run_10_3(kernel, generator(3), 2, 10, 5, 4, 4, strict=False)[0], {
        "a": dims, "x": dims, "h": dims, "hL": ("batch", "channel")}


# ----------------------------------------------------------------------------------------------- 10.4


def _shifted(a):
    """``a_(t+1)`` along the last axis, 0 after the last step."""
    return torch.cat([a[..., 1:], torch.zeros_like(a[..., :1])], -1)


def _reverse(a, g):
    """``dx_t = g_t + a_t dx_(t+1)`` along the last axis, from the last step back (float64)."""
    return _fold(a.flip(-1), g.flip(-1), torch.zeros_like(g[..., 0])).flip(-1)


def _run_10_4(kernel, g, B, L, BLOCK, strict=True):
    from seqlab.ops import linear_scan_reference

    a, x, grad = _gates(g, B, L), _randn(g, B, L), _randn(g, B, L)
    h = linear_scan_reference(a.double()[..., None], x.double()[..., None])[..., 0].float()
    trace = launch(kernel_of(kernel, "scan_backward"), (B,), strict=strict, a_ptr=a, h_ptr=h, g_ptr=grad,
                   dx_ptr=output(B, L), da_ptr=output(B, L), L=L, BLOCK=BLOCK)
    return trace, a.double(), x.double(), h.double(), grad.double()


@exercise("10.4")
def _check_10_4(kernel):
    kernel_of(kernel, "scan_backward")                     # the answer itself, before any case
    from seqlab.ops import linear_scan_reference

    for g, (B, L, BLOCK) in seeded(104, ((2, 1, 1), (3, 13, 16), (2, 16, 16), (1, 29, 32))):
        where = f" at B = {B}, L = {L}, BLOCK = {BLOCK}"
        with _at(where):
            trace, a, x, h, grad = _run_10_4(kernel, g, B, L, BLOCK)
        for name in ("dx", "da"):
            _all_written(trace, name, "row, t", where)
        with torch.enable_grad():
            a_, x_ = a.clone().requires_grad_(), x.clone().requires_grad_()
            (linear_scan_reference(a_[..., None], x_[..., None])[..., 0] * grad).sum().backward()
        dx, da = trace["dx"], trace["da"]
        if not close(dx, x_.grad, 1e-5):
            _named([dx], [([_reverse(a, grad)], "dx_t = g_t + a_(t+1) dx_(t+1): the gate that carries dx_(t+1) back "
                                                "is a_(t+1), the one h_(t+1) was made with; yours is a_t"),
                          ([_fold(_shifted(a), grad, torch.zeros_like(grad[:, 0]))],
                           "the scan ran forwards: the gradient flows from the last step back to the first, "
                           "tl.associative_scan(..., reverse=True)")], 1e-5, where)
        compare(dx, x_.grad, 1e-5, name="dx", against="autograd through linear_scan_reference", axes="row, t",
                where=where)
        if not close(da, a_.grad, 1e-5):
            _named([da], [([x_.grad * h], "da_t = dx_t h_(t-1): a_t multiplies h_(t-1) in h_t = a_t h_(t-1) + x_t; "
                                          "you multiplied by h_t")], 1e-5, where)
        compare(da, a_.grad, 1e-5, name="da", against="autograd through linear_scan_reference", axes="row, t",
                where=where)


@picture_case("10.4")
def _picture_10_4(kernel):
    dims = ("row", "t")
    return _run_10_4(kernel, generator(4), 2, 6, 8, strict=False)[0], {n: dims for n in ("a", "h", "g", "dx", "da")}


# ----------------------------------------------------------------------------------------------- 10.5


def _run_10_5(kernel, g, B, L, BLOCK, zero, strict=True):
    size = _gates(g, B, L).double().abs()
    a = torch.polar(size, uniform(g, B, L, lo=-math.pi, hi=math.pi)).to(torch.complex64)
    x = torch.complex(_randn(g, B, L), _randn(g, B, L))
    h0 = torch.zeros(B, dtype=torch.complex64) if zero else torch.complex(_randn(g, B), _randn(g, B))
    planes = [torch.view_as_real(t).contiguous() for t in (a, x, h0)]
    trace = launch(kernel_of(kernel, "complex_scan"), (B,), strict=strict, a_ptr=planes[0], x_ptr=planes[1],
                   h0_ptr=planes[2], h_ptr=output(B, L, 2), L=L, BLOCK=BLOCK)
    return trace, a.to(torch.complex128), x.to(torch.complex128), h0.to(torch.complex128)


@exercise("10.5")
def _check_10_5(kernel):
    kernel_of(kernel, "complex_scan")                      # the answer itself, before any case
    from seqlab.ops import linear_scan_reference

    def scan(a, x, h0):
        return linear_scan_reference(a[..., None], x[..., None], h0[:, None])[..., 0]

    for g, (B, L, BLOCK, zero) in seeded(105, ((3, 13, 16, True), (2, 1, 1, False), (2, 16, 16, False),
                                               (1, 7, 8, False))):
        where = f" at B = {B}, L = {L}, BLOCK = {BLOCK}, {'h0 = 0' if zero else 'a random h0'}"
        with _at(where):
            trace, a, x, h0 = _run_10_5(kernel, g, B, L, BLOCK, zero)
        _all_written(trace, "h", "row, t, re/im", where)
        got = torch.view_as_complex(trace["h"])
        want = scan(a, x, h0)
        if not close(got, want, 1e-5):
            apart = torch.complex(scan(a.real, x.real, h0.real), scan(a.imag, x.imag, h0.imag))
            _named([got], [([scan(a.conj(), x, h0)], "a conjugate: the imaginary part of a enters with the wrong "
                                                     "sign; (a_r + i a_i)(x_r + i x_i) = (a_r x_r - a_i x_i) + "
                                                     "i (a_r x_i + a_i x_r)"),
                           ([apart], "the planes were scanned apart (real with real, imaginary with imaginary): a "
                                     "complex product mixes them, (a_r x_r - a_i x_i) + i (a_r x_i + a_i x_r)"),
                           ([scan(a.real.to(a.dtype), x, h0)], "the imaginary part of a is missing: the gate "
                                                               "rotates as well as shrinks")], 1e-5, where)
        compare(got, want, 1e-5, name="h", against="linear_scan_reference (complex128)", axes="row, t", where=where)


@picture_case("10.5")
def _picture_10_5(kernel):
    dims = ("row", "t", "re, im")
    return _run_10_5(kernel, generator(5), 2, 6, 8, False, strict=False)[0], {
        "a": dims, "x": dims, "h0": ("row", "re, im"), "h": dims}


# ----------------------------------------------------------------------------------------------- 10.6


def _linear_chunks(q, k, v, C, *, mask="causal", state="before"):
    """Chunked causal linear attention in float64 with one part switched, to name a mistake: ``mask`` "causal"
    (j <= i), "strict" (j < i) or "none"; the state read by a chunk's queries "before" it, "after" it or "none"."""
    L = q.shape[-2]
    rows = torch.arange(C)
    keep = {"causal": rows[:, None] >= rows[None, :], "strict": rows[:, None] > rows[None, :],
            "none": torch.ones(C, C, dtype=torch.bool)}[mask]
    S, ys = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1]), []
    for start in range(0, L, C):
        qc, kc, vc = (t[..., start: start + C, :] for t in (q, k, v))
        n = qc.shape[-2]
        out = ((qc @ kc.mT) * keep[:n, :n]) @ vc
        after = S + kc.mT @ vc
        ys.append(out + {"before": qc @ S, "after": qc @ after, "none": 0}[state])
        S = after
    return torch.cat(ys, -2)


def _run_10_6(kernel, g, BH, L, DK, DV, C, BK, BV, strict=True):
    q, k, v = _randn(g, BH, L, DK), _randn(g, BH, L, DK), _randn(g, BH, L, DV)
    trace = launch(kernel_of(kernel, "linear_attention"), (BH,), strict=strict, q_ptr=q, k_ptr=k, v_ptr=v,
                   y_ptr=output(BH, L, DV), L=L, DK=DK, DV=DV, C=C, BK=BK, BV=BV)
    return trace, q.double(), k.double(), v.double()


@exercise("10.6")
def _check_10_6(kernel):
    kernel_of(kernel, "linear_attention")                  # the answer itself, before any case
    from seqlab.ops import decay_attention_reference

    cases = ((2, 1, 3, 5, 4, 4, 8), (3, 13, 3, 5, 4, 4, 8), (2, 16, 4, 4, 8, 4, 4), (1, 21, 2, 3, 8, 2, 4))
    for g, (BH, L, DK, DV, C, BK, BV) in seeded(106, cases):
        where = f" at BH = {BH}, L = {L}, dk = {DK}, dv = {DV}, C = {C}, BK = {BK}, BV = {BV}"
        with _at(where):
            trace, q, k, v = _run_10_6(kernel, g, BH, L, DK, DV, C, BK, BV)
        _all_written(trace, "y", "head, t, value", where)
        got = trace["y"]
        want = decay_attention_reference(q, k, v, decay="none")
        if not close(got, want, 1e-4):
            _named([got], [
                ([_linear_chunks(q, k, v, C, mask="none")], "y_i reads keys j > i of its own chunk: mask the chunk's "
                                                            "scores to j <= i before multiplying by V"),
                ([_linear_chunks(q, k, v, C, mask="strict")], "the diagonal is missing: y_i = q_i S_i includes the "
                                                              "token's own k_i^T v_i, so keep j <= i, not j < i"),
                ([_linear_chunks(q, k, v, C, state="none")], "y ignores every earlier chunk: add q S, the state "
                                                             "passed from the chunks before (S += K^T V after each)"),
                ([_linear_chunks(q, k, v, C, state="after")], "y reads the state after its chunk, which counts the "
                                                              "chunk's own tokens twice: read S, then update it")],
                1e-4, where)
        compare(got, want, 1e-4, name="y", against="decay_attention_reference(decay='none')",
                axes="head, t, value", where=where)


@picture_case("10.6")
def _picture_10_6(kernel):
    return _run_10_6(kernel, generator(6), 2, 10, 3, 5, 4, 4, 8, strict=False)[0], {
        "q": ("head", "t", "key"), "k": ("head", "t", "key"), "v": ("head", "t", "value"),
        "y": ("head", "t", "value")}


# ----------------------------------------------------------------------------------------------- 10.7 and 10.8


def _chunk_blocks(M, C: int, rows: slice, cols: slice) -> torch.Tensor:
    """The blocks ``[rows, cols]`` of every chunk of ``C`` of ``M (BH, L, L)``, zero past L: ``(BH, n, r, c)``."""
    BH, L = M.shape[0], M.shape[-1]
    n = _cdiv(L, C)
    padded = torch.nn.functional.pad(M, (0, n * C - L, 0, n * C - L)).view(BH, n, C, n, C)
    return torch.stack([padded[:, c, rows, c, cols] for c in range(n)], 1)


def _attention(q, k, log_a):
    """GateLoop's surrogate attention ``(BH, L, L)`` (``gateloop_attention_matrix``, float64) for per-channel
    log-gates ``log_a`` (BH, L, dk), or per-step ones (BH, L) shared by the channels."""
    from seqlab.ops import gateloop_attention_matrix

    if log_a.dim() == 2:
        log_a = log_a[..., None].expand_as(q)
    return gateloop_attention_matrix(q[None], k[None], torch.exp(log_a)[None])[0]


def _decays(log_a, C, *, inclusive=False, transposed=False):
    """The decays of every chunk of ``C`` in float64, ``(BH, n, C, C)``, 0 above the diagonal, for naming mistakes:
    ``exp(g_i - g_j)`` from the chunk-local sums ``g`` of ``log_a (BH, L)``; ``inclusive``: ``a_j`` counted too,
    ``exp(g_i - g_j + log a_j)``; ``transposed``: ``exp(g_j - g_i)``."""
    BH, L = log_a.shape
    n = _cdiv(L, C)
    la = torch.nn.functional.pad(log_a, (0, n * C - L)).view(BH, n, C)
    G = la.cumsum(-1)
    exponent = (G[..., None, :] - G[..., :, None]) if transposed else (G[..., :, None] - G[..., None, :])
    if inclusive:
        exponent = exponent + la[..., None, :]
    return torch.exp(exponent.masked_fill(~torch.ones(C, C, dtype=torch.bool).tril(), -math.inf))


def _run_10_7(kernel, g, BH, L, DK, C, BK, lo, hi, strict=True):
    q, k = _randn(g, BH, L, DK), _randn(g, BH, L, DK)
    log_a = uniform(g, BH, L, lo=lo, hi=hi).float()
    trace = launch(kernel_of(kernel, "decayed_scores"), (BH, _cdiv(L, C)), strict=strict, q_ptr=q, k_ptr=k,
                   la_ptr=log_a, A_ptr=output(BH, L, C), L=L, DK=DK, C=C, BK=BK)
    return trace, q.double(), k.double(), log_a.double()


@exercise("10.7")
def _check_10_7(kernel):
    kernel_of(kernel, "decayed_scores")                    # the answer itself, before any case
    cases = ((2, 1, 3, 4, 4, -1.0, 0.0), (2, 13, 3, 8, 4, -1.0, 0.0), (1, 16, 2, 4, 2, -0.3, 0.0),
             (2, 11, 3, 4, 4, -40.0, -20.0))
    for g, (BH, L, DK, C, BK, lo, hi) in seeded(107, cases):
        where = f" at BH = {BH}, L = {L}, dk = {DK}, C = {C}, BK = {BK}" + (
            f" with log a in [{lo:g}, {hi:g}]" if lo < -5 else "")
        with _at(where):
            trace, q, k, log_a = _run_10_7(kernel, g, BH, L, DK, C, BK, lo, hi)
        _all_written(trace, "A", "head, t, j", where)
        got = trace["A"]
        if lo < -5:
            _no_overflow(got, "A", where)
        blocks = lambda M: _chunk_blocks(M, C, slice(None), slice(None))  # noqa: E731
        n = _cdiv(L, C)
        per_row = lambda B: B.reshape(BH, n * C, C)[:, :L]                # noqa: E731  (BH, n, C, C) -> (BH, L, C)
        want = per_row(blocks(_attention(q, k, log_a)))
        later = per_row(torch.ones(BH, n, C, C).triu(1)).bool()
        if bool((got[later] != 0).any()):
            first = tuple(int(i) for i in (later & (got != 0)).nonzero()[0])
            raise Wrong(f"A at (head, t, j) = {first} is not 0{where}: key j of the chunk comes after query t, and a "
                        f"query reads only the keys j <= t of its chunk (mask j > t before exp)")
        scores = blocks(q @ k.mT)
        if not close(got, want, 1e-4):
            _named([got], [([per_row(scores * _decays(log_a, C, inclusive=True))],
                            "one gate too many: D[i, j] = exp(g_i - g_j) = a_(j+1) ... a_i leaves a_j out, so the "
                            "diagonal is 1"),
                           ([per_row(scores * _decays(log_a, C, transposed=True))],
                            "the decay runs the wrong way: exp(g_i - g_j), the query's g minus the key's")],
                   1e-4, where)
        compare(got, want, 1e-4, name="A", against="gateloop_attention_matrix's diagonal blocks",
                axes="head, t, j", where=where)


@picture_case("10.7")
def _picture_10_7(kernel):
    return _run_10_7(kernel, generator(7), 2, 10, 3, 4, 4, -1.0, 0.0, strict=False)[0], {
        "q": ("head", "t", "key"), "k": ("head", "t", "key"), "la": ("head", "t"), "A": ("head", "t", "j")}


def _boundary_blocks(q, k, log_a, S, key_from=1, query_from=0):
    """Block (1, 0) of every chunk of ``2S`` in float64, each weight ``sum_d q_id k_jd exp(sum of log a_r)`` over
    ``r = j + key_from .. n - 1`` (the key's factor) and ``r = n + query_from .. i`` (the query's), ``n`` the
    boundary: 1 and 0 are right; 0 counts a_j, 1 leaves a_n out (to name a learner's off-by-one)."""
    BH, L, DK = q.shape
    n = _cdiv(L, 2 * S)
    pad = lambda t: torch.nn.functional.pad(t, (0, 0, 0, 2 * S * n - L)).view(BH, n, 2 * S, DK)  # noqa: E731
    q, k, la = pad(q), pad(k), pad(log_a)
    keys, queries = la[:, :, :S], la[:, :, S:]
    to_end = keys.flip(2).cumsum(2).flip(2) - (keys if key_from == 1 else 0)                # r = j + key_from .. n-1
    from_start = queries.cumsum(2) - (queries[:, :, :1] if query_from == 1 else 0)         # r = n + query_from .. i
    qf, kf = q[:, :, S:] * torch.exp(from_start), k[:, :, :S] * torch.exp(to_end)
    return qf @ kf.mT


def _run_10_8(kernel, g, BH, L, DK, S, BK, sharp, strict=True):
    q, k = _randn(g, BH, L, DK), _randn(g, BH, L, DK)
    log_a = uniform(g, BH, L, DK, lo=-0.5, hi=0.0)
    if sharp:                                                     # channel 0 sharp, the others mild (lesson 06, §5)
        log_a[..., 0] = uniform(g, BH, L, lo=-40.0, hi=-20.0)
    log_a = log_a.float()
    n = _cdiv(L, 2 * S)
    trace = launch(kernel_of(kernel, "subchunk_block"), (BH, n), strict=strict, q_ptr=q, k_ptr=k, la_ptr=log_a,
                   A_ptr=output(BH, n, S, S), L=L, DK=DK, S=S, BK=BK)
    return trace, q.double(), k.double(), log_a.double()


@exercise("10.8")
def _check_10_8(kernel):
    kernel_of(kernel, "subchunk_block")                    # the answer itself, before any case
    cases = ((2, 8, 3, 4, 4, False), (2, 13, 3, 4, 4, False), (1, 5, 2, 2, 2, False), (2, 16, 3, 4, 4, True))
    for g, (BH, L, DK, S, BK, sharp) in seeded(108, cases):
        where = f" at BH = {BH}, L = {L}, dk = {DK}, S = {S}, BK = {BK}" + (
            " with log a in [-40, -20] on channel 0" if sharp else "")
        with _at(where):
            trace, q, k, log_a = _run_10_8(kernel, g, BH, L, DK, S, BK, sharp)
        _all_written(trace, "A", "head, chunk, i, j", where)
        got = trace["A"]
        if sharp:
            _no_overflow(got, "A", where)
        want = _chunk_blocks(_attention(q, k, log_a), 2 * S, slice(S, 2 * S), slice(0, S))
        if not close(got, want, 1e-4):
            _named([got], [([_boundary_blocks(q, k, log_a, S, key_from=0)],
                            "the key's factor has one gate too many: from key j to the boundary is a_(j+1) ... "
                            "a_(n-1), without a_j (a suffix sum that leaves j out: tl.cumsum(.., reverse=True) - "
                            "log a_j)"),
                           ([_boundary_blocks(q, k, log_a, S, query_from=1)],
                            "the query's factor leaves out a_n, the gate of its sub-chunk's first step: from the "
                            "boundary to query i is a_n ... a_i (an inclusive tl.cumsum)")], 1e-4, where)
        compare(got, want, 1e-4, name="A", against="block (1, 0) of gateloop_attention_matrix's chunks",
                axes="head, chunk, i, j", where=where)


@picture_case("10.8")
def _picture_10_8(kernel):
    dims = ("head", "t", "key")
    return _run_10_8(kernel, generator(8), 1, 14, 3, 4, 4, False, strict=False)[0], {
        "q": dims, "k": dims, "la": dims, "A": ("head", "chunk", "i", "j")}


# ----------------------------------------------------------------------------------------------- 10.9


def _step(q, k, v, a, S, *, decay="old", read="after"):
    """One GateLoop step in float64 (``S: (BH, dk, dv)``), the decay applied to the "old" state, to "both" terms
    or "none", and ``y`` read "after" or "before" the update: ``(y, S)``."""
    write = k[:, :, None] * v[:, None, :]
    new = {"old": a[:, :, None] * S + write, "both": a[:, :, None] * (S + write), "none": S + write}[decay]
    return torch.einsum("bk,bkv->bv", q, new if read == "after" else S), new


def _run_10_9(kernel, g, BH, DK, DV, BK, BV, strict=True):
    q, k, v, S = _randn(g, BH, DK), _randn(g, BH, DK), _randn(g, BH, DV), _randn(g, BH, DK, DV)
    a = _gates(g, BH, DK).abs()
    trace = launch(kernel_of(kernel, "gateloop_step"), (BH, _cdiv(DV, BV)), strict=strict, q_ptr=q, k_ptr=k,
                   v_ptr=v, a_ptr=a, S_ptr=S, y_ptr=output(BH, DV), DK=DK, DV=DV, BK=BK, BV=BV)
    return trace, q.double(), k.double(), v.double(), a.double(), S.double()


@exercise("10.9")
def _check_10_9(kernel):
    kernel_of(kernel, "gateloop_step")                     # the answer itself, before any case
    from seqlab.ops import gateloop

    for g, (BH, DK, DV, BK, BV) in seeded(109, ((2, 3, 5, 4, 4), (3, 4, 4, 4, 2), (1, 1, 3, 1, 4), (2, 5, 7, 8, 4))):
        where = f" at BH = {BH}, dk = {DK}, dv = {DV}, BK = {BK}, BV = {BV}"
        with _at(where):
            trace, q, k, v, a, S = _run_10_9(kernel, g, BH, DK, DV, BK, BV)
        _all_written(trace, "S", "head, key, value", where)
        _all_written(trace, "y", "head, value", where)
        y, S_new = trace["y"], trace["S"]
        one = lambda t: t[:, None, None]  # noqa: E731  (BH, d) -> (BH, 1, 1, d): one head, one step
        want_y, want_S = gateloop(one(q), one(k), one(v), one(a), h0=S[:, None], mode="recurrent", return_state=True)
        want_y, want_S = want_y[:, 0, 0], want_S[:, 0]
        if not (close(y, want_y, 1e-5) and close(S_new, want_S, 1e-5)):
            _named([y, S_new], [(_step(q, k, v, a, S, read="before"), "y_t is read from S_(t-1): update the state "
                                                                      "first, then y_t = q_t S_t"),
                                (_step(q, k, v, a, S, decay="both"), "the decay scales the new write too: S_t = "
                                                                     "diag(a_t) S_(t-1) + k_t^T v_t, only the old "
                                                                     "state decays"),
                                (_step(q, k, v, a, S, decay="none"), "the decay a_t is missing: S_t = diag(a_t) "
                                                                     "S_(t-1) + k_t^T v_t")], 1e-5, where)
        compare(S_new, want_S, 1e-5, name="S", against="gateloop(mode='recurrent')'s state", axes="head, key, value",
                where=where)
        compare(y, want_y, 1e-5, name="y", against="gateloop(mode='recurrent')", axes="head, value", where=where)


@picture_case("10.9")
def _picture_10_9(kernel):
    return _run_10_9(kernel, generator(9), 2, 3, 5, 4, 4, strict=False)[0], {
        "q": ("head", "key"), "k": ("head", "key"), "v": ("head", "value"), "a": ("head", "key"),
        "S": ("head", "key", "value"), "y": ("head", "value")}


# ----------------------------------------------------------------------------------------------- 10.10


def _in_chunks(t, C):
    """``(BH, L, ...)`` -> ``(BH, n, C, ...)``, zero-padded at the end (padding: beta = 0, k = v = 0)."""
    L, n = t.shape[1], _cdiv(t.shape[1], C)
    widths = [0, 0] * (t.dim() - 2) + [0, n * C - L]
    return torch.nn.functional.pad(t, widths).view(t.shape[0], n, C, *t.shape[2:])


def _run_10_10(kernel, g, BH, L, DK, DV, C, BK, BV, strict=True):
    k = _unit(torch.randn(BH, L, DK, generator=g, dtype=torch.float64)).float()
    v, beta = _randn(g, BH, L, DV), _betas(g, BH, L).float()
    trace = launch(kernel_of(kernel, "ut_transform_kernel"), (BH, _cdiv(L, C)), strict=strict, k_ptr=k, v_ptr=v,
                   beta_ptr=beta, w_ptr=output(BH, L, DK), u_ptr=output(BH, L, DV), L=L, DK=DK, DV=DV, C=C, BK=BK,
                   BV=BV)
    return trace, k.double(), v.double(), beta.double()


@exercise("10.10")
def _check_10_10(kernel):
    kernel_of(kernel, "ut_transform_kernel")               # the answer itself, before any case
    from seqlab.ops import delta_rule_ut_matrix

    cases = ((2, 4, 3, 2, 4, 4, 2), (1, 13, 3, 4, 4, 4, 4), (2, 11, 4, 3, 8, 4, 4), (1, 5, 2, 2, 8, 2, 2))
    for g, (BH, L, DK, DV, C, BK, BV) in seeded(1010, cases):
        where = f" at BH = {BH}, L = {L}, dk = {DK}, dv = {DV}, C = {C}, BK = {BK}, BV = {BV}"
        with _at(where):
            trace, k, v, beta = _run_10_10(kernel, g, BH, L, DK, DV, C, BK, BV)
        _all_written(trace, "w", "head, t, key", where)
        _all_written(trace, "u", "head, t, value", where)
        W, U = trace["w"], trace["u"]
        Kc, Vc, bc = _in_chunks(k, C), _in_chunks(v, C), _in_chunks(beta, C)
        system = delta_rule_ut_matrix(Kc.flatten(1, 2)[None], bc.flatten(1, 2)[None], chunk_size=C)[0]
        WU = torch.linalg.solve_triangular(system, bc[..., None] * torch.cat([Kc, Vc], -1), upper=False,
                                           unitriangular=True)              # T diag(beta) [K | V], every chunk
        back = lambda t: t.flatten(1, 2)[:, :L]  # noqa: E731
        want_W, want_U = back(WU[..., :DK]), back(WU[..., DK:])
        if not (close(W, want_W, 1e-4) and close(U, want_U, 1e-4)):
            once = lambda X: bc[..., None] * X - (system - torch.eye(C)) @ (bc[..., None] * X)  # noqa: E731
            mistakes = [([back(once(Kc)), back(once(Vc))],
                         "row r subtracts the right-hand sides of the rows before it, not their solutions: solve in "
                         "place, so that row r reads the rows i < r already solved (w_r = beta_r k_r - sum_(i<r) "
                         "A[r, i] w_i)"),
                        ([back(bc[..., None] * Kc), back(bc[..., None] * Vc)],
                         "W and U are diag(beta) K and diag(beta) V: the system was never solved (the loop over the "
                         "rows r = 1 .. C-1 changed nothing)")]
            for switches, mistake in _UT_MISTAKES:
                if switches.get("system") in ("identity", "KtK"):
                    continue
                mistakes.append(([back(t) for t in _ut_reference(Kc, Vc, bc, **switches)], mistake))
            _named([W, U], mistakes, 1e-4, where)
        compare(W, want_W, 1e-4, name="W", against="T diag(beta) K (delta_rule_ut_matrix's system, solved)",
                axes="head, t, key", where=where)
        compare(U, want_U, 1e-4, name="U", against="T diag(beta) V", axes="head, t, value", where=where)


@picture_case("10.10")
def _picture_10_10(kernel):
    return _run_10_10(kernel, generator(10), 1, 10, 3, 2, 4, 4, 2, strict=False)[0], {
        "k": ("head", "t", "key"), "v": ("head", "t", "value"), "beta": ("head", "t"), "w": ("head", "t", "key"),
        "u": ("head", "t", "value")}
