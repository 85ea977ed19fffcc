"""The recall sweep's tooling: sittings on a lent machine and their runs merged back, the step-budget probe, answers
read from kept weights, and a snapshot of the record staged for a commit. One subcommand each:

    .venv/bin/python tools/recall_sweep.py device-command --seconds 420 --sittings 12   # the lent machine's command
    SEQLAB_CODE_VERSION='{"commit": "...", "dirty": false}' python3 tools/recall_sweep.py device-run --seconds 420 \
        --sittings 12 --out "$OUT"                                                       # on the lent machine
    .venv/bin/python tools/recall_sweep.py device-merge FILES_AT/recall-sweep-medium.json   # back here
    .venv/bin/python tools/recall_sweep.py steps-probe linear-transformer --checkpoint-dir results/.runs/recall-sweep
    .venv/bin/python tools/recall_sweep.py steps-probe linear-transformer --dry-run   # only say which cell and rate
    .venv/bin/python tools/recall_sweep.py answers [RECORD [CHECKPOINT_DIR]]
    .venv/bin/python tools/recall_sweep.py snapshot [--lesson] && git commit -m "Recall sweep: ..."
    .venv/bin/python tools/recall_sweep.py plan [--budget 60] [--write]   # the next sitting: cells, CPU-hours

**The next sitting** (``plan``: the frontier measured, not bracketed): the cells
``seqlab.experiments.recall_sweep_next`` proposes from the finished medium record (bracket refinement, the cells whose
runs still rose at the end, DeltaNet and Gated DeltaNet, each addition against a base of equal state, the LRNN's
state alone, 16 pairs at 128 tokens), each with why, its width, parameters and state (and per layer), and an estimate
of its CPU-hours from the recorded ``wall_s`` of the most similar cell; the budget (``--budget``, 60 CPU-hours) is
spent in that order and the rest deferred. The record's provenance (runs without a commit, runs on changed code) is
said. ``--write`` writes the profiles of what the budget takes, ``configs/medium/frontier/recall-sweep.toml`` (and
``configs/medium/frontier-128/recall-sweep.toml`` when any of it is taken), and the command prints how to start them.

**On a lent machine** (the `device` tool's `run`; its GPU when it has one: `fit`'s device is "auto"), the command
that ``device-command`` prints here (it names the commit carried, which the copy there cannot read, for each run's
``commit``; ``carry`` it ``.whl``) copies ``results/arena/recall-sweep-medium.json`` to ``OUT`` and starts
``--sittings`` sittings side by side on that copy, each on its own part of what the record still lacks (a family at
a number of pairs, the fewest pairs first, the way the plan orders them), so that no two train the same run. After
``--seconds`` each gets a SIGTERM: it finishes its step and stops; a run cut short is not recorded (its weights stay
there, which is gone with the machine). Each sitting's output is ``OUT/sitting-<i>.log``. A missing Python package
(``datasets`` and the two it needs on the lent machines of 2026-11) travels as wheels: ``.whl/`` (see the `device`
tool's README), installed before anything runs. Back here, with the sittings of this machine stopped first (so that
none trains a run the lent machine recorded), ``device-merge`` adds the runs that file has and this record lacks (the
same key: a run is never recorded twice); then ``snapshot`` stages the record with its page. Each run says where it
ran (``device``) and how long it took (``wall_s``); the record's own ``wall_s``, the time its sittings here ran, is
left as it is.

**The step-budget probe** (``steps-probe``): does a family that recalls at none of its cells learn with more steps?
Among the family's finished cells at ``--pairs`` pairs (4) in the medium record, the cell with the highest mean
*validation* accuracy over its seeds at its chosen rate is trained again at that rate, seeds 0-2, for ``--factor``
(2) times the sweep's steps, everything else as the sweep trains it (``seqlab.experiments.recall_sweep.run_one``).
The choice is made on validation before the probe runs, and the probe's result is kept whatever it is. Each finished
run is merged at once into ``results/arena/recall-sweep-steps.json`` (``--out``) under the sweep's run key, in which
the steps differ, so a run recorded is never trained again; ``--checkpoint-dir`` resumes one that was stopped.

**Answers** (``answers``): adds to the recorded runs how each answered its test queries, from the final weights its
sittings kept (runs recorded before ``seqlab.experiments.recall_sweep`` measured it as it trains; defaults: the
medium record, ``results/.runs/recall-sweep``). For each run without ``answers``: its checkpoint
(``CHECKPOINT_DIR/<run name>.pt``, written by the sitting that trained it; git-ignored, so on the machine that ran it
only) must be at the run's last step; the model is rebuilt as the run built it, loaded, and
:func:`seqlab.experiments.recall_sweep.answers_on_test` read on the test split. The answers are kept only when they
give back the run's recorded test accuracy (to the record's 6 decimals): the same weights, the same data. Runs
without a checkpoint, stopped early or diverged keep no answers; each is listed.

**A snapshot** (``snapshot``) stages the sweep as it stands, for a commit, while its sittings keep running. Under the
record's lock (the one every sitting takes to add a run: ``seqlab.results.merge``), the results page and the sweep's
figure are drawn again from the record (``seqlab.claims.run.write_summary``) and the three files are staged (``git
add``), so that the page committed is the rendering of the record committed: the test
``test_the_committed_results_page_is_the_rendering_of_claims_json`` compares them. Lesson 08 §6 reads the record too,
and nbval compares what it printed: ``--lesson`` executes it (``workbench.py execute``, about a minute) under the
same lock and stages it with the rest. A sitting that finishes a run meanwhile waits for the lock; none is lost.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "results" / "arena" / "recall-sweep-medium.json"
STEPS_RECORD = ROOT / "results" / "arena" / "recall-sweep-steps.json"
CHECKPOINTS = ROOT / "results" / ".runs" / "recall-sweep"
LESSON = Path("notebooks") / "08_arena.ipynb"
PROG = "tools/recall_sweep.py"


# ----------------------------------------------------------------------------------------------- a lent machine


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


def run_on_device(seconds: float, sittings: int, out: Path, *, profile: str = "medium", source: Path = RECORD,
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
    _stop_after(procs, seconds)
    for log in logs:
        log.close()
    shutil.rmtree(out / "weights", ignore_errors=True)      # cut-short runs: not recorded, not brought back
    before = json.loads(source.read_text())["runs"]
    after = json.loads(record.read_text())["runs"]
    print(f"runs recorded on this machine: {len(after) - len(before)} (the record now holds {len(after)})")
    return 0


def _stop_after(procs: list, seconds: float) -> None:
    """Wait for ``procs`` for at most ``seconds``, then SIGTERM those still running, and wait for them to finish."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(2)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait()


def merge_runs(path: Path, record: Path = RECORD) -> int:
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


def device_command(seconds: float, sittings: int) -> str:
    """The lent machine's command line for this tree as it is (its commit, and whether ``seqlab/`` differs)."""
    sys.path.insert(0, str(ROOT))
    from seqlab.experiments.recall_sweep import code_version

    version = json.dumps(code_version())
    return (f"SEQLAB_CODE_VERSION='{version}' python3 {PROG} device-run --seconds {seconds:g} "
            f"--sittings {sittings} --out \"$OUT\"")


# ----------------------------------------------------------------------------------------------- the step-budget probe


def choose(record: Path, family: str, pairs: int) -> dict:
    """The family's finished cell at ``pairs`` pairs with the highest mean validation accuracy at its chosen rate:
    ``{"cell", "lr", "validation", "test"}`` (means over the seeds); a SystemExit naming what is missing when the
    family has no finished cell there."""
    from seqlab.experiments.arena_results import load
    from seqlab.experiments.recall_sweep_plan import cell_rows, plan_cells
    from seqlab.experiments.recall_sweep_results import chosen_runs

    data = load(record)
    cfg = data["config"]
    rows = [r for r in cell_rows(data["runs"], plan_cells(cfg), cfg)
            if r["family"] == family and r["pairs"] == pairs and r["status"] == "done"]
    if not rows:
        raise SystemExit(f"family: {family!r} has no finished cell at {pairs} pairs in {record}")

    def validation(row: dict) -> float:
        return statistics.fmean(r["validation_accuracy"] for r in chosen_runs(row, data["runs"]))

    best = max(rows, key=validation)
    return {"cell": best["cell"], "lr": float(best["chosen_lr"]), "validation": round(validation(best), 6),
            "test": best["mean"]}


def probe(family: str, *, pairs: int = 4, factor: int = 2, record: Path = RECORD, out: Path = STEPS_RECORD,
          checkpoint_dir: str | None = None, dry_run: bool = False) -> dict:
    """Choose the cell (:func:`choose`) and train its seeds at ``factor`` times the steps, under the record's own
    config otherwise; returns the probe's record (``{"probe": {...}, "config": ..., "runs": [...]}``)."""
    from seqlab import results
    from seqlab.experiments.arena_results import load
    from seqlab.experiments.recall_sweep import describe_run, run_one
    from seqlab.experiments.recall_sweep_plan import plan_cells, run_key, spec_key

    chosen = choose(record, family, pairs)
    cfg = load(record)["config"]
    cfg = {**cfg, "steps": cfg["steps"] * factor}
    cell = next(c for c in plan_cells(cfg, [family], [pairs]) if c["cell"] == chosen["cell"])
    fields = {"probe": {**chosen, "family": family, "pairs": pairs, "steps": cfg["steps"], "factor": factor,
                        "source": record.name, "command": " ".join(["python", PROG, *sys.argv[1:]])},
              "config": cfg}
    print(f"probe: {chosen['cell']} at {pairs} pairs, lr {chosen['lr']:g} (its validation accuracy "
          f"{chosen['validation']:.3f}, test {chosen['test']:.3f} at {cfg['steps'] // factor} steps), "
          f"{cfg['steps']} steps, seeds 0-{cfg['seeds'] - 1}", flush=True)
    data = load(out) if out.is_file() else {"runs": []}
    if dry_run:
        return {**data, **fields}
    done = {run_key(r) for r in data["runs"]}
    for seed in range(cfg["seeds"]):
        spec = {**cell, "seed": seed, "lr": chosen["lr"]}
        if spec_key(spec, cfg) in done:
            continue
        run = run_one(spec, cfg, checkpoint_dir=checkpoint_dir)
        print(describe_run(run), flush=True)
        data = results.merge(out, key=run_key, runs=[run], fields=fields)
    return data


# ----------------------------------------------------------------------------------------------- answers


def answers_from_checkpoints(record: Path, folder: Path) -> tuple[dict, list[str]]:
    """``({run_key: {"answers": ...}}, [why each run left out])`` for the record's runs without answers."""
    import torch

    from seqlab import results
    from seqlab.experiments._common import checkpointing
    from seqlab.experiments.recall_sweep import run_name
    from seqlab.experiments.recall_sweep_plan import plan_cells, run_key

    data = results.read(record)
    cfg = data["config"]
    cells = {(c["cell"], c["pairs"]): c for c in plan_cells(cfg)}
    found, left = {}, []
    for run in data["runs"]:
        if "answers" in run:
            continue
        spec = {**cells[(run["cell"], run["pairs"])], "seed": run["seed"], "lr": run["lr"]}
        name = run_name(spec, cfg)
        path = Path(checkpointing(folder, name, cfg["steps"])["checkpoint"])
        if run.get("diverged") or not path.is_file():
            left.append(f"{name}: {'diverged' if run.get('diverged') else 'no checkpoint'}")
            continue
        saved = torch.load(path, map_location="cpu", weights_only=False)
        if saved["step"] != run["steps"]:
            left.append(f"{name}: checkpoint at step {saved['step']} of {run['steps']}")
            continue
        answers = _answers_of(run, saved["model"], cfg)
        correct, asked = (sum(x) for x in zip(*answers["by_pair"]))
        if round(correct / asked, 6) != run["accuracy"]:
            left.append(f"{name}: test accuracy {correct / asked:.6f} from the checkpoint, {run['accuracy']} recorded")
            continue
        found[run_key(run)] = {"answers": answers}
    return found, left


def _answers_of(run: dict, weights: dict, cfg: dict) -> dict:
    """How the run's model, rebuilt as the run built it and given ``weights``, answers its test split's queries."""
    from seqlab import config, models
    from seqlab.experiments.arena_runner import make_task
    from seqlab.experiments.recall_sweep import answers_on_test
    from seqlab.experiments.recall_sweep_plan import model_config

    with config.one_math_thread():
        task = make_task("mqar", {**cfg["mqar"], "num_kv_pairs": run["pairs"]}, run["seed"], cfg)
        model = models.build(run["family"], vocab_size=task.vocab_size, seq_len=task.seq_len,
                             **model_config(run["family"], run["knobs"], run["d_model"], cfg["n_layers"]))
        model.load_state_dict(weights)
        return answers_on_test(model, task, run["pairs"])


def add_answers(record: Path = RECORD, folder: Path = CHECKPOINTS) -> int:
    """Amend ``record``'s runs with the answers read from the weights in ``folder``; list the runs left without."""
    from seqlab import results
    from seqlab.experiments.recall_sweep_plan import run_key

    found, left = answers_from_checkpoints(record, folder)
    changed = results.amend(record, key=run_key, fields=found)
    print(f"{record}: answers added to {changed} runs; left without: {len(left)}")
    for why in left:
        print(f"  {why}")
    return 0


# ----------------------------------------------------------------------------------------------- a snapshot


def snapshot(lesson: bool = False) -> int:
    """Draw the results page and the sweep's figure again and stage them with the record (and, with ``lesson``,
    lesson 08 executed on it), all under the record's lock."""
    from filelock import FileLock

    from seqlab.claims.recall_report import sweep_file
    from seqlab.claims.run import write_summary

    results = ROOT / "results"
    record = sweep_file(results)
    with FileLock(str(record) + ".lock"):
        write_summary(results)
        staged = [record, results / "README.md", results / "claims.json",
                  *[p for p in (record.with_suffix(".png"), record.with_suffix(".plotly.json")) if p.is_file()]]
        if lesson:
            subprocess.run([sys.executable, str(ROOT / "workbench.py"), "execute", str(LESSON)], cwd=ROOT, check=True)
            staged.append(ROOT / LESSON)
        subprocess.run(["git", "add", "--", *map(str, staged)], cwd=ROOT, check=True)
    print("staged:", ", ".join(str(p.relative_to(ROOT)) for p in staged))
    return 0


# ----------------------------------------------------------------------------------------------- the next sitting


FRONTIER = ROOT / "configs" / "medium"


def step_ratios(entries: list[dict], rows: list[dict], cfg: dict, repeats: int = 5) -> dict:
    """``{cell label: its training step's time over the reference's}`` for the cells of the families the record has no
    run of (DeltaNet), timed here on one thread (``benchmarks/recall_sweep.py``'s ``step_ms``, the median of
    ``repeats`` steps at the fewest pairs, the least of three such medians: the least disturbed by other work on the
    machine): what the estimate scales the sweep's recorded Transformer steps by."""
    import importlib.util

    import torch

    from seqlab import config, models
    from seqlab.experiments.recall_sweep_next import profile_cfg
    from seqlab.experiments.recall_sweep_plan import cell_label, cell_width, model_config

    known = {r["family"] for r in rows}
    cells = {cell_label(e): e for e in entries if e["family"] not in known}
    if not cells:
        return {}
    spec = importlib.util.spec_from_file_location("bench_recall_sweep", ROOT / "benchmarks" / "recall_sweep.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    task, pairs = cfg["mqar"], min(cfg["pairs"])

    def ms(family: str, knobs: dict) -> float:
        torch.manual_seed(0)
        width = cell_width(family, knobs, profile_cfg("frontier", cfg))
        model = models.build(family, vocab_size=task["vocab_size"], seq_len=task["seq_len"],
                             **model_config(family, knobs, width["d_model"], cfg["n_layers"]))
        return min(bench.step_ms(model, task["vocab_size"], cfg["batch_size"], task["seq_len"], pairs, repeats)
                   for _ in range(3))

    with config.one_math_thread():
        reference = ms(cfg["reference"], {})
        return {label: round(ms(e["family"], e["knobs"]) / reference, 3) for label, e in cells.items()}


def plan_next(record: Path = RECORD, budget: float = 60.0, write: bool = False, folder: Path = FRONTIER,
              timing: bool = True) -> dict:
    """Print the next sitting's cells and their CPU-hours (module docstring); with ``write``, write its profiles
    under ``folder``; ``timing``: time the steps of the families the record lacks (:func:`step_ratios`), else scale
    their arena runs. Returns ``{"chosen", "deferred", "notes", "flags", "written", "ratios"}``."""
    sys.path.insert(0, str(ROOT))
    from seqlab.experiments import recall_sweep_next as N
    from seqlab.experiments.arena_results import load
    from seqlab.experiments.recall_sweep_plan import cell_label, cell_rows, plan_cells

    data = load(record)
    cfg = data["config"]
    rows = cell_rows(data["runs"], plan_cells(cfg), cfg)
    entries, notes = N.propose(rows, cfg)
    arena = N.arena_times(Path(record).parent)
    ratios = step_ratios(entries, rows, cfg) if timing else {}
    for e in entries:
        e.update(N.estimate(e, rows, data["runs"], cfg, arena, ratios=ratios))
    chosen, deferred = N.select(entries, budget, cfg)
    flags = N.flags(data["runs"], rows, chosen)
    proto = N.PROTOCOL
    print(f"The recall sweep's next sitting, from {Path(record).name} ({len(data['runs'])} runs). Protocol: a cap of "
          f"{proto['steps']} steps (the cosine's length; the old runs' 6000 x 2), each run stopped at the first "
          f"evaluation reaching {proto['stop_at']} validation accuracy, training sequences drawn fresh every step; "
          "every cell trained again from step 0 under it (old runs cannot be continued: module "
          "seqlab.experiments.recall_sweep_next).")
    head = (f"{'':1} {'tier':<11} {'profile':<12} {'cell':<62} {'pairs':>5} {'d_model':>7} {'params (x)':>14} "
            f"{'state':>7} {'a layer':>7} {'runs':>4} {'steps':>6} {'s/step':>6} {'CPU-h':>5} {'sum':>6}  similar; why")
    print(head)
    print("-" * len(head))
    total = 0.0
    for e in sorted(entries, key=lambda e: (e not in chosen, N.order(e, cfg))):
        total += e["cpu_h"]
        params = f"{e['params']:,} ({e['budget']:.2f})" if e.get("params") else "—"
        print(f"{'*' if e in chosen else ' '} {e['tier']:<11} {e['profile']:<12} {cell_label(e):<62} {e['pairs']:>5} "
              f"{e.get('d_model') or '—':>7} {params:>14} {e['state']:>7,} {e['state_per_layer']:>7,} {e['runs']:>4} "
              f"{e['steps']:>6} {e['s_per_step']:>6.3f} {e['cpu_h']:>5.2f} {total:>6.1f}  {e['similar']}; {e['why']}")
    took = sum(e["cpu_h"] for e in chosen)
    print(f"\nchosen (*): {len(chosen)} cells x pairs, about {took:.1f} CPU-hours (budget {budget:g}); deferred: "
          f"{len(deferred)}, about {sum(e['cpu_h'] for e in deferred):.1f} CPU-hours; the whole plan about "
          f"{took + sum(e['cpu_h'] for e in deferred):.1f}. Each run is counted at the steps its most similar old run "
          "took to reach 0.99 (the cap where it did not): an estimate, the schedule being longer; DeltaNet's, never "
          "run here, at the cap: a bound.")
    if ratios:
        print("steps timed here, x the Transformer's: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    for line in notes:
        print(f"note: {line}")
    for line in flags:
        print(f"provenance: {line}")
    written = []
    profiles = sorted({e["profile"] for e in chosen})
    if write:
        for profile in profiles:
            path = folder / profile / "recall-sweep.toml"
            mine = [e for e in chosen if e["profile"] == profile]
            header = [f"The recall sweep's next sitting, profile {profile!r}, written by",
                      f"`{PROG} plan --budget {budget:g} --write` from {Path(record).name} ({len(data['runs'])} runs):",
                      f"{len(mine)} cells x pairs, about {sum(e['cpu_h'] for e in mine):.1f} CPU-hours by the recorded "
                      "wall_s of the most similar cells.", "",
                      f"Runs to convergence: steps = {proto['steps']} is the cap (and the cosine's length), stop_at = "
                      f"{proto['stop_at']} stops a run", "at the first evaluation reaching it, fresh = true draws the "
                      "training sequences new at every step", "(train_size is then not used). A record of its own: "
                      f"results/arena/recall-sweep-{profile}.json.", "Each cell says why it is here (the tier of "
                      "seqlab.experiments.recall_sweep_next).", "",
                      f"  .venv/bin/python -m seqlab experiment recall-sweep profile=configs/medium/{profile} "
                      "checkpoint_dir=results/.runs/recall-sweep"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(N.profile_text(chosen, cfg, profile, header))
            written.append(path)
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    for profile in profiles:
        print(f"start: nohup nice -n 5 .venv/bin/python -m seqlab experiment recall-sweep "
              f"profile=configs/medium/{profile} checkpoint_dir=results/.runs/recall-sweep "
              f">> /tmp/recall-sweep-{profile}.log 2>&1 &")
    return {"chosen": chosen, "deferred": deferred, "notes": notes, "flags": flags, "written": written,
            "ratios": ratios}


# ----------------------------------------------------------------------------------------------- the command line


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, where in (("device-command", "here: the command line to give the lent machine"),
                        ("device-run", "on the lent machine: sittings side by side for a fixed time")):
        p = sub.add_parser(name, help=where)
        p.add_argument("--seconds", type=float, default=420)
        p.add_argument("--sittings", type=int, default=12)
    sub.choices["device-run"].add_argument("--out", type=Path, required=True)
    p = sub.add_parser("device-merge", help="here: add the lent machine's runs to the record")
    p.add_argument("file", type=Path)
    p = sub.add_parser("steps-probe", help="train a family's best validated cell again at more steps")
    p.add_argument("family")
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--factor", type=int, default=2, help="the sweep's steps times this (default 2)")
    p.add_argument("--record", type=Path, default=RECORD)
    p.add_argument("--out", type=Path, default=STEPS_RECORD)
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--dry-run", action="store_true")
    p = sub.add_parser("answers", help="add the answers read from kept weights to the runs without them")
    p.add_argument("record", type=Path, nargs="?", default=RECORD)
    p.add_argument("checkpoint_dir", type=Path, nargs="?", default=CHECKPOINTS)
    p = sub.add_parser("plan", help="the next sitting: its cells, why, and their CPU-hours; --write its profiles")
    p.add_argument("--record", type=Path, default=RECORD)
    p.add_argument("--budget", type=float, default=60.0, help="CPU-hours the sitting may spend (default 60)")
    p.add_argument("--write", action="store_true", help="write configs/medium/<profile>/recall-sweep.toml")
    p.add_argument("--no-timing", action="store_true", help="scale the arena's DeltaNet runs instead of timing steps")
    p = sub.add_parser("snapshot", help="stage the record and its page (and lesson 08 executed on it) for a commit")
    p.add_argument("--lesson", action="store_true", help="execute lesson 08 on the record and stage it too")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "device-command":
        print(device_command(args.seconds, args.sittings))
        return 0
    if args.command == "device-run":
        return run_on_device(args.seconds, args.sittings, args.out)
    if args.command == "device-merge":
        return merge_runs(args.file)
    if args.command == "steps-probe":
        if args.factor < 2:
            raise SystemExit(f"--factor: expected an integer of 2 or more, got {args.factor}")
        probe(args.family, pairs=args.pairs, factor=args.factor, record=args.record, out=args.out,
              checkpoint_dir=args.checkpoint_dir, dry_run=args.dry_run)
        return 0
    if args.command == "answers":
        return add_answers(args.record, args.checkpoint_dir)
    if args.command == "plan":
        plan_next(args.record, args.budget, args.write, timing=not args.no_timing)
        return 0
    return snapshot(lesson=args.lesson)


if __name__ == "__main__":
    sys.exit(main())
