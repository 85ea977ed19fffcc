"""``TrainConfig``: the one vocabulary of a training run's settings.

``fit(model, task, cfg)`` takes one; ``fit(model, task, steps=800, lr=1e-3)`` builds one from keywords (how the
lessons read). The command line's ``train`` flags are its fields (``--batch-size`` is ``batch_size``), a ``train``
TOML file's top-level keys are its fields, the experiments' sizes use the same names (:meth:`TrainConfig.from_sizes`
reads a profile's sizes into one: the one road from a profile to ``fit``), and a checkpoint's ``run``
holds them: :meth:`TrainConfig.from_run` reads one back. Every field is checked when the config is made, and an
error names the field and what was expected.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from seqlab.train.interrupt import CHECKPOINT_EVERY, CHECKPOINT_SECONDS

__all__ = ["TrainConfig", "RUN_FIELDS"]

# The settings a checkpoint's run must share with the run that resumes it (only steps, and the warm-up computed
# from it, may grow).
RUN_FIELDS = ("steps", "batch_size", "lr", "seed", "weight_decay", "warmup", "clip", "final_lr_ratio", "betas")


@dataclass(frozen=True)
class TrainConfig:
    """A training run's settings, one per field:

    - ``steps``: optimizer steps
    - ``batch_size``: examples per step (the global batch under torchrun)
    - ``lr``: AdamW's peak learning rate
    - ``seed``: the batch order and the torch RNG
    - ``weight_decay``: AdamW's, on matrices
    - ``warmup``: linear warm-up steps (None: ``min(100, steps // 10)``), then a cosine decay
    - ``clip``: gradient-norm clipping (None: none)
    - ``final_lr_ratio``: the cosine decay ends at this share of ``lr``
    - ``betas``: AdamW's
    - ``eval_every``: evaluate ``eval_split`` every so many steps (None: at the end only)
    - ``eval_split``: the split watched while training
    - ``eval_batch_size``: the evaluation's batches
    - ``final_eval``: evaluate at the end (``history.final``)
    - ``eval_at_start``: evaluate before step 1 too (the curve's start; on inside ``train.observe``)
    - ``checkpoint``: the file the run is saved to and resumed from
    - ``checkpoint_every``: steps between periodic saves (None: 500)
    - ``checkpoint_seconds``: seconds between periodic saves (None: 300), whichever comes first
    - ``resume``: continue from ``checkpoint`` where it exists
    - ``device``: ``"auto"``, ``"cpu"`` or ``"cuda"``
    - ``threads``: CPU intra-op threads during the run (None: torch's setting)
    - ``progress``: a progress bar
    - ``desc``: its label, and the run's name in summaries
    - ``model``: the registry name trained (the command line sets it)
    - ``model_config``: its config
    - ``task``: the task's name (the command line sets it)
    - ``task_config``: its arguments
    """

    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0
    weight_decay: float = 0.01
    warmup: int | None = None
    clip: float | None = 1.0
    final_lr_ratio: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eval_every: int | None = None
    eval_split: str | None = "test"
    eval_batch_size: int = 256
    final_eval: bool = True
    eval_at_start: bool = False
    checkpoint: str | None = None
    checkpoint_every: int | None = None
    checkpoint_seconds: float | None = None
    resume: bool = False
    device: str = "auto"
    threads: int | None = None
    progress: bool = True
    desc: str | None = None
    model: str | None = None
    model_config: dict = field(default_factory=dict)
    task: str | None = None
    task_config: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_batch_size"):
            _check(name, getattr(self, name), lambda v: _is_int(v) and v >= 1, "a positive int")
        _check("lr", self.lr, lambda v: _is_number(v) and v > 0, "a positive number")
        _check("seed", self.seed, lambda v: _is_int(v) and v >= 0, "a non-negative int")
        _check("weight_decay", self.weight_decay, lambda v: _is_number(v) and v >= 0, "a non-negative number")
        _check("final_lr_ratio", self.final_lr_ratio, lambda v: _is_number(v) and v >= 0, "a non-negative number")
        for name in ("eval_every", "checkpoint_every", "threads"):
            _check(name, getattr(self, name), lambda v: v is None or (_is_int(v) and v >= 1), "None or a positive int")
        _check("warmup", self.warmup, lambda v: v is None or (_is_int(v) and v >= 0), "None or a non-negative int")
        _check("clip", self.clip, lambda v: v is None or (_is_number(v) and v > 0), "None or a positive number")
        _check("checkpoint_seconds", self.checkpoint_seconds, lambda v: v is None or (_is_number(v) and v > 0),
               "None or a positive number")
        betas = tuple(self.betas) if isinstance(self.betas, (list, tuple)) else self.betas
        _check("betas", betas, lambda v: isinstance(v, tuple) and len(v) == 2
               and all(_is_number(b) and 0 <= b < 1 for b in v), "two numbers in [0, 1)")
        object.__setattr__(self, "betas", tuple(float(b) for b in betas))
        if self.checkpoint is not None:
            object.__setattr__(self, "checkpoint", os.fspath(self.checkpoint))
        if self.resume and self.checkpoint is None:
            raise ValueError("resume: resume=True needs checkpoint=PATH")

    @classmethod
    def of(cls, cfg: "TrainConfig | None" = None, **settings) -> "TrainConfig":
        """``cfg`` with ``settings`` replaced (a new config from them where there is none); an unknown setting is
        named with the fields."""
        unknown = sorted(set(settings) - set(cls.fields()))
        if unknown:
            raise TypeError(f"unexpected training setting(s) {unknown}; the fields of TrainConfig are {cls.fields()}")
        return dataclasses.replace(cfg, **settings) if cfg is not None else cls(**settings)

    @classmethod
    def from_sizes(cls, sizes: Mapping, **overrides) -> "TrainConfig":
        """The run a profile's sizes describe: every key of ``sizes`` that is a field (``steps``, ``batch_size``,
        ``lr``, ``warmup``, ``betas``, ``task_config``, ...), None meaning the field's default (TOML has no null),
        with ``overrides`` on top. The other keys (a model's, a task's, a grid's) are not the run's and are left
        out."""
        known = {k: v for k, v in sizes.items() if k in cls.fields() and v is not None}
        return cls.of(cls(**known), **overrides)

    @classmethod
    def fields(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def defaults(cls) -> dict:
        """``{field: default}``, for ``python -m seqlab describe train``."""
        return {f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)
                for f in dataclasses.fields(cls)}

    @classmethod
    def from_run(cls, run: dict) -> "TrainConfig":
        """The config a checkpoint's ``run`` was trained with (the fields it holds; the others at their defaults)."""
        known = {k: v for k, v in run.items() if k in cls.fields() and v is not None}
        for table in ("model_config", "task_config"):
            known[table] = dict(run.get(table) or {})
        return cls(**known)

    def run_record(self) -> dict:
        """What a checkpoint keeps of this config (``run``): the settings a resumed run must share."""
        return {k: getattr(self, k) for k in RUN_FIELDS}

    @property
    def periodic_steps(self) -> int:
        return self.checkpoint_every or CHECKPOINT_EVERY

    @property
    def periodic_seconds(self) -> float:
        return CHECKPOINT_SECONDS if self.checkpoint_seconds is None else self.checkpoint_seconds


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check(name: str, value, ok, expected: str) -> None:
    if not ok(value):
        raise ValueError(f"{name}: expected {expected}, got {value!r}")
