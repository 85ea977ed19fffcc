"""Small pieces every experiment module uses: profile-sized settings, checkpoint folders and a best-of-n clock.

Sizes. An experiment's ``quick`` sizes (CPU, minutes) are written beside it; its ``full`` sizes (the
papers', for a GPU) live in one TOML file under the repository's ``configs/``, read here with the
standard library's ``tomllib``, so that ``configs/`` is the one place the paper sizes are written. Its
``medium`` sizes (CPU, for reproducing a claim over several seeds, ``python -m seqlab reproduce``) live the
same way in ``configs/medium/``; an experiment that no claim uses has no file there and runs its quick sizes
in the medium profile. A ``profile`` is ``"quick"``, ``"medium"``, ``"full"``, the path of a TOML file laid
out like those in ``configs/`` (``python -m seqlab experiment NAME --config-file FILE``) or a folder of such
files, one per experiment (``configs/medium`` is one, ``configs`` another).
"""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path

from seqlab import config

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
MEDIUM_DIR = CONFIG_DIR / "medium"

# Settings that may be left out of a TOML file, meaning None (TOML has no null): all CPU threads, the whole
# corpus, the model's default head count, the default warm-up, no evaluation during training.
NULLABLE = frozenset({"threads", "max_chars", "n_heads", "warmup", "eval_every"})


# Sizes renamed to TrainConfig's field names: the old name is refused with an error naming the new one.
RENAMED = {"task_kwargs": "task_config"}


def refuse_renamed(keys, where: str) -> None:
    """A ``TypeError`` naming the new name of the first renamed size among ``keys``."""
    for old in sorted(set(keys) & set(RENAMED)):
        raise TypeError(f"{where}: {old} is now {RENAMED[old]} (the name of TrainConfig's field)")


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


def file_sizes(path: str | os.PathLike, experiment: str, like: dict, section: str | None = None,
               optional=()) -> dict:
    """The ``[sizes]`` (or ``[sizes.<section>]``) of a config file, checked against the keys of ``like``.

    Every key of ``like`` must be in the file, except those in :data:`NULLABLE`, which default to None. Keys
    in ``optional`` may be in the file too; they are returned only where it sets them."""
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
    refuse_renamed(sizes, f"config file {os.fspath(path)!r}")
    unknown = sorted(set(sizes) - set(like) - set(optional))
    missing = sorted(set(like) - set(sizes) - NULLABLE)
    if unknown or missing:
        raise ValueError(f"config file: {os.fspath(path)!r}" + (f" [sizes.{section}]" if section else " [sizes]")
                         + (f" has unknown keys {unknown}" if unknown else "")
                         + (" and" if unknown and missing else "")
                         + (f" lacks {missing}" if missing else "") + f"; the keys are {sorted(like)}"
                         + (f" (optional: {sorted(optional)})" if optional else ""))
    return {**{key: sizes.get(key) for key in like}, **{key: sizes[key] for key in optional if key in sizes}}


TABLES: dict[str, list["Sizes"]] = {}     # experiment name -> its size tables (for ``python -m seqlab describe``)


class Sizes(Mapping):
    """An experiment's sizes by profile: ``quick`` as written here, ``medium`` read from ``configs/medium/``
    (the quick sizes where that folder has no file for the experiment), ``full`` from ``configs/``, any
    ``*.toml`` path from that file and any folder from its ``<experiment>.toml``.

    ``optional``: settings a file may add to the quick ones (a validation split, the optimizer's betas); they
    are in a profile's sizes only where its file sets them, so the quick and full sizes stay as they were."""

    def __init__(self, experiment: str, quick: dict, section: str | None = None, optional=()):
        self.experiment, self.quick, self.section, self.optional = experiment, dict(quick), section, tuple(optional)
        TABLES.setdefault(experiment, []).append(self)

    def __getitem__(self, profile: str) -> dict:
        if profile == "quick":
            return dict(self.quick)
        if profile == "medium":
            path = MEDIUM_DIR / f"{self.experiment}.toml"
            return self._read(path) if path.is_file() else dict(self.quick)
        if profile == "full":
            return self._read(config_path(self.experiment))
        if isinstance(profile, (str, os.PathLike)) and os.fspath(profile).endswith(".toml"):
            return self._read(profile)
        if isinstance(profile, (str, os.PathLike)) and os.path.isdir(profile):
            return self._read(Path(profile) / f"{self.experiment}.toml")
        raise KeyError(profile)

    def _read(self, path) -> dict:
        return file_sizes(path, self.experiment, self.quick, self.section, self.optional)

    def __iter__(self):
        return iter(config.PROFILES)

    def __len__(self) -> int:
        return len(config.PROFILES)

    def __repr__(self) -> str:
        return f"Sizes({self.experiment!r}, quick={self.quick!r}, full=<{config_path(self.experiment).name}>)"


def sizes_and_source(table: Sizes, profile: str) -> tuple[dict, str]:
    """``(sizes, where they live)`` of the ``medium`` or ``full`` profile of a size table; no sizes and the reason
    where it has none."""
    path = MEDIUM_DIR / f"{table.experiment}.toml" if profile == "medium" else config_path(table.experiment)
    where = path.relative_to(CONFIG_DIR.parent)
    if not path.is_file():
        return (table.quick, "medium: the quick sizes") if profile == "medium" else ({}, f"{profile}: no {where}")
    try:
        return table[profile], f"{profile}: {where}"
    except ValueError as err:
        return {}, f"{profile}: {err}"


def profile_sizes(table: Mapping, profile: str | None, overrides: dict, *, strict: bool = True) -> dict:
    """The settings of ``table[profile]`` (``None``: the active profile) with ``overrides`` applied.

    ``strict``: an override must name a known setting, and ``None`` means "keep the default".
    """
    prof = profile or config.profile()
    refuse_renamed(overrides, "sizes")
    try:
        sizes = dict(table[prof])
    except KeyError:
        raise ValueError(f"profile: expected one of {tuple(table)}, the path of a .toml config file or a folder "
                         f"of them, got {prof!r}") from None
    if not strict:
        sizes.update(overrides)
        return sizes
    unknown = set(overrides) - set(sizes) - set(getattr(table, "optional", ()))
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


def eval_split(task) -> str:
    """The split a run is watched on while it trains (and any choice is made on): the task's validation split
    where it has one, else its test split (the quick profile's tasks, as the lessons were made)."""
    return "validation" if "validation" in task.splits else "test"


def test_metrics(model, task, history) -> dict:
    """The test metrics a result reports, the test split read once: the run's final evaluation where it was
    evaluated on the test split (no validation split), else one evaluation of the test split now."""
    if eval_split(task) == "test" and history.final is not None:
        return dict(history.final)
    from seqlab import train

    return train.evaluate(model, task, "test")


def validation_accuracy(task, history) -> float | None:
    """The run's final accuracy on the validation split (``None`` where the task has none)."""
    return float(history.final["accuracy"]) if eval_split(task) == "validation" and history.final else None


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


@functools.lru_cache(maxsize=1)
def code_version() -> dict:
    """``{"commit", "dirty"}``: the git commit of the code a sitting runs (read once, as the sitting starts) and whether
    ``seqlab/`` differed from it. A grid or a sweep runs over sessions while the code moves: each run records it.
    Outside a git checkout (a copy of the tree on a lent machine): what ``$SEQLAB_CODE_VERSION`` says (JSON,
    written where the copy was made: ``tools/recall_sweep.py device-command``), else ``{}``."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "seqlab"], cwd=root, capture_output=True,
                               text=True, check=True, timeout=10).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        said = json.loads(os.environ.get("SEQLAB_CODE_VERSION") or "{}")
        return {k: said[k] for k in ("commit", "dirty") if k in said}
    return {"commit": commit, "dirty": dirty}
