"""The (gated) delta rule: every mode against the papers' float64 recurrence, values, states and gradients; the
decode step; the UT transform's conditioning at L = 4096; errors named. Float32 bounds as design.md §4: 1e-5 for
the token loop (a scan), 1e-4 for the chunked form (matrix products and a triangular solve)."""
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import check

from seqlab.ops import (DELTA_MODES, FlaUnavailable, delta_rule, delta_rule_reference, delta_rule_step,
                        delta_rule_ut_matrix)

C = 16                                               # the chunk length of the tests' chunked runs
CPU_MODES = tuple(m for m in DELTA_MODES if m != "fla")  # "auto" is "chunked" on CPU


def tol(mode):
    return 1e-5 if mode == "recurrent" else 1e-4


def make_inputs(B=2, H=3, L=C + 1, dk=5, dv=7, *, gated=True, beta=(0.0, 1.0), alpha=(0.5, 1.0), normalise=True,
                dtype=torch.float32):
    """Fresh random inputs: keys L2-normalised as the models use them, ``beta`` uniform in ``beta``, decays
    ``alpha`` log-uniform in ``alpha`` (``g = log alpha``), an initial state."""
    q = torch.randn(B, H, L, dk, dtype=dtype)
    k = torch.randn(B, H, L, dk, dtype=dtype)
    k = F.normalize(k, dim=-1) if normalise else k
    v = torch.randn(B, H, L, dv, dtype=dtype)
    b = torch.empty(B, H, L, dtype=dtype).uniform_(*beta)
    g = torch.empty(B, H, L, dtype=dtype).uniform_(math.log(alpha[0]), math.log(alpha[1])) if gated else None
    h0 = torch.randn(B, H, dk, dv, dtype=dtype)
    return q, k, v, b, g, h0


def reference(q, k, v, beta, g, h0):
    return delta_rule_reference(q, k, v, beta, g, h0=h0, return_state=True)


def compare(mode, inputs, what, *, chunk_size=C, tolerance=None):
    q, k, v, beta, g, h0 = inputs
    ref, S_ref = reference(*inputs)
    y, S = delta_rule(q, k, v, beta, g, h0=h0, mode=mode, return_state=True, chunk_size=chunk_size)
    check(y, ref, tolerance or tol(mode), f"{mode} {what}")
    check(S, S_ref, tolerance or tol(mode), f"{mode} {what}: final state")


# ------------------------------------------------------------------------------------------ the reference itself
def test_a_unit_key_written_with_beta_one_recalls_its_value():
    """The delta rule overwrites: after ``S_t = S' + k^T (v - k S')`` with ``|k| = 1``, ``k S_t = v`` whatever ``S'``
    held, where linear attention's ``S + k^T v`` would recall ``k S' + v``."""
    q, k, v, beta, g, h0 = make_inputs(1, 2, 6, 4, 3, dtype=torch.float64)
    beta = torch.ones_like(beta)
    for t in range(1, 7):
        _, S = delta_rule_reference(q[:, :, :t], k[:, :, :t], v[:, :, :t], beta[:, :, :t], g[:, :, :t], h0=h0,
                                    return_state=True)
        recall = torch.einsum("bhd,bhde->bhe", k[:, :, t - 1], S)
        check(recall, v[:, :, t - 1], 1e-12, f"recall of the key written at step {t}")


def test_beta_zero_only_decays_the_state():
    """``beta = 0`` writes nothing: ``S_t = alpha_t S_{t-1}``, so ``S_L = exp(sum g) S_0``."""
    q, k, v, beta, g, h0 = make_inputs(2, 2, 9, 3, 4, dtype=torch.float64)
    _, S = delta_rule_reference(q, k, v, torch.zeros_like(beta), g, h0=h0, return_state=True)
    check(S, torch.exp(g.sum(-1))[..., None, None] * h0, 1e-12, "beta = 0")


@pytest.mark.parametrize("gated", [True, False])
def test_the_reference_and_the_read_before_write_loop_agree_in_float64(gated):
    """The papers' ``S (I - beta k k^T)`` on a ``(dv, dk)`` state and seqlab's rank-one correction on the
    transposed ``(dk, dv)`` state are one recurrence."""
    inputs = make_inputs(dtype=torch.float64, gated=gated)
    compare("recurrent", inputs, "float64", tolerance=1e-12)


# ------------------------------------------------------------------------------------ every mode, float32 inputs
@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("L", [1, C - 1, C + 1, 2 * C + 13])
@pytest.mark.parametrize("gated", [True, False])
def test_mode_matches_float64_reference(mode, L, gated):
    compare(mode, make_inputs(L=L, gated=gated), f"L={L} gated={gated}")


@pytest.mark.parametrize("mode", CPU_MODES)
def test_default_chunk_length_and_no_initial_state(mode):
    q, k, v, beta, g, _ = make_inputs(L=150, dk=6, dv=3)
    compare(mode, (q, k, v, beta, g, None), "L=150, chunk 64, h0=None", chunk_size=64)


@pytest.mark.parametrize("chunk_size", [1, 7, 200])
def test_chunk_lengths(chunk_size):
    compare("chunked", make_inputs(L=45), f"chunk {chunk_size}", chunk_size=chunk_size)


@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("case", ["zero", "one", "two", "zero_or_one"])
def test_beta_at_its_ends(mode, case):
    q, k, v, beta, g, h0 = make_inputs(L=2 * C + 3)
    beta = {"zero": torch.zeros_like(beta), "one": torch.ones_like(beta), "two": torch.full_like(beta, 2.0),
            "zero_or_one": (torch.rand_like(beta) < 0.5).to(beta.dtype)}[case]
    compare(mode, (q, k, v, beta, g, h0), f"beta {case}")


@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("gates", ["near_zero", "near_one", "strong_then_none", "resets"])
def test_extreme_gates(mode, gates):
    """``alpha ~ 1e-6`` (each chunk's cumulative decay reaches ~1e-96, far below float32's range: only relative
    decays survive), ``alpha ~ 1 - 1e-7``, strong decay followed by none, and near-resets (``g = -1e4`` at random
    steps, ``alpha = 0.99`` between them: the cumulative log decays are large, the decays between two steps after
    a reset are not, and a difference of cumulative sums would keep only a few of their digits)."""
    q, k, v, beta, g, h0 = make_inputs(L=2 * C + 5)
    if gates == "near_zero":
        g = torch.empty_like(g).uniform_(math.log(1e-6), math.log(2e-6))
    elif gates == "near_one":
        g = torch.empty_like(g).uniform_(math.log(1 - 1e-7), 0.0)
    elif gates == "strong_then_none":
        g = torch.where(torch.arange(g.shape[-1]) < C + 3, math.log(1e-6), 0.0).expand_as(g).contiguous()
    else:
        g = _resets(g)
    compare(mode, (q, k, v, beta, g, h0), gates)


def _resets(g):
    return torch.where(torch.rand_like(g) < 0.2, -1e4, math.log(0.99)).to(g.dtype)


@pytest.mark.parametrize("mode", CPU_MODES)
def test_unnormalised_keys(mode):
    """Keys drawn as ``randn / sqrt(dk)`` and not normalised (|k| around 1, spread ~0.3): ``beta |k|^2`` passes 2
    at some steps, where ``I - beta k^T k`` expands, but over 45 steps the state stays moderate and every mode
    agrees. (Keys much longer than 1 make the state grow exponentially: the module docstring's warning.)"""
    q, k, v, beta, g, h0 = make_inputs(L=45, normalise=False)
    k = k / math.sqrt(k.shape[-1])
    compare(mode, (q, k, v, beta, g, h0), "unnormalised keys")


@pytest.mark.parametrize("dk,dv", [(1, 1), (3, 11), (12, 2)])
def test_ragged_head_dims(dk, dv):
    for mode in CPU_MODES:
        compare(mode, make_inputs(B=3, H=2, L=C + 5, dk=dk, dv=dv), f"dk={dk} dv={dv}")


# -------------------------------------------------------------------------------------- long sequence, conditioning
@pytest.mark.slow  # L = 4096; the same modes are tested at small L above
@pytest.mark.parametrize("beta_max", [1.0, 2.0])
@pytest.mark.parametrize("gated", [False, True])
def test_long_sequence_and_the_conditioning_of_the_ut_transform(beta_max, gated):
    """L = 4096 in float32, chunks of 64, normalised keys in dk = 4 (few dimensions: keys often nearly parallel,
    the hard case for the triangular systems). The condition number ``kappa`` of every chunk's
    ``I + tril(diag(beta)(K K^T . Gamma), -1)`` is measured: ``kappa * eps_float32``, the first-order bound on the
    solve's relative error, stays inside the 1e-4 the chunked form is held to, and so does the error itself."""
    q, k, v, beta, g, h0 = make_inputs(1, 2, 4096, 4, 5, beta=(0.0, beta_max), alpha=(0.8, 1.0), gated=gated)
    systems = delta_rule_ut_matrix(k.double(), beta.double(), None if g is None else g.double(), chunk_size=64)
    kappa = float(torch.linalg.cond(systems).max())
    print(f"\nL=4096 dk=4 beta<={beta_max:g} gated={gated}: max cond_2 over {systems.shape[2]} chunks = {kappa:.3g}")
    assert kappa * torch.finfo(torch.float32).eps < 1e-4, f"condition number {kappa:.3g}"
    ref, S_ref = reference(q, k, v, beta, g, h0)
    for mode in CPU_MODES:
        y, S = delta_rule(q, k, v, beta, g, h0=h0, mode=mode, return_state=True)
        check(y, ref, tol(mode), f"{mode} L=4096 (max cond {kappa:.3g})")
        check(S, S_ref, tol(mode), f"{mode} L=4096 final state")


@pytest.mark.parametrize("beta_value", [1.0, 2.0])
def test_parallel_keys_the_worst_conditioned_chunks(beta_value):
    """One unit key repeated, ``beta`` constant, no gate: every chunk's matrix is ``I + beta N`` (``N`` the strictly
    lower triangle of ones), whose inverse has ``-beta (1 - beta)^(i-j-1)`` below the diagonal. So
    ``kappa_1 = (1 + beta (C-1)) * (1 + beta sum_{m<C-1} |1-beta|^m)``: ``2C`` at ``beta = 1``, ``(2C-1)^2`` at
    ``beta = 2`` (16129 for C = 64, ``kappa * eps_float32 ~ 2e-3``). The first-order bound is loose there: the
    triangular solve stays accurate, and the chunked form with it."""
    Cn, dk = 64, 4
    q, _, v, _, _, h0 = make_inputs(1, 2, 4 * Cn + 3, dk, 3, gated=False)
    k = F.normalize(torch.ones(1, 2, 4 * Cn + 3, dk), dim=-1)
    beta = torch.full((1, 2, 4 * Cn + 3), beta_value)
    systems = delta_rule_ut_matrix(k.double(), beta.double(), chunk_size=Cn)[:, :, :-1]   # the full chunks
    inverse_norm = 1 + beta_value * sum(abs(1 - beta_value) ** m for m in range(Cn - 1))
    expected = (1 + beta_value * (Cn - 1)) * inverse_norm
    assert torch.allclose(torch.linalg.cond(systems, p=1), torch.tensor(expected, dtype=torch.float64), rtol=1e-9)
    compare("chunked", (q, k, v, beta, None, h0), f"parallel keys, beta={beta_value:g}", chunk_size=Cn)


def test_the_ut_matrix_is_its_definition():
    """``delta_rule_ut_matrix`` entry by entry: 1 on the diagonal, ``beta_r exp(G_r - G_i) k_r . k_i`` below it."""
    _, k, _, beta, g, _ = make_inputs(1, 2, 11, 3, 2, dtype=torch.float64)
    M = delta_rule_ut_matrix(k, beta, g, chunk_size=4)                       # chunks of 4, the last padded
    assert M.shape == (1, 2, 3, 4, 4)
    for c in range(3):
        for r in range(4):
            for i in range(4):
                t, s = 4 * c + r, 4 * c + i
                if i == r:
                    expected = torch.ones(1, 2, dtype=torch.float64)
                elif i > r or t >= 11:
                    expected = torch.zeros(1, 2, dtype=torch.float64)
                else:
                    decay = torch.exp(g[:, :, s + 1:t + 1].sum(-1))
                    expected = beta[:, :, t] * decay * (k[:, :, t] * k[:, :, s]).sum(-1)
                assert torch.allclose(M[:, :, c, r, i], expected, atol=1e-14), (c, r, i)


# -------------------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("mode", CPU_MODES + ("reference",))
@pytest.mark.parametrize("gated", [True, False])
def test_gradcheck_float64(mode, gated):
    q, k, v, beta, g, h0 = make_inputs(1, 2, 6, 3, 2, gated=gated, beta=(0.1, 1.9), alpha=(0.3, 0.95),
                                       dtype=torch.float64)
    inputs = [t for t in (q, k, v, beta, g, h0) if t is not None]
    inputs = [t.requires_grad_(True) for t in inputs]

    def run(*args):
        q, k, v, beta, *rest = args
        g, h0 = (rest[0], rest[1]) if gated else (None, rest[0])
        if mode == "reference":
            return delta_rule_reference(q, k, v, beta, g, h0=h0, return_state=True)
        return delta_rule(q, k, v, beta, g, h0=h0, mode=mode, return_state=True, chunk_size=4)

    assert torch.autograd.gradcheck(run, inputs)


@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("gates", ["moderate", "resets"])
def test_float32_gradients_match_float64_reference(mode, gates):
    inputs = make_inputs(L=2 * C + 7)
    if gates == "resets":
        inputs = inputs[:4] + (_resets(inputs[4]),) + inputs[5:]
    w = torch.randn(2, 3, 2 * C + 7, 7)

    def grads(fn, tensors):
        tensors = [t.detach().clone().requires_grad_(True) for t in tensors]
        y, S = fn(*tensors)
        ((y * w.to(y.dtype)).sum() + S.square().sum()).backward()
        return [t.grad for t in tensors]

    ref = grads(lambda q, k, v, b, g, h0: delta_rule_reference(q, k, v, b, g, h0=h0, return_state=True),
                [t.double() for t in inputs])
    out = grads(lambda q, k, v, b, g, h0: delta_rule(q, k, v, b, g, h0=h0, mode=mode, return_state=True,
                                                     chunk_size=C), inputs)
    for name, o, r in zip(("q", "k", "v", "beta", "g", "h0"), out, ref):
        check(o, r, tol(mode), f"{mode} d{name}, {gates} gates")


# ------------------------------------------------------------------------------------------------- decoding
@pytest.mark.parametrize("gated", [True, False])
def test_decode_step_loop_equals_reference(gated):
    q, k, v, beta, g, h0 = make_inputs(L=C + 3, gated=gated)
    ref, S_ref = reference(q, k, v, beta, g, h0)
    state, ys = h0, []
    for t in range(q.shape[2]):
        y_t, state = delta_rule_step(q[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t],
                                     None if g is None else g[:, :, t], state)
        ys.append(y_t)
    check(torch.stack(ys, dim=2), ref, 1e-5, "step loop")
    check(state, S_ref, 1e-5, "step loop: final state")


def test_prefill_then_decode_continues_the_sequence():
    """``delta_rule(..., return_state=True)`` over a prompt, then steps from its state: the whole sequence."""
    q, k, v, beta, g, _ = make_inputs(L=2 * C + 5)
    ref = delta_rule_reference(q, k, v, beta, g)
    P = C + 4
    y_prompt, state = delta_rule(q[:, :, :P], k[:, :, :P], v[:, :, :P], beta[:, :, :P], g[:, :, :P],
                                 return_state=True, chunk_size=C)
    ys = [y_prompt]
    for t in range(P, q.shape[2]):
        y_t, state = delta_rule_step(q[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t], g[:, :, t], state)
        ys.append(y_t[:, :, None])
    check(torch.cat(ys, dim=2), ref, 1e-4, "prefill + decode")


def test_first_step_without_a_state_starts_from_zero():
    q, k, v, beta, g, _ = make_inputs(L=1)
    y_t, S = delta_rule_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[:, :, 0], g[:, :, 0])
    ref, S_ref = reference(q, k, v, beta, g, None)
    check(y_t, ref[:, :, 0], 1e-6, "first step")
    check(S, S_ref, 1e-6, "first state")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_step_returns_its_dtype_and_keeps_a_float32_state(dtype):
    q, k, v, beta, g, _ = (None if t is None else t.to(dtype) for t in make_inputs(L=4))
    state, ys = None, []
    for t in range(4):
        y_t, state = delta_rule_step(q[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t], g[:, :, t], state)
        assert y_t.dtype == dtype and state.dtype == torch.float32
        ys.append(y_t)
    ref, S_ref = reference(*(None if t is None else t.double() for t in (q, k, v, beta, g)), None)
    check(torch.stack(ys, dim=2).double(), ref, 1e-2, f"{dtype} steps")
    check(state, S_ref, 1e-5, f"{dtype} steps: the float32 state")


# ------------------------------------------------------------------------------------------ dtypes and errors
@pytest.mark.parametrize("mode", CPU_MODES)
def test_float64_stays_float64(mode):
    inputs = make_inputs(dtype=torch.float64)
    y = delta_rule(*inputs[:5], h0=inputs[5], mode=mode, chunk_size=C)
    assert y.dtype == torch.float64
    check(y, reference(*inputs)[0], 1e-12, f"{mode} float64")


def test_bfloat16_is_computed_in_float32():
    """bf16 in, bf16 out, and equal to the float64 recurrence of the bf16 inputs rounded once to bf16."""
    q, k, v, beta, g, h0 = (t.to(torch.bfloat16) for t in make_inputs())
    y, S = delta_rule(q, k, v, beta, g, h0=h0, mode="chunked", return_state=True, chunk_size=C)
    assert y.dtype == S.dtype == torch.bfloat16
    ref, S_ref = reference(*(t.double() for t in (q, k, v, beta, g, h0)))
    # computed in float32, y is the reference rounded once to bf16 (a float32 error of ~1e-7 flips a bf16 rounding
    # almost never); computed in bf16 it would be ~1e-2 away
    check(y.double(), ref.to(torch.bfloat16).double(), 1e-3, "bf16 output")
    check(S.double(), S_ref.to(torch.bfloat16).double(), 1e-3, "bf16 final state")


def _good():
    q, k, v, beta, g, h0 = make_inputs(1, 2, 5, 3, 4)
    return {"q": q, "k": k, "v": v, "beta": beta, "g": g, "h0": h0}


@pytest.mark.parametrize("name,bad,error,pattern", [
    ("k", torch.zeros(1, 2, 5, 4), ValueError, r"k: expected shape \(1, 2, 5, 3\)"),
    ("v", torch.zeros(1, 2, 6, 4), ValueError, r"v: expected shape \(1, 2, 5, '\*'\)"),
    ("q", torch.zeros(2, 5, 3), ValueError, r"q: expected 4 dimensions, got shape \(2, 5, 3\)"),
    ("beta", torch.zeros(1, 2, 5, 1), ValueError, r"beta: expected shape \(1, 2, 5\).*squeeze the last dimension"),
    ("beta", torch.zeros(1, 2, 4), ValueError, r"beta: expected shape \(1, 2, 5\).*got shape \(1, 2, 4\)"),
    ("g", torch.zeros(1, 2, 5, 3), ValueError, r"g: expected shape \(1, 2, 5\)"),
    ("h0", torch.zeros(1, 2, 4, 3), ValueError, r"h0: expected shape \(1, 2, 3, 4\)"),
    ("q", torch.zeros(1, 2, 5, 3, dtype=torch.long), TypeError, r"q: expected a floating-point .* torch.int64"),
    ("beta", [0.5] * 5, TypeError, r"beta: expected a torch.Tensor, got list"),
    ("k", torch.zeros(1, 2, 5, 3, dtype=torch.complex64), TypeError, r"k: the delta rule is defined for real"),
])
def test_bad_shapes_and_dtypes_are_named(name, bad, error, pattern):
    args = _good()
    args[name] = bad
    with pytest.raises(error, match=pattern):
        delta_rule(args["q"], args["k"], args["v"], args["beta"], args["g"], h0=args["h0"])


@pytest.mark.parametrize("name,value,pattern", [
    ("beta", -0.25, r"beta must lie in \[0, 2\].*got -0.25 at index \(0, 1, 3\)"),
    ("beta", 2.5, r"beta must lie in \[0, 2\].*got 2.5 at index \(0, 1, 3\)"),
    ("g", 0.125, r"g is log alpha and must be <= 0.*got 0.125 at index \(0, 1, 3\)"),
])
def test_values_out_of_range_are_named_with_their_index(name, value, pattern):
    args = _good()
    args[name] = args[name].clone()
    args[name][0, 1, 3] = value
    for mode in CPU_MODES:
        with pytest.raises(ValueError, match=pattern):
            delta_rule(args["q"], args["k"], args["v"], args["beta"], args["g"], h0=args["h0"], mode=mode)


def test_nonfinite_input_of_a_step_is_named():
    q, k, v, beta, g, h0 = make_inputs(1, 2, 1, 3, 4)
    k = k.clone()
    k[0, 1, 0, 2] = float("nan")
    with pytest.raises(FloatingPointError, match=r"k_t holds a non-finite value .* at index \(0, 1, 2\)"):
        delta_rule_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[:, :, 0], g[:, :, 0], h0)


def test_long_unnormalised_keys_overflow_into_a_named_error():
    """Keys of length 10 with ``beta = 1``: ``I - beta k^T k`` has the eigenvalue -99, the state overflows float32
    within ~20 steps, and the op says so instead of returning inf or NaN."""
    q, k, v, beta, g, h0 = make_inputs(1, 1, 40, 3, 2, gated=False)
    with pytest.raises(FloatingPointError, match="non-finite"):
        delta_rule(q, k * 10, v, torch.ones_like(beta), mode="recurrent")


def test_bad_mode_and_chunk_size():
    args = _good()
    with pytest.raises(ValueError, match=r"mode must be one of \('auto', 'recurrent', 'chunked', 'fla'\), got 'x'"):
        delta_rule(args["q"], args["k"], args["v"], args["beta"], mode="x")
    with pytest.raises(ValueError, match=r"chunk_size: expected a positive int, got 0"):
        delta_rule(args["q"], args["k"], args["v"], args["beta"], chunk_size=0)


def test_fla_mode_says_why_it_cannot_run_here():
    args = _good()
    from seqlab.ops.delta.fla import HAVE_FLA

    if HAVE_FLA and torch.cuda.is_available():
        pytest.skip("fla and CUDA are here: test_fla_mode_on_cuda runs it")
    pattern = r"needs flash-linear-attention \(pip install fla-core\)" if not HAVE_FLA else r"run on CUDA tensors"
    with pytest.raises(FlaUnavailable, match=pattern):
        delta_rule(args["q"], args["k"], args["v"], args["beta"], args["g"], mode="fla")


def test_gpu_path_checks_values_on_the_device(monkeypatch):
    """Where the op may not read values on the host (CUDA), one device-side assertion still refuses a
    non-finite input; on CPU ``torch._assert_async`` raises at once, which lets this path run here."""
    import seqlab.ops.delta as delta

    monkeypatch.setattr(delta, "host_checks", lambda t: False)
    args = _good()
    args["v"] = args["v"].clone()
    args["v"][0, 0, 2, 1] = float("inf")
    with pytest.raises(RuntimeError, match="device-side check"):
        delta_rule(args["q"], args["k"], args["v"], args["beta"], args["g"], mode="chunked")


# --------------------------------------------------------------------------------------- fla, where installed
def _fla_naive():
    try:
        from fla.ops.delta_rule.naive import delta_rule_recurrence
        from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule
    except Exception as error:  # not installed, or it does not import on this machine
        pytest.skip(f"flash-linear-attention's naive forms do not import here ({type(error).__name__}: {error})")
    return delta_rule_recurrence, naive_recurrent_gated_delta_rule


def test_cross_check_against_fla_naive_forms():
    """fla's own torch loops (float32, queries scaled by ``dk ** -0.5``; the gated one takes ``(B, L, H, d)``)
    compute what seqlab's reference computes."""
    delta_rule_recurrence, naive_recurrent_gated_delta_rule = _fla_naive()
    q, k, v, beta, g, h0 = make_inputs(L=C + 5)
    dk = q.shape[-1]
    ref_ungated, S_ungated = reference(q, k, v, beta, None, h0)
    y, S = delta_rule_recurrence(q * math.sqrt(dk), k, v, beta, initial_state=h0.clone(), output_final_state=True)
    check(y, ref_ungated, 1e-5, "fla delta_rule_recurrence")
    check(S, S_ungated, 1e-5, "fla delta_rule_recurrence: final state")
    ref_gated, S_gated = reference(q, k, v, beta, g, h0)
    heads_second = lambda t: t.transpose(1, 2)  # noqa: E731
    y, S = naive_recurrent_gated_delta_rule(*map(heads_second, (q, k, v, beta, g)), scale=1.0, initial_state=h0,
                                            output_final_state=True)
    check(heads_second(y), ref_gated, 1e-5, "fla naive_recurrent_gated_delta_rule")
    check(S, S_gated, 1e-5, "fla naive_recurrent_gated_delta_rule: final state")


@pytest.mark.parametrize("gated", [True, False])
def test_fla_mode_on_cuda(gated):
    from seqlab.ops.delta.fla import HAVE_FLA

    if not (HAVE_FLA and torch.cuda.is_available()):
        pytest.skip("fla's kernels need fla installed and a CUDA device")
    inputs = [None if t is None else t.cuda() for t in make_inputs(B=2, H=4, L=200, dk=64, dv=32, gated=gated)]
    q, k, v, beta, g = (None if t is None else t.to(torch.bfloat16) for t in inputs[:5])
    h0 = inputs[5]
    ref, S_ref = reference(*(None if t is None else t.double() for t in (q, k, v, beta, g)), h0)
    for mode in ("fla", "auto"):
        y, S = delta_rule(q, k, v, beta, g, h0=h0, mode=mode, return_state=True)
        assert y.dtype == torch.bfloat16
        check(y.double(), ref, 2e-2, f"{mode} on CUDA, bf16")
        check(S.double(), S_ref, 2e-2, f"{mode} on CUDA, bf16: final state")
    with pytest.raises(TypeError, match="torch.float32"):
        delta_rule(*(None if t is None else t.float() for t in (q, k, v, beta)), g, mode="fla")
