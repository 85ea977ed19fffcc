"""Sampling text from a causal language model: ``seqlab.generate(model, prompt, ...)``.

The function lives here, in ``seqlab.sampling``, and is exported as ``seqlab.generate``.

Decoding protocol (``seqlab.models.decoding``): every causal language model but the FST defines

    state = model.init_state(batch)                    # before the first token
    logits, state = model.prefill(tokens, state=None)  # a prompt (B, P) in one parallel pass
    logits_t, state = model.step(tokens_t, state)      # tokens_t: (B,) -> logits_t: (B, vocab_size)

(O(1) work per token for the linear families; the Transformer's KV cache and the quadratic CausalRN
keep every past key). ``generate`` reads the prompt with ``prefill`` and each new token with ``step``,
and otherwise reruns the model's parallel forward on the whole context for every new token (the way
the authors' code samples), truncated to the model's ``max_len``. Both paths sample the same tokens
for the same ``seed`` because they compute the same logits (in float64; float32 rounding can flip a
sampled token where two are nearly equally likely).
"""
from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["generate", "sample_next", "supports_streaming"]


def supports_streaming(model: nn.Module) -> bool:
    """Whether ``model`` has the decoding protocol (the FST declares why it has none: ``NO_DECODING``)."""
    return (getattr(model, "NO_DECODING", None) is None and callable(getattr(model, "init_state", None))
            and callable(getattr(model, "step", None)))


def _fits(model: nn.Module, length: int) -> bool:
    """Whether a context of ``length`` tokens fits the model's learned positions (past them, the rerun path
    slides a window of ``max_len`` tokens, which a recurrent state cannot do)."""
    max_len = getattr(model, "max_len", None)
    return max_len is None or length <= max_len


def sample_next(logits: torch.Tensor, *, temperature: float, top_k: int | None, generator: torch.Generator) -> torch.Tensor:
    """One token per row of ``logits`` (B, V): greedy at ``temperature == 0``, else softmax sampling
    of ``logits / temperature`` restricted to the ``top_k`` largest."""
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)


def _prompt_tokens(prompt, model) -> tuple[torch.Tensor, bool]:
    if isinstance(prompt, str):
        from seqlab.tasks.text import VOCAB_SIZE, encode

        if getattr(model, "vocab_size", VOCAB_SIZE) < VOCAB_SIZE:
            raise ValueError(f"prompt: a string prompt is ASCII-encoded (128 tokens) but the model's vocab_size is "
                             f"{model.vocab_size}; pass token ids instead")
        ids = encode(prompt)
        if not ids:
            raise ValueError("prompt: expected at least one ASCII character")
        return torch.tensor([ids], dtype=torch.long), True
    tokens = torch.as_tensor(prompt, dtype=torch.long)
    if tokens.dim() == 1:
        tokens = tokens[None]
    if tokens.dim() != 2 or tokens.shape[1] < 1:
        raise ValueError(f"prompt: expected a string or token ids of shape (L,) or (B, L) with L >= 1, got {tuple(tokens.shape)}")
    return tokens, False


@torch.no_grad()
def generate(model: nn.Module, prompt, max_new_tokens: int = 200, *, temperature: float = 1.0, top_k: int | None = None,
             seed: int = 0, streaming: bool | None = None):
    """Continue ``prompt`` by ``max_new_tokens`` sampled tokens.

    ``prompt``: a string (ASCII-encoded, the ``text`` task's tokenizer; the result is a string with
    the prompt included) or token ids ``(L,)`` / ``(B, L)`` (the result is ids ``(B, L + new)``).
    ``temperature=0`` is greedy decoding; ``top_k`` keeps the k most likely tokens; ``seed`` makes
    the samples reproducible. ``streaming``: ``None`` uses the model's step when it has one and the
    whole output fits its ``max_len`` (else the rerun path, which slides a window).
    """
    if getattr(model, "num_classes", None) is not None:
        raise ValueError("model: generate needs a causal language model (built with num_classes=None)")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens: expected a non-negative int, got {max_new_tokens!r}")
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"temperature: expected a number >= 0, got {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k: expected None or a positive int, got {top_k!r}")
    tokens, is_text = _prompt_tokens(prompt, model)
    use_step = supports_streaming(model) and _fits(model, tokens.shape[1] + max_new_tokens) if streaming is None \
        else streaming
    if use_step and not supports_streaming(model):
        why = getattr(model, "NO_DECODING", None) or "it has no init_state/prefill/step"
        raise ValueError(f"streaming=True: {type(model).__name__} has no decoding protocol: {why}")
    device = next(model.parameters()).device
    tokens = tokens.to(device)
    generator = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        new = (_generate_streaming if use_step else _generate_rerun)(
            model, tokens, max_new_tokens, temperature=temperature, top_k=top_k, generator=generator)
    finally:
        model.train(was_training)
    out = torch.cat([tokens, new], dim=1)
    if is_text:
        from seqlab.tasks.text import decode

        return decode(out[0])
    return out


def _generate_streaming(model, tokens, n, **sample_kw):
    if callable(getattr(model, "prefill", None)):      # the prompt in one parallel pass
        logits, state = model.prefill(tokens)
        logits = logits[:, -1]
    else:
        state, logits = model.init_state(tokens.shape[0]), None
        for t in range(tokens.shape[1]):                # the prompt one token at a time
            logits, state = model.step(tokens[:, t], state)
    out = []
    for _ in range(n):
        nxt = sample_next(logits, **sample_kw)
        out.append(nxt)
        if len(out) < n:
            logits, state = model.step(nxt, state)
    return torch.stack(out, 1) if out else tokens[:, :0]


def _generate_rerun(model, tokens, n, **sample_kw):
    # the context the model can read: its longest input (a fixed-length model such as the FST pads a
    # shorter one itself, after the tokens, so its last position is still the last real token)
    max_len = getattr(model, "max_len", None) or getattr(model, "seq_len", None)
    context = tokens
    out = []
    for _ in range(n):
        window = context[:, -max_len:] if max_len else context
        logits = model(window)[:, -1]
        nxt = sample_next(logits, **sample_kw)
        out.append(nxt)
        context = torch.cat([context, nxt[:, None]], dim=1)
    return torch.stack(out, 1) if out else tokens[:, :0]
