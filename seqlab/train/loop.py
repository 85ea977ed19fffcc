"""Training and evaluation: ``fit`` / ``evaluate``, histories, callbacks and checkpoints.

``fit(model, task, steps=, batch_size=, lr=)`` runs AdamW with a linear warm-up followed by a
cosine decay, clips the gradient norm, shows a ``tqdm.auto`` progress bar and returns a
:class:`History` of per-step records::

    {"step": 12, "split": "train", "loss": 1.93, "accuracy": 0.41, "lr": 3e-3,
     "tokens_per_s": 5.1e4, "time": 0.8}

plus one record per periodic evaluation (``"split"`` is the evaluated split, e.g. ``"test"``, and
the record holds every metric of :func:`evaluate`).

Callback protocol
-----------------
A callback is any callable ``cb(history, record)``. ``fit`` calls it after each training step's
record has been appended to ``history.records`` and after each evaluation record
(``record["split"]`` is ``"train"`` or the evaluated split's name). A callback may in addition
define ``on_fit_start(model, task)``, ``on_fit_end(history)`` and ``on_resume(step, checkpoint, steps)`` (after a
checkpoint was read back); ``fit`` calls them when present.
Raising :class:`StopTraining` from a callback ends training cleanly after the current step
(a checkpoint is written first when ``checkpoint=`` is given).

Reproducibility
---------------
The batch of step ``s`` is a pure function of ``(seed, s)`` (see :func:`batch_indices`): the
examples of a split are visited in epochs, each epoch a permutation seeded by ``(seed, epoch)``. A task that
draws its training sequences fresh (``task.train_batch(step, batch_size)``) gives the batch of step ``s`` itself.
The learning rate is a pure function of the step. A checkpoint holds the model, the optimizer,
the step, the history and the RNG states, so that ``fit(..., checkpoint=path, resume=True)``
continues the same run bit-for-bit on CPU.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Callable, Iterable

import torch
import torch.nn as nn

from seqlab import config
from seqlab.train import distributed, interrupt
from seqlab.train.checkpoint import (CheckpointError, PeriodicSaver, check_writable, load_checkpoint,  # noqa: F401
                               load_model, remove_stale_temporaries, restore, rng_state, save_checkpoint)
from seqlab.config import model_device
from seqlab.train.history import (INITIAL_LOSS_TOLERANCE, THRESHOLDS, History, PrintCallback,  # noqa: F401
                            check_initial_loss, first_step_at, num_targets, observe, observing, record_run,
                            run_summary)
from seqlab.train.interrupt import CHECKPOINT_EVERY, CHECKPOINT_SECONDS, Interrupted, TrainingInterrupted  # noqa: F401
from seqlab.train.schedule import batch_indices, lr_at
from seqlab.tasks.base import IGNORE, Task, check_compatible, model_name
from seqlab.train.config import TrainConfig

__all__ = ["fit", "TrainConfig", "evaluate", "History", "StopTraining", "TrainingInterrupted", "check_compatible", "lr_at",
           "batch_indices", "save_checkpoint", "load_checkpoint", "load_model", "CheckpointError", "model_device",
           "PrintCallback", "CHECKPOINT_EVERY", "CHECKPOINT_SECONDS", "remove_stale_temporaries", "observe",
           "num_targets", "check_initial_loss", "first_step_at", "run_summary",
           "INITIAL_LOSS_TOLERANCE", "THRESHOLDS"]


class StopTraining(Exception):
    """Raise from a callback to end ``fit`` after the current step."""


# ----------------------------------------------------------------------------- evaluate


def _batch_to(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, split: str = "test", batch_size: int = 256) -> dict:
    """Metrics of ``model`` over a whole split: always ``"loss"`` and ``"accuracy"``, plus every
    other metric of ``task.metrics`` (e.g. ``"sequence_accuracy"``) and of the task's optional
    ``extra_metrics(model, split)`` hook. Sums and counts are aggregated exactly over the split."""
    check_compatible(model, task)
    device = model_device(model)
    was_training = model.training
    model.eval()
    rank, world = distributed.rank_world()
    if -(-task.size(split) // batch_size) < world:
        rank, world = 0, 1          # fewer batches than ranks: every rank evaluates the whole split
    try:
        loss_sum, loss_count = 0.0, 0
        sums: dict[str, list] = {}
        for i, batch in enumerate(task.batches(split, batch_size)):
            if i % world != rank:   # under torchrun: every world-th batch (seqlab.train.distributed)
                continue
            batch = _batch_to(batch, device)
            logits = model(batch["input_ids"])
            count = task.scored(batch)
            if count:
                loss_sum += float(task.loss(logits, batch)) * count
                loss_count += count
            for key, (s, c) in task.metrics(logits, batch).items():
                acc = sums.setdefault(key, [0.0, 0])
                acc[0] += s
                acc[1] += c
        if world > 1:
            keys = sorted(sums)
            total = distributed.all_sum([loss_sum, loss_count] + [x for k in keys for x in sums[k]], device)
            loss_sum, loss_count = total[0], total[1]
            sums = {k: total[2 + 2 * i: 4 + 2 * i] for i, k in enumerate(keys)}
        out = {"loss": loss_sum / max(1, loss_count)}
        out.update({k: s / max(1, c) for k, (s, c) in sums.items()})
        extra = getattr(task, "extra_metrics", None)
        if callable(extra):
            out.update(extra(model, split))
        return out
    finally:
        model.train(was_training)


# ----------------------------------------------------------------------------- fit


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices (dim >= 2) only; biases, norms' gains and scalars are not decayed."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _call_hook(callbacks: Iterable, hook: str, *args) -> None:
    for cb in callbacks:
        fn = getattr(cb, hook, None)
        if callable(fn):
            fn(*args)


def head_on_features(model) -> bool:
    """Whether ``model(x)`` is ``model.head(model.features(x))``, row for row: a language model of seqlab's
    :class:`~seqlab.models.common.SequenceModel` whose ``forward`` is that class's."""
    from seqlab.models.common import SequenceModel

    return (isinstance(model, SequenceModel) and model.num_classes is None
            and type(model).forward is SequenceModel.forward)


def training_logits(net, model, batch: dict, labelled_only: bool) -> tuple[torch.Tensor, dict]:
    """The logits a training step's loss reads, and the batch they score. A language model's loss reads only its
    labelled tokens, so with ``labelled_only`` its head runs on those rows alone: ``head(features(x)[mask])`` holds
    the rows of ``model(x)[mask]`` (the same loss and gradients up to float rounding), and MQAR's 4 labels of 64
    tokens skip most of the head's work and its softmax. Otherwise every position (``net``: the model, or its
    DistributedDataParallel wrapper, which must see the call)."""
    if not labelled_only:
        return net(batch["input_ids"]), batch
    mask = batch["labels"] != IGNORE
    return model.head(model.features(batch["input_ids"])[mask]), {"labels": batch["labels"][mask]}


def fit(model: nn.Module, task: Task, cfg: TrainConfig | None = None, /, *, callbacks: Iterable[Callable] = (),
        **settings) -> History:
    """Train ``model`` on ``task.splits["train"]`` (or, for a :class:`~seqlab.tasks.base.StreamTask`, on the batch
    its ``train_batch(step, batch_size)`` draws for each step) for ``steps`` optimizer steps, as ``cfg`` (a
    :class:`~seqlab.train.config.TrainConfig`) says, its fields replaced by ``settings`` (``fit(model, task,
    steps=800, lr=1e-3)`` builds one from keywords alone; an unknown one is named).

    AdamW (``lr``, ``betas``, ``weight_decay`` on matrices), learning rate warmed up linearly over ``warmup``
    steps (default ``min(100, steps // 10)``) then cosine-decayed to ``final_lr_ratio * lr``;
    gradient norm clipped to ``clip`` (``None``: no clipping). ``seed`` fixes the batch order and
    the torch RNG (dropout). Every ``eval_every`` steps, and once at the end (``final_eval``),
    ``evaluate`` runs on ``eval_split``; the last one is ``history.final``.

    ``checkpoint=path`` writes the run's state there every ``checkpoint_every`` steps (default
    :data:`CHECKPOINT_EVERY`) or ``checkpoint_seconds`` of wall time (default :data:`CHECKPOINT_SECONDS`),
    whichever comes first, at the end, and when Ctrl-C, SIGTERM or SIGUSR1 arrives (:mod:`seqlab.train.interrupt`: the
    step in progress is finished first, then the file is written atomically and :class:`TrainingInterrupted`, a
    ``KeyboardInterrupt``, says the step). A full disk or a folder gone read-only gets a :class:`CheckpointError`
    naming the file and the cause; the previous checkpoint is kept. Under torchrun every rank stops at the same
    step. With ``resume=True`` and an existing file, training continues from it: the result is
    bit-for-bit the run that was never interrupted (on CPU; after a Ctrl-C inside a step with dropout,
    the same run but for that step's dropout draws). A larger ``steps`` extends a finished or saved
    run on the schedule of the new total (see :func:`seqlab.train.checkpoint.restore`). A run that a callback stopped
    (:class:`StopTraining`) is saved as stopped: resuming it returns its history without training.

    ``threads``: intra-op CPU threads during this fit (restored afterwards); ``None`` leaves torch's
    setting. Small models on a busy shared CPU train many times faster with ``threads=1``.

    ``eval_at_start``: evaluate ``eval_split`` before the first step too (a record at step 0, the start of the
    learning curve; the training itself is unchanged). On inside :class:`observe`, which also checks that loss.
    """
    cfg = TrainConfig.of(cfg, **settings)
    threads_before = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        history = _fit(model, task, cfg, callbacks, eval_at_start=cfg.eval_at_start or observing())
    finally:
        if cfg.threads is not None:
            torch.set_num_threads(threads_before)
    record_run(history, task, cfg.desc)
    return history


def _fit(model, task, cfg: TrainConfig, callbacks, *, eval_at_start: bool) -> History:
    steps, batch_size, lr, seed, betas = cfg.steps, cfg.batch_size, cfg.lr, cfg.seed, cfg.betas
    weight_decay, clip, final_lr_ratio = cfg.weight_decay, cfg.clip, cfg.final_lr_ratio
    eval_every, eval_split, eval_batch_size, final_eval = cfg.eval_every, cfg.eval_split, cfg.eval_batch_size, \
        cfg.final_eval
    checkpoint, resume, progress, desc = cfg.checkpoint, cfg.resume, cfg.progress, cfg.desc
    if checkpoint is not None:
        check_writable(checkpoint)
        remove_stale_temporaries(checkpoint)      # what a kill inside an earlier save left behind
    check_compatible(model, task)
    stream = getattr(task, "train_batch", None)    # a StreamTask: a fresh batch every step, no train split
    if "train" not in task.splits and not callable(stream):
        raise ValueError(f"task {task.name!r} has no 'train' split (splits: {sorted(task.splits)})")
    if eval_split is not None and eval_split not in task.splits:
        raise ValueError(f"eval_split: task {task.name!r} has splits {sorted(task.splits)}, got {eval_split!r}")
    warmup = min(100, steps // 10) if cfg.warmup is None else cfg.warmup
    callbacks = (callbacks,) if callable(callbacks) else tuple(callbacks)
    dev = config.device(cfg.device)
    rank, world = 0, 1
    if distributed.launched():          # under torchrun: data-parallel (seqlab.train.distributed)
        rank, world, dev = distributed.setup(dev)
        callbacks = callbacks if rank == 0 else ()
        progress = progress and rank == 0
    model.to(dev)
    run = {**cfg.run_record(), "warmup": warmup, "model": model_name(model),
           "model_config": getattr(model, "model_config", None), "task": task.name,
           "task_config": getattr(task, "task_config", None), "eval_split": eval_split}
    optimizer = torch.optim.AdamW(_param_groups(model, weight_decay), lr=lr, betas=tuple(betas))
    history = History(config=run)
    start, stopped = 0, False
    if resume and os.path.exists(checkpoint):
        start, stopped = restore(checkpoint, model, optimizer, history, run)
        _call_hook(callbacks, "on_resume", start, os.fspath(checkpoint), steps)
        if stopped:     # a callback ended this run (StopTraining) at the saved step: it is finished as it is
            return history
    else:
        if eval_at_start and eval_split:      # before the seed: the training's random draws are not moved
            first = {"step": 0, "split": eval_split, **evaluate(model, task, eval_split, batch_size=eval_batch_size)}
            if observing():
                check_initial_loss(first["loss"], num_targets(task), desc or f"{model_name(model)} on {task.name}")
            history.append(first)
        torch.manual_seed(seed)
    n_train = None if callable(stream) else task.size("train")
    use_amp = dev.type == "cuda" and config.dtype("auto", dev) == torch.bfloat16
    model.train()
    _call_hook(callbacks, "on_fit_start", model, task)

    net = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    labelled_only = world == 1 and task.is_language_model and head_on_features(model)

    saver = None
    if checkpoint is not None:
        saver = PeriodicSaver(checkpoint, lambda step, stopped: {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "run": run,
            "records": history.records, "rng": rng_state(), "stopped": stopped},
            every=cfg.periodic_steps, seconds=cfg.periodic_seconds, last=start if resume and start else None,
            rank=rank)

    def stop_signal() -> int | None:
        """The signal this loop was asked to stop by; under torchrun, one rank's signal stops every rank."""
        signum = interrupt.requested()
        if world > 1:
            signum = int(distributed.all_max([float(signum or 0)], dev)[0]) or None
        return signum

    def emit(record: dict) -> None:
        history.append(record)
        for cb in callbacks:
            cb(history, record)

    from tqdm.auto import tqdm

    bar = tqdm(total=steps, initial=start, disable=not progress, desc=desc or f"{run['model']} on {task.name}",
               dynamic_ncols=True, leave=True)
    step, t0, done = start, time.perf_counter(), start
    applying = False                  # inside optimizer.step(): the parameters are half updated
    try:
        with interrupt.stepping():    # Ctrl-C, SIGTERM, SIGUSR1: a flag read between two steps
            for step in range(start, steps):
                t_step = time.perf_counter()
                lr_now = lr_at(step, lr=lr, steps=steps, warmup=warmup, final_lr_ratio=final_lr_ratio)
                for group in optimizer.param_groups:
                    group["lr"] = lr_now
                if n_train is None:       # drawn fresh for this step (the same on every rank), then sharded
                    batch = stream(step, batch_size)
                    if world > 1:
                        mine = distributed.shard(torch.arange(batch_size), rank, world)
                        batch = {k: v[mine] for k, v in batch.items()}
                else:
                    index = batch_indices(n_train, batch_size, seed, step)
                    if world > 1:
                        index = distributed.shard(index, rank, world)
                    batch = task.batch_at("train", index)
                batch = _batch_to(batch, dev)
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=use_amp):
                    logits, scored = training_logits(net, model, batch, labelled_only)
                loss = task.loss(logits, scored)
                s, c = task.metrics(logits.detach(), scored)["accuracy"]
                objective = loss
                if world > 1:   # the global batch's mean loss: this rank's sum over the global count (module doc)
                    n = task.scored(batch)
                    local_sum = loss * n if n else logits.sum() * 0.0
                    total_sum, total_n, s, c = distributed.all_sum([float(local_sum.detach()), n, s, c], dev)
                    objective = local_sum * (world / max(total_n, 1.0))
                    loss = torch.tensor(total_sum / max(total_n, 1.0))
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"fit: the training loss became {float(loss)} at step {step + 1} "
                                             f"(lr {lr_now:.3g}); lower lr or check the model's numerics")
                optimizer.zero_grad(set_to_none=True)
                objective.backward()
                if clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), clip)
                applying = True
                optimizer.step()
                applying, done = False, step + 1
                elapsed = time.perf_counter() - t_step
                record = {"step": step + 1, "split": "train", "loss": float(loss.detach()),
                          "accuracy": s / max(1, c), "lr": lr_now,
                          "tokens_per_s": batch["input_ids"].numel() / max(elapsed, 1e-9),
                          "time": time.perf_counter() - t0}
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.4f}", acc=f"{record['accuracy']:.3f}", refresh=False)
                stop = False
                try:
                    emit(record)
                    # the last step's evaluation is the final one (below) unless final_eval is off
                    if eval_every and eval_split and (step + 1) % eval_every == 0 and (step + 1 < steps
                                                                                      or not final_eval):
                        emit({"step": step + 1, "split": eval_split,
                              **evaluate(model, task, eval_split, batch_size=eval_batch_size)})
                except StopTraining:
                    stop = True
                interrupt.hold_for_signal(step + 1)            # tests only (SEQLAB_HOLD_AT); else returns at once
                signum = stop_signal()
                if signum is not None and step + 1 < steps:
                    raise Interrupted(signum)                  # saved below, at the step just finished
                if saver is not None and (stop or (step + 1 < steps and saver.due(step + 1))):
                    saver.save(step + 1, stopped=stop)
                if stop:
                    break
            else:
                if final_eval and eval_split:
                    history.final = evaluate(model, task, eval_split, batch_size=eval_batch_size)
                    if start < steps:  # a finished run that is resumed again already holds this record
                        emit({"step": steps, "split": eval_split, **history.final})
                if saver is not None:
                    saver.save(steps)
            signum = stop_signal()            # a signal during the last step: the run is finished and saved
            if signum is not None:
                raise TrainingInterrupted(done, None if checkpoint is None else os.fspath(checkpoint), signum)
    except KeyboardInterrupt as stop:
        interrupt.take()
        if isinstance(stop, TrainingInterrupted):
            raise
        signum = getattr(stop, "signum", signal.SIGINT)
        path = None if checkpoint is None else os.fspath(checkpoint)
        if saver is not None and not applying:    # the steps done; the batches are a function of (seed, step)
            saver.save(done)
        raise TrainingInterrupted(done, path, signum, saved=not applying) from None
    finally:
        bar.close()
    _call_hook(callbacks, "on_fit_end", history)
    return history
