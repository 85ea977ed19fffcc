"""Small pieces every experiment module uses: profile-sized settings, checkpoint folders and a best-of-n clock.

Sizes. An experiment's ``quick`` sizes (CPU, minutes) are written beside it; its ``full`` sizes (the
papers', for a GPU) live in one TOML file under the repository's ``configs/``, read here with the
standard library's ``tomllib``, so that ``configs/`` is the one place the paper sizes are written. A
``profile`` is ``"quick"``, ``"full"`` or the path of a TOML file laid out like those in ``configs/``
(``python -m seqlab experiment NAME --config-file FILE``).
"""
from __future__ import annotations

import os
import re
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path

from seqlab import config

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"

# Settings that may be left out of a TOML file, meaning None (TOML has no null): all CPU threads, the whole
# corpus, the model's default head count, the default warm-up, no evaluation during training.
NULLABLE = frozenset({"threads", "max_chars", "n_heads", "warmup", "eval_every"})


# A config file: which experiment, the paper's place, a time on one GPU, and the sizes.
TOP_LEVEL = frozenset({"experiment", "paper", "estimated_time", "sizes"})


def config_path(experiment: str) -> Path:
    """``configs/<experiment>.toml``: the full-profile file of a registered experiment."""
    return CONFIG_DIR / f"{experiment}.toml"


def read_config(path: str | os.PathLike) -> dict:
    """A config file as a dict (``experiment``, ``paper``, ``estimated_time``, ``sizes``), with errors that name
    the file."""
    path = Path(path)
    if not path.is_file():
        hint = (" (configs/ ships with the repository: install seqlab editable from a clone, "
                "python3 workbench.py lab does)") if path.parent == CONFIG_DIR else ""
        raise ValueError(f"config file: {os.fspath(path)!r} does not exist{hint}")
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"config file: {os.fspath(path)!r} is not valid TOML: {err}") from err
    if not isinstance(data.get("sizes"), dict):
        raise ValueError(f"config file: {os.fspath(path)!r} has no [sizes] table")
    unknown = sorted(set(data) - TOP_LEVEL)
    if unknown:
        raise ValueError(f"config file: {os.fspath(path)!r} has unknown top-level keys {unknown}; "
                         f"expected {sorted(TOP_LEVEL)}")
    return data


def file_sizes(path: str | os.PathLike, experiment: str, like: dict, section: str | None = None) -> dict:
    """The ``[sizes]`` (or ``[sizes.<section>]``) of a config file, checked against the keys of ``like``.

    Every key of ``like`` must be in the file, except those in :data:`NULLABLE`, which default to None."""
    data = read_config(path)
    named = data.get("experiment")
    if named is not None and named != experiment:
        raise ValueError(f"config file: {os.fspath(path)!r} is for experiment {named!r}, not {experiment!r}")
    sizes = data["sizes"]
    if section is not None:
        if not isinstance(sizes.get(section), dict):
            raise ValueError(f"config file: {os.fspath(path)!r} has no [sizes.{section}] table "
                             f"(it has {sorted(k for k, v in sizes.items() if isinstance(v, dict))})")
        sizes = sizes[section]
    unknown = sorted(set(sizes) - set(like))
    missing = sorted(set(like) - set(sizes) - NULLABLE)
    if unknown or missing:
        raise ValueError(f"config file: {os.fspath(path)!r}" + (f" [sizes.{section}]" if section else " [sizes]")
                         + (f" has unknown keys {unknown}" if unknown else "")
                         + (" and" if unknown and missing else "")
                         + (f" lacks {missing}" if missing else "") + f"; the keys are {sorted(like)}")
    return {key: sizes.get(key) for key in like}


TABLES: dict[str, list["Sizes"]] = {}     # experiment name -> its size tables (for ``python -m seqlab describe``)


class Sizes(Mapping):
    """An experiment's sizes by profile: ``quick`` as written here, ``full`` read from ``configs/``, and any
    ``*.toml`` path read from that file."""

    def __init__(self, experiment: str, quick: dict, section: str | None = None):
        self.experiment, self.quick, self.section = experiment, dict(quick), section
        TABLES.setdefault(experiment, []).append(self)

    def __getitem__(self, profile: str) -> dict:
        if profile == "quick":
            return dict(self.quick)
        if profile == "full":
            return file_sizes(config_path(self.experiment), self.experiment, self.quick, self.section)
        if isinstance(profile, (str, os.PathLike)) and os.fspath(profile).endswith(".toml"):
            return file_sizes(profile, self.experiment, self.quick, self.section)
        raise KeyError(profile)

    def __iter__(self):
        return iter(("quick", "full"))

    def __len__(self) -> int:
        return 2

    def __repr__(self) -> str:
        return f"Sizes({self.experiment!r}, quick={self.quick!r}, full=<{config_path(self.experiment).name}>)"


def profile_sizes(table: Mapping, profile: str | None, overrides: dict, *, strict: bool = True) -> dict:
    """The settings of ``table[profile]`` (``None``: the active profile) with ``overrides`` applied.

    ``strict``: an override must name a known setting, and ``None`` means "keep the default".
    """
    prof = profile or config.profile()
    try:
        sizes = dict(table[prof])
    except KeyError:
        raise ValueError(f"profile: expected one of {tuple(table)} or the path of a .toml config file, "
                         f"got {prof!r}") from None
    if not strict:
        sizes.update(overrides)
        return sizes
    unknown = set(overrides) - set(sizes)
    if unknown:
        raise TypeError(f"unexpected keyword(s) {sorted(unknown)}; sizes are {sorted(sizes)}")
    sizes.update({k: v for k, v in overrides.items() if v is not None})
    return sizes


def checkpointing(folder: str | os.PathLike | None, run: str, steps: int) -> dict:
    """``fit`` keywords that save the run named ``run`` as ``folder/<run>.pt`` and resume it from there.

    A finished run's file gives back its history without training again, so an experiment run again with
    the same folder trains only what was not finished. The file is also written every tenth of the steps
    and on Ctrl-C. ``folder=None``: no checkpoints (``{}``)."""
    if folder is None:
        return {}
    name = re.sub(r"[^A-Za-z0-9._=-]+", "_", run).strip("_")
    return {"checkpoint": os.path.join(os.fspath(folder), f"{name}.pt"), "resume": True,
            "checkpoint_every": max(1, steps // 10)}


def min_seconds(fn, repeats: int, *, warmup: bool = False) -> float:
    """The fastest of ``repeats`` calls (the least disturbed run on a shared machine), in seconds."""
    if warmup:
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
