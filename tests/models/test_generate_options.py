"""generate's stop tokens, per-row seeds and on_token callback, and the CLI's --stop, --seed and --stream
(sampling as users expect it)."""
import pytest
import torch

import seqlab
from seqlab import models
from seqlab.sampling import sample_next


def _lm(name="linear-causalrn", vocab=20, **kw):
    torch.manual_seed(0)
    extra = {"n_heads": 2} if name in ("transformer", "lightnet") else {}
    return models.build(name, vocab_size=vocab, d_model=8, n_layers=2, **extra, **kw).double()


def _prompts(lengths, vocab=20, seed=5):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g) for n in lengths]


@pytest.mark.parametrize("name", ["linear-causalrn", "transformer", "gated-deltanet"])
@pytest.mark.parametrize("streaming", [None, False])
def test_per_row_seeds_equal_each_prompt_alone(name, streaming):
    """A batch of 3 prompts with seeds [1, 2, 3] samples, row by row, what each prompt samples alone with its seed:
    a rectangular batch, a ragged one, and (rerun path) both again."""
    model = _lm(name)
    kw = dict(temperature=1.0, top_k=15, streaming=streaming)
    rect = torch.stack(_prompts([4, 4, 4]))
    out = seqlab.generate(model, rect, 10, seed=[1, 2, 3], **kw)
    assert out.shape == (3, 14)
    for r, s in enumerate([1, 2, 3]):
        assert torch.equal(out[r], seqlab.generate(model, rect[r], 10, seed=s, **kw)[0]), f"row {r}"
    ragged = _prompts([3, 1, 6])
    rows = seqlab.generate(model, [p.tolist() for p in ragged], 10, seed=[1, 2, 3], **kw)
    for r, s in enumerate([1, 2, 3]):
        assert torch.equal(rows[r], seqlab.generate(model, ragged[r], 10, seed=s, **kw)[0]), f"ragged row {r}"
    assert not torch.equal(rows[0][3:], seqlab.generate(model, ragged[0], 10, seed=2, **kw)[0][3:])


def test_per_row_seeds_for_text_prompts_and_an_int_seed_as_before():
    torch.manual_seed(0)
    model = models.build("linear-causalrn", vocab_size=128, d_model=16, n_layers=1).double()
    texts = seqlab.generate(model, ["To be", "a", "Three"], 12, seed=[7, 8, 9])
    assert texts == [seqlab.generate(model, p, 12, seed=s) for p, s in zip(["To be", "a", "Three"], [7, 8, 9])]
    assert seqlab.generate(model, "To be", 12, seed=[7]) == seqlab.generate(model, "To be", 12, seed=7)
    # an int seed: one generator for the batch, exactly as before (the rows draw from it in turn)
    x = torch.randint(0, 128, (2, 3))
    g = torch.Generator().manual_seed(4)
    logits, state = model.prefill(x)
    ref = []
    for i in range(5):
        nxt = sample_next(logits[:, -1] if i == 0 else logits, temperature=1.0, top_k=None, generator=g)
        ref.append(nxt)
        logits, state = model.step(nxt, state)
    assert torch.equal(seqlab.generate(model, x, 5, seed=4)[:, 3:], torch.stack(ref, 1))


@pytest.mark.parametrize("streaming", [None, False])
def test_stop_tokens_end_each_row_and_are_kept(streaming):
    """Greedy rows: each row is its unstopped continuation cut just after its first stop token; generation ends
    when every row stopped."""
    model = _lm("transformer", max_len=64)
    prompts = _prompts([2, 5, 3, 1])
    free = seqlab.generate(model, [p.tolist() for p in prompts], 12, temperature=0, streaming=streaming)
    # a stop id that some rows emit and others do not
    new = [row[len(p):].tolist() for row, p in zip(free, prompts)]
    stop = next(t for row in new for t in row)
    rows = seqlab.generate(model, [p.tolist() for p in prompts], 12, temperature=0, stop=stop, streaming=streaming)
    assert isinstance(rows, list) and len(rows) == 4
    for r, p in enumerate(prompts):
        cut = new[r].index(stop) + 1 if stop in new[r] else 12
        assert rows[r].tolist() == p.tolist() + new[r][:cut], f"row {r}"
    assert any(len(row) < len(p) + 12 for row, p in zip(rows, prompts))
    # a rectangular batch with stop: a list of 1-D tensors, each its own length
    rect = torch.stack(_prompts([3, 3, 3], seed=2))
    free = seqlab.generate(model, rect, 8, temperature=0, streaming=streaming)
    stops = [free[0, 3].item(), free[1, 5].item()]
    rows = seqlab.generate(model, rect, 8, temperature=0, stop=stops, streaming=streaming)
    assert isinstance(rows, list) and all(row.dim() == 1 for row in rows)
    for r in range(3):
        new = free[r, 3:].tolist()
        cut = min([new.index(s) + 1 for s in stops if s in new], default=8)
        assert rows[r].tolist() == free[r, :3 + cut].tolist(), f"rect row {r}"
    single = seqlab.generate(model, rect[0], 8, temperature=0, stop=stops[0], streaming=streaming)
    assert isinstance(single, list) and single[0].tolist() == rows[0].tolist() and len(single[0]) == 4


def test_generation_ends_when_every_row_stopped_and_stopped_rows_are_inactive(monkeypatch):
    model = _lm("lightnet")
    steps = []
    real_step = model.step
    monkeypatch.setattr(model, "step", lambda t, s, **k: steps.append(k.get("active")) or real_step(t, s, **k))
    x = torch.stack(_prompts([4, 4], seed=3))
    free = seqlab.generate(model, x, 10, temperature=0)
    steps.clear()
    a, b = free[0, 5].item(), free[1, 7].item()             # row 0 stops at its 2nd new token, row 1 at its 4th
    rows = seqlab.generate(model, x, 10, temperature=0, stop=[a, b])
    ends = [min([free[r, 4:].tolist().index(s) + 1 for s in (a, b) if s in free[r, 4:].tolist()]) for r in (0, 1)]
    assert [len(row) - 4 for row in rows] == ends
    assert len(steps) == max(ends) - 1, "no step after every row stopped"
    for i, active in enumerate(steps):                      # step i reads the (i+1)-th new token
        assert active.tolist() == [i + 1 < ends[0], i + 1 < ends[1]]
    # with sampling and per-row seeds a stopped row is its own stopped run alone
    x3 = torch.stack(_prompts([3, 3, 3], seed=8))
    kw = dict(temperature=1.5, stop=[1, 2, 3, 4, 5])
    rows = seqlab.generate(model, x3, 15, seed=[4, 5, 6], **kw)
    for r, s in enumerate([4, 5, 6]):
        assert torch.equal(rows[r], seqlab.generate(model, x3[r], 15, seed=s, **kw)[0]), f"row {r}"


def test_stop_strings_for_text_prompts():
    torch.manual_seed(0)
    model = models.build("linear-causalrn", vocab_size=128, d_model=16, n_layers=1).double()
    free = seqlab.generate(model, "To be", 30, seed=1)
    char = free[7]
    out = seqlab.generate(model, "To be", 30, seed=1, stop=char)
    assert isinstance(out, str) and out == free[:free.index(char, 5) + 1]
    assert seqlab.generate(model, "To be", 30, seed=1, stop=[char, "\n"]) == \
        seqlab.generate(model, "To be", 30, seed=1, stop=[ord(char), 10])
    texts = seqlab.generate(model, ["To be", "a"], 30, seed=[1, 2], stop=char)
    assert texts[0] == out and texts[1] == seqlab.generate(model, "a", 30, seed=2, stop=char)


def test_on_token_is_called_in_order_for_every_new_token():
    model = _lm("gated-deltanet")
    prompts = _prompts([2, 4, 1])
    calls = []
    rows = seqlab.generate(model, [p.tolist() for p in prompts], 6, seed=[1, 2, 3],
                           on_token=lambda *a: calls.append(a))
    assert len(calls) == 18 and all(isinstance(v, int) for c in calls for v in c)
    assert [c[0] for c in calls] == [0, 1, 2] * 6                     # step by step, rows in order
    for row, position, token in calls:
        assert rows[row][position].item() == token
    assert sorted((c[0], c[1]) for c in calls) == [(r, len(p) + i) for r, p in enumerate(prompts) for i in range(6)]
    # with stop tokens: nothing after a row's stop token; a string prompt: one row, 0
    calls.clear()
    rows = seqlab.generate(model, [p.tolist() for p in prompts], 6, temperature=2.0, seed=[1, 2, 3],
                           stop=list(range(8)), on_token=lambda *a: calls.append(a))
    assert len(calls) == sum(len(row) - len(p) for row, p in zip(rows, prompts))
    for row, position, token in calls:
        assert rows[row][position].item() == token
    torch.manual_seed(0)
    text_model = models.build("linear-causalrn", vocab_size=128, d_model=8, n_layers=1)
    chars = []
    out = seqlab.generate(text_model, "ab", 5, on_token=lambda r, p, t: chars.append((r, p, chr(t))))
    assert [c[2] for c in chars] == list(out[2:]) and [c[:2] for c in chars] == [(0, p) for p in range(2, 7)]
    chars.clear()                                                      # the rerun path calls it too
    assert seqlab.generate(text_model, "ab", 5, streaming=False, on_token=lambda r, p, t: chars.append(t)) == out
    assert "".join(map(chr, chars)) == out[2:]


def test_bad_arguments_name_themselves():
    model = _lm()
    x = torch.randint(0, 20, (3, 4))
    for bad in ([1, 2], [1, 2, 3, 4], [1, 2.0, 3], [1, True, 3]):
        with pytest.raises(ValueError, match="seed"):
            seqlab.generate(model, x, 2, seed=bad)
    with pytest.raises(ValueError, match="seed"):
        seqlab.generate(model, [[1, 2], [3]], 2, seed=[1])
    for bad in (20, -1, [3, 20], [1.5], [], "ab", [None]):
        with pytest.raises(ValueError, match="stop"):
            seqlab.generate(model, x, 2, stop=bad)
    with pytest.raises(ValueError, match="stop: a string stop is ASCII-encoded"):
        seqlab.generate(model, x, 2, stop="a")                          # vocabulary 20: no characters
    for bad in (1, "print", [print]):
        with pytest.raises(ValueError, match="on_token"):
            seqlab.generate(model, x, 2, on_token=bad)


def test_cli_stop_seed_and_stream(monkeypatch, capsys):
    from seqlab import train
    from seqlab.__main__ import main

    torch.manual_seed(0)
    model = models.build("linear-causalrn", vocab_size=128, d_model=16, n_layers=1).eval()
    model.run = {"task": "text"}
    monkeypatch.setattr(train, "load_model", lambda path, device=None: model)
    base = ["generate", "ckpt.pt", "--max-new-tokens", "20", "--device", "cpu"]
    free = seqlab.generate(model, "To be", 20, seed=3)
    char = free[8]
    assert main(base + ["--prompt", "To be", "--seed", "3", "--stop", char]) == 0
    stopped = capsys.readouterr().out
    assert stopped == seqlab.generate(model, "To be", 20, seed=3, stop=char) + "\n"
    assert stopped.rstrip("\n").endswith(char) and len(stopped) < len(free) + 1
    assert main(base + ["--prompt", "To be", "--seed", "3", "--stop", char, "--stream"]) == 0
    assert capsys.readouterr().out == stopped                           # streamed: the same text
    assert main(base + ["--prompt", "To be", "--seed", "3", "--stop", "\\n", str(ord(char))]) == 0
    assert capsys.readouterr().out == stopped
    assert main(base + ["--prompt", "To be", "--prompt", "a", "--seed", "3", "4"]) == 0
    first, second = capsys.readouterr().out.split("\n---\n")
    assert first == free and second.rstrip("\n") == seqlab.generate(model, "a", 20, seed=4)
    assert main(base + ["--ids", "116", "104", "--ids", "97", "--seed", "1", "2", "--stop", "101", "32"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    for line, ids, s in zip(lines, ([116, 104], [97]), (1, 2)):
        assert line.split() == [str(t) for t in seqlab.generate(model, torch.tensor(ids), 20, seed=s,
                                                                stop=[101, 32])[0].tolist()]
    assert main(base + ["--ids", "116", "104", "--seed", "1", "--stream"]) == 0
    assert capsys.readouterr().out.split() == [str(t) for t in seqlab.generate(model, torch.tensor([116, 104]), 20,
                                                                               seed=1)[0].tolist()]
    for bad in (["--prompt", "a", "--prompt", "b", "--seed", "1", "2", "3"], ["--prompt", "a", "--stop", "xy"],
                ["--ids", "1", "--stop", "z"], ["--ids", "1", "--ids", "2", "--stream"]):
        assert main(base + bad) == 2
        assert "error: --s" in capsys.readouterr().err
