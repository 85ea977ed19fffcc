"""The full profile's experiments, timed: a few steps of every ``configs/*.toml`` run and the time the whole
experiment would take, projected from them. ``python3 workbench.py gpu-check`` runs it on a GPU.

    .venv/bin/python benchmarks/full_profile.py                    # every config, 20 and 40 steps each
    .venv/bin/python benchmarks/full_profile.py gateloop-memory-horizon --steps 10

Each experiment runs three times at its config's sizes: once with every run cut to one step (untimed: data
generation, caches and compilation), once cut to ``--steps`` optimizer steps and once to twice that; the difference is the cost of ``--steps`` steps of all the experiment's runs together
(data generation, model building and the final evaluations cancel), so

    projected = t(n) + (steps in the config - n) * (t(2n) - t(n)) / n

for the experiment's whole set of runs. Periodic evaluations are counted only as far as the short runs hold
them. The config's own ``estimated_time`` (a rough FLOP estimate written before any measurement) is shown
beside it. ``--profile medium`` times the medium sizes (``configs/medium/``, on a CPU: what
``python -m seqlab reproduce`` runs, one seed of it), ``--profile quick`` the quick ones (a CPU check of this script).
"""
from __future__ import annotations

import argparse
import sys
import time

from tqdm.auto import tqdm

from seqlab import config, experiments
from seqlab.experiments import _common

def cases(names: list[str]) -> list[tuple[str, str | None]]:
    """``(experiment, section)`` for every size table of the named experiments (all with a config by default)."""
    out = []
    for name in names:
        if experiments.config_file(name) is None:
            raise SystemExit(f"{name}: has no config ({experiments.WITHOUT_CONFIG[name]})")
        out += [(name, table.section) for table in _common.TABLES[name]]
    return out


def timed_run(name: str, section: str | None, profile: str, steps: int) -> float:
    """Seconds for experiment ``name`` at ``profile`` sizes with every run cut to ``steps`` steps."""
    kwargs = {"task": section} if section else {}
    start = time.perf_counter()
    experiments.run(name, profile=profile, progress=False, **kwargs, steps=steps)
    if config.cuda_available():
        import torch

        torch.cuda.synchronize()
    return time.perf_counter() - start


def project(name: str, section: str | None, profile: str, steps: int) -> dict:
    table = next(t for t in _common.TABLES[name] if t.section == section)
    sizes = table[profile]
    total = sizes["steps"]
    timed_run(name, section, profile, 1)      # untimed: data sets generated and cached, kernels compiled
    short, double = timed_run(name, section, profile, steps), timed_run(name, section, profile, 2 * steps)
    per_step = max(double - short, 0.0) / steps
    path = {"full": _common.config_path(name), "medium": _common.MEDIUM_DIR / f"{name}.toml"}.get(profile)
    estimate = _common.read_config(path).get("estimated_time", "") if path is not None and path.is_file() else ""
    return {"experiment": name + (f" ({section})" if section else ""), "steps": total, "short_s": short,
            "double_s": double, "ms_per_step": 1e3 * per_step,
            "projected_min": (short + (total - steps) * per_step) / 60, "estimate": estimate}


def fmt_minutes(minutes: float) -> str:
    return f"{minutes:.1f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="experiments (default: every one with a config)")
    p.add_argument("--steps", type=int, default=20, help="steps of the short runs (the long ones take twice)")
    p.add_argument("--profile", default="full", choices=("full", "medium", "quick"))
    args = p.parse_args(argv)
    names = args.names or [n for n in experiments.names() if n not in experiments.WITHOUT_CONFIG]
    device = config.device("auto")
    where = __import__("torch").cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"{args.profile} profile on {where}: {args.steps} and {2 * args.steps} steps of every run; "
          f"ms per step is that of all the experiment's runs together", flush=True)
    head = f"{'experiment':<34} {'steps':>7} {'t(n) s':>8} {'t(2n) s':>8} {'ms/step':>9} {'projected':>10}  estimate"
    print(head + "\n" + "-" * len(head), flush=True)
    for name, section in tqdm(cases(names), desc="full-profile configs", file=sys.stderr):
        r = project(name, section, args.profile, args.steps)   # each row printed as it is measured: a cut-short
        print(f"{r['experiment']:<34} {r['steps']:>7} {r['short_s']:>8.1f} {r['double_s']:>8.1f} "   # run keeps them
              f"{r['ms_per_step']:>9.1f} {fmt_minutes(r['projected_min']):>10}  {r['estimate']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
