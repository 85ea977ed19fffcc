"""The state's precision: ``init_state(dtype=)`` in float32, bfloat16 or float16 with weights in float32 or
bfloat16 (``seqlab.models.decoding``'s docstring): every causal family decodes, the state keeps its dtype across
``prefill`` and ``step`` (complex parts complex64), float32 and float64 states compute exactly as before (no cast),
a step computes in float32 whatever the weights and the state, a bad dtype is refused, a low-precision state
that accumulates every token warns; and ``benchmarks/decode_precision.py --quick`` runs for one family."""
import copy
import importlib.util
import warnings

import pytest
import torch

import test_decoding as dec
from helpers import REPO, check
from seqlab.models.decoding import StatePrecisionWarning, state_tensors

LOW_STATES = (torch.float32, torch.bfloat16, torch.float16)
WEIGHTS = (torch.float32, torch.bfloat16)


def _dtypes(state) -> set:
    return {t.dtype for t in state_tensors(state["blocks"]) if t.is_floating_point() or t.is_complex()}


def _expected(state_dtype) -> set:
    return {state_dtype, torch.complex128 if state_dtype == torch.float64 else torch.complex64}


def _decode(model, x, state, prompt=4):
    logits, state = model.prefill(x[:, :prompt], state)
    seen = [_dtypes(state)]
    rows = [logits]
    for t in range(prompt, x.shape[1]):
        out, state = model.step(x[:, t], state)
        rows.append(out[:, None])
        seen.append(_dtypes(state))
    return torch.cat(rows, 1), state, seen


@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("name", sorted(dec.CONFIGS))
def test_every_state_dtype_decodes_and_keeps_its_dtype(name, weights):
    model, x = dec._lm(name, weights), dec._tokens(length=9)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", StatePrecisionWarning)
        exact = copy.deepcopy(model).double()                      # the same (rounded) weights in float64
        ref, _, _ = _decode(exact, x, exact.init_state(dec.B))
        for sd in LOW_STATES:
            logits, state, seen = _decode(model, x, model.init_state(dec.B, dtype=sd))
            assert state["dtype"] == sd
            assert all(s <= _expected(sd) for s in seen), f"{name} {sd}: state dtypes {seen}"
            assert seen[0] == seen[-1] and torch.isfinite(logits).all()
            assert logits.dtype == torch.float32                  # computed (and returned) in float32
            tol = 1e-5 if sd == torch.float32 else 0.05
            check(logits.double(), ref, tol, f"{name} weights {weights} state {sd} against float64")
    assert {p.dtype for p in model.parameters()} == {weights}      # the weights were read, not converted


@pytest.mark.parametrize("state_dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(dec.CONFIGS))
def test_float32_and_float64_states_compute_as_before(name, state_dtype):
    """Weights and state of one dtype: ``step``/``prefill`` are the unwrapped paths bit for bit (nothing cast)."""
    model, x = dec._lm(name, state_dtype), dec._tokens(length=9)
    with torch.no_grad():
        a, sa, _ = _decode(model, x, model.init_state(dec.B, dtype=state_dtype))
        s = model.init_state(dec.B)
        head, s = model._prefill(x[:, :4], s)
        tail = []
        for t in range(4, x.shape[1]):
            out, s = model._step(x[:, t], s)
            tail.append(out[:, None])
    assert torch.equal(a, torch.cat([head, *tail], 1))
    assert all(torch.equal(u, v) for u, v in zip(state_tensors(sa["blocks"]), state_tensors(s["blocks"])))


def test_complex_states_stay_complex64_and_a_short_conv_takes_the_state_dtype():
    model = dec._lm("gateloop", torch.float32, short_conv=3)
    with torch.no_grad():
        _, state, _ = _decode(model, dec._tokens(length=7), model.init_state(dec.B, dtype=torch.bfloat16))
    conv, S = state["blocks"][0]
    assert conv.dtype == torch.bfloat16 and S.dtype == torch.complex64
    model = dec._lm("lrnn", torch.float64)
    assert model.init_state(2, dtype=torch.float64)["blocks"][0].dtype == torch.complex128


def test_ragged_prefill_keeps_the_state_dtype():
    model = dec._lm("lightnet", torch.bfloat16)
    with torch.no_grad():
        with pytest.warns(StatePrecisionWarning):                 # LightNet's additive decay accumulates
            state = model.init_state(2, dtype=torch.float16)
        logits, state = model.prefill([[1, 2, 3], [4, 5]], state)
        out, state = model.step(logits[torch.arange(2), torch.tensor([2, 1])].argmax(-1), state)
    assert _dtypes(state) == {torch.float16} and torch.isfinite(out).all()


def test_gradients_reach_low_precision_weights():
    model = dec._lm("deltanet", torch.bfloat16)
    logits, state = model.prefill(dec._tokens(length=5), model.init_state(dec.B, dtype=torch.float32))
    logits, _ = model.step(dec._tokens(length=1)[:, 0], state)
    logits.sum().backward()
    assert model.embed.weight.grad is not None and model.embed.weight.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("bad", [torch.int64, torch.complex64, torch.bool, "float32"])
def test_a_bad_state_dtype_is_refused(bad):
    with pytest.raises(ValueError, match="dtype"):
        dec._lm("lrnn").init_state(2, dtype=bad)


@pytest.mark.parametrize("name", ["linear-transformer", "linear-causalrn", "lightnet"])
def test_a_low_precision_accumulating_state_warns(name):
    """States that sum every token (nothing forgotten) stall in bfloat16/float16: init_state says so."""
    model = dec._lm(name, torch.float32)
    for dtype, word in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        with pytest.warns(StatePrecisionWarning, match=word):
            model.init_state(2, dtype=dtype)
    with pytest.warns(StatePrecisionWarning) as caught:
        model.init_state(2, dtype=torch.float16)
    assert any("overflow" in str(w.message) for w in caught) == (name == "linear-transformer")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.init_state(2, dtype=torch.float32)


@pytest.mark.parametrize("name", ["transformer", "causalrn", "deltanet", "gated-deltanet", "gateloop", "lrnn"])
def test_states_that_forget_or_cache_do_not_warn(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype in LOW_STATES:
            dec._lm(name).init_state(2, dtype=dtype)


def test_the_precision_benchmark_runs_quick(capsys):
    spec = importlib.util.spec_from_file_location("decode_precision_under_test",
                                                  REPO / "benchmarks" / "decode_precision.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--quick", "--models", "lrnn"]) == 0
    out = capsys.readouterr().out
    assert out.count("| lrnn ") == 2 * 6 and "departs at" in out      # printed per family, then the whole table
    rows = bench.measure("linear-causalrn", 6, ["float32"], ["float32", "bfloat16"])
    assert rows[0]["max_abs_dlogit"] < 1e-5 and rows[0]["departs_at"] is None
    assert rows[1]["max_abs_dlogit"] > rows[0]["max_abs_dlogit"]


def test_decode_drift_measures_against_a_float64_decode():
    from seqlab import readout

    model = dec._lm("linear-transformer", torch.float32)
    before = copy.deepcopy(model.state_dict())
    prompt = _tokens_prompt()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StatePrecisionWarning)
        drift = readout.decode_drift(model, prompt, 12, [torch.float64, torch.float32, torch.bfloat16])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())      # the model is not changed
    assert drift["tokens"].shape == (12,) and drift["logit_scale"] > 0
    assert float(drift["dlogit"][torch.float64].max()) < 1e-5   # float32 weights read in float64: the same decode
    assert 0 < float(drift["dlogit"][torch.float32].max()) < 1e-4
    assert float(drift["dlogit"][torch.bfloat16].max()) > float(drift["dlogit"][torch.float32].max())
    assert drift["warned"] == {torch.float64: False, torch.float32: False, torch.bfloat16: True}
    assert drift["departs_at"][torch.float64] is None
    # the reference is greedy: each token is the argmax of the float64 logits before it
    ref = copy.deepcopy(model).double()
    logits, _ = ref.prefill(prompt)
    assert int(drift["tokens"][0]) == int(logits[0, -1].argmax())


def _tokens_prompt():
    return torch.randint(0, dec.VOCAB, (1, 5), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("prompt, n, match", [(torch.zeros(2, 3, dtype=torch.long), 4, "prompt"),
                                              (torch.zeros(1, 3), 4, "prompt"),
                                              (torch.zeros(1, 0, dtype=torch.long), 4, "prompt"),
                                              (torch.zeros(1, 3, dtype=torch.long), 0, "n_tokens")])
def test_decode_drift_refuses_bad_input(prompt, n, match):
    from seqlab import readout

    with pytest.raises(ValueError, match=match):
        readout.decode_drift(dec._lm("lrnn", torch.float32), prompt, n)
