"""The exercises of lessons 01-09 (``seqlab.exercises``): every checker says "not answered yet" for the untouched
cell, accepts its solution, and rejects a specific wrong answer with a message that says what is wrong. The capstone
(09.3) registers a family: each test leaves the model registry as it found it."""
import contextlib
import io
import math

import pytest
import torch

from seqlab import exercises, models
from seqlab.exercises.solutions import DeltaProductBlock, build_deltaproduct, deltaproduct_rule, solution

IDS = [i for lesson in range(1, 10) for i in exercises.ids(lesson)]   # lesson 10: tests/lessons/test_kernel_puzzles.py


@pytest.fixture(autouse=True)
def _registry_as_it_was():
    """A capstone answer registers its family (a test may replace one of seqlab's own, to see it refused); other
    tests list and build every registered one: new names go, replaced builders come back."""
    from seqlab.models import registry

    before = {name: registry.builder(name) for name in models.names()}
    yield
    for name in models.names():
        if name not in before:
            models.unregister(name)
        elif registry.builder(name) is not before[name]:
            registry.register(name, replace=True)(before[name])


def run(exercise_id, answer):
    """``(returned, printed)`` of ``exercises.check``."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        ok = exercises.check(exercise_id, answer)
    return ok, buf.getvalue().strip()


# ------------------------------------------------------------------------------------- specific wrong answers


def _birn_mean(p, q):                                    # 01.1: every key, not i <= j
    return torch.stack([torch.relu(p + q[:, j: j + 1]).mean(1) for j in range(p.shape[1])], 1)


def _naive_exp(p, q):                                    # 01.2: exp(p) overflows for keys of ~730
    count = torch.arange(1, p.shape[1] + 1, dtype=p.dtype)[:, None]
    return torch.exp(q) * torch.cumsum(torch.exp(p), 1) / count


def _no_count(p, q):                                     # 01.2: the sum, not the mean
    return torch.exp(q + torch.logcumsumexp(p, dim=1))


def _late_scan(a, x, h0):                                # 02.1: stores h_(t-1), off by one
    h, out = h0, []
    for t in range(x.shape[1]):
        out.append(h)
        h = a[:, t] * h + x[:, t]
    return torch.stack(out, 1)


def _eq13(p, q):                                         # 02.3: the right operator breaks nothing
    return p[0] * q[0], q[0] * p[1] + q[1]


def _lrnn_from_zero(lrnn, x):                            # 03.1: forgets h_0
    lam, w = lrnn.lam(), lrnn.input_weight()
    h, ys = torch.zeros(x.shape[0], lrnn.d_state, dtype=w.dtype), []
    for t in range(x.shape[1]):
        h = lam * h + x[:, t].to(w.dtype) @ w
        ys.append(h.real)
    return torch.stack(ys, 1)


def _fst_residual_from_x(block, x):                      # 03.2: second residual from x, not x1
    a1, a2 = block.alpha1, block.alpha2
    x1 = (1 - a1) * x + a1 * block.mlp1(block.lrnn1(block.norm1(x)))
    back = block.mlp2(block.lrnn2(block.norm2(x1).transpose(1, 2))).transpose(1, 2)
    return (1 - a2) * x + a2 * back


def _naive_decay(k):                                     # 04.1: exp(k) overflows for keys of 1000
    s = torch.cumsum(torch.exp(k), 0)
    return torch.cat([torch.zeros_like(k[:1]), s[:-1] / s[1:]])


def _transposed_coefficients(delta):                     # 04.2: c_st instead of c_ts
    return solution("04.2")(delta).T


def _literal_surrogate(q, k, a):                         # 05.1: eq. 18-21 literally, underflows at L = 600
    pi = torch.cumprod(a, 0)
    return ((q * pi) @ (k / pi).T).tril()


def _grad_with_h_t(a, x, w):                             # 05.2: multiplies by h_t, not h_(t-1)
    from seqlab.ops import linear_scan

    h = linear_scan(a, x, mode="sequential")
    g = linear_scan(torch.cat([a[1:], torch.zeros_like(a[:1])]), w, reverse=True, mode="sequential")
    return g * h


def _reset_one_early():                                  # 05.3: the reset at 11, not 12
    a = torch.full((24,), 0.95, dtype=torch.float64)
    a[11] = 0.0
    return a


def _factorised_decays(log_a):                           # 06.1: exp(g_i) exp(-g_j) overflows for sharp gates
    g = log_a.cumsum(0)
    causal = torch.ones(g.shape[0], g.shape[0], dtype=torch.bool).tril()[..., None]
    return torch.where(causal, torch.exp(g)[:, None] * torch.exp(-g)[None, :], 0.0)


def _inclusive_decays(log_a):                            # 06.1: a_j .. a_i, one factor too many
    return solution("06.1")(log_a) * torch.exp(log_a)[None, :, :]


def _states_leaving(k, v, log_a, C):                     # 06.2: the state after each chunk, not before
    h, leaving = torch.zeros(k.shape[1], v.shape[1], dtype=k.dtype), []
    for t in range(k.shape[0]):
        h = torch.exp(log_a[t])[:, None] * h + k[t, :, None] * v[t, None, :]
        if t % C == C - 1 or t == k.shape[0] - 1:
            leaving.append(h)
    return torch.stack(leaving)


def _factorised_gateloop(q, k, v, a, C):                 # 06.3: eq. 18-19 over the whole sequence
    Pi = torch.cumprod(a, 0)
    A = ((q * Pi) @ (k / Pi).T).tril()
    return A @ v


def _conjugated_gateloop(q, k, v, a, C):                 # 06.3: q and k conjugated
    return solution("06.3")(q.conj(), k.conj(), v, a, C)


def _step_without_decay(q_t, k_t, v_t, state):           # 07.1: the old kv is not rescaled by s_(t-1) / s_t
    kv, log_s = state
    new_log_s = torch.logaddexp(log_s, k_t)
    kv = kv + torch.exp(k_t - new_log_s)[..., None] * v_t[..., None, :]
    return torch.einsum("...i,...ij->...j", q_t, kv), (kv, new_log_s)


def _rerun_generate(model, prompt, n):                   # 07.3: right tokens, but O(t) work per token
    tokens = prompt
    for _ in range(n):
        tokens = torch.cat([tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)], 1)
    return tokens


def _labels_everywhere(ids, num_kv_pairs):               # 08.1: scores the key-value region too
    from seqlab.tasks import IGNORE

    labels = torch.full_like(ids, IGNORE)
    for b in range(ids.shape[0]):
        pairs = {int(ids[b, 2 * i]): int(ids[b, 2 * i + 1]) for i in range(num_kv_pairs)}
        for t in range(ids.shape[1]):
            labels[b, t] = pairs.get(int(ids[b, t]), IGNORE)
    return labels


def _count_all(model):                                   # 08.2: embedding, positions and head counted too
    return sum(p.numel() for p in model.parameters())


def _ut_inverting(system, *, beta_after=False):
    """A ut_transform as a learner writes it: the inverse of ``system(K, beta)`` times diag(beta) [K | V] (with
    ``beta_after``, diag(beta) times the inverse times [K | V])."""
    def ut_transform(K, V, beta):
        T, b = torch.linalg.inv(system(K, beta)), beta[..., :, None]
        return (b * (T @ K), b * (T @ V)) if beta_after else (T @ (b * K), T @ (b * V))
    return ut_transform


def _eye_plus(A):
    return torch.eye(A.shape[-1], dtype=A.dtype) + A


def _ut_upper(K, V, beta):                               # 09.1: the right system, solved as if upper triangular
    system = _eye_plus((beta[..., :, None] * (K @ K.mT)).tril(-1))
    WU = torch.linalg.solve_triangular(system, beta[..., None] * torch.cat([K, V], -1), upper=True)
    return WU[..., :K.shape[-1]], WU[..., K.shape[-1]:]


def _ut_chunk_by_chunk(K, V, beta):                      # 09.1: right, but a Python loop over the chunks
    parts = [solution("09.1")(K[..., c:c + 1, :, :], V[..., c:c + 1, :, :], beta[..., c:c + 1, :])
             for c in range(K.shape[-3])]
    return torch.cat([W for W, _ in parts], -3), torch.cat([U for _, U in parts], -3)


def _backward_with(**zeroed):
    """09.2's solution with some inputs replaced (by zeros, ones, M by its transpose): each gets one term of the
    reverse pass wrong."""
    def state_pass_backward(W, through, K_to_end, Q_in, M, S_in, dY, dS):
        given = dict(W=W, through=through, K_to_end=K_to_end, Q_in=Q_in, M=M, S_in=S_in, dY=dY, dS=dS)
        given.update({name: fill(given[name]) for name, fill in zeroed.items()})
        return solution("09.2")(**given)
    return state_pass_backward


def _backward_forwards(W, through, K_to_end, Q_in, M, S_in, dY, dS):   # 09.2: the loop from the first chunk
    """09.2's solution on the chunks in reverse order: its loop then visits them from the first to the last."""
    back = lambda t: t.flip(-3)  # noqa: E731
    dU, dW, dS0 = solution("09.2")(back(W), through.flip(-1), back(K_to_end), back(Q_in), back(M), back(S_in),
                                   back(dY), dS)
    return back(dU), back(dW), dS0


def _product(*, normalise="qk", read_after_first=False):
    """A deltaproduct_rule as a learner writes it (S: (B, H, dk, dv), row vectors), the inputs of ``normalise``
    L2-normalised and, ``read_after_first``, y_t read after the first of a token's steps."""
    def deltaproduct_rule(q, k, v, beta, S):
        q = q / q.norm(dim=-1, keepdim=True) if "q" in normalise else q
        k = k / k.norm(dim=-1, keepdim=True) if "k" in normalise else k
        ys = []
        for t in range(q.shape[2]):
            for j in range(k.shape[3]):
                k_j, v_j = k[:, :, t, j, None, :], v[:, :, t, j, None, :]                      # rows (B, H, 1, d)
                S = S + k_j.mT @ (beta[:, :, t, j, None, None] * (v_j - k_j @ S))
                if j == 0 or not read_after_first:
                    read = S
            ys.append((q[:, :, t, None, :] @ read)[..., 0, :])
        return torch.stack(ys, 2), S
    return deltaproduct_rule


def _shared_key(q, k, v, beta, S):                       # 09.3: the token's first key for all its steps
    return deltaproduct_rule(q, k[..., :1, :].expand_as(k), v, beta, S)


class _StaleStep(DeltaProductBlock):                     # 09.3: step hands back the state it was given
    def step(self, x_t, S):
        return super().step(x_t, S)[0], S


class _CountsTokens(DeltaProductBlock):                  # 09.3: state_size that grows with t, as a cache's does
    def state_size(self, t):
        return super().state_size(t) * max(t, 1)


def _family(name, block, head_std=0.02):
    """Register ``name``: the capstone's model with ``block`` and the head drawn N(0, head_std)."""
    from seqlab.models.decoding import DecodingModel

    @models.register(name)
    def build(*, vocab_size, num_classes=None, seq_len=None, d_model=64, n_layers=2, n_heads=2):
        model = DecodingModel(vocab_size=vocab_size, d_model=d_model, num_classes=num_classes,
                              blocks=[block(d_model, n_heads) for _ in range(n_layers)])
        torch.nn.init.normal_(model.head.weight, std=head_std)
        return model
    return name


WRONG = {   # id: [(wrong answer, a fragment the message must contain), ...]
    "01.1": [(_birn_mean, "every key i")],
    "01.2": [(_naive_exp, "non-finite"), (_no_count, "j times too large")],
    "01.3": [({"causalrn": 64, "linear-causalrn": 64}, "causalrn: you predicted 64, it holds 6400"),
             ({"causalrn": 6400}, "expected a dict")],
    "02.1": [(_late_scan, "one step late")],
    "02.2": [((math.log(50), math.log(2 * math.pi / 10)), "after 50 steps"),
             ((math.log(1 / 50), math.log(1.0)), "not 10")],
    "02.3": [(_eq13, "nothing is broken yet")],
    "03.1": [(_lrnn_from_zero, "start from zero")],
    "03.2": [(_fst_residual_from_x, "second residual starts from x"),
             (lambda block, x: x.transpose(1, 2), "transpose the twisted half back")],
    "03.3": [({"mlp2"}, "without masking lrnn2.W_in"), ({"lrnn2.W_in", "mlp2", "mlp1"}, "mlp1 needs no mask"),
             ({"lrnn2.W_in", "mlp2", "lrnn2.lambda"}, "diagonal")],
    "04.1": [(_naive_decay, "non-finite"), (lambda k: torch.exp(-torch.exp(k)), "a_1 =")],
    "04.2": [(_transposed_coefficients, "transposed")],
    "04.3": [(("additive", "multiplicative"), "wipes the past in the multiplicative"),
             (("multiplicative", "multiplicative"), "survives longest in the additive"),
             (("multiplicative", "exponential"), "expected one of")],
    "05.1": [(_literal_surrogate, "non-finite")],
    "05.2": [(_grad_with_h_t, "multiplied by h_t")],
    "05.3": [(_reset_one_early(), "row 12 still reads key 11"), (torch.full((24,), 1.2), "> 1"),
             (torch.full((24,), 0.5), "row 12 still reads key 11")],
    "06.1": [(_factorised_decays, "non-finite"), (_inclusive_decays, "a_i, not 1")],
    "06.2": [(_states_leaving, "leaving each chunk")],
    "06.3": [(_factorised_gateloop, "non-finite"), (_conjugated_gateloop, "conjugated")],
    "07.1": [(_step_without_decay, "step t = 2")],
    "07.2": [(8, "not yet"), (10, "first such t"), (8.5, "whole number")],
    "07.3": [(_rerun_generate, "ran the whole forward 6 times")],
    "08.1": [(_labels_everywhere, "key-value region")],
    "08.2": [(_count_all, "counted every parameter")],
    "08.3": [({"transformer"}, "causalrn: state_size(64)"), ({"transformer", "causalrn", "lrnn"}, "lrnn: "),
             ({"attention"}, "unknown family")],
    "09.1": [(_ut_inverting(lambda K, b: _eye_plus((b[..., :, None] * (K @ K.mT)).tril())), "the diagonal is kept"),
             (_ut_inverting(lambda K, b: _eye_plus((K @ K.mT * b[..., None, :]).tril(-1))), "wrong side of K K^T"),
             (_ut_inverting(lambda K, b: _eye_plus((b[..., :, None] * (K @ K.mT)).tril(-1)), beta_after=True),
              "applied after T"),
             (_ut_inverting(lambda K, b: _eye_plus((b[..., :, None] * (K.mT @ K)).tril(-1))), "you used K^T K"),
             (_ut_upper, "read only the upper triangle"),
             (_ut_chunk_by_chunk, "a Python loop over the chunks"),
             (lambda K, V, beta: K, "expected (W, U) from your ut_transform")],
    "09.2": [(_backward_with(through=torch.ones_like), "not scaled by gamma_c"),
             (_backward_with(W=torch.zeros_like), "-W_c^T dU~_c is missing"),
             (_backward_with(K_to_end=torch.zeros_like), "Kbar_c dS_(c+1) (Kbar = K_to_end) is missing"),
             (_backward_with(M=lambda M: M.mT), "M_c is not transposed"),
             (_backward_forwards, "the loop ran forwards")],
    "09.3": [((_product(normalise="q"), "deltaproduct"), "keys are not L2-normalised"),
             ((_product(read_after_first=True), "deltaproduct"), "read after the first of the n_h steps"),
             ((_shared_key, "deltaproduct"), "one key serves all n_h steps"),
             ((deltaproduct_rule, "deltanet"), "'deltanet' is one of seqlab's own families: register yours"),
             ((deltaproduct_rule, "no-such-family"), "no family 'no-such-family' is registered"),
             (deltaproduct_rule, "expected answer = (deltaproduct_rule, 'family name')")],
}


def test_three_exercises_per_lesson():
    assert len(IDS) == 27 and set(WRONG) == set(IDS)
    for lesson in range(1, 10):
        listed = exercises.list(lesson)
        assert [i for i, _ in listed] == [f"{lesson:02d}.{n}" for n in (1, 2, 3)]
        assert all(task.strip() for _, task in listed)
    assert exercises.list("01") == exercises.list(1)


@pytest.mark.parametrize("exercise_id", IDS)
def test_untouched_answer_is_not_answered_yet(exercise_id):
    ok, out = run(exercise_id, ...)
    assert ok is False
    assert out.startswith(f"Exercise {exercise_id}: not answered yet — ") and exercises.hint(exercise_id) in out


@pytest.mark.parametrize("exercise_id", IDS)
def test_untouched_notebook_cell_prints_not_answered_yet(exercise_id):
    """The cell a lesson carries (the stub, untouched) runs without error and prints the same line every time."""
    lesson, number = exercise_id.split(".")
    _, code = exercises.notebook_cells(lesson)[int(number) - 1]
    outputs = []
    for _ in range(2):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, f"<exercise {exercise_id}>", "exec"), {})
        outputs.append(buf.getvalue())
    assert outputs[0] == outputs[1] and outputs[0].startswith(f"Exercise {exercise_id}: not answered yet — ")


@pytest.mark.parametrize("exercise_id", IDS)
def test_solution_passes(exercise_id):
    ok, out = run(exercise_id, solution(exercise_id))
    assert ok is True, out
    assert out.startswith(f"Exercise {exercise_id}: correct — ") and "raised" not in out


@pytest.mark.parametrize("exercise_id", IDS)
def test_wrong_answers_fail_and_say_why(exercise_id):
    for wrong, fragment in WRONG[exercise_id]:
        ok, out = run(exercise_id, wrong)
        assert ok is False, out
        assert out.startswith(f"Exercise {exercise_id}: not yet — ") and "correct" not in out, out
        assert fragment in out, out
        assert "checking your answer raised" not in out, out      # the checker saw the mistake itself


def test_a_function_that_raises_is_reported_not_raised():
    def broken(p, q):
        raise IndexError("index 7 is out of bounds")

    ok, out = run("01.1", broken)
    assert ok is False and "your function raised IndexError: index 7 is out of bounds" in out
    ok, out = run("01.1", torch.zeros(3))
    assert ok is False and "expected a function" in out


def test_check_is_deterministic_and_leaves_the_random_stream_alone():
    torch.manual_seed(5)
    before = torch.rand(3)
    torch.manual_seed(5)
    first = run("07.3", _rerun_generate)
    second = run("03.3", {"mlp2"})
    after = torch.rand(3)
    assert torch.equal(before, after)
    assert first == run("07.3", _rerun_generate) and second == run("03.3", {"mlp2"})


def test_unknown_id_raises_naming_it_and_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown exercise '11\.1'; did you mean '..\.1'\? \(valid: 01\.1, 01\.2") as err:
        exercises.check("11.1", ...)
    assert all(i in str(err.value) for i in exercises.ids())
    with pytest.raises(ValueError, match="11.1"):
        exercises.hint("11.1")
    with pytest.raises(ValueError, match="11.1"):
        solution("11.1")


@pytest.mark.parametrize("exercise_id", IDS)
def test_notebook_cell_ends_in_an_assignment(exercise_id):
    """nbval's kernel displays a last expression even after a ";": the cell must end in a statement."""
    lesson, number = exercise_id.split(".")
    _, code = exercises.notebook_cells(lesson)[int(number) - 1]
    assert code.splitlines()[-1] == f'correct = exercises.check("{exercise_id}", answer)'


def test_the_capstone_rejects_a_family_that_decodes_wrong_or_that_the_arena_refuses():
    ok, out = run("09.3", (deltaproduct_rule, _family("stale-step", _StaleStep)))
    assert not ok and "stale-step: step() from init_state differs from forward() first at (batch, t, logit) = " \
                      "(0, 1," in out, out
    ok, out = run("09.3", (deltaproduct_rule, _family("counts-tokens", _CountsTokens)))
    assert not ok and "counts-tokens: state_size(1), (11), (1000) = [64, 704, 64000]" in out, out
    ok, out = run("09.3", (deltaproduct_rule, _family("loud-head", DeltaProductBlock, head_std=1.0)))  # logits ~5
    assert not ok and "the arena refused loud-head: ValueError: " in out and "initial" in out, out


def test_the_capstone_refuses_a_seqlab_family_even_once_replaced():
    """A learner who registered over seqlab's own ``gated-deltanet`` is told so, and how to get it back."""
    models.register("gated-deltanet", replace=True)(build_deltaproduct)       # as a notebook cell would
    ok, out = run("09.3", (deltaproduct_rule, "gated-deltanet"))
    assert not ok and "'gated-deltanet' is one of seqlab's own families; your models.register('gated-deltanet', " \
                      "replace=True) has replaced seqlab's own builder" in out, out
