"""The papers' experiments as functions: lessons call them, and so does ``python -m seqlab experiment NAME``.

Each family module registers its experiments with ``@experiment("name")``; an experiment takes
keyword arguments with quick-profile defaults (``profile=None`` means ``seqlab.config.profile()``)
and returns a plain dict of results (numbers, tables as lists of dicts, histories).

Full profile. The papers' sizes of every experiment that trains live in ``configs/<name>.toml`` (the
only place they are written; :func:`config_file`); ``profile`` may also be the path of such a file.
The three experiments in :data:`WITHOUT_CONFIG` have no sizes to read.

Checkpoints. Every experiment that trains takes ``checkpoint_dir=DIR``: each of its runs is saved as
``DIR/<run>.pt`` (every tenth of its steps, at its end and on Ctrl-C) and resumed from there, so that
the same call again trains only what was not finished and returns the same results.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from seqlab.experiments._common import Sizes, profile_sizes  # noqa: F401  (an experiment's sizes by profile)
from seqlab.registry import Registry

EXPERIMENTS = Registry("experiment", argument="experiment")
_MODULES = ("relation", "lrnn", "lightnet", "gateloop", "arena", "init_scale", "recall_sweep")

# Experiments that take no profile: what they measure is set by their arguments alone.
WITHOUT_CONFIG = {
    "decay-speed": "a CPU timing of one scan against two (lengths are arguments; benchmarks/gpu.py times the "
                   "CUDA kernels)",
    "fst-twist-cost": "a CPU timing of the twisted half's two mixers (the hidden sizes are arguments)",
    "fst-parameter-table": "parameter counts only, nothing is trained",
}


def experiment(name: str):
    """Decorator: ``@experiment("arena") def arena(*, profile=None, ...)``."""
    return EXPERIMENTS.register(name)


def _load_all() -> None:
    for module in _MODULES:
        try:
            importlib.import_module(f"seqlab.experiments.{module}")
        except ModuleNotFoundError as err:
            if err.name != f"seqlab.experiments.{module}":
                raise


def names() -> list[str]:
    _load_all()
    return EXPERIMENTS.names()


def get(name: str) -> Callable:
    """The registered experiment function ``name``; a clear error with a suggestion otherwise."""
    _load_all()
    return EXPERIMENTS.lookup(name)


def config_file(name: str):
    """``configs/<name>.toml``, the full-profile sizes of experiment ``name`` (None for :data:`WITHOUT_CONFIG`)."""
    from seqlab.experiments._common import config_path

    get(name)
    return None if name in WITHOUT_CONFIG else config_path(name)


@dataclass(frozen=True)
class SizeTable:
    """One size table of an experiment, its profiles side by side (``python -m seqlab describe NAME``): ``rows``
    are ``(key, quick, medium, full)`` as text ("-" where a profile lacks the key, "" where it has no sizes)."""
    section: str | None
    medium_note: str
    full_note: str
    rows: list


def size_tables(name: str) -> list[SizeTable]:
    """The size tables of experiment ``name`` (none for those that take no profile)."""
    from seqlab.experiments import _common

    get(name)
    out = []
    for table in _common.TABLES.get(name, []):
        medium, medium_note = _common.sizes_and_source(table, "medium")
        full, full_note = _common.sizes_and_source(table, "full")
        keys = [*table.quick, *(k for k in table.optional if k in medium or k in full)]
        out.append(SizeTable(table.section, medium_note, full_note,
                             [(k, repr(table.quick[k]) if k in table.quick else "-", _cell(medium, k), _cell(full, k))
                              for k in keys]))
    return out


def _cell(sizes: dict, key: str) -> str:
    return repr(sizes[key]) if key in sizes else ("" if not sizes else "-")


def run(name: str, /, **kwargs):
    """Run experiment ``name`` with keyword arguments (``profile="full"`` or a ``.toml`` path for paper sizes)."""
    import inspect

    fn = get(name)
    params = inspect.signature(fn).parameters
    if "profile" in kwargs and "profile" not in params:
        raise ValueError(f"experiment {name!r} takes no profile or config file: {WITHOUT_CONFIG.get(name, '')}")
    return fn(**kwargs)
