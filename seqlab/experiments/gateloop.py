"""GateLoop's Memory Horizon experiment (paper 004 §5.1, Fig. 5-7, Appendix C.1).

Two models that differ only in their state transition, data-controlled (eq. 25) or fixed (one
learned ``a`` per channel), trained on Memory Horizon; returned: their test accuracies (Fig. 6),
accuracy against the required memory span (Fig. 7), the histories and the trained models (for the
transition heatmaps of Fig. 5, read by ``seqlab.readout.gateloop_transitions``).

Sizes: ``quick`` (CPU, minutes): ``seq_len=128``, 2 layers of ``d_model=32``; ``medium`` (CPU, for the
claim over several seeds): ``configs/medium/gateloop-memory-horizon.toml``, with a validation split and
Appendix C.1's learning rate, warm-up share and AdamW betas; ``full``: Appendix C.1, in
``configs/gateloop-memory-horizon.toml`` (``seq_len=1024``, 4 layers, ``d_model=d_qk=d_v=64``, ``d_ff=128``,
batch 32, lr 0.0025, AdamW with betas (0.9, 0.98) and weight decay 0.05, 10000 warm-up steps then cosine
decay; the paper's 300 epochs of 2000 samples are 18750 steps). Medium and full share the optimiser settings.
"""
from __future__ import annotations

import torch

from seqlab import config
from seqlab.experiments import experiment
from seqlab.experiments._common import (Sizes, checkpointing, eval_split, profile_sizes, test_metrics,
                                        validation_accuracy)
from seqlab.tasks.base import IGNORE

__all__ = ["SIZES", "memory_horizon_comparison", "accuracy_by_span"]


def accuracy_by_span(model, task, split: str = "test", bins=None, batch_size: int = 100) -> list[dict]:
    """Accuracy of ``model`` on ``split`` grouped by required memory span (Fig. 7).

    ``bins``: increasing span edges; bin ``i`` holds spans in ``[bins[i], bins[i+1])``. Returns a
    list of ``{"span_lo", "span_hi", "accuracy", "count"}``.
    """
    from seqlab.readout import predict
    from seqlab.tasks.memory_horizon import memory_spans

    data = task.tensors(split)
    ids, labels = data["input_ids"], data["labels"]
    preds = torch.cat([predict(model, ids[s:s + batch_size]) for s in range(0, ids.shape[0], batch_size)])
    spans = memory_spans(ids, task.info["reset"])
    scored = labels != IGNORE
    if bins is None:
        bins = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1025]
    rows = []
    for lo, hi in zip(bins[:-1], bins[1:]):
        sel = scored & (spans >= lo) & (spans < hi)
        n = int(sel.sum())
        if n:
            rows.append({"span_lo": lo, "span_hi": hi, "accuracy": float((preds[sel] == labels[sel]).float().mean()),
                         "count": n})
    return rows


# Quick sizes: a CPU in minutes. The full sizes (Appendix C.1) are in configs/gateloop-memory-horizon.toml.
# Optional: ``validation_size`` (a validation split, watched instead of the test split), ``betas`` (AdamW's;
# seqlab.train.fit's default where not given) and ``eval_every`` (the watched split's curve: an evaluation every so
# many steps; only the final one where not given).
SIZES = Sizes("gateloop-memory-horizon", dict(
    seq_len=128, steps=250, d_model=32, n_layers=2, n_heads=None, batch_size=32, lr=5e-3, weight_decay=0.05,
    warmup=None, train_size=2000, test_size=200), optional=("validation_size", "betas", "eval_every"))


@experiment("gateloop-memory-horizon")
def memory_horizon_comparison(*, profile: str | None = None, seed: int = 0, progress: bool = True, callbacks=(),
                              checkpoint_dir: str | None = None, **overrides) -> dict:
    """Data-controlled vs fixed state transitions on Memory Horizon (Fig. 6-7).

    Sizes (``seq_len, steps, d_model, n_layers, n_heads, batch_size, lr, weight_decay, warmup, train_size,
    test_size``; optional ``validation_size, betas, eval_every``) come from the profile and may be overridden by keyword.
    ``checkpoint_dir``: save each run there and resume it (``seqlab.experiments`` module doc).

    Returns ``{"accuracy": {"data_controlled": float, "fixed": float}, "validation": {variant: accuracy on the
    validation split, None without one}, "by_span": {variant: rows}, "histories": {variant: History},
    "models": {variant: model}, "task": task, "config": dict}``.
    """
    from seqlab import models, tasks, train
    from seqlab.train.config import TrainConfig

    cfg = profile_sizes(SIZES, profile, overrides)
    task = tasks.memory_horizon(seq_len=cfg["seq_len"], train_size=cfg["train_size"], test_size=cfg["test_size"],
                                seed=seed, validation_size=cfg.get("validation_size") or 0)
    results = {"accuracy": {}, "validation": {}, "by_span": {}, "histories": {}, "models": {}, "task": task,
               "config": cfg}
    for variant, data_controlled in (("data_controlled", True), ("fixed", False)):
        config.seed_everything(seed)
        model = models.build("gateloop", vocab_size=task.vocab_size, d_model=cfg["d_model"], n_layers=cfg["n_layers"],
                             n_heads=cfg["n_heads"], d_ff=2 * cfg["d_model"], data_controlled=data_controlled)
        run = TrainConfig.from_sizes(cfg, seed=seed, progress=progress, desc=f"GateLoop {variant}",
                                     eval_split=eval_split(task),
                                     **checkpointing(checkpoint_dir, f"{variant}-seed{seed}", cfg["steps"]))
        history = train.fit(model, task, run, callbacks=callbacks)
        results["histories"][variant] = history
        results["models"][variant] = model
        results["accuracy"][variant] = float(test_metrics(model, task, history)["accuracy"])
        results["validation"][variant] = validation_accuracy(task, history)
        results["by_span"][variant] = accuracy_by_span(model, task)
    return results
