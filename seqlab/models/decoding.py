"""The decoding protocol of every causal language model, composed from its blocks.

    state = model.init_state(batch, device=None, dtype=None)   # before the first token
    logits_t, state = model.step(tokens_t, state)              # tokens_t (B,) -> (B, vocab_size)
    logits, state = model.prefill(tokens, state=None)          # a prompt (B, P) in one parallel pass
    model.state_size(t)                                        # floats held per sequence after t tokens

The state lives in the blocks: each block defines ``init_state(batch, device=, dtype=)``,
``step(x_t, state) -> (y_t, state)`` on ``(B, D)`` and ``state_size(t)``, and, where its recurrence has
a parallel form that starts from a state, ``prefill(x, state) -> (y, state)`` on ``(B, P, D)``. A
block without ``prefill`` is prefilled by stepping through the prompt. The model adds the token
embedding (and its positions, offset by the tokens already read), the final norm and the head.

``forward(x)``, ``prefill(x[:, :P])`` followed by ``step`` for the rest, and ``step`` alone from
``init_state`` compute the same logits; ``prefill(b, prefill(a)[1])`` continues ``prefill(a)``.

Prompts of different lengths (a ragged batch) decode together::

    logits, state = model.prefill([[3, 1, 4], [1, 5], [9, 2, 6, 5, 3]])   # or prefill(tokens, lengths=[3, 2, 5])
    last = logits[torch.arange(3), torch.tensor([3, 2, 5]) - 1]          # each prompt's last logits
    logits_t, state = model.step(last.argmax(-1), state)                 # every row at its own position

The prompts are right-padded: ``prefill`` reads the tokens all rows share in one parallel pass, then the rest
by masked steps, in which a row whose prompt is over keeps its state exactly (``where(active, new, old)``,
``seqlab.layers.rows``) and pads are never read (their logits are zeros). The state then holds one position per
row, ``state["t"]`` a (B,) tensor: each row's positions (learned or sinusoidal, LightNet's LRPE), counts and KV
cache (its own entries first, zeros after) are those of its own prompt, and ``step`` advances every row from its
own position. ``step(tokens_t, state, active=mask)`` is the masked step itself.

The state's precision (``init_state(dtype=)``): a state may be kept in float64, float32, bfloat16 or float16, with
the weights in float32 or bfloat16 (or float64). The default is the weights' dtype (as before). Whatever the state's
dtype, every ``prefill``/``step`` computes in at least float32: the state is widened to the compute dtype (float64
if the weights or the state are float64, else float32), the blocks run with the weights read at that dtype (a
bfloat16 weight is read as its exact float32 value; the parameters themselves are not changed), and the new state
is stored back in its own dtype after every call; the logits come back in the compute dtype (float32 logits from
bfloat16 weights: rounding them to bfloat16 would hide what the state's precision did). A float32 or float64
state with weights of its own dtype is computed exactly as it always was (nothing is cast).

What each family keeps, per state dtype (``STATE_DTYPES``):

- Transformer (KV cache), CausalRN (past ``p_i``), LightNet's multiplicative decay, DeltaNet / Gated DeltaNet
  (fast weights ``S``), short convs (last inputs): every real tensor in the state dtype, no warning. Their values
  stay bounded (keys/values of normed inputs; the delta rule's ``S`` is rewritten, not summed) and each entry is
  rounded once (a cache) or the state forgets (a decay), so the error does not build up with the length the way
  an accumulated sum's does; it is still a per-token rounding (the table in ``benchmarks/results``).
- States that accumulate every token with nothing forgotten: the Linear Transformer's ``[S | z]`` (plain sums,
  ``z = sum phi(k_j)``), the linear CausalRN's running log-sum (its token count stays an integer) and LightNet's
  additive decay (the running mean ``kv`` and its log-normaliser ``log s``). Each token moves them by about
  ``1/t`` of their size, which falls below bfloat16's resolution after about 2^8 tokens and float16's after about
  2^11: the state then stops tracking the context (measured: ``benchmarks/results/decode_precision.md``); the
  Linear Transformer's float16 sums also overflow (max 65504) on long contexts. They are kept in the state dtype
  as asked, and ``init_state`` warns (``StatePrecisionWarning``) for bfloat16 and float16.
- GateLoop (``S``) and LRNN (``h``): complex. torch has no complex bfloat16/float16, so for a float32, bfloat16 or
  float16 state these are kept in complex64 (complex128 for float64), their other tensors (a short conv's) in the
  state dtype: a low-precision state dtype does not shrink or round the complex part.
"""
from __future__ import annotations

import warnings

import torch

from seqlab.layers.rows import keep_rows
from seqlab.models.common import SequenceModel
from seqlab.ops.positional import sinusoidal_positions

__all__ = ["DecodingModel", "state_tensors", "ragged_prompt", "STATE_DTYPES", "StatePrecisionWarning"]

STATE_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
"""The dtypes a decoding state may be kept in (``init_state(dtype=)``)."""


class StatePrecisionWarning(UserWarning):
    """A state dtype known to overflow or lose the state on long contexts for this model."""


def _map_state(obj, fn):
    """``obj`` (tensors in tuples, lists, dicts, named tuples) with ``fn`` applied to every tensor."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _map_state(v, fn) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_state(v, fn) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_map_state(v, fn) for v in obj)
    return obj


def _complex_of(dtype: torch.dtype) -> torch.dtype:
    return torch.complex128 if dtype == torch.float64 else torch.complex64


def _cast_state(blocks, real: torch.dtype, cplx: torch.dtype):
    """Every real floating tensor of ``blocks`` to ``real``, every complex one to ``cplx`` (integers unchanged)."""
    def cast(t):
        if t.is_complex():
            return t if t.dtype == cplx else t.to(cplx)
        if t.is_floating_point():
            return t if t.dtype == real else t.to(real)
        return t
    return _map_state(blocks, cast)


def state_tensors(obj):
    """Every tensor inside a block state (tensors, tuples, lists, dicts, named tuples)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from state_tensors(v)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from state_tensors(v)


class DecodingModel(SequenceModel):
    """A ``SequenceModel`` whose causal language model decodes with a state (see the module docstring)."""

    def _state_tag(self) -> tuple:
        """What a state must come from: this family, config and stack of blocks."""
        config = getattr(self, "model_config", None)
        return (getattr(self, "model_name", type(self).__name__), repr(config),
                tuple(type(b).__name__ for b in self.blocks), self.d_model, self.vocab_size)

    def _check_decoder(self, what: str) -> None:
        if not self.is_language_model:
            raise ValueError(f"{what}: only a causal language model (num_classes=None) decodes token by token")

    def init_state(self, batch: int, device=None, dtype=None) -> dict:
        """The state before the first token, for ``batch`` sequences (device and dtype of the weights by default).

        ``dtype``: the state's precision, one of ``STATE_DTYPES`` (float64, float32, bfloat16, float16): every real
        tensor of the state is kept in it, complex ones (GateLoop, LRNN) in complex64 (complex128 for float64),
        since torch has no complex bfloat16/float16. Each step computes in at least float32 and stores the state
        back in this dtype (the module docstring). A bfloat16 or float16 state for a block whose state accumulates
        every token (Linear Transformer, linear CausalRN, LightNet's additive decay) warns with
        ``StatePrecisionWarning``."""
        self._check_decoder("init_state")
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ValueError(f"batch: expected a positive int, got {batch!r}")
        device = device or self.embed.weight.device
        dtype = dtype or self.embed.weight.dtype
        if dtype not in STATE_DTYPES:
            raise ValueError(f"dtype: expected one of {', '.join(map(str, STATE_DTYPES))} for the state, got {dtype!r}")
        compute = self._compute_dtype(dtype)
        blocks = [b.init_state(batch, device=device, dtype=compute) for b in self.blocks]
        blocks = _cast_state(blocks, dtype, _complex_of(dtype))
        if dtype in (torch.bfloat16, torch.float16):
            kinds = sorted({k for k in (_accumulates(b) for b in self.blocks) if k})
            if kinds:
                bits = 8 if dtype == torch.bfloat16 else 11
                overflow = (" and the Linear Transformer's sums overflow float16 (max 65504) on long contexts"
                            if dtype == torch.float16 and any(k.startswith("Linear Transformer") for k in kinds)
                            else "")
                low = str(dtype).replace("torch.", "")
                warnings.warn(f"init_state: a {low} state for {'; '.join(kinds)}: "
                              f"each token moves it by about 1/t of its size, which falls below {low}'s "
                              f"resolution after about 2^{bits} tokens, so the state stops tracking the context"
                              f"{overflow}; use float32 for long contexts "
                              f"(benchmarks/results/decode_precision.md)", StatePrecisionWarning, stacklevel=2)
        return {"model": self._state_tag(), "batch": batch, "t": 0, "blocks": blocks, "dtype": dtype}

    def _compute_dtype(self, state_dtype: torch.dtype) -> torch.dtype:
        """What a step computes in: float64 if the weights or the state are float64, else float32."""
        return torch.float64 if torch.float64 in (state_dtype, self.embed.weight.dtype) else torch.float32

    def _state_dtype(self, state: dict) -> torch.dtype:
        dtype = state.get("dtype")
        if dtype is None:                       # a state made before the dtype was recorded: its first real tensor
            reals = [t.dtype for t in state_tensors(state["blocks"]) if t.is_floating_point()]
            dtype = reals[0] if reals else self.embed.weight.dtype
        return dtype

    def _at_precision(self, run, state: dict):
        """``run(model, state)`` -> ``(logits, state)`` computed in the compute dtype from ``state`` widened to it;
        the new state stored back in the state's dtype, the logits returned in the compute dtype. Nothing is
        cast when the weights, the state and the compute dtype agree (float32 or float64 throughout)."""
        dtype = self._state_dtype(state)
        compute = self._compute_dtype(dtype)
        weights = self.embed.weight.dtype
        if dtype == compute and weights == compute:
            return run(self, state)
        state = {**state, "blocks": _cast_state(state["blocks"], compute, _complex_of(compute))}
        if weights == compute:
            logits, state = run(self, state)
        else:
            logits, state = _with_weights_at(self, compute, run, state)
        blocks = _cast_state(state["blocks"], dtype, _complex_of(dtype))
        return logits, {**state, "blocks": blocks, "dtype": dtype}

    def check_state(self, state, batch: int) -> None:
        """``ValueError`` naming ``state`` unless it is a state of this model for ``batch`` sequences."""
        if not isinstance(state, dict) or state.get("model") != self._state_tag():
            raise ValueError(f"state: expected a state from this model's init_state/prefill/step "
                             f"({self._state_tag()[0]}), got one from {_owner(state)}")
        if state["batch"] != batch or any(t.shape[0] != batch for t in state_tensors(state["blocks"])):
            raise ValueError(f"state: holds {state['batch']} sequences but the tokens have batch size {batch}")

    def _check_positions(self, t, n, what: str) -> None:
        """Positions ``t .. t + n - 1`` fit the learned table (``t`` and ``n`` ints, or one per row)."""
        if self.max_len is None:
            return
        end = int(torch.as_tensor(t + n).max()) if isinstance(t, torch.Tensor) or isinstance(n, torch.Tensor) \
            else t + n
        if end > self.max_len:
            raise ValueError(f"{what}: positions up to {end - 1} go beyond this model's max_len={self.max_len}")

    def _embed_at(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        """Token embeddings ``(B, P, D)`` of tokens at positions ``t .. t + P - 1``."""
        x = self.embed(tokens)
        return x + self.position_embedding(t, tokens.shape[1], x)

    def _positions_at(self, t: torch.Tensor, like: torch.Tensor) -> torch.Tensor | float:
        """What is added to the embeddings ``like`` (B, D) of tokens at one position per row ``t`` (B,)."""
        if self.positions == "learned":
            return self.pos[0, t]
        if self.positions == "sinusoidal":
            pe = sinusoidal_positions(0, int(t.max()) + 1, self.d_model, device=like.device, dtype=like.dtype)
            return self.pos_scale * pe[t]
        return 0.0

    def _ragged_prompt(self, tokens, lengths) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, lengths = ragged_prompt(tokens, lengths, self.check_tokens)
        device = self.embed.weight.device
        return tokens.to(device), lengths.to(device)

    def prefill(self, tokens, state: dict | None = None, *, lengths=None) -> tuple[torch.Tensor, dict]:
        """``tokens`` (B, P) in one parallel pass (see :meth:`_prefill`), at the state's precision."""
        self._check_decoder("prefill")
        if lengths is None and isinstance(tokens, torch.Tensor):
            self.check_tokens(tokens)
        else:
            tokens, lengths = self._ragged_prompt(tokens, lengths)
        state = self.init_state(tokens.shape[0]) if state is None else state
        self.check_state(state, tokens.shape[0])
        return self._at_precision(lambda m, s: m._prefill(tokens, s, lengths=lengths), state)

    def _prefill(self, tokens, state: dict, *, lengths=None) -> tuple[torch.Tensor, dict]:
        """``tokens`` (B, P) in one parallel pass: logits (B, P, vocab_size) and the state after them.

        Prompts of different lengths: ``tokens`` a list of token sequences, or a (B, P) tensor right-padded
        (pads of any value) with ``lengths`` (B ints, each 1 to P). The shared prefix is read in parallel and the
        rest by masked steps; row ``r``'s logits ``[:lengths[r]]`` and state are those of its prompt read alone,
        its logits past them zeros, and the state holds one position per row (the module docstring). ``tokens``,
        ``lengths`` and ``state`` come checked, as :meth:`prefill` hands them on."""
        ragged_state = isinstance(state["t"], torch.Tensor)
        if ragged_state or (lengths is not None and bool((lengths != tokens.shape[1]).any())):
            return self._prefill_ragged(tokens, lengths, state)
        t = state["t"]
        self._check_positions(t, tokens.shape[1], "tokens")
        x = self._embed_at(tokens, t)
        if tokens.shape[1] == 0:       # an empty prompt: no logits, and the state as it was (no block runs on it)
            return self.head(self.norm(x)), {**state, "blocks": list(state["blocks"])}
        new = []
        for block, s in zip(self.blocks, state["blocks"]):
            x, s = block.prefill(x, s) if hasattr(block, "prefill") else _prefill_by_steps(block, x, s)
            new.append(s)
        return self.head(self.norm(x)), {**state, "t": t + tokens.shape[1], "blocks": new}

    def _prefill_ragged(self, tokens: torch.Tensor, lengths: torch.Tensor | None, state: dict):
        """Right-padded prompts (``lengths`` (B,), None: all of width P) after ``state``: the columns every row
        has (from a state with one position for all rows) in one parallel pass, then masked steps."""
        B, P = tokens.shape
        device = self.embed.weight.device
        lengths = torch.full((B,), P, dtype=torch.long, device=device) if lengths is None else lengths.to(device)
        self._check_positions(state["t"], lengths, "tokens")
        common = 0 if isinstance(state["t"], torch.Tensor) else int(lengths.min())
        parts = []
        if common:
            logits, state = self._prefill(tokens[:, :common], state)
            parts.append(logits)
        for i in range(common, P):
            active = lengths > i
            logits, state = self._step_rows(tokens[:, i], state, active)
            parts.append(torch.where(active[:, None], logits, torch.zeros_like(logits))[:, None])
        if not parts:                                       # an empty prompt: the state as it was
            return self.head(self.norm(self.embed(tokens))), {**state, "blocks": list(state["blocks"])}
        return torch.cat(parts, dim=1), state

    def _step_rows(self, tokens_t: torch.Tensor, state: dict, active: torch.Tensor):
        """The masked step: every row at its own position ``state["t"]``; rows where ``active`` (B,) is False
        keep their state exactly (their logits mean nothing). A block whose state grows or counts per row has
        ``step_rows``; any other steps and keeps the inactive rows' old state (``seqlab.layers.rows``)."""
        B = tokens_t.shape[0]
        t = state["t"]
        t = t if isinstance(t, torch.Tensor) else torch.full((B,), t, dtype=torch.long, device=active.device)
        x = self.embed(tokens_t)
        x = x + self._positions_at(t, x)
        new = []
        for block, s in zip(self.blocks, state["blocks"]):
            if hasattr(block, "step_rows"):
                x, s = block.step_rows(x, s, t, active)
            else:
                x, s_new = block.step(x, s)
                s = keep_rows(active, s_new, s)
            new.append(s)
        return self.head(self.norm(x)), {**state, "t": t + active.long(), "blocks": new}

    def step(self, tokens_t: torch.Tensor, state: dict, *, active=None) -> tuple[torch.Tensor, dict]:
        """One token per row at the state's precision (see :meth:`_step`)."""
        self._check_decoder("step")
        if isinstance(state, dict) and "blocks" in state and "model" in state:
            return self._at_precision(lambda m, s: m._step(tokens_t, s, active=active), state)
        return self._step(tokens_t, state, active=active)

    def _step(self, tokens_t: torch.Tensor, state: dict, *, active=None) -> tuple[torch.Tensor, dict]:
        """``tokens_t`` (B,) at position ``state["t"]`` -> logits (B, vocab_size) and the new state: O(1)
        work per token for the linear families, O(t) for attention with a KV cache.

        ``active`` (B,) bool: only those rows read their token; the others keep their state exactly (their
        token is not read and their logits mean nothing). A state with one position per row (after prompts of
        different lengths) advances each row from its own position."""
        self._check_decoder("step")
        if not isinstance(tokens_t, torch.Tensor) or tokens_t.dim() != 1:
            got = getattr(tokens_t, "shape", tokens_t)
            raise ValueError(f"tokens_t: expected integer tokens of shape (B,), got {got!r}")
        if active is not None:
            if (not isinstance(active, torch.Tensor) or active.dtype != torch.bool
                    or tuple(active.shape) != tuple(tokens_t.shape)):
                got = f"shape {tuple(active.shape)}, dtype {active.dtype}" if isinstance(active, torch.Tensor) \
                    else type(active).__name__
                raise ValueError(f"active: expected a bool tensor of shape {tuple(tokens_t.shape)}, got {got}")
            active = active.to(self.embed.weight.device)
            if not (tokens_t.is_floating_point() or tokens_t.is_complex()):
                tokens_t = tokens_t.masked_fill(~active.to(tokens_t.device), 0)
        self.check_tokens(tokens_t[:, None], "tokens_t")
        self.check_state(state, tokens_t.shape[0])
        if active is not None or isinstance(state["t"], torch.Tensor):
            self._check_positions(state["t"], 1, "tokens_t")
            if active is None:
                active = torch.ones(tokens_t.shape[0], dtype=torch.bool, device=self.embed.weight.device)
            return self._step_rows(tokens_t, state, active)
        t = state["t"]
        self._check_positions(t, 1, "tokens_t")
        x = self._embed_at(tokens_t[:, None], t)[:, 0]
        new = []
        for block, s in zip(self.blocks, state["blocks"]):
            x, s = block.step(x, s)
            new.append(s)
        return self.head(self.norm(x)), {**state, "t": t + 1, "blocks": new}

    def state_size(self, t: int) -> int:
        """Floats held per sequence after ``t`` tokens (a complex number counts as two)."""
        if not isinstance(t, int) or t < 0:
            raise ValueError(f"t: expected a non-negative int, got {t!r}")
        return sum(b.state_size(t) for b in self.blocks)


def _accumulates(block) -> str | None:
    """What a block's state accumulates over every token read, with nothing forgotten (None if it forgets or
    caches): such a state, kept in bfloat16/float16, stops moving once the per-token change ~1/t of its size falls
    below the dtype's resolution (``init_state`` warns)."""
    name = type(block).__name__
    if name == "LinearTransformerBlock":
        return "Linear Transformer (the sums S and z = sum phi(k_j))"
    if name == "RelationBlock" and getattr(block, "streams_in_constant_time", False):
        return "linear CausalRN (the running log-sum)"
    attn = getattr(block, "attn", None)
    if name == "LightNetLayer" and getattr(attn, "decay", None) == "additive":
        return "LightNet additive decay (the running mean kv and its log-normaliser)"
    return None


def _with_weights_at(model, dtype: torch.dtype, run, state):
    """``run(model, state)`` with every floating parameter and buffer of ``model`` read at ``dtype`` (through
    ``torch.func.functional_call``: the parameters are not changed and gradients reach them). Without gradients
    the cast weights are kept until a parameter changes (its storage or in-place version counter)."""
    names = [(n, p) for n, p in model.named_parameters()] + [(n, b) for n, b in model.named_buffers()]
    key = (dtype, tuple((n, p.data_ptr(), p._version, p.dtype) for n, p in names))
    cached = model.__dict__.get("_precision_cache")
    if torch.is_grad_enabled() or cached is None or cached[0] != key:
        cast = {n: (p.to(dtype) if p.is_floating_point() and p.dtype != dtype else p) for n, p in names}
        if not torch.is_grad_enabled():
            model.__dict__["_precision_cache"] = (key, cast)
    else:
        cast = cached[1]
    return torch.func.functional_call(_Runner(model), {f"model.{n}": p for n, p in cast.items()},
                                      (run, state), strict=False, tie_weights=True)


class _Runner(torch.nn.Module):
    """``forward(run, state) = run(model, state)``: a module to hand ``functional_call`` a method other than forward."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, run, state):
        return run(self.model, state)


def _owner(state) -> str:
    if isinstance(state, dict) and "model" in state:
        return repr(state["model"][0])
    return type(state).__name__


def _prefill_by_steps(block, x: torch.Tensor, state):
    """For a block with no parallel form from a state: its ``step`` over the prompt."""
    rows = []
    for i in range(x.shape[1]):
        y, state = block.step(x[:, i], state)
        rows.append(y)
    return torch.stack(rows, 1), state


def ragged_prompt(tokens, lengths, check_tokens=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (B, P) right-padded with 0, lengths (B,))`` from a list of token sequences, or from a ``(B, P)``
    tensor and its ``lengths`` (pads of any value, replaced by 0, and the columns past the longest prompt
    dropped); a ``ValueError`` naming the argument for anything else. ``check_tokens(tokens)`` checks the ids
    (a model's vocabulary and longest length)."""
    check_tokens = check_tokens or (lambda t: None)
    if isinstance(tokens, (list, tuple)):
        if lengths is not None:
            raise ValueError("lengths: a list of prompts gives its own lengths; pass lengths= only with a (B, P) "
                             "tensor")
        if not tokens:
            raise ValueError("tokens: expected at least one prompt, got an empty list")
        rows = []
        for i, row in enumerate(tokens):
            try:
                row = torch.as_tensor(row)
            except (TypeError, ValueError, RuntimeError) as err:
                raise ValueError(f"tokens: prompt {i} must be a sequence of int token ids, got {row!r}") from err
            if row.dim() == 1 and row.numel() == 0:
                raise ValueError(f"tokens: prompt {i} is empty; every prompt needs at least one token")
            if row.dim() != 1 or row.is_floating_point() or row.is_complex() or row.dtype == torch.bool:
                raise ValueError(f"tokens: prompt {i} must be a sequence of int token ids, got "
                                 f"shape {tuple(row.shape)}, dtype {row.dtype}")
            rows.append(row.long())
        lengths = torch.tensor([len(r) for r in rows])
        padded = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
        for i, row in enumerate(rows):
            padded[i, :len(row)] = row
        check_tokens(padded)
        return padded, lengths
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        got = f"shape {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"tokens: expected integer tokens of shape (B, P) or a list of token sequences, got {got}")
    B, P = tokens.shape
    if isinstance(lengths, torch.Tensor):
        if lengths.dim() != 1 or lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise ValueError(f"lengths: expected {B} ints (one per row of tokens), got a tensor of shape "
                             f"{tuple(lengths.shape)}, dtype {lengths.dtype}")
        values = lengths.tolist()
    elif isinstance(lengths, (list, tuple)):
        values = list(lengths)
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise ValueError(f"lengths: expected ints, got {bad[0]!r} ({type(bad[0]).__name__})")
    else:
        raise ValueError(f"lengths: expected a list or 1-D tensor of {B} ints, got {type(lengths).__name__}")
    if len(values) != B:
        raise ValueError(f"lengths: expected {B} lengths (one per row of tokens), got {len(values)}")
    for i, n in enumerate(values):
        if not 1 <= n <= P:
            raise ValueError(f"lengths: row {i} has length {n}; expected 1 to {P} (the width of tokens)")
    lengths = torch.tensor(values, dtype=torch.long, device=tokens.device)
    tokens = tokens[:, :max(values)]
    pads = torch.arange(tokens.shape[1], device=tokens.device)[None, :] >= lengths[:, None]
    if not (tokens.is_floating_point() or tokens.is_complex()):
        tokens = tokens.masked_fill(pads, 0)                # a pad of any value (-1 too) is never read
    check_tokens(tokens)
    return tokens, lengths
