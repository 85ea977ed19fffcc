"""Lesson 07 · Decoding with a state: one LightNet step, when a KV cache outgrows a state, greedy decoding.

The checkers only: what the learner reads (title, task, hint, starting code, and the success line where a checker
returns none) is in texts.toml.
"""
from __future__ import annotations

import torch

from seqlab.exercises._core import (Wrong, call, compare, exercise, generator, random_weights, seeded, tensor,
                                    whole_number)


def _unpack_step(out, B, H, dk, dv, where):
    if not isinstance(out, (tuple, list)) or len(out) != 2 or not isinstance(out[1], (tuple, list)) \
            or len(out[1]) != 2:
        raise Wrong(f"expected (o_t, (kv, log_s)) from your step{where}, got {type(out).__name__}")
    o = tensor(out[0], "o_t", (B, H, dv), complex_ok=False)
    kv = tensor(out[1][0], "kv", (B, H, dk, dv), complex_ok=False)
    log_s = tensor(out[1][1], "log_s", (B, H, dk), complex_ok=False)
    return o, kv, log_s


@exercise("07.1")
def _check_07_1(fn):
    from seqlab import ops

    B, H, L, dk, dv = 2, 2, 9, 3, 4
    for g, scale in seeded(61, (1.0, 400.0)):
        q, k, v = (torch.randn(B, H, L, d, generator=g, dtype=torch.float64) for d in (dk, dk, dv))
        k = scale * k
        where = f" (keys of size {scale:.0f})" if scale > 1 else ""
        want, (kv_want, log_s_want) = ops.decay_attention(q, k, v, decay="additive", mode="recurrent",
                                                          return_state=True)
        state = (torch.zeros(B, H, dk, dv, dtype=torch.float64), torch.full((B, H, dk), -torch.inf,
                                                                           dtype=torch.float64))
        for t in range(L):
            out = call(fn, q[:, :, t].clone(), k[:, :, t].clone(), v[:, :, t].clone(), state,
                       what="your step")
            o, kv, log_s = _unpack_step(out, B, H, dk, dv, where)
            at = f" at step t = {t + 1}{where}"
            if scale > 1 and not (torch.isfinite(o).all() and torch.isfinite(kv).all()):
                raise Wrong(f"non-finite values{at}: exp(k) overflows for keys of 400; keep log s and exponentiate "
                            f"only differences (k_t - log s_t, log s_(t-1) - log s_t)")
            try:
                compare(o, want[:, :, t], 1e-10, name="o_t", against="ops.decay_attention(..., mode='recurrent')",
                        axes="(batch, head, channel)", where=at)
            except Wrong as err:
                if t == 0:
                    raise
                raise Wrong(f"{err}; step 1 was right, so look at the old state: kv_(t-1) must be scaled by "
                            f"s_(t-1) / s_t = exp(log s_(t-1) - log s_t)") from None
            state = (kv, log_s)
        compare(state[1], log_s_want, 1e-12, name="log_s", against="log sum exp(k) of the op's final state",
                where=where)
        compare(state[0], kv_want, 1e-10, name="kv", against="the op's final state", where=where)


@exercise("07.2")
def _check_07_2(answer):
    from seqlab import models

    t = whole_number(answer)
    tr = models.build("transformer", vocab_size=8, d_model=64, n_layers=2)
    lt = models.build("linear-transformer", vocab_size=8, d_model=64, n_layers=2, n_heads=4)
    fixed = lt.state_size(10 ** 6)
    first = next(n for n in range(1, 10 ** 6) if tr.state_size(n) > fixed)
    if t < 1:
        raise Wrong(f"expected a positive number of tokens, got {t}")
    if tr.state_size(t) <= fixed:
        raise Wrong(f"after {t} tokens the cache holds {tr.state_size(t)} floats, not more than the linear "
                    f"Transformer's {fixed}: not yet")
    if t != first:
        raise Wrong(f"after {t} tokens the cache ({tr.state_size(t)} floats) is larger, but it already was after "
                    f"{t - 1} ({tr.state_size(t - 1)} > {fixed}): find the first such t")
    return (f"model.state_size: the cache holds 2 x 64 x 2 = 256 floats per token, {tr.state_size(first)} after "
            f"{first} tokens against the linear Transformer's constant 2 x 64 x (16 + 1) = {fixed}; from then on the "
            f"cache only grows.")


@exercise("07.3")
def _check_07_3(fn):
    from seqlab import models

    torch.manual_seed(63)
    model = models.build("gateloop", vocab_size=11, d_model=16, n_layers=2, mode="recurrent").double().eval()
    random_weights(model)                             # no token is trivially likely
    prompt = torch.randint(0, 11, (2, 5), generator=generator(63))
    n = 6
    with torch.no_grad():
        want = prompt
        for _ in range(n):                            # rerun the whole forward for every new token
            want = torch.cat([want, model(want)[:, -1].argmax(-1, keepdim=True)], 1)
    calls = {"forward": 0, "prefill": 0, "step": 0}

    def counted(name):
        method = getattr(model, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return method(*args, **kwargs)
        return wrapper

    for name in calls:
        setattr(model, name, counted(name))           # instance attributes: model(...) goes through them too
    try:
        with torch.no_grad():
            out = call(fn, model, prompt.clone(), n)
    finally:
        for name in calls:
            delattr(model, name)
    if not isinstance(out, torch.Tensor):
        raise Wrong(f"expected a tensor of tokens (2, {5 + n}), got {type(out).__name__}")
    if tuple(out.shape) != (2, 5 + n):
        raise Wrong(f"expected shape (2, {5 + n}) (the prompt and {n} new tokens), got {tuple(out.shape)}")
    if not torch.equal(out[:, :5].long(), prompt):
        raise Wrong("the first 5 tokens of your output are not the prompt")
    diff = (out.long() != want).nonzero()
    if len(diff):
        b, t = (int(i) for i in diff[0])
        raise Wrong(f"token {t} of sequence {b} is {int(out[b, t])}, greedy decoding gives {int(want[b, t])} "
                    f"(the argmax of the logits after token {t - 1})")
    if calls["forward"]:
        raise Wrong(f"right tokens, but you ran the whole forward {calls['forward']} times: read the prompt with one "
                    f"model.prefill, then one model.step per new token (O(1) work each)")
    if calls["prefill"] != 1 or calls["step"] not in (n - 1, n):
        raise Wrong(f"right tokens, but with {calls['prefill']} prefill and {calls['step']} step calls: expected one "
                    f"prefill and {n - 1} steps (the last token needs no step after it)")
    return (f"the same {n} tokens as rerunning the forward each time, from 1 prefill and {calls['step']} steps: "
            f"each step reads only the state S, O(1) work per token instead of a pass over the whole context.")
