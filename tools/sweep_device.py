"""The recall sweep on a lent machine for a fixed time, and its runs merged back into the record here.

On the lent machine (the `device` tool's `run`; its GPU when it has one: `fit`'s device is "auto"), the command
that ``.venv/bin/python tools/sweep_device.py command`` prints here (it names the commit carried, which the copy
there cannot read, for each run's ``commit``; ``carry`` it ``.whl``):

    SEQLAB_CODE_VERSION='{"commit": "...", "dirty": false}' python3 tools/sweep_device.py run --seconds 420 \
        --sittings 12 --out "$OUT"

copies ``results/arena/recall-sweep-medium.json`` to ``OUT`` and starts ``--sittings`` sittings side by side on that
copy, each on its own part of what the record still lacks (a family at a number of pairs, the fewest pairs first,
the way the plan orders them), so that no two train the same run. After ``--seconds`` each gets a SIGTERM: it
finishes its step and stops; a run cut short is not recorded (its weights stay there, which is gone with the
machine). Each sitting's output is ``OUT/sitting-<i>.log``. A missing Python package (``datasets`` and the two it
needs on the lent machines of 2026-11) travels as wheels: ``.whl/`` (see the `device` tool's README), installed
before anything runs.

Back here, with the sittings of this machine stopped first (so that none trains a run the lent machine recorded):

    .venv/bin/python tools/sweep_device.py merge FILES_AT/recall-sweep-medium.json

adds the runs that file has and this record lacks (the same key: a run is never recorded twice); then
``tools/sweep_snapshot.py`` stages the record with its page. Each run says where it ran (``device``) and how long it
took (``wall_s``); the record's own ``wall_s``, the time its sittings here ran, is left as it is.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "results" / "arena" / "recall-sweep-medium.json"


def parts(record: Path, profile: str = "medium") -> list[tuple[str, int]]:
    """``[(family, pairs), ...]`` that still lack runs, in the plan's order (every cell at the fewest pairs first)."""
    from seqlab.experiments._common import profile_sizes
    from seqlab.experiments.arena_results import load
    from seqlab.experiments.recall_sweep import SIZES
    from seqlab.experiments.recall_sweep_plan import next_specs, plan_cells

    cfg = profile_sizes(SIZES, profile, {})
    runs = load(record)["runs"] if record.is_file() else []
    out: list[tuple[str, int]] = []
    for cell in plan_cells(cfg):
        key = (cell["family"], cell["pairs"])
        if key not in out and next_specs(runs, cell, cfg):
            out.append(key)
    return out


def install_wheels() -> dict:
    """The sittings' environment: seqlab from this tree, and, where ``datasets`` is missing (the lent machines' image
    of 2026-11), ``.whl/*.whl`` installed into /tmp/site first (no index, no dependencies)."""
    import importlib.util

    env = dict(os.environ)
    wheels = sorted((ROOT / ".whl").glob("*.whl"))
    paths = [str(ROOT)]
    if importlib.util.find_spec("datasets") is None:
        if not wheels:
            raise SystemExit("datasets is missing here and .whl/ holds no wheels: bring datasets, dill and "
                             "multiprocess (the `device` tool's README says how)")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", "/tmp/site", *map(str, wheels)], check=True)
        paths.append("/tmp/site")
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("SEQLAB_DATA", "/tmp/seqlab-data")
    sys.path[:0] = [p for p in paths if p not in sys.path]          # this process reads the plan with them too
    return env


def run(seconds: float, sittings: int, out: Path, *, profile: str = "medium", source: Path = RECORD,
        overrides: tuple[str, ...] = ()) -> int:
    """Copy ``source`` to ``out`` and run ``sittings`` sittings of ``profile`` on that copy for ``seconds``
    (``overrides``: ``key=value`` sizes passed to each, as on the command line)."""
    out.mkdir(parents=True, exist_ok=True)
    env = install_wheels()
    record = out / source.name
    shutil.copyfile(source, record)
    todo = parts(record, profile)[:sittings]
    print(f"{len(todo)} sittings for {seconds:.0f} s: " + ", ".join(f"{f}@{p}" for f, p in todo), flush=True)
    procs, logs = [], []
    for i, (family, pairs) in enumerate(todo):
        logs.append(log := open(out / f"sitting-{i}.log", "w"))
        argv = ["-m", "seqlab", "experiment", "recall-sweep", f"profile={profile}", f"out={record}",
                f"families={family}", f"only_pairs={pairs}", f"checkpoint_dir={out / 'weights'}", *overrides]
        procs.append(subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(2)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p, log in zip(procs, logs):
        p.wait()
        log.close()
    shutil.rmtree(out / "weights", ignore_errors=True)      # cut-short runs: not recorded, not brought back
    before = json.loads(source.read_text())["runs"]
    after = json.loads(record.read_text())["runs"]
    print(f"runs recorded on this machine: {len(after) - len(before)} (the record now holds {len(after)})")
    return 0


def merge(path: Path, record: Path = RECORD) -> int:
    """Add the runs of the record at ``path`` that ``record`` lacks, under its lock."""
    from seqlab import results
    from seqlab.experiments.recall_sweep_plan import run_key

    theirs = json.loads(Path(path).read_text())
    have = {run_key(r) for r in results.read(record)["runs"]}
    new = [r for r in theirs["runs"] if run_key(r) not in have]
    results.merge(record, key=run_key, runs=new)
    devices = sorted({r["device"] for r in new})
    print(f"{record}: {len(new)} runs added ({', '.join(devices) or 'none'})")
    return 0


def command(seconds: float, sittings: int) -> str:
    """The lent machine's command line for this tree as it is (its commit, and whether ``seqlab/`` differs)."""
    sys.path.insert(0, str(ROOT))
    from seqlab.experiments.recall_sweep import code_version

    version = json.dumps(code_version())
    return (f"SEQLAB_CODE_VERSION='{version}' python3 tools/sweep_device.py run --seconds {seconds:g} "
            f"--sittings {sittings} --out \"$OUT\"")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run", help="on the lent machine: sittings side by side for a fixed time")
    go.add_argument("--seconds", type=float, default=420)
    go.add_argument("--sittings", type=int, default=12)
    go.add_argument("--out", type=Path, required=True)
    back = sub.add_parser("merge", help="here: add the lent machine's runs to the record")
    back.add_argument("file", type=Path)
    say = sub.add_parser("command", help="here: the command line to give the lent machine")
    say.add_argument("--seconds", type=float, default=420)
    say.add_argument("--sittings", type=int, default=12)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.seconds, args.sittings, args.out)
    if args.command == "command":
        print(command(args.seconds, args.sittings))
        return 0
    return merge(args.file)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
