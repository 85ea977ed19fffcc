r"""The linear recurrence ``h_t = a_t ⊙ h_{t-1} + x_t``: the engine under LRNN/FST, LightNet and GateLoop.

Paper 002 §2.1 unrolls the linear RNN ``h_t = W h_{t-1} + W_in x_t`` into

    h_t = Λ^t h_0 + Σ_{i=0}^{t-1} Λ^i W̄_in x_{t-i}                   (paper 002 §2.1, last display)

once ``W = C Λ C^{-1}`` is diagonalised: every channel ``d`` is an independent scalar recurrence
``h_t = λ h_{t-1} + x_t`` with a complex ``λ``. Paper 003 (Theorem 3.1) and paper 004 (eq. 12-13)
let the decay depend on time, ``h_t = a_t h_{t-1} + x_t``. This file computes that one recurrence,
along dim ``-2`` of ``x`` (``(..., L, D)``), in every equivalent way:

``sequential``
    The loop, written the way the recurrence reads. The reference (autograd through the loop).
``doubling``
    Algorithm 1 of paper 002 (from Yue et al. 2024): pad ``L`` to a power of two, then for
    ``i = 1..log2 L`` add ``Λ^{1..l/2}`` times the last state of each left half to its right half.
    Needs a time-invariant ``a`` (the powers ``Λ^k`` are shared by every position).
``associative``
    A parallel prefix scan with the associative operator of paper 004 eq. 13,
    ``(a1, x1) • (a2, x2) = (a1 a2, a2 x1 + x2)``: pairs are combined, the half-length problem is
    solved recursively, and the other half is filled in (``O(L)`` work, ``log2 L`` depth).
``blocked``
    A two-level chunked scan for CPUs: chunks of ``C`` steps are scanned side by side (a loop over
    ``C`` touching ``L/C`` chunks at once), their end states are carried across chunks by a short
    scan over ``L/C`` items, then each chunk is rescanned from its true initial state.
``numba``
    The loop itself, compiled for the CPU by Numba (``seqlab.kernels.compiled``): one pass that reads
    ``a`` and ``x`` once and writes ``h`` once, parallel over batch rows and blocks of channels.
``triton``
    A Triton kernel (``seqlab.kernels.scan``): sequential in time, parallel over batch and channels.
``auto``
    The fastest correct mode for the device: ``triton`` on CUDA, ``numba`` on CPU (``blocked``
    where Numba is missing); see ``benchmarks/scan.py`` for the measurements behind this choice.

Every mode is differentiable. The fast modes share one backward, the reverse recurrence
(``g = ∂loss/∂h``, PyTorch's conjugate convention for complex tensors):

    ∂x_t = g_t + conj(a_{t+1}) ∂x_{t+1},    ∂a_t = ∂x_t · conj(h_{t-1}),    ∂h_0 = conj(a_1) ∂x_1

which is itself a linear scan run backwards in time, computed by the same mode.

Shapes and dtypes: ``x`` is ``(..., L, D)``, real or complex. ``a`` is either ``(D,)``
(time-invariant, like ``Λ``) or broadcastable to ``x``; a real ``a`` with a complex ``x`` is fine
(a real decay of a complex state); a complex ``a`` with a real ``x`` is refused (the state would be
complex: pass a complex ``x``). ``h0`` is ``(..., D)`` (the state before ``t = 1``; after ``t = L``
when ``reverse=True``, where ``h_t = a_t h_{t+1} + x_t``). ``bfloat16``/``float16`` inputs are
computed with a float32 state and returned in their dtype (their ``a``/``h0`` may be float32).
"""
from __future__ import annotations

import math

import torch

from seqlab.ops._checks import (check_finite_inputs, check_mode, check_same_device, check_tensor, describe, has_values,
                                traceable_mode)

__all__ = ["linear_scan", "linear_scan_reference", "doubling_levels", "SCAN_MODES", "scan_auto_mode", "scan_chunk_size"]

SCAN_MODES = ("auto", "sequential", "doubling", "associative", "blocked", "numba", "triton")

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_LOW_PRECISION = (torch.bfloat16, torch.float16)


# ----------------------------------------------------------------------------------------------
# 1. The reference: the loop, as the recurrence reads.
# ----------------------------------------------------------------------------------------------
def linear_scan_reference(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None = None, *,
                          reverse: bool = False) -> torch.Tensor:
    """``h_t = a_t h_{t-1} + x_t`` by a Python loop over ``t`` (vectorised over batch and channels).

    The reference every other mode is tested against; autograd flows through the loop.
    ``a`` broadcastable to ``x`` (``(..., L, D)``) or ``(D,)``; ``h0`` broadcastable to ``(..., D)``.
    """
    L = x.shape[-2]
    a_t = a.unsqueeze(-2) if a.dim() == 1 else a  # (D,) -> (1, D): the same a_t at every t
    h = torch.zeros_like(x[..., 0, :]) if h0 is None else h0 + torch.zeros_like(x[..., 0, :])
    a_steps = a_t.unbind(-2)  # one (..., D) slice per step (unbind: a single backward, not L scatters)
    x_steps = x.unbind(-2)
    states = [None] * L
    steps = range(L - 1, -1, -1) if reverse else range(L)
    for t in steps:
        at = a_steps[t if len(a_steps) > 1 else 0]
        h = at * h + x_steps[t]  # h_t = a_t h_{t-1} + x_t
        states[t] = h
    return torch.stack(states, dim=-2)


# ----------------------------------------------------------------------------------------------
# 2. Forward passes of the fast modes. Internal layout: x (B, L, *F), a (Ba, La, *F) with Ba in
#    {1, B} and La in {1, L} (La = 1: time-invariant), h0 (Bh, *F) or None; *F is (D,) or (D, 2)
#    (a complex x with a real a is computed on its real view, a broadcast over the last axis).
#    No autograd here: _ScanFunction below wraps them.
# ----------------------------------------------------------------------------------------------
def _wide(t: torch.Tensor) -> torch.Tensor:
    """float64/complex128 copy: products of many decays (``a^C``, ``Λ^k``) are formed in double precision.

    With ``|a| = 1 - ε`` the state remembers ``W = 1/ε`` steps; a product shared by many chunks (or
    blocks) with relative error δ moves ``h`` by about ``δ W / C`` -- coherently, since every chunk
    uses the same product. Forming products in float64 and rounding once keeps that below the
    float32 loop's own error (tested with ``|a| = 1 - 1e-4`` over 65 536 steps).
    """
    return t.to(torch.complex128 if t.is_complex() else torch.float64)


def _a_at(a: torch.Tensor, t) -> torch.Tensor:
    """``a_t`` (a slice along time, or the one time-invariant value)."""
    return a[:, t] if a.shape[1] > 1 else a[:, 0]


def _fold_h0(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None, reverse: bool) -> torch.Tensor:
    """``x_1 <- x_1 + a_1 h_0``: the initial state becomes part of the first input (a copy of x)."""
    if h0 is None:
        return x
    first = -1 if x.shape[1] and reverse else 0
    x = x.clone()
    x[:, first] += _a_at(a, first) * h0
    return x


def _sequential_into(out, a, x, h, steps) -> torch.Tensor:
    """Run ``h_t = a_t h_{t-1} + x_t`` over ``steps`` (time indices in order), writing into ``out``."""
    for t in steps:
        if h is None:
            out[:, t] = x[:, t]
        else:
            torch.addcmul(x[:, t], _a_at(a, t), h, out=out[:, t])
        h = out[:, t]
    return h


def _forward_loop(a, x, h0, reverse):
    out = torch.empty_like(x)
    L = x.shape[1]
    _sequential_into(out, a, x, h0, range(L - 1, -1, -1) if reverse else range(L))
    return out


def scan_chunk_size(L: int, width: int = 1) -> int:
    """Chunk length ``C`` of the blocked scan for ``L`` steps of ``width`` elements each.

    Each of the ~3C vectorised steps touches ``(L/C) * width`` elements: aim for ~64k of them (a step
    stays in cache and its Python overhead is amortised), with ``16 <= C <= 1024``
    (measured in benchmarks/scan.py).
    """
    chunks = max(2, 65536 // max(width, 1))
    return int(min(1024, max(16, L // chunks)))


def _forward_blocked(a, x, h0, reverse, chunk: int | None = None):
    """Two-level scan. Body: ``N`` chunks of ``C`` steps, viewed as ``(B, N, C, *F)``.

    pass 1: chunk-local scans from a zero state, all chunks at once: end states ``s_n`` and the
            chunk products ``P_n = Π_c a_{n,c}`` (loop over ``C``, each step on ``(B, N, *F)``);
    carry : the true initial state of chunk ``n`` is ``P_{n-1} init_{n-1} + s_{n-1}`` -- itself a
            linear scan over ``N`` items (recursively blocked);
    pass 2: rescan every chunk from its true initial state, writing the output.
    The ``L - N C`` leftover steps run sequentially after the body.
    """
    B, L = x.shape[:2]
    C = chunk or scan_chunk_size(L, x[0, 0].numel() * B)
    N = L // C
    out = torch.empty_like(x)
    if N < 2:
        return _forward_loop(a, x, h0, reverse)
    L0 = N * C
    body = slice(L - L0, L) if reverse else slice(0, L0)
    feat = x.shape[2:]
    xv = x[:, body].view(B, N, C, *feat)  # (B, N, C, *F)
    ov = out[:, body].view(B, N, C, *feat)
    varying = a.shape[1] > 1
    av = a[:, body].reshape(a.shape[0], N, C, *a.shape[2:]) if varying else a[:, :1]  # (Ba, N, C, *F) or (Ba, 1, *F)

    def a_c(c):  # a at in-chunk step c for every chunk: (Ba, N, *F) or (Ba, 1, *F)
        return av[:, :, c] if varying else av

    order = list(range(C - 1, -1, -1)) if reverse else list(range(C))
    # pass 1: local scans from zero, all N chunks at once
    s = xv[:, :, order[0]].clone()  # (B, N, *F)
    prod = _wide(a_c(order[0])).clone() if varying else None  # (Ba, N, *Fa), float64 (see _wide)
    for c in order[1:]:
        torch.addcmul(xv[:, :, c], a_c(c), s, out=s)  # s <- a_c s + x_c
        if varying:
            prod.mul_(a_c(c))  # P_n = Π_c a_{n,c}
    if not varying:
        prod = (_wide(a[:, 0]) ** C).unsqueeze(1)  # Λ^C, (Ba, 1, *F)
    # carry: init_n = P_{n-1} init_{n-1} + s_{n-1}, a scan over chunks (in float64: it is 1/C of the data)
    h0w = None if h0 is None else _wide(h0)
    carry = _forward_blocked if N >= 64 else _forward_loop
    ends = carry(prod, _wide(s), h0w, reverse).to(x.dtype)  # (B, N, *F)
    if reverse:
        init = torch.cat([ends[:, 1:], _zeros_or(h0, ends[:, :1])], 1)
    else:
        init = torch.cat([_zeros_or(h0, ends[:, :1]), ends[:, :-1]], 1)  # state before each chunk
    # pass 2: rescan each chunk from its true initial state
    torch.addcmul(xv[:, :, order[0]], a_c(order[0]), init, out=ov[:, :, order[0]])
    for prev, c in zip(order[:-1], order[1:]):
        torch.addcmul(xv[:, :, c], a_c(c), ov[:, :, prev], out=ov[:, :, c])
    # leftover steps after the body (forward) or before it (reverse)
    if L0 < L:
        last = out[:, L - L0] if reverse else out[:, L0 - 1]
        steps = range(L - L0 - 1, -1, -1) if reverse else range(L0, L)
        _sequential_into(out, a, x, last, steps)
    return out


def _zeros_or(h0, like):
    """``h0`` as a ``(B, 1, *F)`` block (zeros when absent)."""
    if h0 is None:
        return torch.zeros_like(like)
    return (h0 + torch.zeros_like(like[:, 0])).unsqueeze(1)


def _forward_doubling(a, x, h0, reverse):
    """Algorithm 1 of paper 002 (recursive doubling, Yue et al. 2024) for a time-invariant ``a = Λ``.

    1. sequence padding: ``x`` is left-padded with zeros to ``2^⌈log2 L⌉`` (zeros in front of a
       zero state leave it zero);
    2. for ``i = 1..log2 L``, ``l = 2^i``: view ``h`` as blocks of ``l`` steps, split each into
       halves ``h1, h2``; ``Λ <- cat(Λ, Λ·Λ[-1])`` holds ``Λ^1..Λ^{l/2}``; ``h2 += Λ ⊙ h1[-1]``.
    After level ``i`` every block of ``l`` steps holds its own exact scan.
    """
    if a.shape[1] != 1:
        raise ValueError("linear_scan(mode='doubling'): Algorithm 1 of paper 002 needs a time-invariant a "
                         f"(shape (D,) or with time length 1), got a with time length {a.shape[1]}; "
                         "use mode='blocked' or 'associative' for a time-varying a")
    if reverse:
        return _forward_doubling(a, x.flip(1), h0, False).flip(1)
    L = x.shape[1]
    h = None
    for h in _doubling_steps(a, x, h0):
        pass
    return h[:, h.shape[1] - L:].contiguous()


def _doubling_steps(a, x, h0):
    """Yield the padded ``h`` after the padding and after each level ``i`` of Algorithm 1 (in place)."""
    B, L = x.shape[:2]
    levels = max(0, math.ceil(math.log2(L))) if L > 0 else 0
    L2 = 2 ** levels
    h = x.new_zeros((B, L2) + tuple(x.shape[2:]))
    h[:, L2 - L:] = x  # 1. sequence padding (in front)
    if h0 is not None:
        h[:, L2 - L] += a[:, 0] * h0
    yield h
    lam = _wide(a)  # (Ba, 1, *F): Λ^1, powers formed in float64 (see _wide)
    for i in range(1, levels + 1):
        l = 2 ** i
        hv = h.view(B, L2 // l, l, *h.shape[2:])  # (B, L/l, l, *F)
        if i > 1:
            lam = torch.cat([lam, lam * lam[:, -1:]], 1)  # (Ba, l/2, *F): Λ^1 .. Λ^{l/2}
        h1_last = hv[:, :, l // 2 - 1: l // 2]  # (B, L/l, 1, *F): last state of each left half
        hv[:, :, l // 2:].addcmul_(lam.unsqueeze(1).to(h.dtype), h1_last)  # 3. h2 += Λ^{1..l/2} h1[-1]
        yield h


def doubling_levels(lam: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
    """The state after each level of Algorithm 1 (paper 002), for pictures: ``[h after padding, level 1, ...]``.

    ``lam``: ``(D,)``; ``x``: ``(..., L, D)``. Each entry is ``(..., L, D)`` (the padding cut off):
    after level ``i`` every block of ``2^i`` steps (counted on the padded sequence) holds its own scan,
    and the last entry equals ``linear_scan(lam, x)``.
    """
    _check_inputs(lam, x, None)
    if lam.dim() != 1:
        raise ValueError(f"lam: doubling_levels needs a time-invariant lam of shape (D,), got {describe(lam)}")
    a3, x3, _ = _canonical(lam, x, None)
    ar, xr, _, viewed = _real_view(a3, x3, None)
    L = x.shape[-2]
    out = []
    for h in _doubling_steps(ar, xr, None):
        h = h[:, h.shape[1] - L:].clone()
        out.append((torch.view_as_complex(h) if viewed else h).reshape(x.shape))
    return out


def _forward_associative(a, x, h0, reverse):
    """Parallel prefix scan with paper 004 eq. 13, ``(a1, x1) • (a2, x2) = (a1 a2, a2 x1 + x2)``."""
    if reverse:
        a_r = a.flip(1) if a.shape[1] > 1 else a
        return _forward_associative(a_r, x.flip(1), h0, False).flip(1)
    x = _fold_h0(a, x, h0, False)
    if a.shape[1] == 1:  # time-invariant: one pair product per level, formed in float64 (see _wide)
        a = _wide(a)
    return _prefix_scan(a, x)


def _prefix_scan(a, x):
    """Inclusive scan of the ``x`` component of ``(a_t, x_t)`` under eq. 13, zero initial state."""
    L = x.shape[1]
    if L == 1:
        return x.clone()
    n_pairs = L // 2
    invariant = a.shape[1] == 1  # (Ba, 1, *F) float64: the same a at every position
    a_left, a_right = (a, a) if invariant else (a[:, 0:2 * n_pairs:2], a[:, 1:2 * n_pairs:2])
    x_left, x_right = x[:, 0:2 * n_pairs:2], x[:, 1:2 * n_pairs:2]
    # (a_left, x_left) • (a_right, x_right): one element per pair, half the length
    a_pair = _wide(a_left) * a_right  # pair products in float64 (see _wide), rounded once where used
    x_pair = torch.addcmul(x_right, a_right.to(x.dtype), x_left)
    out = x.new_empty(x.shape)  # (B, L, *F)
    out[:, 1:2 * n_pairs:2] = _prefix_scan(a_pair, x_pair)  # h at odd positions (ends of pairs)
    out[:, 0] = x[:, 0]
    # even positions 2k >= 2: h_{2k} = a_{2k} h_{2k-1} + x_{2k}
    if L > 2:
        a_even = a.to(x.dtype) if invariant else a[:, 2::2].to(x.dtype)
        torch.addcmul(x[:, 2::2], a_even, out[:, 1:L - 1:2], out=out[:, 2::2])
    return out


def _forward_numba(a, x, h0, reverse):
    from seqlab.kernels.compiled import scan_forward

    return scan_forward(a, x, h0, reverse)


_FORWARD = {
    "blocked": _forward_blocked,
    "doubling": _forward_doubling,
    "associative": _forward_associative,
    "loop": _forward_loop,
    "numba": _forward_numba,
}


# ----------------------------------------------------------------------------------------------
# 3. The shared backward: the reverse recurrence, run by the same mode.
# ----------------------------------------------------------------------------------------------
def _real_view(a, x, h0):
    """Real a with complex x: compute on the real view ``(..., D, 2)`` with ``a`` broadcast over the pair."""
    if x.is_complex() and not a.is_complex():
        h0r = None if h0 is None else torch.view_as_real(h0)
        return a.unsqueeze(-1), torch.view_as_real(x), h0r, True
    return a, x, h0, False


def _run(mode, a, x, h0, reverse):
    if mode == "numba":  # the compiled loop takes complex x with a real a as it is
        return _forward_numba(a, x, h0, reverse)
    ar, xr, h0r, viewed = _real_view(a, x, h0)
    out = _FORWARD[mode](ar, xr, h0r, reverse)
    return torch.view_as_complex(out) if viewed else out


def _shift_a(a, reverse):
    """``a_{t+1}`` at position ``t`` (``a_{t-1}`` when reverse); the wrapped-around value multiplies a zero."""
    if a.shape[1] == 1:
        return a
    return torch.roll(a, -1 if not reverse else 1, dims=1)


def _sum_to(t: torch.Tensor, shape) -> torch.Tensor:
    """Sum a gradient over the dimensions that were broadcast to reach ``t.shape``."""
    dims = [i for i, (n, m) in enumerate(zip(shape, t.shape)) if n == 1 and m != 1]
    return t.sum(dim=dims, keepdim=True) if dims else t


class _ScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, x, h0, reverse, mode):
        h = _run(mode, a, x, h0, reverse)
        ctx.save_for_backward(a, h, h0)
        ctx.reverse, ctx.mode = reverse, mode
        return h

    @staticmethod
    def backward(ctx, g):
        a, h, h0 = ctx.saved_tensors
        reverse, mode = ctx.reverse, ctx.mode
        # ∂x_t = g_t + conj(a_{t+1}) ∂x_{t+1}: a scan in the opposite direction
        dx = _run(mode, _shift_a(a, reverse).conj(), g.contiguous(), None, not reverse)
        da = dh0 = None
        if ctx.needs_input_grad[0]:
            # ∂a_t = ∂x_t conj(h_{t-1}), h_{t-1} = h0 (or 0) at the first step
            h_prev = torch.empty_like(h)
            first = -1 if reverse else 0
            if reverse:
                h_prev[:, :-1] = h[:, 1:]
            else:
                h_prev[:, 1:] = h[:, :-1]
            h_prev[:, first] = 0 if h0 is None else h0
            da = dx * h_prev.conj()
            if not a.is_complex() and da.is_complex():
                da = da.real
            da = _sum_to(da, a.shape)
        if h0 is not None and ctx.needs_input_grad[2]:
            first = -1 if reverse else 0
            dh0 = _sum_to(_a_at(a, first).conj() * dx[:, first], (h0.shape[0],) + tuple(dx.shape[2:]))
            if not h0.is_complex() and dh0.is_complex():
                dh0 = dh0.real
        return da, dx, dh0, None, None


# ----------------------------------------------------------------------------------------------
# 4. The public op: checks, canonical layout, dispatch.
# ----------------------------------------------------------------------------------------------
def scan_auto_mode(device: torch.device) -> str:
    """``auto``: the Triton kernel on CUDA (when Triton is there); on CPU the compiled loop, else the blocked scan."""
    if device.type == "cuda":
        from seqlab import kernels

        if kernels.HAVE_TRITON and not kernels.interpreted():
            return "triton"
    if device.type == "cpu":
        from seqlab.kernels.compiled import HAVE_NUMBA

        if HAVE_NUMBA:
            return "numba"
    return "blocked"


def _real_dtype(t: torch.Tensor) -> torch.dtype:
    return _REAL_OF.get(t.dtype, t.dtype)


def _check_inputs(a, x, h0):
    check_tensor("x", x, min_ndim=2)
    check_tensor("a", a, min_ndim=1)
    if h0 is not None:
        check_tensor("h0", h0, min_ndim=1)
    check_same_device(a=a, x=x, h0=h0)
    L, D = x.shape[-2:]
    if a.dim() == 1:
        if a.shape[0] != D:
            raise ValueError(f"a: a time-invariant a must have shape (D,) = ({D},) matching x's last dimension; "
                             f"got a {describe(a)}, x {describe(x)}")
    else:
        try:
            shape = torch.broadcast_shapes(a.shape, x.shape)
        except RuntimeError:
            shape = None
        if shape != x.shape:
            raise ValueError(f"a: expected (D,) = ({D},) or a shape broadcastable to x's {tuple(x.shape)} "
                             f"(time along dim -2), got a {describe(a)}")
    if h0 is not None:
        state_shape = x.shape[:-2] + (D,)
        try:
            shape = torch.broadcast_shapes(h0.shape, state_shape)
        except RuntimeError:
            shape = None
        if shape != state_shape:
            raise ValueError(f"h0: expected a shape broadcastable to x.shape[:-2] + (D,) = {tuple(state_shape)}, got h0 {describe(h0)}")
    if a.is_complex() and not x.is_complex():
        raise TypeError(f"a is complex ({a.dtype}) but x is real ({x.dtype}): the state would be complex; "
                        f"pass a complex x (x.to({a.dtype}))")
    if h0 is not None and h0.is_complex() and not x.is_complex():
        raise TypeError(f"h0 is complex ({h0.dtype}) but x is real ({x.dtype}): pass a complex x")
    allowed = {_real_dtype(x)} | ({torch.float32} if x.dtype in _LOW_PRECISION else set())
    for name, t in (("a", a), ("h0", h0)):
        if t is not None and _real_dtype(t) not in allowed:
            raise TypeError(f"{name}: precision must match x's: x is {x.dtype} (real part {_real_dtype(x)}), "
                            f"{name} is {t.dtype} (real part {_real_dtype(t)}); cast one of them "
                            "(with a bfloat16/float16 x, a float32 a or h0 is fine too)")


def _canonical(a, x, h0):
    """Flatten leading dims: x (B, L, D); a (Ba, La, D) with Ba in {1, B}, La in {1, L}; h0 (Bh, D)."""
    L, D = x.shape[-2:]
    lead = x.shape[:-2]
    B = math.prod(lead)
    x3 = x.reshape(B, L, D)
    if a.dim() == 1:
        a3 = a.view(1, 1, D)
    else:
        a_full = a.reshape((1,) * (x.dim() - a.dim()) + tuple(a.shape))
        La = a_full.shape[-2]
        if all(s == 1 for s in a_full.shape[:-2]):
            a3 = a_full.reshape(1, La, a_full.shape[-1])
        else:
            a3 = a_full.expand(*lead, La, a_full.shape[-1]).reshape(B, La, a_full.shape[-1])
        if a3.shape[-1] != D:
            a3 = a3.expand(a3.shape[0], La, D)
    h03 = None
    if h0 is not None:
        h0_full = h0.reshape((1,) * (x.dim() - 1 - h0.dim()) + tuple(h0.shape))
        if all(s == 1 for s in h0_full.shape[:-1]):
            h03 = h0_full.reshape(1, h0_full.shape[-1]).expand(1, D)
        else:
            h03 = h0_full.expand(*lead, D).reshape(B, D)
    return a3, x3, h03


def linear_scan(a: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None = None, *, reverse: bool = False,
                mode: str = "auto") -> torch.Tensor:
    r"""``h_t = a_t ⊙ h_{t-1} + x_t`` along dim ``-2`` (``reverse``: ``h_t = a_t ⊙ h_{t+1} + x_t``).

    Args:
        a: decays, ``(D,)`` (time-invariant, paper 002's ``Λ``) or broadcastable to ``x``; real or complex.
        x: inputs ``(..., L, D)``, real or complex (complex if ``a`` is).
        h0: state before the first step, broadcastable to ``(..., D)``; zero when ``None``.
        reverse: scan from ``t = L`` down to ``t = 1``.
        mode: one of ``SCAN_MODES`` (see the module docstring); ``doubling`` needs a time-invariant ``a``.
    Returns:
        ``h``, shaped and typed like ``x``.
    """
    mode = check_mode("linear_scan", mode, SCAN_MODES)
    _check_inputs(a, x, h0)
    if mode == "auto":
        mode = scan_auto_mode(x.device)
    mode = traceable_mode(mode, "blocked", a, x, h0)
    if x.shape[-2] == 0:
        return x.clone()
    if mode == "sequential":
        h = linear_scan_reference(a, x, h0, reverse=reverse)
        _check_finite_scan(h, reverse, a=a, x=x, h0=h0)
        return h
    out_dtype = x.dtype
    if h0 is not None and h0.is_complex() != x.is_complex():  # a real h0 for a complex x
        h0 = h0.to(x.dtype)
    a3, x3, h03 = _canonical(a, x, h0)
    if mode == "triton":
        from seqlab.kernels.scan import triton_linear_scan

        if x.dtype == torch.float16:  # the kernel reads bfloat16 itself; float16 goes in as float32
            a3, x3, h03 = (None if t is None else t.float() for t in (a3, x3, h03))
        h = triton_linear_scan(a3, x3, h03, reverse=reverse).to(out_dtype)
    else:
        if x.dtype in _LOW_PRECISION:  # float32 state for half-precision inputs
            a3, x3 = a3.float(), x3.float()
            h03 = None if h03 is None else h03.float()
        h = _ScanFunction.apply(a3, x3, h03, bool(reverse), mode).to(out_dtype)
    _check_finite_scan(h, reverse, a=a, x=x, h0=h0)
    return h.reshape(x.shape)


def _check_finite_scan(h, reverse, **inputs):
    """NaN or inf never passes silently, at the cost of reading one state per sequence: a non-finite
    ``h_t`` stays non-finite (``a * inf`` is inf or NaN, ``0 * inf`` is NaN), so every non-finite input
    and every overflow shows in the last state of the scan. The inputs are searched only then, to name
    the first bad value."""
    last = h[..., 0, :] if reverse else h[..., -1, :]
    if has_values(last) and not torch.isfinite(last).all():
        check_finite_inputs("linear_scan", **inputs)
        raise FloatingPointError("linear_scan: produced non-finite values (NaN or inf) from finite inputs: "
                                 "the state overflowed (|a| > 1 grows it geometrically, or the dtype's range is "
                                 "too small for the sums)")
