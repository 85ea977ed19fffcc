"""A training run's records (:class:`History`), the terminal's one-line summaries (:class:`PrintCallback`), and
what a comparison keeps of a run besides its final number (:func:`run_summary`, collected by :class:`observe`)."""
from __future__ import annotations

import math
from typing import Callable

from seqlab.tasks.base import Task

__all__ = ["History", "PrintCallback", "observe", "observing", "record_run", "run_summary", "num_targets", "check_initial_loss", "first_step_at",
           "INITIAL_LOSS_TOLERANCE", "THRESHOLDS"]


class History:
    """Metric records of one training run.

    ``records``: list of dicts in the order they happened (train steps and evaluations).
    ``final``: the metrics of the evaluation at the end of ``fit`` (``None`` if there was none).
    """

    def __init__(self, records: list[dict] | None = None, final: dict | None = None, config: dict | None = None):
        self.records: list[dict] = list(records or [])
        self.final: dict | None = final
        self.config: dict = dict(config or {})

    def append(self, record: dict) -> None:
        self.records.append(record)

    def split(self, name: str = "train") -> list[dict]:
        """All records of one split (``"train"`` or an evaluated split)."""
        return [r for r in self.records if r.get("split") == name]

    def series(self, key: str, split: str = "train") -> tuple[list[int], list[float]]:
        """``(steps, values)`` of one metric, for plotting."""
        rows = [r for r in self.split(split) if key in r]
        return [r["step"] for r in rows], [r[key] for r in rows]

    def train_loss(self) -> list[float]:
        return self.series("loss", "train")[1]

    def last(self, key: str = "loss", split: str = "train"):
        """The latest value of ``key`` in ``split`` (``None`` if never recorded)."""
        for r in reversed(self.records):
            if r.get("split") == split and key in r:
                return r[key]
        return None

    def seconds(self, through_step: int | None = None) -> float:
        """Wall seconds the training loop ran, up to ``through_step`` (all of it by default), over every sitting: a
        resumed run's train records count their ``time`` from the start of their own sitting, so each sitting adds
        its last ``time``."""
        total, last = 0.0, 0.0
        for r in self.split("train"):
            if through_step is not None and r["step"] > through_step:
                break
            t = float(r.get("time", 0.0))
            if t < last:                   # a new sitting began
                total += last
            last = t
        return total + last

    @property
    def steps(self) -> int:
        train = self.split("train")
        return train[-1]["step"] if train else 0

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        final = ", ".join(f"{k}={v:.4f}" for k, v in (self.final or {}).items() if isinstance(v, float))
        return f"History(steps={self.steps}, records={len(self.records)}{', final: ' + final if final else ''})"


class PrintCallback:
    """Print a one-line summary every ``every`` steps and after each evaluation (for terminals)."""

    def __init__(self, every: int = 100, print_fn: Callable[[str], None] = print):
        self.every, self.print_fn = every, print_fn

    def __call__(self, history: History, record: dict) -> None:
        if record["split"] != "train":
            metrics = " ".join(f"{k}={v:.4f}" for k, v in record.items() if k not in ("step", "split")
                               and isinstance(v, float))
            self.print_fn(f"step {record['step']:>6} | {record['split']}: {metrics}")
        elif record["step"] % self.every == 0:
            self.print_fn(f"step {record['step']:>6} | train loss {record['loss']:.4f} acc {record['accuracy']:.4f} "
                          f"lr {record['lr']:.2e} {record['tokens_per_s']:.0f} tok/s")

    def on_resume(self, step: int, checkpoint: str, steps: int) -> None:
        self.print_fn(f"resuming from step {step} of {checkpoint} (to step {steps})")


INITIAL_LOSS_TOLERANCE = 0.3     # nats: a run must start within this of ln(num_targets), the loss of a uniform guess
THRESHOLDS = (0.9, 0.99)         # the accuracies whose first step a run summary records (steps_to_0.9, ...)


def num_targets(task: Task) -> int:
    """The classes the model's head chooses among: the task's labels, or its vocabulary for next-token tasks."""
    return task.num_classes or task.vocab_size


def check_initial_loss(loss: float, targets: int, run: str) -> None:
    """A model must start near the loss of a uniform guess, ``ln(targets)``: a wrong initial scale (logits far
    from zero) shows here, before any step is spent on it. ``ValueError`` naming ``run`` otherwise."""
    uniform = math.log(targets)
    if not abs(loss - uniform) <= INITIAL_LOSS_TOLERANCE:
        raise ValueError(f"{run}: initial validation loss {loss:.3f} is more than {INITIAL_LOSS_TOLERANCE} nats from "
                         f"ln({targets}) = {uniform:.3f}, the loss of a uniform guess: the initialisation's scale "
                         "is wrong for this width")


def first_step_at(curve: list, threshold: float) -> int | None:
    """The first step of ``curve`` (``[[step, accuracy], ...]``) whose accuracy reaches ``threshold``; None if none."""
    return next((step for step, acc in curve if acc >= threshold), None)


def run_summary(history: History, task: Task, name: str | None = None) -> dict:
    """What a comparison keeps of one run besides its final number: ``initial_loss`` (the watched split's loss
    before step 1, from the step-0 record of ``fit(..., eval_at_start=True)``; None where the run has none),
    ``num_targets``, the ``curve`` ``[[step, accuracy], ...]`` of the watched split and the first step reaching
    each of :data:`THRESHOLDS` (``steps_to_0.9``, ``steps_to_0.99``; None if never)."""
    split = history.config.get("eval_split")
    evals = history.split(split) if split else []
    start = next((r for r in evals if r["step"] == 0), None)
    curve = [[r["step"], round(float(r["accuracy"]), 6)] for r in evals if "accuracy" in r]
    return {"name": name or f"{history.config.get('model')} on {task.name}", "task": task.name, "eval_split": split,
            "num_targets": num_targets(task), "initial_loss": None if start is None else round(float(start["loss"]), 6),
            "curve": curve, **{f"steps_to_{t}": first_step_at(curve, t) for t in THRESHOLDS}}


_OBSERVERS: list[list] = []


def observing() -> bool:
    """Whether a :class:`observe` block is open (``fit`` then evaluates before step 1 and checks that loss)."""
    return bool(_OBSERVERS)


def record_run(history: History, task: Task, name: str | None) -> None:
    """Hand a finished run's :func:`run_summary` to every open :class:`observe` block."""
    for runs in _OBSERVERS:
        runs.append(run_summary(history, task, name))


class observe:
    """``with train.observe() as runs:`` every ``fit`` inside evaluates its watched split before step 1
    (``eval_at_start``), refuses to train a model whose initial loss is more than
    :data:`INITIAL_LOSS_TOLERANCE` nats from ``ln(num_targets)`` (:func:`check_initial_loss`), and appends its
    :func:`run_summary` to ``runs`` when it returns. How the claims record every run of an experiment without the
    experiment's code knowing (nested blocks each see the runs inside them)."""

    def __enter__(self) -> list[dict]:
        self.runs: list[dict] = []
        _OBSERVERS.append(self.runs)
        return self.runs

    def __exit__(self, *exc) -> None:
        del _OBSERVERS[next(i for i, runs in enumerate(_OBSERVERS) if runs is self.runs)]   # by identity
