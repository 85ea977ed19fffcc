"""The decoding protocol: ``init_state`` / ``prefill`` / ``step`` / ``state_size``.

Every check compares a model against its own parallel ``forward`` (random weights, lengths that are not
powers of two): ``forward(x)`` == ``prefill(x[:, :P])`` then ``step`` == ``step`` from ``init_state``;
``prefill(b, prefill(a)[1])`` == ``prefill(a + b)``; rows of a batch are independent; bad input raises.
"""
import pytest
import torch

from helpers import check
from seqlab import models
from seqlab.models.decoding import state_tensors

VOCAB, B, L, P = 13, 3, 37, 20

CONFIGS = {
    "gateloop": dict(d_model=8, n_layers=2, n_heads=4, d_qk=8, d_v=12, d_ff=16),
    "transformer": dict(d_model=8, n_layers=2, n_heads=2, mlp_ratio=2.0, max_len=64),
    "linear-transformer": dict(d_model=8, n_layers=2, n_heads=2, mlp_ratio=2.0),       # sinusoidal positions
    "causalrn": dict(d_model=8, n_layers=2, max_len=64),
    "linear-causalrn": dict(d_model=8, n_layers=2),
    "lrnn": dict(d_model=8, n_layers=2, r_min=0.5, r_max=0.95),
    "lightnet": dict(d_model=8, n_layers=2, n_heads=2, tpe_dim=3, lrpe_base=7.0),
    "deltanet": dict(d_model=8, n_layers=2, n_heads=2, mlp_ratio=2.0, chunk_size=8),      # 37 tokens: 5 chunks
    "gated-deltanet": dict(d_model=8, n_layers=2, n_heads=2, mlp_ratio=2.0, chunk_size=8),
}
TOL = {torch.float64: 1e-9, torch.float32: 1e-4}


def _lm(name, dtype=torch.float64, **kw):
    """A language model with random weights (every parameter perturbed, so no path is trivially exact)."""
    torch.manual_seed(1)
    model = models.build(name, vocab_size=VOCAB, **{**CONFIGS[name], **kw}).to(dtype).eval()
    with torch.no_grad():
        for prm in model.parameters():
            prm.add_(0.3 * torch.randn_like(prm))
    return model


def _tokens(batch=B, length=L, seed=2):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _steps(model, tokens, state):
    rows = []
    for t in range(tokens.shape[1]):
        logits, state = model.step(tokens[:, t], state)
        rows.append(logits)
    return torch.stack(rows, 1), state


def _floats(state) -> int:
    """Floats held per sequence in a model state (complex = two)."""
    return sum(t[0].numel() * (2 if t.is_complex() else 1) for t in state_tensors(state["blocks"]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_prefill_and_step_equal_forward(name, dtype):
    model, x = _lm(name, dtype), _tokens()
    with torch.no_grad():
        ref = model(x)
        head, state = model.prefill(x[:, :P])
        tail, _ = _steps(model, x[:, P:], state)
        alone, _ = _steps(model, x, model.init_state(B))
    assert head.shape == (B, P, VOCAB) and tail.shape == (B, L - P, VOCAB)
    check(torch.cat([head, tail], 1), ref, TOL[dtype], f"{name} prefill + step")
    check(alone, ref, TOL[dtype], f"{name} step from init_state")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_prefill_with_a_state_continues_it(name):
    """prefill(a) then prefill(b, state) == prefill(a + b): the cached state is not dropped (HF PR #45513)."""
    model, x = _lm(name), _tokens()
    with torch.no_grad():
        whole, s_whole = model.prefill(x)
        first, s = model.prefill(x[:, :11])
        second, s = model.prefill(x[:, 11:], s)
        nxt_whole, _ = model.step(x[:, 0], s_whole)
        nxt, _ = model.step(x[:, 0], s)
    check(torch.cat([first, second], 1), whole, 1e-9, f"{name} prefill in two parts")
    check(nxt, nxt_whole, 1e-9, f"{name} step after the two prefills")
    assert s["t"] == s_whole["t"] == L


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_an_empty_prompt_leaves_the_state_as_it_was(name):
    """prefill of a (B, 0) prompt: (B, 0, vocab) logits and the state unchanged, from init_state and mid-sequence
    (the blocks read by steps, and LightNet's LRPE on zero positions, used to fail on it)."""
    model, x = _lm(name), _tokens()
    with torch.no_grad():
        for state in (model.init_state(B), model.prefill(x[:, :P])[1]):
            logits, after = model.prefill(x[:, :0], state)
            assert logits.shape == (B, 0, VOCAB) and after["t"] == state["t"]
            for S, S_before in zip(state_tensors(after["blocks"]), state_tensors(state["blocks"])):
                assert torch.equal(S, S_before)
            nxt, _ = model.step(x[:, P], after)
            ref, _ = model.step(x[:, P], state)
            check(nxt, ref, 1e-15, f"{name} step after an empty prefill")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sequences_of_a_batch_stay_independent(name):
    model, x = _lm(name), _tokens()
    y = x.clone()
    y[1] = (x[1] + 1) % VOCAB                            # another prompt in row 1 only
    with torch.no_grad():
        out_x, s_x = model.prefill(x[:, :P])
        out_y, s_y = model.prefill(y[:, :P])
        step_x, _ = _steps(model, x[:, P:], s_x)
        step_y, _ = _steps(model, y[:, P:], s_y)
        single, s1 = model.prefill(x[2:, :P])            # row 2 decoded on its own
        single_step, _ = _steps(model, x[2:, P:], s1)
    assert not torch.allclose(out_x[1], out_y[1])
    for r in (0, 2):
        check(out_y[r], out_x[r], 1e-12, f"{name} prefill row {r}")
        check(step_y[r], step_x[r], 1e-12, f"{name} step row {r}")
    check(single, out_x[2:], 1e-9, f"{name} row 2 alone (prefill)")
    check(single_step, step_x[2:], 1e-9, f"{name} row 2 alone (step)")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_state_size_counts_the_state(name):
    model, x = _lm(name), _tokens(batch=2)
    with torch.no_grad():
        for t in (0, 5, 19):
            _, state = model.prefill(x[:, :t]) if t else (None, model.init_state(2))
            assert model.state_size(t) == _floats(state), f"{name}: state_size({t})"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bad_input_is_refused(name):
    model, x = _lm(name), _tokens()
    state = model.init_state(B)
    with pytest.raises(ValueError, match="tokens_t"):
        model.step(torch.full((B,), VOCAB), state)       # a token outside the vocabulary
    with pytest.raises(ValueError, match="tokens"):
        model.prefill(x.masked_fill(x == 3, -1), state)
    with pytest.raises(ValueError, match="state"):
        model.step(x[:2, 0], state)                      # a state for another batch size
    with pytest.raises(ValueError, match="state"):
        model.prefill(x, model.init_state(B + 1))
    other = next(n for n in ["linear-causalrn", "gateloop"] if n != name)
    foreign = models.build(other, vocab_size=VOCAB, d_model=8, n_layers=1).double().init_state(B)
    with pytest.raises(ValueError, match="state"):
        model.step(x[:, 0], foreign)                     # a state from another model
    with pytest.raises(ValueError, match="batch"):
        model.init_state(0)
    clf = models.build(name, vocab_size=VOCAB, num_classes=3, **CONFIGS[name])
    with pytest.raises(ValueError, match="language model"):
        clf.init_state(1)


@pytest.mark.parametrize("mode", ["recurrent", "associative", "chunked", "attention", "numba", "triton"])
def test_gateloop_prefill_uses_the_ops_final_state_in_every_mode(mode):
    """The GateLoop op's ``h0`` / ``return_state`` in each mode carry the prompt's state into decoding."""
    if mode == "numba":
        pytest.importorskip("numba")
    if mode == "triton":
        pytest.importorskip("triton")
    ref_model, x = _lm("gateloop", mode="recurrent"), _tokens(length=13)
    model = _lm("gateloop", mode=mode)
    model.load_state_dict(ref_model.state_dict())
    with torch.no_grad():
        ref = ref_model(x)
        a, s = model.prefill(x[:, :5])
        b, s = model.prefill(x[:, 5:], s)
        _, s_ref = _steps(ref_model, x, ref_model.init_state(B))
    check(torch.cat([a, b], 1), ref, 1e-9, f"gateloop mode={mode}")
    for S, S_ref in zip(s["blocks"], s_ref["blocks"]):
        check(S, S_ref, 1e-9, f"gateloop mode={mode} final state")


def _check_parts_and_steps(model, x, cut: int, what: str):
    """``forward(x)`` == ``prefill(x[:, :cut])`` then ``prefill`` of the rest from its state == ``step`` alone from
    ``init_state`` (float64, 1e-9), and both ways end in the same state, which is returned."""
    with torch.no_grad():
        ref = model(x)
        a, s = model.prefill(x[:, :cut])
        b, s = model.prefill(x[:, cut:], s)
        c, s_steps = _steps(model, x, model.init_state(B))
    check(torch.cat([a, b], 1), ref, 1e-9, f"{what}: prefill in two parts")
    check(c, ref, 1e-9, f"{what}: steps")
    for S, S_ref in zip(state_tensors(s["blocks"]), state_tensors(s_steps["blocks"])):
        check(S, S_ref, 1e-9, f"{what}: final state")
    return s


@pytest.mark.parametrize("mode", ["quadratic", "chunked", "numba", "triton"])
def test_linear_transformer_prefill_in_every_mode(mode):
    """Its prefill runs GateLoop's recurrence with a = 1 from h0 = [S | z] (the Numba loop or Triton where asked)."""
    pytest.importorskip({"numba": "numba", "triton": "triton"}.get(mode, "torch"))
    _check_parts_and_steps(_lm("linear-transformer", mode=mode), _tokens(length=13), 6,
                           f"linear-transformer mode={mode}")


@pytest.mark.parametrize("name", ["transformer", "linear-transformer"])
def test_learned_positions_bound_the_decoded_length(name):
    model, x = _lm(name, max_len=40, positions="learned"), _tokens()
    with torch.no_grad():
        _, state = model.prefill(x)                      # 37 of 40 positions
        _, state = model.prefill(x[:, :3], state)        # 40: the last one
        with pytest.raises(ValueError, match="max_len=40"):
            model.step(x[:, 0], state)
    assert model.state_size(40) == (2 * 8 * 2 * 40 if name == "transformer" else model.state_size(1))


@pytest.mark.parametrize("name", ["linear-transformer", "linear-causalrn"])
def test_sinusoidal_positions_decode_past_any_table(name):
    """The linear models' default positions have no table: 2000 tokens (past the old caps of 512 and 1024)
    prefill, and the steps after them equal the forward pass over all of them."""
    model, x = _lm(name), _tokens(batch=1, length=2003)
    assert model.positions == "sinusoidal" and model.max_len is None
    with torch.no_grad():
        _, state = model.prefill(x[:, :2000])
        logits = []
        for t in range(2000, 2003):
            out, state = model.step(x[:, t], state)
            logits.append(out)
        check(torch.stack(logits, 1), model(x)[:, 2000:], 1e-9, f"{name} steps after 2000 tokens")
    with pytest.raises(ValueError, match="max_len: only learned positions have a longest length"):
        _lm(name, max_len=40)


def test_transformer_kv_cache_grows_and_the_linear_states_do_not():
    sizes = {n: [_lm(n).state_size(t) for t in (1, 100, 1000)] for n in CONFIGS}
    assert sizes["transformer"] == [2 * 8 * 2 * t for t in (1, 100, 1000)]   # K and V, d_model each, 2 layers
    assert sizes["causalrn"] == [2 * 8 * t for t in (1, 100, 1000)]      # every past p_i (quadratic CausalRN)
    for n in ("gateloop", "linear-transformer", "linear-causalrn", "lightnet", "lrnn", "deltanet", "gated-deltanet"):
        assert len(set(sizes[n])) == 1 and sizes[n][0] > 0, n


@pytest.mark.parametrize("mode", ["recurrent", "parallel", "chunked", "numba"])
@pytest.mark.parametrize("variant", [dict(), dict(decay="multiplicative"), dict(decay="none"), dict(share=False),
                                     dict(lrpe=False, tpe=False)])
def test_lightnet_variants_decode_in_every_mode(variant, mode):
    """LightNet's prefill is decay_attention from h0 (its state (kv, log s) or kv) with LRPE phases from the
    position t; each ablation switch and mode gives its forward in parts and token by token."""
    if mode == "numba":
        pytest.importorskip("numba")
    model = _lm("lightnet", mode=mode, **variant)
    s = _check_parts_and_steps(model, _tokens(length=29), 9, f"lightnet {variant} mode={mode}")
    assert model.state_size(29) == _floats(s)


@pytest.mark.parametrize("mode", ["sequential", "doubling", "associative", "blocked", "numba"])
def test_lrnn_prefill_is_one_scan_from_the_state_in_every_mode(mode):
    """lrnn's state is h̄_t (complex), from the trained h̄_0; prefill is linear_scan(h0=state) in the model's mode."""
    if mode == "numba":
        pytest.importorskip("numba")
    model, x = _lm("lrnn", mode=mode), _tokens(length=29)
    with torch.no_grad():
        ref = model(x)
        a, s = model.prefill(x[:, :10])
        b, s = model.prefill(x[:, 10:], s)
        c, s_steps = _steps(model, x, model.init_state(B))
        h0 = model.init_state(B)["blocks"][0]
    check(torch.cat([a, b], 1), ref, 1e-9, f"lrnn mode={mode} prefill in two parts")
    check(c, ref, 1e-9, f"lrnn mode={mode} steps")
    for S, S_ref in zip(s["blocks"], s_steps["blocks"]):
        check(S, S_ref, 1e-9, f"lrnn mode={mode} final state")
    assert h0.is_complex() and h0.abs().min() > 0                       # the trained h̄_0, not zeros
    check(h0[0], model.blocks[0].lrnn1.h0(), 1e-15, "init_state is h̄_0")


def test_fst_does_not_decode():
    model = models.build("fst", vocab_size=VOCAB, seq_len=8, d_model=8, n_layers=1)
    for method in ("init_state", "prefill", "step", "state_size"):
        with pytest.raises(NotImplementedError, match="twisted half mixes along the sequence axis"):
            getattr(model, method)(1)
    with pytest.raises(NotImplementedError, match="FSTBlock"):
        model.blocks[0].init_state(1)


def test_lrnn_decoding_weights_follow_changed_parameters():
    """The LRNN keeps Λ and W̄_in between steps: a changed weight (in place, as an optimizer changes it, or a
    model moved to another dtype) must be seen by the next step."""
    model, x = _lm("lrnn"), _tokens(batch=2, length=5)
    with torch.no_grad():
        first, _ = model.step(x[:, 0], model.init_state(2))
        for block in model.blocks:
            block.lrnn1.nu.add_(0.5)
            block.lrnn1.w_re.mul_(1.5)
        again, _ = model.step(x[:, 0], model.init_state(2))
        check(again, model(x[:, :1])[:, 0], 1e-9, "step after an in-place change")
        assert not torch.allclose(first, again)
        small = model.float()
        check(small.step(x[:, 0], small.init_state(2))[0], small(x[:, :1])[:, 0], 1e-4, "step after .float()")
