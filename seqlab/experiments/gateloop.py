"""GateLoop's Memory Horizon experiment (paper 004 §5.1, Fig. 5-7, Appendix C.1).

Two models that differ only in their state transition, data-controlled (eq. 25) or fixed (one
learned ``a`` per channel), trained on Memory Horizon; returned: their test accuracies (Fig. 6),
accuracy against the required memory span (Fig. 7), the histories and the trained models (for the
transition heatmaps of Fig. 5, read by ``seqlab.readout.gateloop_transitions``).

Sizes: ``quick`` (CPU, minutes): ``seq_len=128``, 2 layers of ``d_model=32``; ``full``: Appendix C.1
(``seq_len=1024``, 4 layers, ``d_model=d_qk=d_v=64``, 64 heads, ``d_ff=128``, batch 32, lr 0.0025,
AdamW, weight decay 0.05, 10000 warm-up steps then cosine decay; the paper's 300 epochs of 2000
samples are 18750 steps; ``seqlab.train.fit`` keeps AdamW's default betas, not the paper's (0.9, 0.98)).
"""
from __future__ import annotations

import torch

from seqlab import config
from seqlab.experiments import experiment
from seqlab.tasks.base import IGNORE

__all__ = ["memory_horizon_comparison", "accuracy_by_span"]


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


@experiment("gateloop-memory-horizon")
def memory_horizon_comparison(*, profile: str | None = None, seq_len: int | None = None, steps: int | None = None,
                              d_model: int | None = None, n_layers: int | None = None, n_heads: int | None = None,
                              batch_size: int = 32, lr: float | None = None, train_size: int | None = None,
                              test_size: int | None = None, seed: int = 0, progress: bool = True,
                              callbacks=()) -> dict:
    """Data-controlled vs fixed state transitions on Memory Horizon (Fig. 6-7).

    Returns ``{"accuracy": {"data_controlled": float, "fixed": float}, "by_span": {variant: rows},
    "histories": {variant: History}, "models": {variant: model}, "task": task, "config": dict}``.
    """
    from seqlab import models, tasks, train

    profile = profile or config.profile()
    full = profile == "full"
    cfg = dict(
        seq_len=seq_len or (1024 if full else 128),
        steps=steps or (18750 if full else 250),
        d_model=d_model or (64 if full else 32),
        n_layers=n_layers or (4 if full else 2),
        n_heads=n_heads,
        lr=lr or (2.5e-3 if full else 5e-3),
        train_size=train_size or 2000,
        test_size=test_size or (500 if full else 200),
        batch_size=batch_size,
    )
    task = tasks.memory_horizon(seq_len=cfg["seq_len"], train_size=cfg["train_size"], test_size=cfg["test_size"],
                                seed=seed)
    results = {"accuracy": {}, "by_span": {}, "histories": {}, "models": {}, "task": task, "config": cfg}
    for variant, data_controlled in (("data_controlled", True), ("fixed", False)):
        config.seed_everything(seed)
        model = models.build("gateloop", vocab_size=task.vocab_size, d_model=cfg["d_model"], n_layers=cfg["n_layers"],
                             n_heads=cfg["n_heads"], d_ff=2 * cfg["d_model"], data_controlled=data_controlled)
        history = train.fit(model, task, steps=cfg["steps"], batch_size=batch_size, lr=cfg["lr"], seed=seed,
                            weight_decay=0.05, warmup=10000 if full else None, progress=progress,
                            desc=f"GateLoop {variant}",
                            callbacks=callbacks)
        results["histories"][variant] = history
        results["models"][variant] = model
        results["accuracy"][variant] = float(train.evaluate(model, task, split="test")["accuracy"])
        results["by_span"][variant] = accuracy_by_span(model, task)
    return results
