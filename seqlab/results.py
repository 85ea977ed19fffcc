"""Results files that several sittings can write at once: read, merged under a lock, replaced atomically.

A results file is one JSON object (the arena's and the init measurement's: ``{"command", "versions", "profile",
"config", "wall_s", "runs": [...], "controls": [...]}``). Two sittings of one grid side by side (one per GPU, or
``families=a`` and ``families=b``) each finish runs; :func:`merge` adds them without losing the other's:

1. take the file's lock (``<file>.lock``, a ``filelock.FileLock``: held by one process at a time);
2. read the file again, as it is now;
3. add the new records whose key is not there yet (``key``: what makes two records the same), keep every other
   key of the file as it is, add ``wall_s`` to the file's;
4. write a temporary file whose name is this writer's own, and replace the file with it (atomic: a reader sees
   the old file or the new one, never half of one).

A file that is not valid JSON raises :class:`ResultsError` naming it and what to do; it is never overwritten. A
write that fails (a full disk, a folder gone read-only or vanished) raises :class:`ResultsError` naming the file
and the cause (:func:`write_failure`), leaves no temporary file and keeps the file as it was. The claims' one-record
files use the same two steps (:func:`read_json`, :func:`write_json`).
"""
from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import uuid
from pathlib import Path
from typing import Callable, Iterable

from filelock import FileLock

__all__ = ["ResultsError", "read", "merge", "amend", "read_json", "write_json", "write_failure", "machine",
           "profile_tag", "RESULTS_DIR", "LISTS"]

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"   # the committed results: claims, arena, init

LISTS = ("runs", "controls")       # the lists of records a results file holds


def machine() -> dict:
    """Where a run ran: CPU model, cores, GPU (if any), torch version and the math threads used."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "python": platform.python_version()}


def profile_tag(profile: str) -> str:
    """A profile's name in records and folders: the name itself, or the stem of a config file or folder."""
    from seqlab import config

    return profile if profile in config.PROFILES else Path(profile).stem


class ResultsError(ValueError):
    """A results file that cannot be read: named, with what to do."""


def read(path: str | os.PathLike) -> dict:
    """The results file at ``path`` (``{"runs": [], "controls": []}`` where there is none yet)."""
    path = Path(path)
    if not path.is_file():
        return {name: [] for name in LISTS}
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ResultsError(f"{path}: not a valid results file ({err}); it is left as it is. Move it aside (or mend "
                           "it) and run again: the runs it held are trained again") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs", []), list):
        raise ResultsError(f"{path}: not a results file (expected an object with a list of runs); it is left as it "
                           "is. Move it aside and run again")
    for name in LISTS:
        data.setdefault(name, [])
    return data


def write_failure(path, err: BaseException) -> str:
    """Why writing ``path`` failed, in words: a full disk (torch's own error on one carries no errno, so the free
    space of the folder is looked at), a read-only or vanished folder, or the error itself."""
    code = getattr(err, "errno", None)
    folder = os.path.dirname(os.path.abspath(path))
    if code is None:
        try:
            if shutil.disk_usage(folder).free < 1 << 20:
                code = errno.ENOSPC
        except OSError:
            code = errno.ENOENT
    if code == errno.ENOSPC:
        return f"no space left on device while writing {path}"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"{path} cannot be written (read-only or not permitted: {os.strerror(code)})"
    if code == errno.ENOENT:
        return f"the folder of {path} vanished while writing it"
    return f"writing {path} failed ({type(err).__name__}: {err})"


def write_json(path: str | os.PathLike, data) -> None:
    """``data`` as JSON at ``path``: written to a temporary file of this writer's own, then moved into place (a
    reader never sees half a file). A failure raises :class:`ResultsError` naming the file and the cause; the
    file keeps what it held and no temporary file is left."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")   # this writer's own
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError as err:
        raise ResultsError(f"{write_failure(path, err)}; the file keeps what it held") from err
    finally:
        tmp.unlink(missing_ok=True)


def read_json(path: str | os.PathLike):
    """The JSON at ``path``; None where there is no file. A file that is not valid JSON raises
    :class:`ResultsError` naming it: it is never taken for a missing one (and so never overwritten)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ResultsError(f"{path}: not valid JSON ({err}); it is left as it is. Move it aside (or mend it) and "
                           "run again") from None


_write = write_json


def merge(path: str | os.PathLike, *, key: Callable[[dict], tuple], runs: Iterable[dict] = (),
          controls: Iterable[dict] = (), fields: dict | None = None, wall_s: float = 0.0) -> dict:
    """Add ``runs`` and ``controls`` to the file at ``path`` under its lock (module docstring) and return what
    the file holds now. ``fields`` (``command``, ``versions``, ``config``, ...) replace the file's; ``wall_s`` is
    added to its ``wall_s``; a record whose ``key`` the file already has is not added twice."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        data = read(path)
        data.update(fields or {})
        for name, new in (("runs", runs), ("controls", controls)):
            new = list(new)
            if not new:
                continue
            have = {key(r) for r in data[name]}
            for record in new:
                if key(record) not in have:
                    data[name].append(record)
                    have.add(key(record))
        data["wall_s"] = round(data.get("wall_s", 0.0) + wall_s, 1)
        _write(path, data)
    return data


def amend(path: str | os.PathLike, *, key: Callable[[dict], tuple], fields: dict[tuple, dict]) -> int:
    """Add fields to runs the file at ``path`` already holds, under its lock: ``fields`` maps a run's ``key`` to the
    fields to set on it (a field it already has is left as it is). Returns how many runs changed."""
    path = Path(path)
    changed = 0
    with FileLock(str(path) + ".lock"):
        data = read(path)
        for run in data["runs"]:
            new = {k: v for k, v in fields.get(key(run), {}).items() if k not in run}
            if new:
                run.update(new)
                changed += 1
        if changed:
            _write(path, data)
    return changed

