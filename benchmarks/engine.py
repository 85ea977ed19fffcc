"""One recurrence under every causal linear family: forward + backward time of ``decay_attention`` (additive
and multiplicative causal decay) and of causal linear attention, each run on GateLoop's loop, against
``gateloop(mode="auto")`` itself with a real ``a`` shaped like ``k``; and their agreement with the float64
eq. 7 / eq. 2 loops with keys of +-80.

    .venv/bin/python benchmarks/engine.py                  # B=2, H=4, L=4096, dk=dv=16, one thread
    .venv/bin/python benchmarks/engine.py --length 1024 --repeats 3

Times: one untimed call, then the minimum over ``--repeats`` (ms), taken in ``--rounds`` rounds that run
every op in turn (a busy moment of a shared machine slows them all, not the one that happened to run then);
the best of the rounds. The ratio column is each op's time over GateLoop's; 1 would mean the decay costs
nothing on top of the recurrence. The error column is ``|out - ref| / |ref|`` against the float64 loops of
``decay_attention_reference`` on a shorter sequence (``--check-length``; the loops are Python loops over time)
with keys drawn in [-80, 80]. The machine's load average is printed before and after.

``--clock cpu`` times by the process's CPU time (``time.process_time``) instead of the wall clock: on a machine
whose other processes want more cores than it has, a wall-clock minimum still holds the time the op waited for
a core, a CPU-time one does not (cache and memory traffic shared with them still slow it). With one thread the two
agree on a quiet machine; with more, CPU time adds up the threads' times.

``--record`` also writes the table as JSON, by default to
``benchmarks/results/cpu-engine-<date>-B<b>-H<h>-L<l>-d<d>.json`` (the commit, the machine, the load, the command).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
from _timing import best_ms

from seqlab.layers.attention import linear_attention
from seqlab.ops import decay_attention, decay_attention_reference, gateloop, relative_error


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def best_of(fn, repeats: int, clock: str = "wall") -> float:
    """``_timing.best_ms`` (one untimed call, then the minimum over ``repeats``, ms) on the chosen clock."""
    if clock == "wall":
        return best_ms(fn, repeats)
    tick = CLOCKS[clock]
    fn()
    best = math.inf
    for _ in range(repeats):
        start = tick()
        fn()
        best = min(best, tick() - start)
    return best * 1e3


def forward_backward(fn, inputs):
    def step():
        leaves = [t.detach().requires_grad_() for t in inputs]
        fn(*leaves).sum().backward()
    return step


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--dim", type=int, default=16, help="dk = dv")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--check-length", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3, help="rounds over all ops; each op's best is kept")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                   help="wall clock, or the process's CPU time (a loaded machine's waits for a core left out)")
    p.add_argument("--record", nargs="?", const="", default=None, metavar="PATH",
                   help="also write the table as JSON (default path: benchmarks/results/cpu-engine-...)")
    args = p.parse_args(argv)
    load_before = os.getloadavg()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, args.length, args.dim)
    q, k, v = (torch.randn(shape, generator=g) for _ in range(3))
    a = torch.rand(shape, generator=g) * 0.5 + 0.5
    log_decay = torch.rand(shape, generator=g)
    ops = {
        "gateloop (real a like k)": (lambda q, k, v, a: gateloop(q, k, v, a), (q, k, v, a)),
        "additive causal decay": (lambda q, k, v: decay_attention(q, k, v), (q, k, v)),
        "multiplicative causal decay": (
            lambda q, k, v, ld: decay_attention(q, k, v, decay="multiplicative", log_decay=ld), (q, k, v, log_decay)),
        "linear attention (causal)": (lambda q, k, v: linear_attention(q, k, v), (q, k, v)),
    }
    times = dict.fromkeys(ops, float("inf"))
    for _ in range(args.rounds):       # every op in turn, so that a busy moment slows them alike
        for name, (fn, ins) in ops.items():
            times[name] = min(times[name], best_of(forward_backward(fn, ins), args.repeats, args.clock))
    # agreement with the float64 loops, keys of +-80
    L = args.check_length
    qc, vc = q[..., :L, :], v[..., :L, :]
    kc = (torch.rand(qc.shape, generator=g) * 160 - 80)
    ldc = log_decay[..., :L, :] * 5
    errors = {
        "additive causal decay": relative_error(decay_attention(qc, kc, vc),
                                                decay_attention_reference(qc, kc, vc)),
        "multiplicative causal decay": relative_error(
            decay_attention(qc, kc, vc, decay="multiplicative", log_decay=ldc),
            decay_attention_reference(qc, kc, vc, decay="multiplicative", log_decay=ldc)),
    }
    base = times["gateloop (real a like k)"]
    load_after = os.getloadavg()
    print(f"forward + backward, B={args.batch}, H={args.heads}, L={args.length}, dk=dv={args.dim}, "
          f"threads={args.threads}, {args.clock} clock, min of {args.repeats} in {args.rounds} rounds; error vs the "
          f"float64 loops at "
          f"L={L}, keys in [-80, 80]; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          f"({os.cpu_count()} CPUs)")
    head = f"{'op':>28} | {'ms':>8} {'x gateloop':>10} | {'rel. error':>10}"
    print(head)
    print("-" * len(head))
    for name, ms in times.items():
        err = f"{errors[name]:10.1e}" if name in errors else f"{'-':>10}"
        print(f"{name:>28} | {ms:8.1f} {ms / base:10.2f} | {err}")
    if args.record is not None:
        rows = [{"op": name, "ms": round(ms, 3), "x_gateloop": round(ms / base, 3), "rel_error": errors.get(name)}
                for name, ms in times.items()]
        shape = dict(batch=args.batch, heads=args.heads, length=args.length, dim=args.dim, threads=args.threads,
                     repeats=args.repeats, rounds=args.rounds, clock=args.clock, check_length=L)
        tag = f"B{args.batch}-H{args.heads}-L{args.length}-d{args.dim}{'-cpu' if args.clock == 'cpu' else ''}"
        path = write_record("engine", args.record, tag,
                            shape, rows, load_before, load_after, argv)
        print(f"record: {path}")
    return 0


def write_record(script: str, path: str, tag: str, config: dict, rows: list, load_before, load_after, argv,
                 extra: dict | None = None) -> Path:
    """A CPU script's table as JSON (``engine.py`` and ``decode.py``): ``benchmarks/results/cpu-<script>-<date>
    [-<tag>].json`` unless ``path`` names a file."""
    root = Path(__file__).resolve().parent
    date = datetime.date.today().isoformat()
    out = Path(path) if path else root / "results" / f"cpu-{script}-{date}{'-' + tag if tag else ''}.json"
    repo = root.parent
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "seqlab"], cwd=repo,
                           capture_output=True, text=True)
    record = {
        "schema": f"seqlab-cpu-{script}/1",
        "date": date,
        "command": " ".join([f"benchmarks/{script}.py", *(sys.argv[1:] if argv is None else argv)]),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in load_after]},
        "software": {"python": platform.python_version(), "torch": torch.__version__,
                     "numba": _version("numba"), "numpy": _version("numpy"),
                     "seqlab_commit": commit.stdout.strip() if commit.returncode == 0 else None,
                     "seqlab_uncommitted_changes": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None},
        "config": config,
        "rows": rows,
        **(extra or {}),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return out


def _version(package: str):
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:  # noqa: BLE001 - a missing package is recorded as None
        return None


if __name__ == "__main__":
    sys.exit(main())
