"""Prompts of different lengths decode together: ragged batches.

Every causal family of the decoding tests (``test_decoding.CONFIGS``), float64, random weights: a batch of five
prompts of 1 to 33 tokens gives, row by row, the logits and final state of that prompt decoded alone (prefill,
then steps and a prefill from the ragged state), to 1e-10; pads of any value, anywhere in the padding, change
nothing; bad ``lengths`` are refused naming the argument; ``generate`` and the CLI take several prompts.
"""
import pytest
import torch

import seqlab
from helpers import check
from seqlab import models
from seqlab.models.decoding import state_tensors
from test_decoding import CONFIGS, VOCAB, _lm

LENGTHS = [1, 9, 33, 4, 17]
TOL = 1e-10


def _prompts(lengths=LENGTHS, seed=7):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g) for n in lengths]


def _padded(prompts, width, pad):
    """A (B, width) tensor of the prompts, right-padded by ``pad(row, n_pads)`` (a tensor of pad tokens)."""
    out = torch.empty(len(prompts), width, dtype=torch.long)
    for r, p in enumerate(prompts):
        out[r, :len(p)] = p
        out[r, len(p):] = pad(r, width - len(p))
    return out


def _same_row(ragged, alone, r: int, what: str) -> None:
    """Row ``r`` of a ragged batch's state equals the state of that prompt decoded alone (batch 1): tensors to
    1e-10 (a growing cache holds the row's own entries first, zeros after), counts and positions exactly."""
    if isinstance(alone, torch.Tensor):
        row = ragged[r:r + 1]
        own = tuple(slice(0, n) for n in alone.shape)
        assert all(a >= b for a, b in zip(row.shape, alone.shape)), f"{what}: {tuple(row.shape)} {tuple(alone.shape)}"
        if alone.is_floating_point() or alone.is_complex():
            check(row[own], alone, TOL, what)
        else:
            assert torch.equal(row[own].cpu(), alone.cpu()), what
        rest = torch.ones(row.shape, dtype=torch.bool)
        rest[own] = False
        assert (row[rest] == 0).all(), f"{what}: entries past the row's own are not zeros"
    elif isinstance(alone, dict):
        assert ragged.keys() == alone.keys(), what
        for k in alone:
            _same_row(ragged[k], alone[k], r, f"{what}[{k!r}]")
    elif isinstance(alone, (tuple, list)):
        assert len(ragged) == len(alone), what
        for i, (a, b) in enumerate(zip(ragged, alone)):
            _same_row(a, b, r, f"{what}[{i}]")
    else:                                                  # a position or count: one per row in the ragged state
        value = int(ragged[r]) if isinstance(ragged, torch.Tensor) else ragged
        assert value == alone, f"{what}: {value} != {alone}"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_ragged_prompts_decode_as_each_prompt_alone(name):
    model, prompts = _lm(name), _prompts()
    B = len(prompts)
    nxt = torch.randint(0, VOCAB, (B, 3), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits, state = model.prefill([p.tolist() for p in prompts])
        assert logits.shape == (B, max(LENGTHS), VOCAB) and state["t"].tolist() == LENGTHS
        after_prefill = state
        more, state = model.prefill(nxt[:, :2], state)            # a prefill from the ragged state
        last, state = model.step(nxt[:, 2], state)                 # and a step
        for r, p in enumerate(prompts):
            n = len(p)
            ref, s = model.prefill(p[None])
            check(logits[r, :n], ref[0], TOL, f"{name} row {r} ({n} tokens): prefill logits")
            assert (logits[r, n:] == 0).all(), f"{name} row {r}: logits of pads are zeros"
            _same_row(after_prefill["blocks"], s["blocks"], r, f"{name} row {r} state after the prompt")
            ref_more, s = model.prefill(nxt[r:r + 1, :2], s)
            ref_last, s = model.step(nxt[r:r + 1, 2], s)
            check(more[r], ref_more[0], TOL, f"{name} row {r}: logits of the next two tokens")
            check(last[r], ref_last[0], TOL, f"{name} row {r}: logits of a step")
            _same_row(state["blocks"], s["blocks"], r, f"{name} row {r} final state")
        assert state["t"].tolist() == [n + 3 for n in LENGTHS]


VARIANTS = [("linear-transformer", dict(short_conv=3)), ("linear-transformer", dict(positions="learned", max_len=40)),
            ("linear-transformer", dict(feature_map="taylor")), ("gateloop", dict(short_conv=3)),
            ("lrnn", dict(short_conv=4)), ("causalrn", dict(pre_norm="none", mode="linear")),
            ("transformer", dict(positions="sinusoidal", max_len=None)), ("lightnet", dict(decay="multiplicative")),
            ("lightnet", dict(share=False)), ("gated-deltanet", dict(short_conv=0, use_gate=True))]


@pytest.mark.parametrize("name,config", VARIANTS, ids=[f"{n}-{'-'.join(map(str, c.values()))}" for n, c in VARIANTS])
def test_ragged_variants(name, config):
    """Convolution buffers, learned and sinusoidal positions, other feature maps, decays and counts."""
    model, prompts = _lm(name, **config), _prompts([6, 1, 14, 3], seed=9)
    with torch.no_grad():
        logits, state = model.prefill([p.tolist() for p in prompts])
        last, state = model.step(torch.tensor([1, 2, 3, 4]), state)
        for r, p in enumerate(prompts):
            ref, s = model.prefill(p[None])
            ref_last, s = model.step(torch.tensor([r + 1]), s)
            check(logits[r, :len(p)], ref[0], TOL, f"{name} {config} row {r}: prefill")
            check(last[r], ref_last[0], TOL, f"{name} {config} row {r}: step")
            _same_row(state["blocks"], s["blocks"], r, f"{name} {config} row {r} state")


@pytest.mark.parametrize("name", ["transformer", "lightnet", "deltanet"])
def test_ragged_prompts_in_float32(name):
    model, prompts = _lm(name, dtype=torch.float32), _prompts([2, 11, 5, 8])
    with torch.no_grad():
        logits, state = model.prefill([p.tolist() for p in prompts])
        for r, p in enumerate(prompts):
            check(logits[r, :len(p)], model.prefill(p[None])[0][0], 1e-5, f"{name} float32 row {r}")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_pads_change_nothing(name):
    """Pad values anywhere in the padding (0, the last id, random ids, -1, ids past the vocabulary) give the same
    logits and states, bit for bit, as the list of prompts; a masked step keeps inactive rows' states exactly."""
    model, prompts = _lm(name), _prompts([5, 1, 12, 3])
    lengths = [len(p) for p in prompts]
    g = torch.Generator().manual_seed(11)
    pads = [lambda r, n: 0, lambda r, n: VOCAB - 1, lambda r, n: torch.randint(0, VOCAB, (n,), generator=g),
            lambda r, n: torch.tensor([-1, 10 ** 6, 3] * n)[:n]]
    with torch.no_grad():
        ref, s_ref = model.prefill([p.tolist() for p in prompts])
        for i, pad in enumerate(pads):
            tokens = _padded(prompts, 14, pad)                    # wider than the longest prompt too
            out, s = model.prefill(tokens, lengths=lengths)
            assert torch.equal(out, ref), f"{name} pad {i}: logits"
            assert torch.equal(s["t"], s_ref["t"])
            for a, b in zip(state_tensors(s["blocks"]), state_tensors(s_ref["blocks"])):
                assert torch.equal(a, b), f"{name} pad {i}: state"
        active = torch.tensor([True, False, True, False])
        _, s_masked = model.step(torch.tensor([1, -5, 2, 10 ** 6]), s_ref, active=active)
        assert s_masked["t"].tolist() == [6, 1, 13, 3]
        for a, b in zip(state_tensors(s_masked["blocks"]), state_tensors(s_ref["blocks"])):
            own = tuple(slice(0, n) for n in b.shape)          # a cache may have grown for the active rows
            assert torch.equal(a[own][~active], b[~active]), f"{name}: an inactive row's state moved"
            grown = a.clone()
            grown[own] = 0
            assert (grown[~active] == 0).all(), f"{name}: an inactive row's cache grew"


def test_equal_lengths_keep_the_old_path():
    """lengths all equal to the width (or a list of equal prompts) is the plain parallel prefill, bit for bit."""
    model = _lm("lightnet")
    x = torch.randint(0, VOCAB, (3, 6))
    with torch.no_grad():
        ref, s_ref = model.prefill(x)
        for out, s in (model.prefill(x, lengths=[6, 6, 6]), model.prefill(x.tolist())):
            assert torch.equal(out, ref) and s["t"] == 6
            for a, b in zip(state_tensors(s["blocks"]), state_tensors(s_ref["blocks"])):
                assert torch.equal(a, b)


def test_bad_lengths_are_refused():
    model = _lm("linear-causalrn")
    x = torch.randint(0, VOCAB, (3, 6))
    for bad in ([2, -1, 3], [2, 0, 3], [2, 7, 3], [2, 3], [2, 3, 4, 5], [2, 3.0, 4], [2, True, 3], "236",
                torch.tensor([2.0, 3.0, 4.0]), torch.tensor([[2, 3, 4]]), 3):
        with pytest.raises(ValueError, match="lengths"):
            model.prefill(x, lengths=bad)
    with pytest.raises(ValueError, match="lengths"):
        model.prefill([[1, 2], [3]], lengths=[2, 1])
    with pytest.raises(ValueError, match="tokens: prompt 1 is empty"):
        model.prefill([[1, 2], []])
    with pytest.raises(ValueError, match="tokens"):
        model.prefill([[1, 2], [VOCAB]])                         # an id outside the vocabulary
    with pytest.raises(ValueError, match="tokens"):
        model.prefill(x.masked_fill(x == x[0, 0], VOCAB), lengths=[6, 6, 6])
    with pytest.raises(ValueError, match="active"):
        model.step(x[:, 0], model.init_state(3), active=torch.tensor([1, 0, 1]))
    with pytest.raises(ValueError, match="lengths"):
        seqlab.generate(model, x, 2, lengths=[1, 2])
    with pytest.raises(ValueError, match="max_len"):
        _lm("transformer", max_len=40).prefill(torch.zeros(2, 45, dtype=torch.long), lengths=[41, 45])


@pytest.mark.parametrize("name", ["transformer", "lightnet", "linear-causalrn", "gated-deltanet"])
def test_generate_takes_prompts_of_different_lengths(name):
    """Greedy continuations of a ragged batch are each prompt's own (the same logits); a list of prompts gives a
    list of rows, as does a padded tensor with lengths=."""
    model, prompts = _lm(name), _prompts([3, 1, 8, 5])
    out = seqlab.generate(model, [p.tolist() for p in prompts], 4, temperature=0)
    padded = seqlab.generate(model, _padded(prompts, 9, lambda r, n: -1), 4, lengths=[3, 1, 8, 5], temperature=0)
    assert isinstance(out, list) and len(out) == 4
    for r, p in enumerate(prompts):
        alone = seqlab.generate(model, p[None], 4, temperature=0)[0]
        assert torch.equal(out[r], alone) and torch.equal(padded[r], alone), f"{name} row {r}"


def test_generate_text_prompts_and_the_rerun_path():
    torch.manual_seed(0)
    model = models.build("linear-causalrn", vocab_size=128, d_model=16, n_layers=2).double()
    texts = seqlab.generate(model, ["To be", "a", "Three years"], 6, temperature=0)
    assert [t[:-6] for t in texts] == ["To be", "a", "Three years"]
    assert texts == [seqlab.generate(model, p, 6, temperature=0) for p in ["To be", "a", "Three years"]]
    rerun = seqlab.generate(model, ["To be", "a", "Three years"], 6, temperature=0, streaming=False)
    assert rerun == texts
    fst = models.build("fst", vocab_size=20, seq_len=12, d_model=8, n_layers=1)
    rows = seqlab.generate(fst, [[1, 2, 3], [4]], 5, temperature=0)
    assert [len(r) for r in rows] == [8, 6]
    assert torch.equal(rows[1], seqlab.generate(fst, torch.tensor([[4]]), 5, temperature=0)[0])


def test_cli_generates_from_several_prompts(monkeypatch, capsys):
    from seqlab import train
    from seqlab.__main__ import main

    torch.manual_seed(0)
    model = models.build("linear-causalrn", vocab_size=128, d_model=16, n_layers=1).eval()
    model.run = {"task": "text"}
    monkeypatch.setattr(train, "load_model", lambda path, device=None: model)
    assert main(["generate", "ckpt.pt", "--prompt", "the ", "--prompt", "a", "--max-new-tokens", "3",
                 "--temperature", "0", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    first, second = out.split("\n---\n")
    assert first == seqlab.generate(model, "the ", 3, temperature=0)
    assert second.rstrip("\n") == seqlab.generate(model, "a", 3, temperature=0)
    assert main(["generate", "ckpt.pt", "--ids", "116", "104", "--ids", "97", "--max-new-tokens", "2",
                 "--temperature", "0", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [len(line.split()) for line in lines] == [4, 3]
    assert lines[1].split()[:1] == ["97"]
    alone = seqlab.generate(model, torch.tensor([116, 104]), 2, temperature=0)[0]
    assert lines[0] == " ".join(map(str, alone.tolist()))


def test_top_p_keeps_the_nucleus():
    """top_p keeps the most likely tokens whose probabilities first reach it (the first always stays)."""
    from seqlab.sampling import sample_next

    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0], [2.0, 2.0, 2.0, 2.0]])      # row 0: p = .005 .727 .268 .002
    g = torch.Generator().manual_seed(0)
    draw = lambda p: torch.stack([sample_next(logits, temperature=1.0, top_k=None, top_p=p, generator=g)  # noqa: E731
                                  for _ in range(300)])
    for p, row0, n_row1 in ((0.5, {1}, 2), (0.9, {1, 2}, 4), (1e-9, {1}, 1)):    # row 1: ties, any n of them
        d = draw(p)
        assert set(d[:, 0].tolist()) == row0 and len(set(d[:, 1].tolist())) == n_row1, p
    assert set(draw(1.0)[:, 0].tolist()) >= {1, 2}
    model = _lm("linear-causalrn")
    for bad in (0, 1.5, -0.1, "0.5", True):
        with pytest.raises(ValueError, match="top_p"):
            seqlab.generate(model, torch.tensor([1, 2]), 2, top_p=bad)
    a = seqlab.generate(model, [[1, 2], [3]], 5, top_p=0.8, seed=1)
    assert a[0][:2].tolist() == [1, 2] and len(a[1]) == 6
