"""Running the arena's runs (:mod:`seqlab.experiments.arena`): one run from its spec (:func:`run_one`), many at
once in worker processes (:func:`run_all`, one math thread each), each finished run recorded at once
(:func:`recorder`) so that a sitting stopped by Ctrl-C or a signal keeps every run it finished.
"""
from __future__ import annotations

import platform
import signal
import time
from pathlib import Path

from seqlab import config
from seqlab.experiments._common import checkpointing, code_version
from seqlab.experiments.arena_families import family_config, matched_width, target_parameters
from seqlab.experiments.arena_grid import filler_of, init_of, run_key
from seqlab.train import THRESHOLDS

__all__ = ["make_task", "run_name", "build_model", "run_one", "describe_run", "versions", "recorder", "run_all"]

def make_task(name: str, args: dict, seed: int, cfg: dict):
    """Task ``name`` with the grid's split sizes, its own arguments and the run's seed (each seed new data)."""
    from seqlab import tasks

    kw = {"train_size": cfg["train_size"], "test_size": cfg["test_size"], "validation_size": cfg["validation_size"],
          "seed": seed, **args}
    if name == "copying":
        kw.setdefault("autoregressive_n", 0)      # the arena reads teacher-forced accuracy on every task
    return tasks.get(name, **kw)


def run_name(spec: dict, cfg: dict, seq_len: int) -> str:
    """The run's name, its progress bar's label and its checkpoint file's stem: every field of :func:`run_key`."""
    filler = filler_of(spec["task"], cfg["tasks"][spec["task"]])
    return (f"{spec['family']}-{spec['task']}-w{spec['width']}-L{seq_len}-lr{spec['lr']:g}-seed{spec['seed']}"
            f"-steps{cfg['steps']}" + (f"-{filler}" if filler else "") + f"-init-{init_of(spec)}")


def build_model(spec: dict, task, d_model: int, cfg: dict):
    """The run's model, seeded by its seed; a spec naming an init variant has its weights drawn again by it."""
    from seqlab import models
    from seqlab.models.init import VARIANTS, redraw

    config.seed_everything(spec["seed"])
    model = models.build(spec["family"], vocab_size=task.vocab_size, seq_len=task.seq_len,
                         **family_config(spec["family"], d_model, cfg["n_layers"]))
    init = init_of(spec)
    if init != models.init_rule(spec["family"]):
        if init not in VARIANTS:
            raise ValueError(f"init: {init!r} is neither {spec['family']}'s rule nor a variant of {list(VARIANTS)}")
        redraw(model, **VARIANTS[init])
    return model


def run_one(spec: dict, cfg: dict, *, progress: bool = False, checkpoint_dir=None) -> dict:
    """Train one run of the grid (``spec``: family, task, seed, width, seq_len, lr, and optionally ``init``, a variant
    of :data:`seqlab.models.init.VARIANTS`) and return its record: the
    test accuracy, the loss before the first step (``initial_loss``, checked against ``ln(num_targets)``) and the
    learning curve (validation accuracy every ``eval_every`` steps, with ``steps_to_0.9`` and ``steps_to_0.99``)."""
    from seqlab import train
    from seqlab.train.config import TrainConfig

    start = time.perf_counter()
    family, name, seed = spec["family"], spec["task"], spec["seed"]
    args = dict(cfg["tasks"][name])
    if spec["seq_len"] is not None:
        args["seq_len"] = spec["seq_len"]
    eval_every = cfg.get("eval_every") or max(1, cfg["steps"] // 20)
    with config.one_math_thread():
        task = make_task(name, args, seed, cfg)
        target = target_parameters(cfg["reference"], spec["width"], cfg["n_layers"])
        d_model, params = matched_width(family, target, cfg["n_layers"])
        model = build_model(spec, task, d_model, cfg)
        name_of_run = run_name(spec, cfg, task.seq_len)
        run = TrainConfig.from_sizes(cfg, lr=spec["lr"], seed=seed, eval_split="validation", eval_every=eval_every,
                                     progress=progress, desc=name_of_run,
                                     **checkpointing(checkpoint_dir, name_of_run, cfg["steps"]))
        with train.observe() as watched:           # the loss before step 1 is checked against ln(num_targets)
            history = train.fit(model, task, run)
        test = train.evaluate(model, task, "test")
    summary = watched[-1]
    return {"family": family, "task": name, "seed": seed, "d_model": d_model, "params": params,
            "state_size": int(model.state_size(task.seq_len)), "seq_len": task.seq_len,
            "accuracy": round(float(test["accuracy"]), 6), "wall_s": round(time.perf_counter() - start, 2),
            "width": spec["width"], "target_params": target, "varied": "d_model", "lr": spec["lr"],
            "validation_accuracy": round(float(history.final["accuracy"]), 6),
            "test_loss": round(float(test["loss"]), 6), "steps": cfg["steps"], "vocab_size": task.vocab_size,
            "eval_every": eval_every, **{k: summary[k] for k in ("num_targets", "initial_loss", "curve")},
            **{f"steps_to_{t}": summary[f"steps_to_{t}"] for t in THRESHOLDS},
            "filler": filler_of(name, args), "init": init_of(spec), **code_version()}


def describe_run(run: dict) -> str:
    """One line per run: what was matched, by which key, and how close it came."""
    off = run["params"] / run["target_params"] - 1
    return (f"{run['family']:>18s} {run['task']:<23s} seed {run['seed']} L={run['seq_len']:<4d} lr={run['lr']:g} "
            f"{run['varied']}={run['d_model']:<4d} params={run['params']} ({off:+.1%} of {run['target_params']}) "
            f"state={run['state_size']} acc={run['accuracy']:.3f} (val {run['validation_accuracy']:.3f}) "
            f"{run['wall_s']:.0f}s")


def versions() -> dict:
    import numpy
    import torch

    import seqlab
    from seqlab.results import machine

    return {"seqlab": seqlab.__version__, "torch": torch.__version__, "numpy": numpy.__version__,
            "python": platform.python_version(), "machine": machine()}


def recorder(path: Path | None, data: dict, fields: dict, verbose: bool, describe=None):
    """``record(run, kind="runs")``: print the finished run and merge it into the results file under its lock
    (:func:`seqlab.results.merge`, which keeps what other sittings wrote), then refresh ``data`` from the file."""
    from seqlab import results

    def record(run: dict, kind: str = "runs") -> None:
        if verbose:
            print((describe or describe_run)(run), flush=True)
        if path is None:
            data.setdefault(kind, []).append(run)
            return
        now = time.perf_counter()
        fresh = results.merge(path, key=run_key, fields=fields, wall_s=now - record.since, **{kind: [run]})
        record.since = now
        data.clear()
        data.update(fresh)

    record.since = time.perf_counter()
    return record


_STOPPING = None      # in a worker: the sitting's stop event (set once it has been asked to stop)


def _init_worker(stopping) -> None:
    global _STOPPING
    _STOPPING = stopping


def _worker(args):
    from seqlab.train import interrupt

    spec, cfg, checkpoint_dir = args
    if _STOPPING is not None and _STOPPING.is_set():   # a run handed over before the stop: not started
        raise interrupt.Interrupted(signal.SIGTERM, "not started: the sitting is stopping")
    with interrupt.handling():              # SIGTERM: the run saves after its step, as in one process
        return run_one(spec, cfg, checkpoint_dir=checkpoint_dir)


def _stop_workers(pool, futures, signum: int, record, stopping) -> None:
    """The sitting was asked to stop: no worker starts another run (``stopping``; the pool hands each worker a
    run ahead, which cancelling cannot take back), each running one gets the signal (it saves after its step and
    stops), then wait for them and keep every run that finished meanwhile."""
    import os

    processes = list((getattr(pool, "_processes", None) or {}).values())
    stopping.set()
    for process in processes:
        try:
            os.kill(process.pid, signum)
        except (ProcessLookupError, OSError):
            pass
    pool.shutdown(wait=True, cancel_futures=True)
    for fut in futures:
        if fut.done() and not fut.cancelled() and fut.exception() is None and not getattr(fut, "recorded", False):
            record(fut.result())


def run_all(specs: list[dict], cfg: dict, workers: int, record, progress: bool, checkpoint_dir) -> None:
    from tqdm.auto import tqdm

    from seqlab.train import interrupt

    bar = tqdm(total=len(specs), desc="arena", disable=not progress, leave=False)
    try:
        if workers <= 1 or len(specs) <= 1:
            for spec in specs:
                record(run_one(spec, cfg, checkpoint_dir=checkpoint_dir))
                bar.update()
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")
        stopping = context.Event()
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                                 initargs=(stopping,)) as pool:
            futures = [pool.submit(_worker, (spec, cfg, checkpoint_dir)) for spec in specs]
            try:
                for fut in as_completed(futures):
                    record(fut.result())          # a worker's TrainingInterrupted (it saved) comes out here
                    fut.recorded = True
                    bar.update()
            except KeyboardInterrupt as stop:     # Ctrl-C, SIGTERM, SIGUSR1 to the sitting or to a worker
                signum = getattr(stop, "signum", signal.SIGINT)
                _stop_workers(pool, futures, signum, record, stopping)
                raise interrupt.Interrupted(signum, f"the arena stopped by {interrupt.signal_name(signum)}; every "
                                                    "finished run is in the results file"
                                            + (f", each stopped run saved under {checkpoint_dir}"
                                               if checkpoint_dir else "")) from None
    finally:
        bar.close()
