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

Prompts of different lengths (a list of prompts, or a padded tensor with ``lengths=``) decode together:
one ragged ``prefill`` and batched steps, every row at its own position; the rerun path reads them one at a
time. Greedy rows equal each prompt's own continuation; sampled rows draw from one generator for the batch.
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


def sample_next(logits: torch.Tensor, *, temperature: float, top_k: int | None, generator: torch.Generator,
                top_p: float | None = None) -> torch.Tensor:
    """One token per row of ``logits`` (B, V): greedy at ``temperature == 0``, else softmax sampling
    of ``logits / temperature`` restricted to the ``top_k`` largest, then to the nucleus of ``top_p``: the
    most likely tokens whose probabilities first sum to ``top_p`` or more (Holtzman et al. 2020; the most
    likely token always stays)."""
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        ranked, order = logits.sort(dim=-1, descending=True)
        probs = torch.softmax(ranked, dim=-1)
        before = probs.cumsum(-1) - probs                  # the mass of the more likely tokens
        ranked = ranked.masked_fill(before >= top_p, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, ranked)
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)


def _encoded(text: str, model, what: str = "prompt") -> list[int]:
    from seqlab.tasks.text import VOCAB_SIZE, encode

    if getattr(model, "vocab_size", VOCAB_SIZE) < VOCAB_SIZE:
        raise ValueError(f"prompt: a string prompt is ASCII-encoded (128 tokens) but the model's vocab_size is "
                         f"{model.vocab_size}; pass token ids instead")
    ids = encode(text)
    if not ids:
        raise ValueError(f"{what}: expected at least one ASCII character")
    return ids


def _is_ragged_list(prompt) -> bool:
    """A list of prompts (strings, or token sequences not all of one length)."""
    if not isinstance(prompt, (list, tuple)) or not prompt:
        return False
    if all(isinstance(p, str) for p in prompt):
        return True
    rows = [p for p in prompt if isinstance(p, (list, tuple)) or (isinstance(p, torch.Tensor) and p.dim() == 1)]
    return len(rows) == len(prompt) and len({len(p) for p in rows}) > 1


def _ragged_prompts(prompt, lengths, model) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """``(tokens (B, P) right-padded with 0, lengths (B,), is_text)`` for prompts of different lengths: a list of
    strings, a list of token sequences, or a (B, P) tensor with ``lengths``."""
    from seqlab.models.decoding import ragged_prompt

    check = getattr(model, "check_tokens", None)
    if isinstance(prompt, (list, tuple)):
        is_text = all(isinstance(p, str) for p in prompt)
        if any(isinstance(p, str) for p in prompt) and not is_text:
            raise ValueError("prompt: a list of prompts holds strings or token sequences, not both")
        if is_text:
            prompt = [_encoded(p, model, f"prompt[{i}]") for i, p in enumerate(prompt)]
        tokens, n = ragged_prompt(list(prompt), lengths, check)
        return tokens, n, is_text
    tokens, n = ragged_prompt(torch.as_tensor(prompt), lengths, check)
    return tokens, n, False


def _prompt_tokens(prompt, model) -> tuple[torch.Tensor, bool]:
    if isinstance(prompt, str):
        return torch.tensor([_encoded(prompt, model)], dtype=torch.long), True
    tokens = torch.as_tensor(prompt, dtype=torch.long)
    if tokens.dim() == 1:
        tokens = tokens[None]
    if tokens.dim() != 2 or tokens.shape[1] < 1:
        raise ValueError(f"prompt: expected a string or token ids of shape (L,) or (B, L) with L >= 1, got {tuple(tokens.shape)}")
    return tokens, False


@torch.no_grad()
def generate(model: nn.Module, prompt, max_new_tokens: int = 200, *, temperature: float = 1.0, top_k: int | None = None,
             seed: int = 0, streaming: bool | None = None, lengths=None, top_p: float | None = None):
    """Continue ``prompt`` by ``max_new_tokens`` sampled tokens.

    ``prompt``: a string (ASCII-encoded, the ``text`` task's tokenizer; the result is a string with
    the prompt included) or token ids ``(L,)`` / ``(B, L)`` (the result is ids ``(B, L + new)``).
    Prompts of different lengths decode together: a list of strings (the result: a list of strings), a
    list of token sequences, or a right-padded ``(B, P)`` tensor with ``lengths`` (B ints; pads of any value);
    the result is then a list of 1-D tensors, each prompt followed by its new tokens. Each row continues its
    own prompt from its own position (``model.prefill(..., lengths=)``, ``seqlab.models.decoding``).
    ``temperature=0`` is greedy decoding; ``top_k`` keeps the k most likely tokens, ``top_p`` the most
    likely tokens whose probabilities first reach ``top_p`` (nucleus sampling, after ``top_k``); ``seed`` makes
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
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"top_p: expected None or a number in (0, 1], got {top_p!r}")
    ragged = lengths is not None or _is_ragged_list(prompt)
    if ragged:
        tokens, lengths, is_text = _ragged_prompts(prompt, lengths, model)
    else:
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
    sample_kw = dict(temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
    try:
        if ragged:
            lengths = lengths.to(device)
            if use_step and callable(getattr(model, "prefill", None)):
                new = _generate_streaming(model, tokens, max_new_tokens, lengths=lengths, **sample_kw)
            else:                                           # one prompt at a time
                run = _generate_streaming if use_step else _generate_rerun
                new = [run(model, tokens[r:r + 1, :int(n)], max_new_tokens, **sample_kw)[0]
                       for r, n in enumerate(lengths.tolist())]
        else:
            new = (_generate_streaming if use_step else _generate_rerun)(model, tokens, max_new_tokens, **sample_kw)
    finally:
        model.train(was_training)
    if ragged:
        rows = [torch.cat([tokens[r, :int(n)], new[r]]) for r, n in enumerate(lengths.tolist())]
        if is_text:
            from seqlab.tasks.text import decode

            return [decode(row) for row in rows]
        return rows
    out = torch.cat([tokens, new], dim=1)
    if is_text:
        from seqlab.tasks.text import decode

        return decode(out[0])
    return out


def _generate_streaming(model, tokens, n, lengths=None, **sample_kw):
    if lengths is not None:                             # prompts of different lengths: each row's last logits
        logits, state = model.prefill(tokens, lengths=lengths)
        logits = logits[torch.arange(tokens.shape[0], device=logits.device), lengths - 1]
    elif callable(getattr(model, "prefill", None)):    # the prompt in one parallel pass
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
