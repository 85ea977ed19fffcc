"""On-disk cache of generated task splits: ``data/cache/<name>-<hash of every parameter>/``.

A split set is built once (deterministically from its parameters, seed included), saved with
``DatasetDict.save_to_disk`` into a temporary folder and moved into place with ``os.replace``
(atomic: parallel test workers never see half a cache), then memory-mapped on later calls.
``SEQLAB_DATA`` overrides the data folder; where it is not writable the cache is skipped.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import contextlib

import datasets

CACHE_VERSION = 1


@contextlib.contextmanager
def _quiet():
    """No ``datasets`` progress bars while saving/loading a cache (they would clutter lessons)."""
    was_disabled = datasets.is_progress_bar_enabled() is False
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def data_dir() -> Path:
    """``$SEQLAB_DATA`` or the repository's ``data/`` folder."""
    env = os.environ.get("SEQLAB_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "data"


def cache_key(name: str, params: dict) -> str:
    blob = json.dumps({"name": name, "version": CACHE_VERSION, **params}, sort_keys=True, default=str)
    return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def cached_splits(name: str, params: dict, build: Callable[[], dict]) -> dict:
    """The splits ``{split: datasets.Dataset}`` for ``params``, from the cache or from ``build()``."""
    with _quiet():
        return _cached_splits(name, params, build)


def _cached_splits(name: str, params: dict, build: Callable[[], dict]) -> dict:
    folder = data_dir() / "cache" / cache_key(name, params)
    if (folder / "dataset_dict.json").exists():
        try:
            return dict(datasets.load_from_disk(str(folder)))
        except (OSError, ValueError, FileNotFoundError):
            pass  # a damaged cache is rebuilt below
    splits = build()
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".tmp-{folder.name}-", dir=folder.parent)
        datasets.DatasetDict(splits).save_to_disk(tmp)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process won the race (or a damaged cache is in the way)
            if not (folder / "dataset_dict.json").exists():
                shutil.rmtree(folder, ignore_errors=True)
                os.replace(tmp, folder)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        return dict(datasets.load_from_disk(str(folder)))
    except OSError:
        return splits  # read-only installation: work from memory
