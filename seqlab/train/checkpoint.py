"""Checkpoints: a training run's state on disk, written so that a kill, a signal or a full disk never leaves half
a file, read back without running code.

A checkpoint is ``{"model", "optimizer", "step", "run", "records", "rng", "stopped"}`` (``torch.save``): the
weights, AdamW's state, the steps done, the run's settings (model and task names and configs: what rebuilds it),
the history so far and the RNG states. :func:`save_checkpoint` writes a temporary file beside it and moves it
into place; a failure names the file and the cause (:class:`CheckpointError`). :func:`load_checkpoint` unpickles
tensors and plain containers only. :func:`load_model` rebuilds the trained model (``seqlab.load``).
"""
from __future__ import annotations

import contextlib
import glob
import os
import tempfile
import time

import torch
import torch.nn as nn

from seqlab import config
from seqlab.results import write_failure
from seqlab.train.config import RUN_FIELDS

__all__ = ["save_checkpoint", "load_checkpoint", "load_model", "check_writable", "remove_stale_temporaries",
           "CheckpointError", "rng_state", "set_rng_state", "restore", "PeriodicSaver"]


def _tmp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}.tmp-"


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Remove the temporary files a killed save of ``path`` left in its folder (one writer per checkpoint)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    stale = glob.glob(os.path.join(glob.escape(folder), glob.escape(_tmp_prefix(path)) + "*"))
    for tmp in stale:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
    return stale


def save_checkpoint(path: str | os.PathLike, state: dict) -> None:
    """``torch.save`` to a temporary file in the same folder, then ``os.replace`` (atomic): the file at ``path``
    is the old checkpoint or the new one, never half of one. A failure (full disk, read-only folder, vanished
    path) leaves no temporary file and raises :class:`CheckpointError` naming the file and the cause."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=".pt", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
        os.replace(tmp, path)
        tmp = None
    except (OSError, RuntimeError) as err:
        raise CheckpointError(write_failure(path, err)) from err
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


class CheckpointError(ValueError):
    """A file that is not a readable seqlab checkpoint, or a checkpoint path that cannot be written."""


_CHECKPOINT_KEYS = ("model", "optimizer", "step", "run", "records", "rng")


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint written by ``fit``. Only tensors and plain containers are unpickled
    (``weights_only=True``): a checkpoint never runs code. Anything else raises :class:`CheckpointError`
    naming the file."""
    path = os.fspath(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:  # EOFError, UnpicklingError, RuntimeError (bad zip), OSError ... all say the same
        raise CheckpointError(f"{path} is not a readable seqlab checkpoint: {type(err).__name__}: {err}") from err
    missing = [k for k in _CHECKPOINT_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"{path} is not a readable seqlab checkpoint: it has no {', '.join(missing)} "
                              f"(a {type(state).__name__} was stored)")
    return state


def check_writable(path: str | os.PathLike) -> None:
    """Fail before training, not after it: ``path``'s folder is created if needed and a file is written
    and removed there, the way :func:`save_checkpoint` will write."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise CheckpointError(f"checkpoint: {path} is a folder; expected a file path such as {os.path.join(path, 'run.pt')}")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".pt", dir=folder)
        os.close(fd)
        os.remove(tmp)
    except OSError as err:
        raise CheckpointError(f"checkpoint: {path} cannot be written ({type(err).__name__}: {err}); "
                              "pick a writable path before training starts") from err


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """The trained model a checkpoint holds, rebuilt from its registry name and config, in eval mode
    (``seqlab.load``). Its run (``model.run``: settings, task name and config) comes with it."""
    from seqlab import models

    state = load_checkpoint(path)
    run = state["run"]
    if not run.get("model_config"):
        raise CheckpointError(f"{os.fspath(path)!r} was saved before checkpoints carried the model's config; "
                              f"rebuild it with seqlab.models.build({run.get('model')!r}, ...) and load_state_dict")
    model = models.build(run["model"], **run["model_config"])
    model.load_state_dict(state["model"])
    model.run = run
    return model.to(config.device(device)).eval()


def restore(path, model: nn.Module, optimizer: torch.optim.Optimizer, history, run: dict) -> tuple[int, bool]:
    """Load a checkpoint into ``model``, ``optimizer`` and ``history``; return the step it was saved at and
    whether a callback had stopped the run there (``StopTraining``: such a run is not continued).

    The run must be the same one (every setting of :data:`RUN_FIELDS`, the model, its config and the task);
    only ``steps`` may grow: the run then continues on the schedule of the new total (warm-up and cosine
    decay computed for it, so the learning rate after the resume differs from the shorter run's)."""
    state = load_checkpoint(path)
    saved = state["run"]
    step = int(state["step"])
    extended = run["steps"] != saved.get("steps")
    if extended and run["steps"] < step:
        raise ValueError(f"steps: the checkpoint {os.fspath(path)!r} is at step {step}; steps={run['steps']} "
                         f"would end before it (steps may only grow on resume)")
    keys = [k for k in RUN_FIELDS if not (extended and k in ("steps", "warmup"))] + ["model", "task"]
    diff = [f"{k}: checkpoint {saved.get(k)!r}, now {run.get(k)!r}" for k in keys if saved.get(k) != run.get(k)]
    if diff:
        raise ValueError(f"resume: the checkpoint {os.fspath(path)!r} belongs to a different run; "
                         f"differences: {'; '.join(diff)}")
    mine, theirs = run.get("model_config") or {}, saved.get("model_config") or {}
    if mine and theirs and mine != theirs:
        keys = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        raise ValueError(f"resume: the checkpoint {os.fspath(path)!r} holds another {run['model']} config; "
                         + "; ".join(f"{k}: checkpoint {theirs.get(k)!r}, now {mine.get(k)!r}" for k in keys))
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as err:   # a config that the checkpoint does not name (an older checkpoint)
        raise ValueError(f"resume: the checkpoint {os.fspath(path)!r} does not fit this model (another config?): "
                         f"{str(err).splitlines()[0]}") from None
    optimizer.load_state_dict(state["optimizer"])
    history.records.extend(state["records"])
    set_rng_state(state["rng"])
    return step, bool(state.get("stopped", False))


class PeriodicSaver:
    """The saves of one run to ``path`` (rank 0 writes): :meth:`save` at a step, :meth:`due` when the next
    periodic one is, every ``every`` steps or ``seconds`` of wall time (None: never by time), whichever comes
    first. ``state(step, stopped)`` gives what to write. ``last`` is the step of the last save of this run (the
    resumed step when it resumed), named when a later save fails."""

    def __init__(self, path, state, *, every: int, seconds: float | None, last: int | None = None, rank: int = 0):
        self.path, self.state, self.every, self.seconds, self.rank = path, state, every, seconds, rank
        self.last, self.at = last, time.perf_counter()

    def save(self, step: int, stopped: bool = False) -> None:
        if self.rank == 0:
            try:
                save_checkpoint(self.path, self.state(step, stopped))
            except CheckpointError as err:
                kept = (f"the previous checkpoint at step {self.last} is intact" if self.last is not None
                        else "no earlier checkpoint of this run was written")
                raise CheckpointError(f"{err} (at step {step}); {kept}") from err.__cause__
        self.last, self.at = step, time.perf_counter()

    def due(self, step: int) -> bool:
        return step % self.every == 0 or (self.seconds is not None and time.perf_counter() - self.at >= self.seconds)
