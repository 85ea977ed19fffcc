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
time. Greedy rows equal each prompt's own continuation; sampled rows draw from one generator for the batch
(``seed=`` an int), or each from its own (``seed=`` a list, one per prompt: each row then samples what its
prompt generated alone with that seed samples).

``stop=`` (token ids, or one-character strings for the ASCII tokenizer) ends a row at the first stop token it
emits (kept in its output; the row is inactive afterwards, ``step(..., active=)``), and ``on_token(row,
position, token_id)`` is called for every new token as it is sampled.
"""
from __future__ import annotations

import numbers

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
        name = "stop" if what == "stop" else "prompt"
        raise ValueError(f"{name}: a string {name} is ASCII-encoded (128 tokens) but the model's vocab_size is "
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


def _stop_ids(stop, model) -> list[int] | None:
    """The stop tokens as a list of ids (``None``: no stop), checked against the model's vocabulary."""
    if stop is None:
        return None
    items = [stop] if isinstance(stop, (int, str)) or (isinstance(stop, torch.Tensor) and stop.dim() == 0) \
        else stop
    if isinstance(items, torch.Tensor):
        items = items.tolist()
    if not isinstance(items, (list, tuple, set, frozenset)) or not items:
        raise ValueError(f"stop: expected a token id, a one-character string or a non-empty list of them, "
                         f"got {stop!r}")
    vocab = getattr(model, "vocab_size", None)
    ids = []
    for item in items:
        if isinstance(item, torch.Tensor) and item.dim() == 0 and not (item.is_floating_point() or item.is_complex()):
            item = int(item)
        if isinstance(item, str):
            if len(item) != 1:
                raise ValueError(f"stop: a stop string is one character (the text tokenizer is per character), "
                                 f"got {item!r}")
            code = _encoded(item, model, "stop")
            if len(code) != 1:
                raise ValueError(f"stop: {item!r} is not one ASCII character")
            item = code[0]
        elif isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise ValueError(f"stop: expected int token ids (or one-character strings), got {item!r} "
                             f"({type(item).__name__})")
        if item < 0 or (vocab is not None and item >= vocab):
            raise ValueError(f"stop: token id {item} is outside the vocabulary [0, {vocab})")
        ids.append(int(item))
    return sorted(set(ids))


def _generators(seed, batch: int):
    """One ``torch.Generator`` for the batch (``seed`` an int) or a list of one per row (``seed`` a list)."""
    if isinstance(seed, (list, tuple)):
        bad = [s for s in seed if isinstance(s, bool) or not isinstance(s, numbers.Integral)]
        if bad:
            raise ValueError(f"seed: expected an int or a list of ints, got {bad[0]!r} ({type(bad[0]).__name__})")
        if len(seed) != batch:
            raise ValueError(f"seed: expected one seed per prompt ({batch}), got a list of {len(seed)}")
        return [torch.Generator().manual_seed(int(s)) for s in seed]
    return torch.Generator().manual_seed(seed)


class _Picker:
    """Samples the next token of every row, and keeps what ``stop``, per-row seeds and ``on_token`` need: which
    rows stopped (``done``) and how many new tokens each row kept (``count``). Without them it is
    ``sample_next`` with the batch's generator, exactly as before."""

    def __init__(self, sample_kw: dict, generator, stop, on_token, prompt_lengths: list[int], rows: list[int]):
        self.kw, self.generator, self.on_token = sample_kw, generator, on_token
        self.stop = None if stop is None else torch.tensor(stop, dtype=torch.long)
        self.prompt_lengths, self.rows = prompt_lengths, rows
        self.done = torch.zeros(len(rows), dtype=torch.bool)
        self.count = torch.zeros(len(rows), dtype=torch.long)

    def row(self, r: int, prompt_length: int) -> "_Picker":
        """The picker of row ``r`` alone (the rerun path reads prompts of different lengths one at a time)."""
        g = self.generator[r] if isinstance(self.generator, list) else self.generator
        return _Picker(self.kw, g, None if self.stop is None else self.stop.tolist(), self.on_token,
                       [prompt_length], [self.rows[r]])

    @property
    def finished(self) -> bool:
        return self.stop is not None and bool(self.done.all())

    def active(self, device) -> torch.Tensor | None:
        """The rows still generating, for ``step(..., active=)``; ``None`` without stop tokens (all rows are)."""
        return None if self.stop is None else (~self.done).to(device)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        done = self.done.to(logits.device)
        if self.stop is not None and bool(self.done.any()):    # a stopped row's logits mean nothing
            logits = logits.masked_fill(done[:, None], 0)
        if isinstance(self.generator, list) and self.kw["temperature"] != 0:
            nxt = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
            for r, g in enumerate(self.generator):              # each row from its own generator, as if alone
                if not self.done[r]:
                    nxt[r] = sample_next(logits[r:r + 1], generator=g, **self.kw)[0]
        else:
            g = self.generator[0] if isinstance(self.generator, list) else self.generator
            nxt = sample_next(logits, generator=g, **self.kw)
        if self.stop is None and self.on_token is None:
            return nxt
        if self.stop is not None:
            nxt = nxt.masked_fill(done, 0)
        active = ~self.done
        self.count += active.long()
        if self.on_token is not None:
            tokens = nxt.tolist()
            for r in active.nonzero().flatten().tolist():
                self.on_token(self.rows[r], self.prompt_lengths[r] + int(self.count[r]) - 1, tokens[r])
        if self.stop is not None:
            self.done |= active & torch.isin(nxt.cpu(), self.stop)
        return nxt


@torch.no_grad()
def generate(model: nn.Module, prompt, max_new_tokens: int = 200, *, temperature: float = 1.0, top_k: int | None = None,
             seed: int | list[int] = 0, streaming: bool | None = None, lengths=None, top_p: float | None = None,
             stop=None, on_token=None):
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

    ``seed``: an int (one generator for the whole batch) or a list of ints, one per prompt (row): each row then
    samples from its own ``torch.Generator``, so its continuation is the one its prompt generates alone with
    that seed (up to float rounding of the logits in a batch).

    ``stop``: a token id or a list of them (for a string prompt, also one-character strings: the tokenizer is
    per character, ``stop="\n"``). A row stops at the first stop token it emits: the stop token **is included**
    in its output, the row is inactive afterwards (``model.step(..., active=)``: its state no longer changes)
    and generation ends when every row stopped or ``max_new_tokens`` were generated. With ``stop`` given, rows
    have their own lengths: token-id prompts always return a list of 1-D tensors (one per row, the prompt
    followed by its new tokens, a rectangular ``(L,)`` or ``(B, L)`` prompt too); string prompts return a
    string (a list of strings) as without ``stop``.

    ``on_token``: a callable ``on_token(row, position, token_id)`` (ints) called for every new token as it is
    sampled, in order: ``row`` the prompt's index in the batch (0 for one prompt), ``position`` the token's
    index in that row's output (prompt included: ``output[row][position] == token_id``). Batched decoding
    calls it step by step, rows in order within a step; the rerun path with prompts of different lengths
    generates (and calls it for) one row after another. Nothing is called for a row after its stop token.
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
    if on_token is not None and not callable(on_token):
        raise ValueError(f"on_token: expected a callable on_token(row, position, token_id), got {on_token!r}")
    stop = _stop_ids(stop, model)
    ragged = lengths is not None or _is_ragged_list(prompt)
    if ragged:
        tokens, lengths, is_text = _ragged_prompts(prompt, lengths, model)
    else:
        tokens, is_text = _prompt_tokens(prompt, model)
    generator = _generators(seed, tokens.shape[0])
    use_step = supports_streaming(model) and _fits(model, tokens.shape[1] + max_new_tokens) if streaming is None \
        else streaming
    if use_step and not supports_streaming(model):
        why = getattr(model, "NO_DECODING", None) or "it has no init_state/prefill/step"
        raise ValueError(f"streaming=True: {type(model).__name__} has no decoding protocol: {why}")
    device = next(model.parameters()).device
    tokens = tokens.to(device)
    was_training = model.training
    model.eval()
    sample_kw = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    prompt_lengths = lengths.tolist() if ragged else [tokens.shape[1]] * tokens.shape[0]
    pick = _Picker(sample_kw, generator, stop, on_token, prompt_lengths, list(range(tokens.shape[0])))
    try:
        if ragged:
            lengths = lengths.to(device)
            if use_step and callable(getattr(model, "prefill", None)):
                new = _generate_streaming(model, tokens, max_new_tokens, pick, lengths=lengths)
                counts = _counts(pick, new)
            else:                                           # one prompt at a time
                run = _generate_streaming if use_step else _generate_rerun
                picks = [pick.row(r, n) for r, n in enumerate(prompt_lengths)]
                new = [run(model, tokens[r:r + 1, :n], max_new_tokens, picks[r])[0]
                       for r, n in enumerate(prompt_lengths)]
                counts = [_counts(p, row[None])[0] for p, row in zip(picks, new)]
        else:
            new = (_generate_streaming if use_step else _generate_rerun)(model, tokens, max_new_tokens, pick)
            counts = _counts(pick, new)
    finally:
        model.train(was_training)
    if ragged or stop is not None:
        rows = [torch.cat([tokens[r, :n], new[r][:k]]) for r, (n, k) in enumerate(zip(prompt_lengths, counts))]
        if is_text:
            from seqlab.tasks.text import decode

            texts = [decode(row) for row in rows]
            return texts if ragged else texts[0]
        return rows
    out = torch.cat([tokens, new], dim=1)
    if is_text:
        from seqlab.tasks.text import decode

        return decode(out[0])
    return out


def _counts(pick: _Picker, new) -> list[int]:
    """How many new tokens each row keeps (all of them without stop tokens)."""
    return pick.count.tolist() if pick.stop is not None else [new.shape[-1]] * len(pick.rows)


def _generate_streaming(model, tokens, n, pick, lengths=None):
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
        nxt = pick(logits)
        out.append(nxt)
        if pick.finished:                               # every row emitted a stop token
            break
        if len(out) < n:
            active = pick.active(nxt.device)            # rows that stopped keep their state
            logits, state = model.step(nxt, state) if active is None else model.step(nxt, state, active=active)
    return torch.stack(out, 1) if out else tokens[:, :0]


def _generate_rerun(model, tokens, n, pick):
    # the context the model can read: its longest input (a fixed-length model such as the FST pads a
    # shorter one itself, after the tokens, so its last position is still the last real token)
    max_len = getattr(model, "max_len", None) or getattr(model, "seq_len", None)
    context = tokens
    out = []
    for _ in range(n):
        window = context[:, -max_len:] if max_len else context
        logits = model(window)[:, -1]
        nxt = pick(logits)                              # a stopped row's tokens are read by no one
        out.append(nxt)
        if pick.finished:
            break
        context = torch.cat([context, nxt[:, None]], dim=1)
    return torch.stack(out, 1) if out else tokens[:, :0]
