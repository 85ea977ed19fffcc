"""The CausalRN / BiRN experiments of papers 000 and 001, as functions.

Each takes ``profile=None`` (``seqlab.config.profile()``): ``quick`` sizes run on a CPU in seconds
(the lesson calls them), ``full`` sizes are the papers' (001 App. D / 000 App. B: d_e = 192,
12 blocks, batch 320, Adam at 5e-4, 2000 iterations, strings of 128), read from ``configs/``. Any size
can be overridden by keyword; ``checkpoint_dir=DIR`` saves every run there and resumes it. Every
experiment returns a plain dict.

- ``relation-copying``: CausalRN (exact pre-activation norm) against the linear CausalRN on the
  copying task under one budget (001 Fig. 4: only the former copies).
- ``relation-copying-ablation``: 001 Fig. 2 / 000 Fig. 3 (post-reduction norm on/off;
  pre-activation norm none/approx/exact; exp/relu/elu) and 000 Fig. 4d (state expansion 1/2/4).
- ``relation-copying-scaling``: iterations to 99 % accuracy against string length (001 Fig. 4)
  for causalrn, linear-causalrn, transformer and linear-transformer.
- ``relation-birn-digits``: a BiRN with a CLS token on 2x2 patches of the 8x8 digits, and the
  CLS heat map of 000 Fig. 7 read out by ``seqlab.readout.birn_cls_heatmap``.
- ``relation-text``: a linear CausalRN character model (000 §4.3) and a sample from it.
"""
from __future__ import annotations

from seqlab import config
from seqlab.experiments import experiment
from seqlab.train.config import TrainConfig
from seqlab.experiments._common import (Sizes, checkpointing, eval_split, profile_sizes, test_metrics,
                                        validation_accuracy)

__all__ = ["copying_pair", "copying_ablation", "copying_scaling", "birn_digits", "text_model", "SIZES",
           "ABLATION_VARIANTS", "train_copying"]

# Quick sizes, tuned to run on 2 busy CPU cores; the full sizes (the papers') are in configs/<experiment>.toml,
# the medium ones in configs/medium/. ``validation_size`` (optional): a validation split that the runs are
# watched on (the quick profile has none and watches the test split, as its lessons were made).
SIZES = {
    "copying": Sizes("relation-copying", dict(
        length=16, d_model=64, n_layers=1, steps=250, batch_size=16, lr=3e-3, train_size=8000, test_size=256,
        eval_every=25), optional=("validation_size",)),
    "ablation": Sizes("relation-copying-ablation", dict(
        length=6, d_model=64, n_layers=1, steps=120, batch_size=16, lr=3e-3, train_size=4000, test_size=128,
        eval_every=20), optional=("validation_size",)),
    "scaling": Sizes("relation-copying-scaling", dict(
        lengths=(4, 8), d_model=64, n_layers=1, steps=150, batch_size=16, lr=3e-3, train_size=4000,
        test_size=128, eval_every=10), optional=("validation_size",)),
    "birn": Sizes("relation-birn-digits", dict(
        d_model=32, n_layers=2, steps=400, batch_size=32, lr=3e-3, levels=2, pre_norm="approx")),
    "text": Sizes("relation-text", dict(
        d_model=64, n_layers=2, steps=150, batch_size=32, lr=3e-3, seq_len=64, max_chars=300_000)),
}

# 001 Fig. 2 / 000 Fig. 3-4: the proposed CausalRN, then one change at a time.
BASE = dict(activation="exp", pre_norm="exact", post_norm=True, state_expansion=1)
ABLATION_VARIANTS = {
    "post-norm": {"post-norm on (proposed)": {}, "post-norm off": {"post_norm": False}},
    "pre-norm": {"exact (proposed)": {}, "approx": {"pre_norm": "approx"}, "none": {"pre_norm": "none"}},
    "activation": {"exp (proposed)": {}, "relu": {"activation": "relu"}, "elu": {"activation": "elu"}},
    "state-expansion": {"1x": {}, "2x": {"state_expansion": 2}, "4x": {"state_expansion": 4}},
}
GROUP_SETTING = {"post-norm": "post_norm", "pre-norm": "pre_norm", "activation": "activation",
                 "state-expansion": "state_expansion"}      # the block's keyword each group changes


def _copy_run(s: dict, seed: int, model_name: str, run_name: str, checkpoint_dir, progress: bool) -> TrainConfig:
    """A copying experiment's run of ``model_name`` at sizes ``s``, saved as ``run_name`` under ``checkpoint_dir``
    and resumed from there."""
    return TrainConfig.from_sizes(s, seed=seed, progress=progress, desc=model_name,
                                  **checkpointing(checkpoint_dir, run_name, s["steps"]))


def _copy_task(length: int, train_size: int, test_size: int, seed: int, validation_size: int | None = None):
    from seqlab import tasks

    return tasks.copying(min_len=length, max_len=length, train_size=train_size, test_size=test_size, seed=seed,
                         autoregressive_n=0, validation_size=validation_size or 0)


def train_copying(model_name: str, task, run: TrainConfig, *, d_model: int, n_layers: int, callbacks=(),
                  stop_at: float | None = None, **model_config):
    """Build ``model_name`` for ``task`` and fit it as ``run`` says (its ``seed`` seeds the model too); ``stop_at``:
    stop once the accuracy on the watched split (:func:`~seqlab.experiments._common.eval_split`: validation where
    the task has one, else test) reaches it.

    Returns ``(model, history)``; ``history.final`` holds the last evaluation of the watched split."""
    from seqlab import models, train

    config.seed_everything(run.seed)
    extra = {"n_heads": 1} if "transformer" in model_name else {}   # 001 App. D: one head was best
    model_config.setdefault("positions", "learned")                # 001 App. D: trainable positions, every model
    model = models.build(model_name, vocab_size=task.vocab_size, d_model=d_model, n_layers=n_layers, **extra, **model_config)
    callbacks = list(callbacks)
    watched = eval_split(task)
    if stop_at is not None:
        callbacks.append(_StopAt(stop_at, watched))
    history = train.fit(model, task, TrainConfig.of(run, eval_split=watched), callbacks=callbacks)
    if history.final is None:   # stopped early: the last evaluation is the final one
        evals = history.split(watched)
        history.final = {k: v for k, v in evals[-1].items() if k not in ("step", "split")} if evals else None
    return model, history


class _StopAt:
    def __init__(self, threshold: float, split: str = "test"):
        self.threshold, self.split = threshold, split

    def __call__(self, history, record):
        from seqlab.train import StopTraining

        if record.get("split") == self.split and record.get("accuracy", 0.0) >= self.threshold:
            raise StopTraining


@experiment("relation-copying")
def copying_pair(*, profile: str | None = None, seed: int = 0, callbacks=(), progress: bool = True,
                 checkpoint_dir: str | None = None, **sizes) -> dict:
    """CausalRN (quadratic, exact pre-activation norm) vs linear CausalRN, same budget (001 Fig. 4).

    Returns ``{"accuracy": {name: final parallel test accuracy}, "validation": {name: final parallel accuracy on
    the validation split, None without one}, "histories": {name: History}, "models": {name: trained model},
    "task": the copying task, "sizes": ...}``."""
    s = profile_sizes(SIZES["copying"], profile, sizes)
    task = _copy_task(s["length"], s["train_size"], s["test_size"], seed, s.get("validation_size"))
    out = {"accuracy": {}, "validation": {}, "histories": {}, "models": {}, "task": task, "sizes": s}
    for name in ("causalrn", "linear-causalrn"):
        cbs = [cb.run(name) if hasattr(cb, "run") else cb for cb in callbacks]
        run = _copy_run(s, seed, name, f"{name}-seed{seed}", checkpoint_dir, progress)
        model, history = train_copying(name, task, run, d_model=s["d_model"], n_layers=s["n_layers"], callbacks=cbs)
        out["models"][name] = model
        out["histories"][name] = history
        out["accuracy"][name] = test_metrics(model, task, history)["accuracy"]
        out["validation"][name] = validation_accuracy(task, history)
    return out



@experiment("relation-copying-ablation")
def copying_ablation(*, profile: str | None = None, seed: int = 0, groups=None, progress: bool = False,
                     checkpoint_dir: str | None = None, **sizes) -> dict:
    """001 Fig. 2 (a-c) and 000 Fig. 4d: the proposed CausalRN, changing one component at a time.

    Returns ``{"groups": {group: {label: History}}, "final": {group: {label: test accuracy}}, "validation":
    {group: {label: validation accuracy, None without a validation split}}, "by_value": {group: {the setting's
    value: test accuracy}} (``by_value["activation"]["relu"]``), "validation_by_value": the same on the validation
    split, "sizes": ...}``; the proposed configuration is trained once and shared by every group."""
    s = profile_sizes(SIZES["ablation"], profile, sizes)
    groups = list(groups or ABLATION_VARIANTS)
    bad = [g for g in groups if g not in ABLATION_VARIANTS]
    if bad:
        raise ValueError(f"groups: unknown {bad}; expected some of {list(ABLATION_VARIANTS)}")
    task = _copy_task(s["length"], s["train_size"], s["test_size"], seed, s.get("validation_size"))
    cache: dict[tuple, tuple] = {}
    out = {"groups": {}, "final": {}, "validation": {}, "by_value": {}, "validation_by_value": {}, "sizes": s}
    for group in groups:
        out["groups"][group], out["final"][group], out["validation"][group] = {}, {}, {}
        out["by_value"][group], out["validation_by_value"][group] = {}, {}
        for label, change in ABLATION_VARIANTS[group].items():
            cfg = {**BASE, **change}
            key = tuple(sorted(cfg.items()))
            if key not in cache:
                name = "-".join(f"{k}={v}" for k, v in key) + f"-seed{seed}"
                run = _copy_run(s, seed, "causalrn", name, checkpoint_dir, progress)
                model, history = train_copying("causalrn", task, run, d_model=s["d_model"], n_layers=s["n_layers"],
                                               **cfg)
                cache[key] = (history, test_metrics(model, task, history)["accuracy"])
            history, accuracy = cache[key]
            out["groups"][group][label] = history
            out["final"][group][label] = accuracy
            out["validation"][group][label] = validation_accuracy(task, history)
            value = str(cfg[GROUP_SETTING[group]])
            out["by_value"][group][value] = accuracy
            out["validation_by_value"][group][value] = out["validation"][group][label]
    return out


@experiment("relation-copying-scaling")
def copying_scaling(*, profile: str | None = None, seed: int = 0, names=("causalrn", "linear-causalrn", "transformer",
                    "linear-transformer"), threshold: float = 0.99, progress: bool = False,
                    checkpoint_dir: str | None = None, **sizes) -> dict:
    """Iterations until 99 % accuracy against string length (001 Fig. 4 / 000 Fig. 6), the accuracy watched on
    the validation split where the sizes give one (``validation_size``), else on the test split.

    Returns ``{"lengths": [...], "iterations": {name: [steps or None (not reached)]}, "final": {name: [test
    accuracy where the run stopped]}, "at_longest": {"length", "steps": {name: steps, the budget where not
    reached}, "censored": {name: not reached}, "test_accuracy": {name: ...}}, ...}``."""
    s = profile_sizes(SIZES["scaling"], profile, sizes)
    out = {"lengths": list(s["lengths"]), "iterations": {}, "final": {}, "max_steps": s["steps"], "sizes": s}
    for name in names:
        out["iterations"][name], out["final"][name] = [], []
        for length in s["lengths"]:
            task = _copy_task(length, s["train_size"], s["test_size"], seed, s.get("validation_size"))
            run = _copy_run(s, seed, name, f"{name}-L{length}-seed{seed}", checkpoint_dir, progress)
            model, history = train_copying(name, task, run, d_model=s["d_model"], n_layers=s["n_layers"],
                                           stop_at=threshold)
            reached = [r["step"] for r in history.split(eval_split(task)) if r["accuracy"] >= threshold]
            out["iterations"][name].append(reached[0] if reached else None)
            out["final"][name].append(test_metrics(model, task, history)["accuracy"])
    reached = {name: out["iterations"][name][-1] for name in names}
    out["at_longest"] = {"length": out["lengths"][-1],
                         "steps": {name: s["steps"] if n is None else n for name, n in reached.items()},
                         "censored": {name: n is None for name, n in reached.items()},
                         "test_accuracy": {name: out["final"][name][-1] for name in names}}
    return out


@experiment("relation-birn-digits")
def birn_digits(*, profile: str | None = None, seed: int = 0, callbacks=(), progress: bool = True, examples: int = 6,
                checkpoint_dir: str | None = None, **sizes) -> dict:
    """A linear BiRN classifier with a CLS token on 2x2 patches of the 8x8 digits (000 §4.3), and
    the CLS heat maps of 000 Fig. 7 for the first ``examples`` test images.

    Returns ``{"accuracy", "history", "model", "task", "heatmaps" (n, rows, cols), "images" (n, 8, 8),
    "labels"}``."""
    from seqlab import readout, models, tasks, train

    s = profile_sizes(SIZES["birn"], profile, sizes)
    task = tasks.digits(layout="patches", levels=s["levels"])
    config.seed_everything(seed)
    model = models.build("birn", vocab_size=task.vocab_size, num_classes=task.num_classes, max_len=task.seq_len,
                         d_model=s["d_model"], n_layers=s["n_layers"], pre_norm=s["pre_norm"])
    run = TrainConfig.from_sizes(s, seed=seed, progress=progress, desc="birn",
                                 **checkpointing(checkpoint_dir, f"birn-seed{seed}", s["steps"]))
    history = train.fit(model, task, run, callbacks=callbacks)
    test = task.tensors("test")
    tokens = test["input_ids"][:examples]
    heat = readout.birn_cls_heatmap(model, tokens, task.info["grid"], layer=-1)
    images = _digit_images(task, examples)
    return {"accuracy": history.final["accuracy"], "history": history, "model": model, "task": task,
            "heatmaps": heat, "images": images, "labels": test["labels"][:examples], "sizes": s}


def _digit_images(task, n: int):
    """The original 8x8 images of the first ``n`` test examples (for showing beside the heat maps)."""
    import torch
    from sklearn.datasets import load_digits

    index = task.splits["test"]["index"][:n]
    return torch.as_tensor(load_digits().images[index])


@experiment("relation-text")
def text_model(*, profile: str | None = None, seed: int = 0, callbacks=(), progress: bool = True,
               prompt: str = "To be, or not ", new_tokens: int = 120, temperature: float = 0.8, top_k: int | None = 20,
               dataset: str | None = None, dataset_config: str | None = None, checkpoint_dir: str | None = None,
               **sizes) -> dict:
    """A linear CausalRN character model on the default corpus (Shakespeare, ``data/corpus/``) or on a HuggingFace
    data set (000 §4.3 used ``dataset="wikitext", dataset_config="wikitext-103-raw-v1"``, prompt
    ``"Three years later,"``), and a sample from ``prompt`` through the O(1)-per-token decoding step.

    Returns ``{"history", "model", "task", "sample", "bits_per_char"}``."""
    import math

    import seqlab
    from seqlab import models, tasks, train

    s = profile_sizes(SIZES["text"], profile, sizes)
    task = tasks.text(dataset=dataset, dataset_config=dataset_config, seq_len=s["seq_len"], max_chars=s["max_chars"])
    config.seed_everything(seed)
    model = models.build("linear-causalrn", vocab_size=task.vocab_size, d_model=s["d_model"], n_layers=s["n_layers"])
    run = TrainConfig.from_sizes(s, seed=seed, progress=progress, desc="linear-causalrn (text)",
                                 **checkpointing(checkpoint_dir, f"text-seed{seed}", s["steps"]))
    history = train.fit(model, task, run, callbacks=callbacks)
    sample = seqlab.generate(model, prompt, new_tokens, temperature=temperature, top_k=top_k, seed=seed)
    return {"history": history, "model": model, "task": task, "sample": sample,
            "bits_per_char": history.final["loss"] / math.log(2), "sizes": s}
