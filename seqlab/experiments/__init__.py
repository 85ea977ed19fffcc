"""The papers' experiments as functions: lessons call them, and so does ``python -m seqlab experiment NAME``.

Each family module registers its experiments with ``@experiment("name")``; an experiment takes
keyword arguments with quick-profile defaults (``profile=None`` means ``seqlab.config.profile()``)
and returns a plain dict of results (numbers, tables as lists of dicts, histories).
"""
from __future__ import annotations

import importlib
from typing import Callable

_EXPERIMENTS: dict[str, Callable] = {}
_MODULES = ("relation", "lrnn", "lightnet", "gateloop")


def experiment(name: str):
    def wrap(fn):
        if name in _EXPERIMENTS:
            raise ValueError(f"experiment {name!r} is registered twice")
        _EXPERIMENTS[name] = fn
        return fn

    return wrap


def _load_all() -> None:
    for module in _MODULES:
        try:
            importlib.import_module(f"seqlab.experiments.{module}")
        except ModuleNotFoundError as err:
            if err.name != f"seqlab.experiments.{module}":
                raise


def names() -> list[str]:
    _load_all()
    return sorted(_EXPERIMENTS)


def run(name: str, /, **kwargs):
    _load_all()
    if name not in _EXPERIMENTS:
        raise ValueError(f"experiment: unknown experiment {name!r}; expected one of {sorted(_EXPERIMENTS)}")
    return _EXPERIMENTS[name](**kwargs)
