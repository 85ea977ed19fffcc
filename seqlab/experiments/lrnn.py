"""The LRNN / FST experiments of paper 002, as functions.

Each takes ``profile=None`` (``seqlab.config.profile()``): ``quick`` sizes train on 2 busy CPU cores
in seconds (lesson 03 calls them), ``full`` sizes follow the paper (§3.1 Long ListOps: 6 FST
blocks of hidden size 256, sequences up to 2000; §3.2 pixel MNIST: 2 FST blocks of hidden size
128) and are read from ``configs/fst-comparison.toml``. Any size can be overridden by keyword. Every experiment returns a plain dict.

- ``fst-comparison``: FST against LRNN-only blocks (002 §3.5's ablation) against a Transformer
  encoder with learned positions predicting from the last element (002 §3.2), at matched
  parameter counts, on ``digits`` (pixel by pixel) or ``listops``; plus ``alpha1 / alpha2`` of
  every FST block after training (002 Fig. 3).
- ``fst-parameter-table``: parameter counts of the three families over hidden sizes and depths.
- ``fst-twist-cost``: the cost of the twisted half against the hidden feature size ``H`` when the
  feature axis is mixed by an LRNN (``O(H L^2)``) or by softmax attention (``O(H^2 L)``), 002 §2.2.

``threads=1`` in the quick profile: small models on a busy shared CPU train many times faster
on one intra-op thread (and the result does not depend on it).

Matching rule: the FST model sets the budget (``d_model``, ``n_layers``); LRNN-only uses
``2 * n_layers`` blocks (an FST block is two halves), the Transformer ``n_layers`` blocks; the width of
each is the one whose parameter count is closest to the FST's.
"""
from __future__ import annotations

import time

import torch

from seqlab import config
from seqlab.experiments import experiment
from seqlab.experiments._common import (Sizes, checkpointing, eval_split, min_seconds, profile_sizes, test_metrics,
                                        validation_accuracy)

__all__ = ["SIZES", "make_task", "matched_width", "comparison_models", "fst_comparison", "parameter_table",
           "twist_cost"]

# Quick sizes, a CPU in seconds; the full sizes (002 §3.1, §3.2) are in configs/fst-comparison.toml.
SIZES = {
    "digits": Sizes("fst-comparison", dict(
        d_model=32, n_layers=2, steps=120, batch_size=32, lr=5e-3, transformer_lr=3e-3, eval_every=40, threads=1,
        task_config={}), section="digits"),
    # quick listops: shallow expressions (depth <= 3, <= 4 arguments, 4..32 tokens) that a CPU learns in seconds
    "listops": Sizes("fst-comparison", dict(
        d_model=32, n_layers=2, steps=200, batch_size=32, lr=5e-3, transformer_lr=3e-3, eval_every=50, threads=1,
        task_config=dict(train_size=4000, validation_size=500, test_size=500, max_depth=3, max_args=4, min_length=4,
                         max_length=32)), section="listops"),
}


def _sizes(task: str, profile: str | None, overrides: dict) -> dict:
    if task not in SIZES:
        raise ValueError(f"task: expected one of {tuple(SIZES)}, got {task!r}")
    return profile_sizes(SIZES[task], profile, overrides)


def make_task(task: str, **task_config):
    """``digits`` in its pixel-by-pixel layout, or ``listops``."""
    from seqlab import tasks

    if task == "digits":
        return tasks.digits(layout="sequence", **task_config)
    if task == "listops":
        return tasks.listops(**task_config)
    raise ValueError(f"task: expected 'digits' or 'listops', got {task!r}")


def matched_width(name: str, target: int, *, widths, vocab_size: int, num_classes: int | None, seq_len: int,
                  **config_) -> tuple[int, int]:
    """``(width, params)``: the width among ``widths`` whose model has the parameter count closest to ``target``.

    The count grows with the width, so the two widths around ``target`` are found by bisection.
    """
    from seqlab.models import build, count_parameters

    widths = sorted(widths)

    def params(i: int) -> int:
        return count_parameters(build(name, vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len,
                                      d_model=widths[i], **config_))

    lo, hi = 0, len(widths) - 1          # invariant: the first width with params >= target lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if params(mid) < target:
            lo = mid + 1
        else:
            hi = mid
    candidates = [(widths[i], params(i)) for i in {max(lo - 1, 0), lo}]
    return min(candidates, key=lambda wn: (abs(wn[1] - target), wn[0]))


def comparison_models(*, vocab_size: int, num_classes: int | None, seq_len: int, d_model: int, n_layers: int) -> dict:
    """The three models at matched parameter counts: ``{name: (config, params)}``."""
    from seqlab.models import build, count_parameters

    fst_cfg = dict(d_model=d_model, n_layers=n_layers)
    target = count_parameters(build("fst", vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len, **fst_cfg))
    common = dict(vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len)
    w_lrnn, n_lrnn = matched_width("lrnn", target, widths=range(8, 8 * d_model + 1, 2), n_layers=2 * n_layers,
                                   **common)
    tf_extra = dict(n_layers=n_layers, n_heads=4, pool="last", causal=False, max_len=seq_len)
    w_tf, n_tf = matched_width("transformer", target, widths=range(8, 8 * d_model + 1, 4), **tf_extra, **common)
    return {
        "fst": (fst_cfg, target),
        "lrnn": (dict(d_model=w_lrnn, n_layers=2 * n_layers), n_lrnn),
        "transformer": (dict(d_model=w_tf, **tf_extra), n_tf),
    }


@experiment("fst-comparison")
def fst_comparison(*, task: str = "digits", profile: str | None = None, models=("fst", "lrnn", "transformer"),
                   seed: int = 0, progress: bool = True, callbacks=(), live=None, checkpoint_dir: str | None = None,
                   **overrides) -> dict:
    """FST vs LRNN-only vs Transformer at matched parameter counts (002 §3.2, §3.5).

    Returns ``{"task", "profile", "sizes", "rows", "accuracy", "validation", "params", "alpha2", "histories",
    "models", "alphas", "data"}``: ``accuracy``, ``validation`` and ``params`` the rows' test accuracy, validation
    accuracy and parameters by model, ``alpha2`` the first and the deepest FST block's, ``rows`` one
    dict per model (``model, config, params, test_accuracy, test_loss, validation_accuracy, seconds``; the runs
    are watched on the task's validation split where ``task_config`` gives one, ``validation_accuracy`` is None
    otherwise), ``histories``
    and ``models`` by name, ``alphas`` the FST's ``[{"block", "alpha1", "alpha2"}]`` after training
    (``None`` when FST was not trained), ``data`` the task. ``callbacks`` are passed to every ``fit``; ``live`` (a
    ``seqlab.viz.LivePlot``) draws every run into one live figure; ``checkpoint_dir`` saves every run there and
    resumes it.
    """
    from seqlab import readout, train
    from seqlab.models import build
    from seqlab.train.config import TrainConfig

    sizes = _sizes(task, profile, overrides)
    data = make_task(task, **sizes["task_config"])
    configs = comparison_models(vocab_size=data.vocab_size, num_classes=data.num_classes, seq_len=data.seq_len,
                                d_model=sizes["d_model"], n_layers=sizes["n_layers"])
    unknown = set(models) - set(configs)
    if unknown:
        raise ValueError(f"models: expected names among {sorted(configs)}, got {sorted(unknown)}")
    rows, histories, trained = [], {}, {}
    for name in models:
        cfg, params = configs[name]
        config.seed_everything(seed)
        model = build(name, vocab_size=data.vocab_size, num_classes=data.num_classes, seq_len=data.seq_len, **cfg)
        lr = sizes["transformer_lr"] if name == "transformer" else sizes["lr"]
        start = time.perf_counter()
        run = TrainConfig.from_sizes(sizes, lr=lr, seed=seed, progress=progress, desc=f"{name} on {task}",
                                     eval_split=eval_split(data),
                                     **checkpointing(checkpoint_dir, f"{name}-{task}-seed{seed}", sizes["steps"]))
        history = train.fit(model, data, run, callbacks=[*callbacks, *([live.run(name)] if live is not None else [])])
        seconds = time.perf_counter() - start
        final = test_metrics(model, data, history)
        rows.append({"model": name, "config": cfg, "params": params, "lr": lr,
                     "test_accuracy": float(final["accuracy"]), "test_loss": float(final["loss"]),
                     "validation_accuracy": validation_accuracy(data, history), "seconds": seconds})
        histories[name], trained[name] = history, model
    alphas = readout.fst_alphas(trained["fst"]) if "fst" in trained else None
    by_model = {key: {r["model"]: r[field] for r in rows} for key, field in
                (("accuracy", "test_accuracy"), ("validation", "validation_accuracy"), ("params", "params"))}
    return {"task": task, "profile": profile or config.profile(), "sizes": sizes, "rows": rows, **by_model,
            "alpha2": {"first_block": alphas[0]["alpha2"], "deepest_block": alphas[-1]["alpha2"]} if alphas else None,
            "histories": histories, "models": trained, "alphas": alphas, "data": data}


@experiment("fst-parameter-table")
def parameter_table(*, vocab_size: int = 17, num_classes: int | None = 10, seq_len: int = 64,
                    widths=(16, 32, 64, 128), depths=(1, 2)) -> dict:
    """Parameter counts of FST and its matched LRNN-only and Transformer models over widths (``d_model``)
    and depths (``n_layers``, FST blocks)."""
    rows = []
    for n_layers in depths:
        for d_model in widths:
            cfg = comparison_models(vocab_size=vocab_size, num_classes=num_classes, seq_len=seq_len, d_model=d_model,
                                    n_layers=n_layers)
            rows.append({"d_model": d_model, "fst_blocks": n_layers,
                         "fst": cfg["fst"][1],
                         "lrnn_only": cfg["lrnn"][1], "lrnn_only_width": cfg["lrnn"][0]["d_model"],
                         "lrnn_only_blocks": cfg["lrnn"][0]["n_layers"],
                         "transformer": cfg["transformer"][1], "transformer_width": cfg["transformer"][0]["d_model"]})
    return {"rows": rows, "seq_len": seq_len, "vocab_size": vocab_size}




@experiment("fst-twist-cost")
def twist_cost(*, seq_len: int = 64, hiddens=(32, 64, 128, 256, 512, 1024), batch: int = 4, repeats: int = 3,
               mode: str = "auto", seed: int = 0) -> dict:
    """Mixing along the feature axis (the twisted half) with an LRNN vs with softmax attention.

    The twisted input is ``(B, H, L)``: ``H`` "time steps" of ``L`` features. An LRNN with state
    size ``L`` costs ``O(H L^2)`` (its ``L x L`` input map at each of ``H`` steps, then a scan),
    attention over ``H`` tokens ``O(H^2 L)`` (an ``H x H`` score matrix). Returns the measured
    forward times (best of ``repeats``) and the multiply counts of the two dominant products.
    """
    import torch.nn.functional as F

    from seqlab.layers.lrnn import LRNN

    gen = config.seed_everything(seed)
    lrnn = LRNN(seq_len, seq_len, mode=mode)
    times = {"LRNN along features": [], "attention along features": []}
    flops = {"LRNN along features": [], "attention along features": []}
    with torch.no_grad():
        for h in hiddens:
            x = torch.randn(batch, h, seq_len, generator=gen)
            times["LRNN along features"].append(min_seconds(lambda: lrnn(x), repeats, warmup=True))
            times["attention along features"].append(
                min_seconds(lambda: F.scaled_dot_product_attention(x, x, x), repeats, warmup=True))
            flops["LRNN along features"].append(4 * h * seq_len * seq_len)        # complex W̄_in: 4 real mults
            flops["attention along features"].append(2 * h * h * seq_len)         # Q K^T and A V
    return {"hiddens": list(hiddens), "seq_len": seq_len, "seconds": times, "multiplies": flops}
