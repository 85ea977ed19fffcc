"""Lesson 09 · The delta rule: the UT transform of every chunk at once, the reverse pass over chunk states, and the
capstone: DeltaProduct as a new family, through the decoding protocol and into the arena.

seqlab's layout throughout: the state ``S`` is ``(dk, dv)``, keys, values and queries are row vectors, a key reads
``k S``, and the gated delta rule is ``S_t = alpha_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t``,
``y_t = q_t S_t``.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from seqlab.exercises._capstone import check_decoding, enter_arena, refuse_seqlab_name
from seqlab.exercises._core import (Wrong, call, close, compare, exercise, generator, need_function, seeded, tensor,
                                    uniform)


def _betas(g, *shape) -> torch.Tensor:
    """Write strengths in (0, 1), some near 1 (the old value at a key is overwritten) and some near 0 (the token is
    almost not written)."""
    beta = torch.sigmoid(4 * torch.randn(*shape, generator=g, dtype=torch.float64))
    flat = beta.view(-1)
    flat[::3] = 1 - 1e-9
    flat[1::5] = 1e-9
    return beta


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def _leading(lead: tuple) -> str:
    return f"leading dims {lead}" if lead else "no leading dims"


# ----------------------------------------------------------------------------------------------- 09.1


def _ut_reference(K, V, beta, *, system="lower", rhs="before"):
    """``W = T diag(beta) K``, ``U = T diag(beta) V`` with ``T = (I + tril(diag(beta) K K^T, -1))^-1`` materialised
    (float64). ``system`` and ``rhs`` switch one part to name a learner's mistake: the matrix inverted ("diagonal":
    tril(., 0); "columns": K K^T diag(beta); "unscaled": no beta; "KtK": K^T K; "minus": I - tril; "upper": I +
    triu(., 1); "identity": a solve that read the upper triangle only) and where diag(beta) goes ("before" T's
    right-hand side, "after" T, or "none")."""
    b = beta[..., :, None]
    gram = K @ K.mT                                                                 # (..., C, C): k_r . k_i
    A = {"lower": lambda: (b * gram).tril(-1), "diagonal": lambda: (b * gram).tril(0),
         "columns": lambda: (gram * beta[..., None, :]).tril(-1), "unscaled": lambda: gram.tril(-1),
         "KtK": lambda: (b * (K.mT @ K)).tril(-1), "minus": lambda: -(b * gram).tril(-1),
         "upper": lambda: (b * gram).triu(1), "identity": lambda: torch.zeros_like(gram)}[system]()
    T = torch.linalg.inv(torch.eye(K.shape[-2], dtype=K.dtype) + A)
    if rhs == "after":
        return b * (T @ K), b * (T @ V)
    scale = b if rhs == "before" else 1.0
    return T @ (scale * K), T @ (scale * V)


_AFTER_T = "diag(beta) scales K and V before T is applied: W = T diag(beta) K, U = T diag(beta) V"
_UT_MISTAKES = (   # (switches of _ut_reference, what the learner did)
    (dict(system="diagonal"), "the diagonal is kept (tril(..., 0)): the system is I + tril(diag(beta) K K^T, -1), "
                              "strictly lower, so row r reads only the rows i < r before it"),
    (dict(system="columns"), "beta is on the wrong side of K K^T: K K^T diag(beta) scales column i by beta_i; row r "
                             "of the system is scaled by beta_r, diag(beta) K K^T"),
    (dict(system="unscaled"), "beta is missing from the system: T = (I + tril(diag(beta) K K^T, -1))^-1, row r "
                              "scaled by beta_r"),
    (dict(system="unscaled", rhs="after"), f"beta is missing from the system and applied after T; {_AFTER_T}"),
    (dict(rhs="after"), f"diag(beta) is applied after T (diag(beta) T K); {_AFTER_T}"),
    (dict(rhs="none"), f"diag(beta) is missing on the right of T; {_AFTER_T}"),
    (dict(system="KtK"), "you used K^T K, the (dk, dk) Gram matrix of the channels: the system needs K K^T, "
                         "(C, C), whose entry (r, i) is k_r . k_i"),
    (dict(system="minus"), "the sign: the system is I + tril(diag(beta) K K^T, -1), not I - tril(...)"),
    (dict(system="upper"), "you solved an upper triangular system: the UT transform's is lower triangular, I + "
                           "tril(diag(beta) K K^T, -1) (row r depends on the rows i < r)"),
    (dict(system="identity"), "your solve read only the upper triangle of the system (upper=True): it is lower "
                              "triangular, so solve with upper=False"),
)


class _CountingCalls(TorchFunctionMode):
    """Counts the torch functions and tensor methods called inside it."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def _torch_calls(fn, g, lead: tuple, n: int) -> int:
    """How many torch calls ``fn`` makes for ``n`` chunks of 4 tokens behind the leading dimensions ``lead``."""
    K = _unit(torch.randn(*lead, n, 4, 3, generator=g, dtype=torch.float64))
    args = K, torch.randn(*lead, n, 4, 2, generator=g, dtype=torch.float64), _betas(g, *lead, n, 4)
    with _CountingCalls() as counting:
        call(fn, *args, what="your ut_transform")
    return counting.calls


def _ut_output(out, lead, n, C, dk, dv, where):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Wrong(f"expected (W, U) from your ut_transform{where}, got {type(out).__name__}")
    return (tensor(out[0], "W", (*lead, n, C, dk), complex_ok=False),
            tensor(out[1], "U", (*lead, n, C, dv), complex_ok=False))


@exercise("09.1")
def _check_09_1(fn):
    cases = (((2, 3), 3, 4, 4, 3, True), ((), 5, 1, 3, 2, True), ((2,), 4, 5, 3, 4, False), ((2, 2), 3, 16, 8, 8, True))
    for g, (lead, n, C, dk, dv, unit) in seeded(91, cases):
        K = torch.randn(*lead, n, C, dk, generator=g, dtype=torch.float64)
        K = _unit(K) if unit else K
        V, beta = torch.randn(*lead, n, C, dv, generator=g, dtype=torch.float64), _betas(g, *lead, n, C)
        where = f" ({_leading(lead)}, {n} chunks of C = {C}, dk = {dk}, {'unit' if unit else 'random'} keys)"
        W, U = _ut_output(call(fn, K.clone(), V.clone(), beta.clone(), what="your ut_transform"), lead, n, C, dk, dv,
                          where)
        want_W, want_U = _ut_reference(K, V, beta)
        if close(W, want_W, 1e-10) and close(U, want_U, 1e-10):
            continue
        for switches, mistake in _UT_MISTAKES:
            if switches.get("system") == "KtK" and dk != C:
                continue
            if all(close(a, b, 1e-8) for a, b in zip((W, U), _ut_reference(K, V, beta, **switches))):
                raise Wrong(f"{mistake}{where}")
        axes = "(..., chunk, row r, channel)"
        compare(W, want_W, 1e-10, name="W", against="T diag(beta) K", axes=axes, where=where)
        compare(U, want_U, 1e-10, name="U", against="T diag(beta) V", axes=axes, where=where)
    g = generator(910)
    few, many, wide = _torch_calls(fn, g, (1,), 2), _torch_calls(fn, g, (1,), 32), _torch_calls(fn, g, (6,), 2)
    if many > few or wide > few:
        raise Wrong(f"your ut_transform makes {few} torch calls for 2 chunks, {many} for 32 chunks and {wide} for 6 "
                    f"times the batch: a Python loop over the chunks (or the batch). Transform every chunk at once: "
                    f"@ and torch.linalg.solve_triangular broadcast over the leading dimensions")


# ----------------------------------------------------------------------------------------------- 09.2


def _chunk(t: torch.Tensor, c: int) -> torch.Tensor:
    """Chunk ``c`` of a ``(..., n, rows, cols)`` tensor."""
    return t[..., c, :, :]


def _state_pass(W, U, through, K_to_end, Q_in, M, S0):
    """The forward pass over chunk states, chunk after chunk: ``(Y (..., n, C, dv), S_in (..., n, dk, dv), S_n)``."""
    S, Y, S_in = S0, [], []
    for c in range(W.shape[-3]):
        S_in.append(S)
        corrected = _chunk(U, c) - _chunk(W, c) @ S                                 # U~_c = U_c - W_c S_c
        Y.append(_chunk(Q_in, c) @ S + _chunk(M, c) @ corrected)                    # Y_c = Qbar_c S_c + M_c U~_c
        S = through[..., c, None, None] * S + _chunk(K_to_end, c).mT @ corrected    # S_(c+1)
    return torch.stack(Y, -3), torch.stack(S_in, -3), S


def _backward_variant(W, through, K_to_end, Q_in, M, S_in, dY, dS, *, forgot=None):
    """The reverse pass with one part left out, to name a learner's mistake: ``forgot`` is "gamma" (dS_(c+1)
    not scaled by gamma_c), "erase" (no -W_c^T dU~_c), "carry" (no Kbar_c dS_(c+1) in dU~_c), "transpose" (M_c dY_c),
    "sign" (dW_c = +dU~_c S_c^T) or "order" (the loop run from the first chunk)."""
    n = W.shape[-3]
    grads = {}
    for c in (range(n) if forgot == "order" else reversed(range(n))):
        reads = _chunk(M, c) if forgot == "transpose" else _chunk(M, c).mT
        d_corrected = reads @ _chunk(dY, c) + (0 if forgot == "carry" else _chunk(K_to_end, c) @ dS)
        grads[c] = d_corrected, (1 if forgot == "sign" else -1) * d_corrected @ _chunk(S_in, c).mT
        decay = 1 if forgot == "gamma" else through[..., c, None, None]
        erased = 0 if forgot == "erase" else _chunk(W, c).mT @ d_corrected
        dS = decay * dS + _chunk(Q_in, c).mT @ _chunk(dY, c) - erased
    return torch.stack([grads[c][0] for c in range(n)], -3), torch.stack([grads[c][1] for c in range(n)], -3), dS


_BACKWARD_MISTAKES = (   # (the part _backward_variant leaves out, what the learner did)
    ("order", "the loop ran forwards: dS is the gradient of the last state, so the pass starts at the last chunk "
              "and goes back to the first (c = n-1 .. 0)"),
    ("gamma", "dS_(c+1) is not scaled by gamma_c = through[..., c]: S_(c+1) = gamma_c S_c + Kbar_c^T U~_c, so "
              "dS_c = gamma_c dS_(c+1) + ..."),
    ("erase", "the term -W_c^T dU~_c is missing from dS_c: S_c also enters U~_c = U_c - W_c S_c"),
    ("carry", "the term Kbar_c dS_(c+1) (Kbar = K_to_end) is missing from dU~_c: U~_c also writes the next state, "
              "S_(c+1) = gamma_c S_c + Kbar_c^T U~_c"),
    ("transpose", "M_c is not transposed: Y_c = ... + M_c U~_c gives dU~_c = M_c^T dY_c + ..."),
    ("sign", "dW has the wrong sign: U~_c = U_c - W_c S_c, so dW_c = -dU~_c S_c^T"),
)


def _backward_pieces(g, lead, n, C, dk, dv):
    """Random pieces of the chunk-state pass: W, U, the decays through each chunk (some near 0 and near 1),
    Kbar, Qbar, a lower triangular M, S_0, and the gradients dY, dS that come back."""
    r = lambda *shape: torch.randn(*lead, *shape, generator=g, dtype=torch.float64)  # noqa: E731
    through = uniform(g, *lead, n, lo=0.2, hi=1.0)
    flat = through.view(-1)
    flat[::3], flat[1::4] = 1 - 1e-9, 1e-9
    return dict(W=r(n, C, dk), U=r(n, C, dv), through=through, K_to_end=r(n, C, dk), Q_in=r(n, C, dk),
                M=r(n, C, C).tril(), S0=r(dk, dv), dY=r(n, C, dv), dS=r(dk, dv))


def _autograd(p):
    """``(dU, dW, dS0)`` of ``sum(dY . Y) + sum(dS . S_n)`` by autograd, and the entering states ``S_in``."""
    with torch.enable_grad():
        U, W, S0 = (p[k].clone().requires_grad_() for k in ("U", "W", "S0"))
        Y, S_in, S_n = _state_pass(W, U, p["through"], p["K_to_end"], p["Q_in"], p["M"], S0)
        ((p["dY"] * Y).sum() + (p["dS"] * S_n).sum()).backward()
    return (U.grad, W.grad, S0.grad), S_in.detach()


@exercise("09.2")
def _check_09_2(fn):
    cases = (((2, 3), 4, 3, 4, 5), ((), 1, 2, 3, 2), ((2,), 7, 5, 3, 2))
    for g, (lead, n, C, dk, dv) in seeded(92, cases):
        p = _backward_pieces(g, lead, n, C, dk, dv)
        want, S_in = _autograd(p)
        args = (p["W"], p["through"], p["K_to_end"], p["Q_in"], p["M"], S_in, p["dY"], p["dS"])
        where = f" ({_leading(lead)}, {n} chunk{'s' if n > 1 else ''} of C = {C})"
        out = call(fn, *(a.clone() for a in args), what="your state_pass_backward")
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise Wrong(f"expected (dU, dW, dS0) from your state_pass_backward{where}, got {type(out).__name__}")
        shapes = ((*lead, n, C, dv), (*lead, n, C, dk), (*lead, dk, dv))
        got = [tensor(o, name, shape, complex_ok=False) for o, name, shape in zip(out, ("dU", "dW", "dS0"), shapes)]
        if all(close(a, b, 1e-10) for a, b in zip(got, want)):
            continue
        for forgot, mistake in _BACKWARD_MISTAKES:
            if all(close(a, b, 1e-8) for a, b in zip(got, _backward_variant(*args, forgot=forgot))):
                raise Wrong(f"{mistake}{where}")
        for a, b, name, axes in zip(got, want, ("dU", "dW", "dS0"), ("(..., chunk, row, value)",
                                                                       "(..., chunk, row, key)", "(..., key, value)")):
            compare(a, b, 1e-10, name=name, against="autograd", axes=axes, where=where)


# ----------------------------------------------------------------------------------------------- 09.3, the capstone
#
# DeltaProduct (Siems et al. 2025, arXiv 2502.10297): each token applies n_h steps of the delta rule, each with its
# own key, value and beta, before the output is read; its transition is a product of n_h generalised Householder
# matrices. In seqlab's layout, for token t and j = 1 .. n_h:
#     S <- (I - beta_(t,j) k_(t,j)^T k_(t,j)) S + beta_(t,j) k_(t,j)^T v_(t,j),        then y_t = q_t S


def _deltaproduct_reference(q, k, v, beta, S, *, normalise="qk", keys="own", order="forward", compose=True,
                            erase=True, read="last"):
    """DeltaProduct token by token with each transition materialised (float64). The keywords switch one part, to
    name a learner's mistake: ``normalise`` (which of "q", "k" are L2-normalised), ``keys`` ("shared": every step
    uses the token's first key), ``order`` ("reverse": step n_h first), ``compose`` (False: every step reads the
    state before the token), ``erase`` (False: the outer-product rule), ``read`` ("first": after step 1;
    "before": y_t from S_{t-1})."""
    q = _unit(q) if "q" in normalise else q
    k = _unit(k) if "k" in normalise else k
    eye = torch.eye(k.shape[-1], dtype=k.dtype)
    n_h, ys = k.shape[3], []
    for t in range(q.shape[2]):
        before, after_first = S, None
        for j in (range(n_h) if order == "forward" else reversed(range(n_h))):
            k_j = k[:, :, t, 0 if keys == "shared" else j, None, :]                  # (B, H, 1, dk), a row
            b = beta[:, :, t, j, None, None]
            read_from = S if compose else before
            kept = (eye - b * k_j.mT @ k_j) @ read_from if erase else read_from
            step = kept + b * k_j.mT @ v[:, :, t, j, None, :]
            S = step if compose else S + step - before
            after_first = S if after_first is None else after_first
        state = {"last": S, "first": after_first, "before": before}[read]
        ys.append((q[:, :, t, None, :] @ state)[..., 0, :])                          # y_t = q_t S
    return torch.stack(ys, 2), S


_PRODUCT_MISTAKES = (   # (switches of _deltaproduct_reference, what the learner did)
    (dict(read="first"), "y_t is read after the first of the n_h steps: apply all n_h steps of token t, then read "
                         "y_t = q_t S"),
    (dict(keys="shared"), "one key serves all n_h steps of a token (k_(t,1)): step j has its own key k_(t,j), with "
                          "its own value and beta"),
    (dict(normalise="q"), "the keys are not L2-normalised: with |k| != 1, I - beta k^T k has the eigenvalue "
                          "1 - beta |k|^2, which can exceed 1 in size and blow the state up; normalise each of the "
                          "n_h keys over dk"),
    (dict(normalise="k"), "the queries are not L2-normalised (q_t / |q_t|, as the keys)"),
    (dict(normalise=""), "neither queries nor keys are L2-normalised: divide each by its norm over dk"),
    (dict(compose=False), "every step of a token reads the state before the token: step j reads the state step j-1 "
                          "left, so the transition is the product of the n_h (I - beta k^T k)"),
    (dict(order="reverse"), "the steps run in reverse (j = n_h first): step 1 comes first, the transition is "
                            "(I - beta_(t,n_h) k^T k) ... (I - beta_(t,1) k^T k)"),
    (dict(erase=False), "nothing is erased: S <- S + beta k^T v is linear attention's write; the delta rule first "
                        "removes what S holds at k, S <- S + beta k^T (v - k S)"),
    (dict(read="before"), "y_t is read from S_{t-1}, before token t's steps: write first, then read y_t = q_t S_t"),
)


def _rule_output(out, B, H, L, dk, dv, where):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Wrong(f"expected (y, S) from your deltaproduct_rule{where}, got {type(out).__name__}")
    if isinstance(out[1], torch.Tensor) and tuple(out[1].shape) == (B, H, dv, dk) != (B, H, dk, dv):
        raise Wrong(f"S: expected shape {(B, H, dk, dv)}, that is (B, H, dk, dv), got {(B, H, dv, dk)}{where}: keep "
                    f"seqlab's layout, a key reads k S (the papers' S transposed)")
    return tensor(out[0], "y", (B, H, L, dv), complex_ok=False), tensor(out[1], "S", (B, H, dk, dv), complex_ok=False)


def _check_rule(fn) -> None:
    """The learner's deltaproduct_rule against :func:`_deltaproduct_reference` (float64, 1e-10), from a zero and a
    random state, with 2, 3 and 1 steps per token; a known mistake is named."""
    B, H, dk, dv = 2, 3, 4, 5
    for g, (L, n_h, zero) in seeded(93, ((13, 2, True), (13, 3, False), (1, 2, False), (6, 1, False))):
        q = 3 * torch.randn(B, H, L, dk, generator=g, dtype=torch.float64)            # size ~3: normalising matters
        k = 3 * torch.randn(B, H, L, n_h, dk, generator=g, dtype=torch.float64)
        v, beta = torch.randn(B, H, L, n_h, dv, generator=g, dtype=torch.float64), _betas(g, B, H, L, n_h)
        S0 = torch.randn(B, H, dk, dv, generator=g, dtype=torch.float64) * (0 if zero else 1)
        where = f" (L = {L}, n_h = {n_h}, {'a zero' if zero else 'a random'} initial state)"
        out = call(fn, q.clone(), k.clone(), v.clone(), beta.clone(), S0.clone(), what="your deltaproduct_rule")
        y, S = _rule_output(out, B, H, L, dk, dv, where)
        want_y, want_S = _deltaproduct_reference(q, k, v, beta, S0)
        if close(y, want_y, 1e-10) and close(S, want_S, 1e-10):
            continue
        for switches, mistake in _PRODUCT_MISTAKES:
            if close(y, _deltaproduct_reference(q, k, v, beta, S0, **switches)[0], 1e-8):
                raise Wrong(f"{mistake}{where}")
        if close(y, want_y, 1e-5):
            raise Wrong(f"y is within float32 rounding of DeltaProduct but not within 1e-10{where}: compute in the "
                        f"inputs' dtype (float64 here)")
        compare(y, want_y, 1e-10, name="y", against="DeltaProduct", axes="(batch, head, t, value)", where=where)
        compare(S, want_S, 1e-10, name="the final S", against="DeltaProduct's", axes="(batch, head, key, value)",
                where=where)


@exercise("09.3")
def _check_09_3(answer):
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2 and isinstance(answer[1], str)):
        raise Wrong(f"expected answer = (deltaproduct_rule, 'family name'), got a {type(answer).__name__}")
    fn, name = need_function(answer[0], "deltaproduct_rule(q, k, v, beta, S) -> (y, S)"), answer[1]
    refuse_seqlab_name(name, "deltaproduct")
    _check_rule(fn)
    state = check_decoding(name)
    run = enter_arena(name)
    return (f"deltaproduct_rule equals DeltaProduct's recurrence (float64, 1e-10; 1, 2 and 3 steps per token, from "
            f"a zero and a random state, beta near 0 and 1); {name} decodes as it computes in parallel (step, and "
            f"prefill in two parts, give forward's logits), with a state of {state} floats at any length; and it "
            f"entered the arena: MQAR at the budget of a d_model-16 Transformer, d_model={run['d_model']} with "
            f"{run['params']} parameters (target {run['target_params']}), state {run['state_size']} floats. To "
            f"train it beside DeltaNet: experiments.run('arena', families=['{name}', 'deltanet'], tasks=['mqar'], "
            f"out=None).")
