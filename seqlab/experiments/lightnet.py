"""The LightNet experiments of paper 003, as functions (lesson 04 and ``benchmarks/decay.py`` call them).

- ``decay-speed`` (:func:`scan_speed`): Fig. 2 on CPU, non-causal 1 scan (additive, eq. 8) against
  2 scans (multiplicative, forward + backward chunked scans), forward and backward.
- ``lightnet-digits`` (:func:`digits_classifier`): the non-causal LightNet classifier on the 8x8
  digits as a 2-D grid (MD-TPE, MD-LRPE, additive decay in one scan).
- ``lightnet-ablation`` (:func:`ablation`): the same without TPE / LRPE / decay (Tables 1, 5-7).
- ``lightnet-copying`` (:func:`causal_lm`): the causal LightNet LM (1-D TPE/LRPE, eq. 7) on copying.

``profile=None`` means ``seqlab.config.profile()``; ``quick`` sizes train on a busy 2-core CPU in
tens of seconds on one intra-op thread (``threads=1``), ``full`` sizes are GPU-sized (``configs/``). Any size
can be overridden by keyword; ``checkpoint_dir=DIR`` saves every training run there and resumes it. Every
experiment returns a plain dict.
"""
from __future__ import annotations

import time

import torch

from seqlab import config
from seqlab.experiments import experiment
from seqlab.experiments._common import (Sizes, checkpointing, eval_split, min_seconds, profile_sizes, test_metrics,
                                        validation_accuracy)

__all__ = ["scan_speed", "digits_classifier", "ablation", "causal_lm", "DIGITS_SIZES", "COPYING_SIZES",
           "ABLATION_SIZES", "SPEED_SIZES"]


# ----------------------------------------------------------------------------------------------
# Fig. 2: one scan against two scans
# ----------------------------------------------------------------------------------------------



def _backward_time(fn, inputs, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        for t in inputs:
            t.grad = None
        out = fn()
        weight = torch.ones_like(out)
        t0 = time.perf_counter()
        out.backward(weight)
        best = min(best, time.perf_counter() - t0)
    return best


# The sizes of the timing claim (python -m seqlab reproduce lightnet-one-scan): quick as lesson 04 times it, medium
# in configs/medium/decay-speed.toml. (decay-speed itself takes them as arguments: it has no profile.)
SPEED_SIZES = Sizes("decay-speed", dict(lengths=(512, 1024, 2048, 4096), heads=4, dim=64, repeats=2, threads=1))


@experiment("decay-speed")
def scan_speed(*, lengths=(512, 1024, 2048, 4096, 8192), heads: int = 4, dim: int = 64, repeats: int = 5,
               threads: int | None = 1, loop_max: int = 0, seed: int = 0, progress: bool = False) -> list[dict]:
    """Times (ms, min over ``repeats``) of non-causal decay attention, ``B=1, H=heads, dk=dv=dim``.

    ``one``: additive decay, eq. 8 (``decay_attention(q, k, v, causal=False)``); ``two``: multiplicative
    decay with one decay per head, forward + backward chunked scans; ``loop``: the eq. 7 recurrence run
    to the end (the sequential reference, for ``L <= loop_max``); ``floor``: one elementwise pass
    reading q, k, v and writing o (``addcmul``). Returns one dict per length; its ``ratio`` is two scans' time
    over one's, forward and backward together (``relative``: each method's time over one scan's).
    """
    from tqdm.auto import tqdm

    from seqlab.ops.decay import decay_attention

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(seed)
    rows = []
    try:
        for L in tqdm(list(lengths), desc="1 scan vs 2 scans", disable=not progress):
            q, k, v = (torch.randn(1, heads, L, dim, generator=gen) for _ in range(3))
            ld = torch.rand(1, heads, L, 1, generator=gen) * 0.1

            def one(q=q, k=k, v=v):
                return decay_attention(q, k, v, decay="additive", causal=False)

            def two(q=q, k=k, v=v):
                return decay_attention(q, k, v, decay="multiplicative", log_decay=ld, causal=False)

            with torch.no_grad():
                one(), two()                                                        # warm-up
                row = {"L": L, "one_fwd_ms": 1e3 * min_seconds(one, repeats), "two_fwd_ms": 1e3 * min_seconds(two, repeats),
                       "floor_ms": 1e3 * min_seconds(lambda: torch.addcmul(q, k, v), repeats)}
                row["loop_fwd_ms"] = (1e3 * min_seconds(lambda: decay_attention(q, k, v, causal=False, mode="recurrent"), 1)
                                      if L <= loop_max else None)
            leaves = [t.requires_grad_(True) for t in (q, k, v)]
            row["one_bwd_ms"] = 1e3 * _backward_time(one, leaves, repeats)
            row["two_bwd_ms"] = 1e3 * _backward_time(two, leaves, repeats)
            row["ratio_fwd"] = row["two_fwd_ms"] / row["one_fwd_ms"]
            row["ratio_bwd"] = row["two_bwd_ms"] / row["one_bwd_ms"]
            row["ratio"] = (row["two_fwd_ms"] + row["two_bwd_ms"]) / (row["one_fwd_ms"] + row["one_bwd_ms"])
            row["relative"] = {"one_scan": 1.0, "two_scans": row["ratio"]}
            rows.append(row)
    finally:
        torch.set_num_threads(before)
    return rows


# ----------------------------------------------------------------------------------------------
# Training: the non-causal grid classifier, its ablation, the causal language model
# ----------------------------------------------------------------------------------------------

# Quick sizes (a busy CPU thread, about a minute); the full ones are in configs/lightnet-*.toml.
# quick digits: 2x2 binary patches on the 4x4 grid (16 tokens, vocabulary 16)
DIGITS_SIZES = Sizes("lightnet-digits", dict(
    d_model=64, n_layers=2, n_heads=4, steps=300, batch_size=64, lr=3e-3, eval_every=50, threads=1,
    task_config=dict(layout="patches", patch=2, levels=2), lrpe_base=10.0, abs_pos=True))

# small and short, so that five variants train in about a minute; no absolute positions, so that MD-TPE and
# MD-LRPE are the only sources of position (as in the paper's ablations)
ABLATION_SIZES = Sizes("lightnet-ablation", dict(
    d_model=32, n_layers=1, n_heads=4, steps=120, batch_size=64, lr=5e-3, eval_every=None, threads=1,
    task_config=dict(layout="patches", patch=2, levels=2), lrpe_base=10.0, abs_pos=False))

ABLATIONS = {
    "LightNet": {},
    "w/o TPE": {"tpe": False},
    "w/o LRPE": {"lrpe": False},
    "w/o TPE and LRPE": {"tpe": False, "lrpe": False},
    "w/o Decay": {"decay": "none"},
}

COPYING_SIZES = Sizes("lightnet-copying", dict(
    d_model=64, n_layers=2, n_heads=4, steps=120, batch_size=64, lr=3e-3, eval_every=50, threads=1,
    task_config=dict(min_len=8, max_len=8, autoregressive_n=64)))

def _model_config(sizes: dict) -> dict:
    """The sizes that are the model's: every key that is not a training setting (:class:`TrainConfig`'s fields)."""
    from seqlab.train.config import TrainConfig

    return {k: v for k, v in sizes.items() if k not in TrainConfig.fields()}


def _train(task, model_config: dict, sizes: dict, *, seed: int, callbacks=(), desc: str | None = None,
           progress: bool = True, checkpoint_dir: str | None = None, run_name: str = "lightnet") -> dict:
    from seqlab import train
    from seqlab.models import build
    from seqlab.train.config import TrainConfig

    config.seed_everything(seed)
    model = build("lightnet", vocab_size=task.vocab_size, num_classes=task.num_classes, seq_len=task.seq_len,
                  **model_config)
    run = TrainConfig.from_sizes(sizes, seed=seed, desc=desc, progress=progress, eval_split=eval_split(task),
                                 **checkpointing(checkpoint_dir, f"{run_name}-seed{seed}", sizes["steps"]))
    history = train.fit(model, task, run, callbacks=callbacks)
    final = test_metrics(model, task, history)
    return {"model": model, "history": history, "accuracy": float(final["accuracy"]), "loss": float(final["loss"]),
            "validation_accuracy": validation_accuracy(task, history), "config": model_config}


def _digits_task(sizes: dict):
    from seqlab import tasks

    return tasks.digits(**sizes["task_config"])


@experiment("lightnet-digits")
def digits_classifier(*, profile: str | None = None, seed: int = 0, callbacks=(), progress: bool = True,
                      checkpoint_dir: str | None = None, **overrides) -> dict:
    """The non-causal LightNet classifier on the digits patch grid (``task.info["grid"]``): MD-TPE,
    MD-LRPE and additive decay in one scan (eq. 8). Returns ``model, history, accuracy, loss, task, config``."""
    sizes = profile_sizes(DIGITS_SIZES, profile, overrides, strict=False)
    task = _digits_task(sizes)
    model_config = _model_config(sizes)
    model_config["grid"] = task.info["grid"]
    out = _train(task, model_config, sizes, seed=seed, callbacks=callbacks, desc="LightNet on digits", progress=progress,
                 checkpoint_dir=checkpoint_dir, run_name="digits")
    out["task"] = task
    return out


@experiment("lightnet-ablation")
def ablation(*, profile: str | None = None, seed: int = 0, variants: dict | None = None, callbacks_for=None,
             progress: bool = True, checkpoint_dir: str | None = None, **overrides) -> dict:
    """LightNet with and without MD-TPE, MD-LRPE and the additive decay (Tables 1, 5-7) on digits.

    ``variants``: ``{name: config changes}`` (default :data:`ABLATIONS`); ``callbacks_for(name)`` may
    return fit callbacks per variant. Returns ``rows`` (``variant, accuracy, loss, parameters`` and
    ``validation_accuracy``: None unless ``task_config`` give the digits a validation split), ``accuracy`` and
    ``validation`` (the rows' two accuracies), ``histories`` and ``models`` keyed by variant.
    """
    from seqlab.models import count_parameters

    sizes = profile_sizes(ABLATION_SIZES, profile, overrides, strict=False)
    task = _digits_task(sizes)
    base = _model_config(sizes)
    base["grid"] = task.info["grid"]
    rows, histories, models = [], {}, {}
    for name, change in (variants or ABLATIONS).items():
        cbs = callbacks_for(name) if callbacks_for else ()
        run = _train(task, {**base, **change}, sizes, seed=seed, callbacks=cbs, desc=name, progress=progress,
                     checkpoint_dir=checkpoint_dir, run_name=name)
        rows.append({"variant": name, "accuracy": run["accuracy"], "loss": run["loss"],
                     "parameters": count_parameters(run["model"]), "validation_accuracy": run["validation_accuracy"]})
        histories[name], models[name] = run["history"], run["model"]
    return {"rows": rows, "accuracy": {r["variant"]: r["accuracy"] for r in rows},
            "validation": {r["variant"]: r["validation_accuracy"] for r in rows}, "histories": histories,
            "models": models, "task": task}


@experiment("lightnet-copying")
def causal_lm(*, profile: str | None = None, seed: int = 0, callbacks=(), progress: bool = True,
              checkpoint_dir: str | None = None, **overrides) -> dict:
    """The causal LightNet language model (1-D TPE and LRPE, eq. 7) on the copying task."""
    from seqlab import tasks

    sizes = profile_sizes(COPYING_SIZES, profile, overrides, strict=False)
    task = tasks.copying(**sizes["task_config"])
    model_config = _model_config(sizes)
    config.seed_everything(seed)
    from seqlab import train
    from seqlab.models import build
    from seqlab.train.config import TrainConfig

    model = build("lightnet", vocab_size=task.vocab_size, **model_config)
    run = TrainConfig.from_sizes(sizes, seed=seed, desc="causal LightNet on copying", progress=progress,
                                 **checkpointing(checkpoint_dir, f"copying-seed{seed}", sizes["steps"]))
    history = train.fit(model, task, run, callbacks=callbacks)
    return {"model": model, "history": history, "accuracy": float(history.final["accuracy"]),
            "final": dict(history.final), "task": task, "config": model_config}
