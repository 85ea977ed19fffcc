"""Read what a model has learned: gates, mixing coefficients, effective attention matrices.

``readout`` reads models, it never changes them and the math never imports it; its results go to
``seqlab.viz`` to be drawn. The generic read-outs come first (run a model and catch what chosen
sub-modules return, collect one value per block, predictions, parameter counts); each family
adds its own read-outs below (CausalRN/BiRN, LRNN/FST, LightNet, GateLoop), each returning plain
tensors with their shapes in the docstring.

Every read-out runs under ``torch.no_grad()`` with the model in eval mode, and puts the model's
training flag back as it found it.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import torch
import torch.nn as nn

from seqlab.config import model_device

__all__ = ["evaluating", "capture", "per_layer", "logits", "predict", "parameter_count"]


@contextlib.contextmanager
def evaluating(model: nn.Module):
    """``with evaluating(model):`` eval mode and no gradients inside, the previous mode restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def _check_tokens(tokens) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() not in (1, 2) or tokens.is_floating_point() or tokens.is_complex():
        got = f"shape {tuple(tokens.shape)}, dtype {tokens.dtype}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"tokens: expected integer tokens of shape (B, L) or (L,), got {got}")
    return tokens if tokens.dim() == 2 else tokens[None]


def _run_hooked(model: nn.Module, tokens: torch.Tensor, handles: list) -> None:
    """Run ``model`` on ``tokens`` in eval mode for the hooks in ``handles``; always remove them."""
    try:
        with evaluating(model):
            model(tokens.to(model_device(model)))
    finally:
        for h in handles:
            h.remove()


def capture(model: nn.Module, tokens: torch.Tensor,
            where: str | type | Iterable[str] | Callable[[str, nn.Module], bool]) -> dict[str, torch.Tensor]:
    """Run ``model(tokens)`` and return ``{module name: its output}`` for the chosen sub-modules.

    ``where``: a module class (every sub-module of that class), a name or list of names from
    ``model.named_modules()`` (e.g. ``"blocks.0.mixer"``), or a predicate ``(name, module) -> bool``.
    Outputs that are tuples keep only their first element. Tensors are detached, on the CPU.
    """
    tokens = _check_tokens(tokens)
    modules = dict(model.named_modules())
    if isinstance(where, type):
        chosen = [n for n, m in modules.items() if isinstance(m, where)]
    elif isinstance(where, str) or (isinstance(where, Iterable) and not callable(where)):
        names = [where] if isinstance(where, str) else list(where)
        unknown = [n for n in names if n not in modules]
        if unknown:
            raise ValueError(f"where: no sub-module named {unknown}; some names: {list(modules)[1:12]}")
        chosen = names
    elif callable(where):
        chosen = [n for n, m in modules.items() if where(n, m)]
    else:
        raise ValueError(f"where: expected a module class, names or a predicate, got {type(where).__name__}")
    if not chosen:
        raise ValueError(f"where: {where!r} matches no sub-module of {type(model).__name__}")
    caught: dict[str, torch.Tensor] = {}

    def hook_for(name):
        def hook(_module, _inputs, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            caught[name] = out.detach().cpu() if isinstance(out, torch.Tensor) else out
        return hook

    _run_hooked(model, tokens, [modules[n].register_forward_hook(hook_for(n)) for n in chosen])
    return caught


def per_layer(model: nn.Module, read: str | Callable[[nn.Module], object], blocks: str = "blocks") -> list:
    """One value per block of ``model.<blocks>``: ``read`` is an attribute path (``"mixer.alpha1"``)
    or a function of the block. Scalar tensors become floats, other tensors are detached CPU copies.
    """
    stack = getattr(model, blocks, None)
    if not isinstance(stack, (nn.ModuleList, nn.Sequential)):
        raise ValueError(f"blocks: {type(model).__name__} has no module list {blocks!r}")
    values = []
    for i, block in enumerate(stack):
        if callable(read):
            value = read(block)
        else:
            value = block
            for part in read.split("."):
                if not hasattr(value, part):
                    raise ValueError(f"read: block {i} ({type(block).__name__}) has no attribute path {read!r} "
                                     f"(missing {part!r})")
                value = getattr(value, part)
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            value = float(value) if value.numel() == 1 and not value.is_complex() else value
        values.append(value)
    return values


def logits(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The model's output for ``tokens`` ``(B, L)`` (or ``(L,)``, read as one sequence), on the CPU: ``(B, L,
    vocab)`` for a language model, ``(B, classes)`` for a classifier. The tokens go to the model's device; eval
    mode, no gradients."""
    with evaluating(model):
        return model(_check_tokens(tokens).to(model_device(model))).cpu()


def predict(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The model's arg-max prediction: ``(B, L)`` next tokens for a language model, ``(B,)`` classes
    for a classifier (a 1-D ``tokens`` gives results without the batch dimension)."""
    squeeze = isinstance(tokens, torch.Tensor) and tokens.dim() == 1
    out = logits(model, tokens).argmax(-1)
    return out[0] if squeeze else out


def parameter_count(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters; complex parameters count their real and imaginary parts."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters()
               if p.requires_grad or not trainable_only)


# ----------------------------------------------------------------------------- CausalRN / BiRN (papers 000, 001)


def _relation_block(model: nn.Module, layer: int):
    blocks = getattr(model, "blocks", None)
    if blocks is None or not len(blocks):
        raise ValueError(f"model: {type(model).__name__} has no blocks to read")
    n = len(blocks)
    if not -n <= layer < n:
        raise ValueError(f"layer: expected an index in [-{n}, {n}), got {layer}")
    block = blocks[layer]
    if not hasattr(block, "project") or not hasattr(block, "pre_norm"):
        raise ValueError(f"layer: block {layer} is a {type(block).__name__}, not a CausalRN/BiRN relation block")
    return block


def relation_pq(model: nn.Module, tokens: torch.Tensor, layer: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p, q)`` of relation block ``layer``, each ``(B, L', d_h)`` (``L' = L + 1`` with a CLS token):
    ``p_i = W_left LN(x_i)``, ``q_j = W_right LN(x_j) + b_in`` (000 eq. 7-8) for the block's input."""
    block = _relation_block(model, layer)
    seen = {}
    handle = block.register_forward_pre_hook(lambda _m, args: seen.__setitem__("x", args[0]))
    try:
        with evaluating(model):
            model(_check_tokens(tokens).to(model_device(model)))
            p, q = block.project(seen["x"])
    finally:
        handle.remove()
    return p.cpu(), q.cpu()


def relation_attention(model: nn.Module, tokens: torch.Tensor, layer: int = -1) -> torch.Tensor:
    """The effective attention of an exp relation block: ``A[b, j, i]`` = the share of the reduced
    vector ``sum_i exp(z_ij)`` of output ``j`` that comes from input ``i`` (rows sum to 1), ``(B, L', L')``.
    See ``seqlab.ops.relation_attention_matrix``."""
    from seqlab.ops.relation import relation_attention_matrix

    block = _relation_block(model, layer)
    if block.activation != "exp":
        raise ValueError(f"layer: block {layer} uses activation={block.activation!r}; the attention read-out needs exp")
    p, q = relation_pq(model, tokens, layer)
    w = None if block.act_weight is None else block.act_weight.detach().cpu()
    b = None if block.act_bias is None else block.act_bias.detach().cpu()
    with torch.no_grad():
        return relation_attention_matrix(p, q, causal=block.causal, pre_norm=block.pre_norm, weight=w, bias=b)


def birn_cls_heatmap(model: nn.Module, tokens: torch.Tensor, grid: tuple[int, int], layer: int = -1,
                     direction: str = "to_cls") -> torch.Tensor:
    """BiRN read-out of 000 Fig. 7: one value per image patch, ``(B, rows, cols)``.

    ``direction="to_cls"`` (the paper's wording, "how strongly each patch attends to the <CLS>
    token"): ``A[patch, CLS]``; ``"from_cls"``: ``A[CLS, patch]``, how much of the CLS output each
    patch supplies. ``A`` is :func:`relation_attention` of block ``layer``; ``grid`` is the patch
    grid (``task.info["grid"]``); the model must have a CLS token at position 0.
    """
    if getattr(model, "cls", None) is None:
        raise ValueError("model: the CLS heat map needs a model with a CLS token (build('birn', num_classes=C))")
    if direction not in ("to_cls", "from_cls"):
        raise ValueError(f"direction: expected 'to_cls' or 'from_cls', got {direction!r}")
    tokens = _check_tokens(tokens)
    rows, cols = grid
    if rows * cols != tokens.shape[1]:
        raise ValueError(f"grid: {rows}x{cols} = {rows * cols} patches, but tokens have length {tokens.shape[1]}")
    A = relation_attention(model, tokens, layer)          # (B, 1 + N, 1 + N), CLS first
    values = A[:, 1:, 0] if direction == "to_cls" else A[:, 0, 1:]
    return values.reshape(-1, rows, cols)


__all__ += ["relation_pq", "relation_attention", "birn_cls_heatmap"]


# ----------------------------------------------------------------------------- GateLoop (paper 004)


def gateloop_transitions(model: nn.Module, tokens: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    """The state transitions ``a_n`` a GateLoop model applies to ``tokens``, layer by layer (Fig. 5).

    Returns ``{"magnitude": [...], "phase": [...]}``, one ``(B, L, d_qk)`` tensor per layer
    (``|a_n|`` from the sigmoid of eq. 25, ``arg a_n`` its identity phase). Read by hooking the input
    of every ``GateLoopTimeMixing`` and calling its ``magnitude_phase`` on it.
    """
    from seqlab.layers.gateloop import GateLoopTimeMixing

    tokens = _check_tokens(tokens)
    mixers = [m for m in model.modules() if isinstance(m, GateLoopTimeMixing)]
    if not mixers:
        raise ValueError(f"model: {type(model).__name__} has no GateLoop time-mixing layer")
    out: dict[str, list[torch.Tensor]] = {"magnitude": [], "phase": []}

    def hook(module, inputs):
        mag, phase = module.magnitude_phase(inputs[0])
        out["magnitude"].append(mag.detach().float().cpu())
        out["phase"].append(phase.detach().float().cpu())

    _run_hooked(model, tokens, [m.register_forward_pre_hook(hook) for m in mixers])
    return out


__all__ += ["gateloop_transitions"]


# ----------------------------------------------------------------------------- LRNN / FST (paper 002)


def fst_alphas(model: nn.Module) -> list[dict]:
    """The mixing coefficients of every block of an ``lrnn`` or ``fst`` model (002 Fig. 3).

    Returns one dict per block, ``{"block": i, "alpha1": α1, "alpha2": α2}`` with
    ``α_k = sigmoid(p_k)``: the share of the new representation against the skip path in the
    sequence half (``alpha1``) and the twisted half (``alpha2``; ``None`` for an LRNN-only block).
    """
    from seqlab.layers.lrnn import LRNNBlock

    blocks = [m for m in model.modules() if isinstance(m, LRNNBlock)]
    if not blocks:
        raise ValueError(f"model: {type(model).__name__} has no LRNN or FST block")
    with torch.no_grad():
        return [{"block": i, "alpha1": float(b.alpha1),
                 "alpha2": float(b.alpha2) if hasattr(b, "alpha2") else None} for i, b in enumerate(blocks)]


def lrnn_eigenvalues(model: nn.Module) -> list[dict]:
    """The eigenvalues ``λ = exp(-exp(ν) + i exp(θ))`` of every LRNN of a model, complex ``(d_state,)`` each.

    Returns ``[{"block": i, "lrnn": "lrnn1" | "lrnn2", "lambda": tensor}, ...]``.
    """
    from seqlab.layers.lrnn import LRNNBlock

    out = []
    with torch.no_grad():
        for i, b in enumerate(m for m in model.modules() if isinstance(m, LRNNBlock)):
            for name in ("lrnn1", "lrnn2"):
                if hasattr(b, name):
                    out.append({"block": i, "lrnn": name, "lambda": getattr(b, name).lam().detach().cpu()})
    return out


def fst_representation_changes(model: nn.Module, tokens: torch.Tensor,
                               alphas: tuple[float, float] | None = None) -> dict:
    """How much each half of each FST block changes the representation, optionally with overridden alphas.

    ``tokens``: ``(B, seq_len)`` (full length: no padding). ``alphas=(α1, α2)`` replaces every
    block's trained coefficients (``None``: the trained ones). Returns ``{"changes": [{"block",
    "sequence_half", "twisted_half"}], "logits": (B, C) or (B, L, V)}``, where each change is the
    relative norm ``|x_after - x_before| / |x_before|`` over the batch.
    """
    from seqlab.layers.lrnn import FSTBlock

    tokens = _check_tokens(tokens)
    blocks = list(getattr(model, "blocks", []))
    if not blocks or not all(isinstance(b, FSTBlock) for b in blocks):
        raise ValueError(f"model: expected a model whose blocks are FSTBlocks, got {type(model).__name__}")
    if tokens.shape[1] != blocks[0].seq_len:
        raise ValueError(f"tokens: expected length seq_len={blocks[0].seq_len}, got {tokens.shape[1]}")

    def rel(after, before):
        return float(torch.linalg.vector_norm(after - before) / torch.linalg.vector_norm(before))

    changes = []
    with evaluating(model):
        model.check_tokens(tokens)
        x = model.embed_tokens(tokens.to(model_device(model)))
        for i, b in enumerate(blocks):
            a1, a2 = (b.alpha1, b.alpha2) if alphas is None else alphas
            mid = (1 - a1) * x + a1 * b.sequence_half(x)
            out = (1 - a2) * mid + a2 * b.twisted_half(mid)
            changes.append({"block": i, "sequence_half": rel(mid, x), "twisted_half": rel(out, mid)})
            x = out
        h = model.norm(x)
        logits = model.head(h) if model.num_classes is None else model.head(h[:, -1])
    return {"changes": changes, "logits": logits.cpu()}


__all__ += ["fst_alphas", "lrnn_eigenvalues", "fst_representation_changes"]


# ----------------------------------------------------------------------------- LightNet (paper 003)


def _lightnet_attention(model: nn.Module, layer: int):
    from seqlab.layers.lightnet import LightNetAttention

    found = [m for m in model.modules() if isinstance(m, LightNetAttention)]
    if not found:
        raise ValueError(f"model: {type(model).__name__} has no LightNet attention")
    if not -len(found) <= layer < len(found):
        raise ValueError(f"layer: expected an index in [-{len(found)}, {len(found)}), got {layer}")
    return found[layer]


def lightnet_attention_matrix(model: nn.Module, tokens: torch.Tensor, layer: int = 0) -> torch.Tensor:
    """The effective attention of LightNet layer ``layer``: ``A: (B, H, L, L)`` with
    ``o_t = sum_s A[t, s] v_s`` before the norm and gate (eq. 7 / eq. 8, with MD-LRPE folded in).

    Additive: ``A[t, s] = sum_i q_ti m_si exp(d_si - log s_ti)`` (``s <= t`` causal; ``log s_t`` the
    causal log-sum, or the whole sequence's non-causal); multiplicative: ``sum_i q_ti k_si c^i_ts``
    (Theorem 3.1's ``c_ts`` per channel); none: ``q_t . k_s``.
    """
    from seqlab.ops.decay import decay_coefficients

    lna = _lightnet_attention(model, layer)
    caught = {}
    handle = lna.register_forward_hook(lambda _m, inputs, _out: caught.setdefault("x", inputs[0].detach()))
    tokens = _check_tokens(tokens)
    try:
        with evaluating(model):
            model(tokens.to(model_device(model)))
            q, k, v, ld = lna.mixer_inputs(caught["x"])
    finally:
        handle.remove()
    L = q.shape[-2]
    causal_mask = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    if lna.decay == "additive":
        d = k if ld is None else ld
        mult = torch.ones_like(k) if ld is None else k
        if lna.causal:
            log_s = torch.logcumsumexp(d, dim=-2)
            expo = d[..., None, :, :] - log_s[..., :, None, :]                        # [t, s, i]
            W = torch.where(causal_mask[..., None], expo, torch.full((), -torch.inf, device=q.device)).exp()
            A = torch.einsum("...ti,...tsi,...si->...ts", q, W, mult)
        else:
            A = q @ (torch.softmax(d, dim=-2) * mult).transpose(-1, -2)
    elif lna.decay == "multiplicative":
        C = decay_coefficients(ld.transpose(-1, -2), "multiplicative", causal=lna.causal)   # (B, H, dk, L, L)
        A = torch.einsum("...ti,...its,...si->...ts", q, C, k)
    else:
        A = q @ k.transpose(-1, -2)
        if lna.causal:
            A = A.masked_fill(~causal_mask, 0)
    return A.cpu()


def lightnet_tpe_decays(model: nn.Module) -> torch.Tensor | None:
    """The learned MD-TPE decays ``lambda: (e, d)`` of eq. 11 (``None`` when the model has no TPE)."""
    from seqlab.layers.lightnet import MDTPE

    for m in model.modules():
        if isinstance(m, MDTPE):
            return m.decays.detach().cpu()
    return None


__all__ += ["lightnet_attention_matrix", "lightnet_tpe_decays"]


# ---------------------------------------------------------------------------------------------------------------
# Decoding: how far a state kept at a lower precision moves the logits
# ---------------------------------------------------------------------------------------------------------------

def decode_drift(model: nn.Module, prompt: torch.Tensor, n_tokens: int,
                 state_dtypes: Iterable[torch.dtype] = (torch.float32, torch.bfloat16, torch.float16)) -> dict:
    """How far each state dtype moves a causal language model's logits while it decodes.

    The reference is the same weights in float64 with a float64 state: ``prompt`` (1, P) is prefilled and
    ``n_tokens`` are decoded greedily. Each state dtype (``model.init_state(dtype=)``) then decodes the same
    prompt **teacher-forced** on the reference's tokens, so that a difference does not compound through
    different tokens. Returns a dict:

    - ``"tokens"``: (n,) the reference's greedy tokens; ``"logit_scale"``: the reference's largest ``|logit|``;
    - ``"dlogit"``: ``{dtype: (n,) float64}``, the largest ``|logit - reference logit|`` at each generated position;
    - ``"departs_at"``: ``{dtype: int | None}``, the first position whose argmax differs from the reference's
      token (where free greedy decoding would first depart), None if none does;
    - a position whose logits are not finite (a float16 sum that overflowed) has ``dlogit`` inf and departs;
    - ``"warned"``: ``{dtype: bool}``, whether ``init_state`` warned that this state accumulates at low precision.

    The model is not changed (the reference is a float64 copy). Raises ValueError on a prompt that is not (1, P)
    integer tokens with P >= 1, or ``n_tokens`` < 1.
    """
    import copy
    import warnings

    from seqlab.models.decoding import StatePrecisionWarning, state_tensors

    if (not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[0] != 1 or prompt.shape[1] < 1
            or prompt.is_floating_point() or prompt.is_complex()):
        raise ValueError(f"prompt: expected integer tokens of shape (1, P) with P >= 1, got "
                         f"{getattr(prompt, 'shape', type(prompt).__name__)!r}")
    if not isinstance(n_tokens, int) or n_tokens < 1:
        raise ValueError(f"n_tokens: expected an int >= 1, got {n_tokens!r}")

    def greedy_reference():
        ref = copy.deepcopy(model).to(torch.float64)
        logits, state = ref.prefill(prompt, ref.init_state(1, dtype=torch.float64))
        last, rows, tokens = logits[:, -1], [], []
        for _ in range(n_tokens):
            rows.append(last[0])
            tokens.append(int(last.argmax(-1)))
            last, state = ref.step(torch.tensor(tokens[-1:]), state)
        return torch.tensor(tokens), torch.stack(rows)

    def forced(dtype):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", StatePrecisionWarning)
            state = model.init_state(1, dtype=dtype)
        kept = sorted({str(t.dtype) for t in state_tensors(state["blocks"])})
        logits, state = model.prefill(prompt, state)
        rows, last = [], logits[:, -1]
        for tok in tokens.tolist():
            rows.append(last[0].double())
            last, state = model.step(torch.tensor([tok]), state)
        after = sorted({str(t.dtype) for t in state_tensors(state["blocks"])})
        if after != kept:
            raise AssertionError(f"the state's dtypes changed while decoding: {kept} -> {after}")
        return torch.stack(rows), any(issubclass(w.category, StatePrecisionWarning) for w in caught)

    with evaluating(model):
        tokens, reference = greedy_reference()
        out = {"tokens": tokens, "logit_scale": float(reference.abs().max()), "dlogit": {}, "departs_at": {},
               "warned": {}}
        for dtype in state_dtypes:
            got, warned = forced(dtype)
            finite = torch.isfinite(got).all(-1)
            departs = ((got.argmax(-1) != tokens) | ~finite).nonzero()
            out["dlogit"][dtype] = torch.where(finite, (got - reference).abs().amax(-1), torch.inf)
            out["departs_at"][dtype] = int(departs[0]) if len(departs) else None
            out["warned"][dtype] = warned
    return out


__all__ += ["decode_drift"]
