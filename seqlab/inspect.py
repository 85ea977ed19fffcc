"""Read what a model has learned: gates, mixing coefficients, effective attention matrices.

``inspect`` reads models, it never changes them and the math never imports it; its results go to
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

__all__ = ["evaluating", "capture", "per_layer", "predict", "parameter_count"]


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


def _model_device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


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

    handles = [modules[n].register_forward_hook(hook_for(n)) for n in chosen]
    try:
        with evaluating(model):
            model(tokens.to(_model_device(model)))
    finally:
        for h in handles:
            h.remove()
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


def predict(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The model's arg-max prediction: ``(B, L)`` next tokens for a language model, ``(B,)`` classes
    for a classifier (a 1-D ``tokens`` gives results without the batch dimension)."""
    squeeze = isinstance(tokens, torch.Tensor) and tokens.dim() == 1
    batch = _check_tokens(tokens)
    with evaluating(model):
        out = model(batch.to(_model_device(model))).argmax(-1).cpu()
    return out[0] if squeeze else out


def parameter_count(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters; complex parameters count their real and imaginary parts."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters()
               if p.requires_grad or not trainable_only)
