"""seqlab.generate: streaming decoding equals rerunning the forward; sampling options behave."""
import pytest
import torch

import seqlab
from seqlab import models
from seqlab.sampling import sample_next, supports_streaming


def _lm(name, **kw):
    torch.manual_seed(0)
    return models.build(name, vocab_size=128, d_model=16, n_layers=2, **kw)


@pytest.mark.parametrize("name", ["linear-causalrn", "causalrn"])
def test_streaming_and_rerun_sample_the_same_text(name):
    model = _lm(name)
    assert supports_streaming(model)
    a = seqlab.generate(model, "Three years later,", 40, temperature=1.0, top_k=20, seed=3)
    b = seqlab.generate(model, "Three years later,", 40, temperature=1.0, top_k=20, seed=3, streaming=False)
    assert a == b and a.startswith("Three years later,") and len(a) == len("Three years later,") + 40
    c = seqlab.generate(model, "Three years later,", 40, temperature=1.0, top_k=20, seed=4)
    assert c != a                                   # another seed, another sample


def test_token_prompts_greedy_and_batch():
    model = _lm("linear-causalrn")
    prompt = torch.randint(0, 128, (3, 5))
    out = seqlab.generate(model, prompt, 7, temperature=0)
    assert out.shape == (3, 12) and torch.equal(out[:, :5], prompt)
    # greedy: each new token is the argmax of the forward at the previous position
    logits = model(out[:, :-1])
    assert torch.equal(out[:, 5:], logits[:, 4:].argmax(-1))


def test_sample_next_top_k_and_temperature():
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0]])
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_next(logits, temperature=1.0, top_k=2, generator=g) for _ in range(200)])
    assert set(draws.flatten().tolist()) <= {1, 2}
    assert sample_next(logits, temperature=0, top_k=None, generator=g).item() == 1


@pytest.mark.parametrize("name", ["transformer", "linear-transformer"])
def test_generate_works_for_baselines(name):
    model = models.build(name, vocab_size=128)
    out = seqlab.generate(model, "abc", 5, seed=0)
    assert isinstance(out, str) and out.startswith("abc") and len(out) == 8


def test_errors():
    model = _lm("linear-causalrn")
    with pytest.raises(ValueError, match="max_new_tokens"):
        seqlab.generate(model, "a", -1)
    with pytest.raises(ValueError, match="temperature"):
        seqlab.generate(model, "a", 2, temperature=-1)
    with pytest.raises(ValueError, match="top_k"):
        seqlab.generate(model, "a", 2, top_k=0)
    small = models.build("linear-causalrn", vocab_size=10, d_model=8, n_layers=1)
    with pytest.raises(ValueError, match="ASCII"):
        seqlab.generate(small, "abc", 2)
    clf = models.build("birn", vocab_size=10, num_classes=3, d_model=8, n_layers=1)
    with pytest.raises(ValueError, match="causal language model"):
        seqlab.generate(clf, torch.tensor([1, 2]), 2)


def test_fst_continues_a_prompt_shorter_than_its_seq_len():
    """The causal FST pads a short input itself (after the tokens), so generate feeds it any prompt up to
    seq_len and, past it, the last seq_len tokens; greedy tokens are the argmax of its own forward."""
    torch.manual_seed(0)
    model = models.build("fst", vocab_size=20, seq_len=12, d_model=16, n_layers=2)
    prompt = torch.randint(0, 20, (2, 3))
    out = seqlab.generate(model, prompt, 14, temperature=0)
    assert out.shape == (2, 17) and torch.equal(out[:, :3], prompt)
    for t in range(3, 17):
        window = out[:, max(0, t - 12):t]
        assert torch.equal(out[:, t], model(window)[:, -1].argmax(-1)), f"token {t}"


def test_sampling_module_and_the_generate_function_do_not_collide():
    import seqlab.sampling

    assert callable(seqlab.generate) and seqlab.generate is seqlab.sampling.generate
    assert type(seqlab.sampling) is type(pytest)          # a plain module, no class swapped in


@pytest.mark.parametrize("name", ["transformer", "linear-transformer", "causalrn", "linear-causalrn", "lrnn",
                                  "lightnet", "gateloop", "deltanet", "gated-deltanet"])
def test_every_lm_decodes_with_prefill_and_step_like_the_rerun_path(name, monkeypatch):
    """Every causal LM streams by default (prompt by prefill, then step) and samples the rerun path's tokens
    (float64: float32 rounding can flip a token where two are nearly equally likely)."""
    torch.manual_seed(0)
    extra = {"n_heads": 2} if name in ("transformer", "linear-transformer", "lightnet") else {}
    model = models.build(name, vocab_size=20, d_model=8, n_layers=2, **extra).double()
    calls = []
    real_prefill = model.prefill
    monkeypatch.setattr(model, "prefill", lambda *a, **k: calls.append(a[0].shape) or real_prefill(*a, **k))
    assert supports_streaming(model)
    prompt = torch.randint(0, 20, (2, 5))
    a = seqlab.generate(model, prompt, 12, temperature=1.0, seed=3)
    assert calls == [(2, 5)], "the prompt is read by one prefill"
    b = seqlab.generate(model, prompt, 12, temperature=1.0, seed=3, streaming=False)
    assert torch.equal(a, b)


def test_the_fst_cannot_stream_and_says_why():
    model = models.build("fst", vocab_size=20, d_model=8, n_layers=1, seq_len=12)
    assert not supports_streaming(model)
    with pytest.raises(ValueError, match="no decoding protocol: the FST cannot decode with a state: its twisted"):
        seqlab.generate(model, torch.randint(0, 20, (1, 4)), 3, streaming=True)
    for method in ("init_state", "step", "prefill"):
        with pytest.raises(NotImplementedError, match="every output depends on the whole fixed-length sequence"):
            getattr(model, method)(1)
    assert seqlab.generate(model, torch.randint(0, 20, (1, 4)), 3).shape == (1, 7)      # by rerunning


def test_a_context_past_max_len_falls_back_to_the_sliding_window():
    """The Transformer's learned positions end at max_len: past it generate reruns a window, as before."""
    torch.manual_seed(0)
    model = models.build("transformer", vocab_size=20, d_model=8, n_layers=1, max_len=8)
    prompt = torch.randint(0, 20, (1, 5))
    out = seqlab.generate(model, prompt, 6, temperature=0)
    assert out.shape == (1, 11)
    for t in range(5, 11):
        assert torch.equal(out[:, t], model(out[:, max(0, t - 8):t])[:, -1].argmax(-1)), f"token {t}"
