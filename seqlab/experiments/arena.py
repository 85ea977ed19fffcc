"""The arena: every causal LM family on the field's recall and memory tasks at matched size (lesson 08).

Seven families (:data:`FAMILIES`) meet eight tasks (:data:`TASKS`): Zoology's multi-query associative recall
(``mqar``), five tasks of the MAD suite (in-context, fuzzy and noisy recall, selective copying, memorization),
paper 001's copying and GateLoop's Memory Horizon. Any other family of the model registry enters by name
(``families=``; one registered with ``seqlab.models.register``, as lesson 08's capstone does): it is matched,
trained and recorded as the seven are, and listed after them.

Matched size. The reference family (``reference``, the Transformer) at a reference width ``w`` sets a target
count of parameters *excluding the token embedding, the position table and the output head*; every other family
gets the ``d_model`` (the one key varied, in whole heads: :func:`width_step`) whose count is nearest, and a run
whose count is more than 10 % off is refused (:func:`matched_width`). Every other setting is the family's default in
the one config vocabulary (``n_layers`` is shared; GateLoop's ``d_ff`` is ``2 * d_model`` as in its own experiment).

The grid (:func:`plan`):

1. every task at the base width ``base_width``: seed 0 at each learning rate of ``lrs``; the rate with the best
   *validation* accuracy is kept (:func:`chosen_lrs`) and seeds ``1 .. seeds-1`` run at it; accuracy is read on
   the *test* split. A grid of three rates or more is extended one step beyond an edge while the best rate sits
   there (:func:`search_rates`), so the chosen rate lies strictly inside what was searched; the summary says
   which grid each cell searched and whether its choice is still at an edge (:func:`rate_grid`);
2. the width sweep: MQAR at every reference width of ``widths`` (each family at its chosen MQAR rate), so that
   accuracy can be drawn against **state size** (floats per sequence after ``seq_len`` tokens, from the decoding
   protocol's ``model.state_size``);
3. the length sweep: MQAR at every length of ``mqar_lengths`` at the base width (the families of the optional
   ``length_sweep_families``, every family where it is not given);
4. the rate band: on the tasks of the optional ``rate_band_tasks``, every seed at every searched rate, so that
   accuracy against learning rate can be drawn with the seeds' spread (the window in which a family learns).

Results. Each finished run is appended at once to the results file (``results/arena/<profile>.json`` by
default): ``{"command", "versions", "wall_s", "profile", "config", "runs": [{"family", "task", "seed",
"d_model", "params", "state_size", "seq_len", "accuracy", "wall_s", ...}]}``; a run already in the file is
skipped, so an interrupted grid resumes where it stopped and a grid can be produced over several sittings.
``workers=2`` trains two runs at a time in separate processes (one math thread each).
"""
from __future__ import annotations

import functools
import json
import platform
import signal
import sys
import time
from pathlib import Path

from seqlab import config
from seqlab.experiments import experiment
from seqlab.train import INITIAL_LOSS_TOLERANCE, THRESHOLDS, check_initial_loss, first_step_at  # noqa: F401
from seqlab.experiments._common import Sizes, checkpointing, profile_sizes

__all__ = ["FAMILIES", "TASKS", "SIZES", "arena", "core_parameters", "matched_width", "plan", "chosen_lrs", "in_grid",
           "run_key", "first_step_at", "search_rates", "best_rate", "rate_grid", "control_specs", "control_verdicts",
           "summarize", "base_rows", "cell_runs", "rank", "sizes",
           "load", "default_out", "run_one", "RESULTS_DIR", "width_step", "family_order"]

FAMILIES = ("transformer", "linear-transformer", "causalrn", "linear-causalrn", "lrnn", "lightnet", "gateloop")
TASKS = ("mqar", "in_context_recall", "fuzzy_in_context_recall", "noisy_in_context_recall", "selective_copying",
         "memorization", "copying", "memory_horizon")
RESULTS_DIR = Path(__file__).resolve().parents[2] / "results" / "arena"

TOLERANCE = 0.10                 # matched means within 10 % of the target count
EMBEDDING_PARAMETERS = ("embed.", "pos", "head.")   # the token table, learned positions, the output head

# Quick sizes: the whole grid on a CPU in a few minutes (lesson 08 trains a part of it live). The medium and full
# sizes are in configs/medium/arena.toml and configs/arena.toml.
SIZES = Sizes("arena", dict(
    families=list(FAMILIES), seeds=1, steps=40, batch_size=32, n_layers=2, lrs=[3e-3], reference="transformer",
    base_width=16, widths=[16, 24], mqar_lengths=[32, 64], threads=1, train_size=512, test_size=128,
    validation_size=128,
    tasks={"mqar": {"vocab_size": 64, "seq_len": 32, "num_kv_pairs": 4},
           "in_context_recall": {"seq_len": 32},
           "fuzzy_in_context_recall": {"seq_len": 32},
           "noisy_in_context_recall": {"seq_len": 32},
           "selective_copying": {"seq_len": 32, "num_tokens_to_copy": 4},
           "memorization": {},
           "copying": {"min_len": 6, "max_len": 6},
           "memory_horizon": {"seq_len": 32}}),
    optional=("controls", "eval_every", "length_sweep_families", "rate_band_tasks"))


# ----------------------------------------------------------------------------------------------- matched size


def core_parameters(model) -> int:
    """Parameters outside the token embedding, the position table and the output head (complex ones count two)."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for name, p in model.named_parameters()
               if not name.startswith(EMBEDDING_PARAMETERS))


def family_config(family: str, d_model: int, n_layers: int) -> dict:
    """The config of ``family`` at width ``d_model``: the shared keys, plus GateLoop's ``d_ff = 2 d_model``."""
    cfg = {"d_model": d_model, "n_layers": n_layers}
    if family == "gateloop":
        cfg["d_ff"] = 2 * d_model
    return cfg


def width_step(family: str) -> int:
    """The step ``d_model`` is varied in: whole heads, the builder's default ``n_heads``, where that is a number
    (4 for the Transformers and LightNet); 2 otherwise (GateLoop's heads follow its width)."""
    import inspect

    from seqlab.models.registry import builder

    heads = inspect.signature(builder(family)).parameters.get("n_heads")
    return heads.default if heads is not None and isinstance(heads.default, int) else 2


def _core_count(family: str, d_model: int, n_layers: int) -> int:
    from seqlab.models.registry import builder

    return _built_count(builder(family), family, d_model, n_layers)


@functools.lru_cache(maxsize=None)
def _built_count(build_fn, family: str, d_model: int, n_layers: int) -> int:
    """The count of ``family`` as ``build_fn`` builds it: the cache holds the builder, so a family registered again
    with another builder (a notebook cell run again) is counted again."""
    from seqlab import models

    return core_parameters(models.build(family, vocab_size=2, **family_config(family, d_model, n_layers)))


def target_parameters(reference: str, width: int, n_layers: int) -> int:
    """The count every family is matched to: the reference family's at ``width``."""
    return _core_count(reference, width, n_layers)


def matched_width(family: str, target: int, n_layers: int) -> tuple[int, int]:
    """``(d_model, parameters)`` of ``family`` nearest ``target`` parameters (bisection: the count grows with
    ``d_model``, in steps of :func:`width_step`); ``ValueError`` where the nearest is more than 10 % off."""
    step = width_step(family)
    lo, hi = 1, 2
    while _core_count(family, hi * step, n_layers) < target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:                                    # count(lo * step) < target <= count(hi * step)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _core_count(family, mid * step, n_layers) < target else (lo, mid)
    d = min((lo * step, hi * step), key=lambda w: abs(_core_count(family, w, n_layers) - target))
    params = _core_count(family, d, n_layers)
    if abs(params - target) > TOLERANCE * target:
        raise ValueError(f"{family}: no d_model (a multiple of {step}) comes within 10% of {target} parameters "
                         f"(nearest: d_model={d} with {params})")
    return d, params


# ----------------------------------------------------------------------------------------------- one run


def make_task(name: str, args: dict, seed: int, cfg: dict):
    """Task ``name`` with the grid's split sizes, its own arguments and the run's seed (each seed new data)."""
    from seqlab import tasks

    kw = {"train_size": cfg["train_size"], "test_size": cfg["test_size"], "validation_size": cfg["validation_size"],
          "seed": seed, **args}
    if name == "copying":
        kw.setdefault("autoregressive_n", 0)      # the arena reads teacher-forced accuracy on every task
    return tasks.get(name, **kw)


def filler_of(task: str, args: dict) -> str | None:
    """MQAR's filler (``"random"`` unless the task's arguments say ``"zoology"``); None for the other tasks."""
    return args.get("filler", "random") if task == "mqar" else None


def run_key(run: dict) -> tuple:
    """What makes two runs the same run: a finished one is never trained again, and no two share a checkpoint.
    Records written before steps, filler and init were part of it read as what they were then (their steps are
    recorded; the random filler; the family's rule of that time, which :data:`seqlab.models.registry.INIT_RULES`
    still names)."""
    from seqlab.models import init_rule

    filler = run.get("filler", "random" if run["task"] == "mqar" else None)
    return (run["family"], run["task"], run["seed"], run["width"], run["seq_len"], float(run["lr"]),
            int(run["steps"]), filler, run.get("init") or init_rule(run["family"]))


def spec_key(spec: dict, cfg: dict) -> tuple:
    """:func:`run_key` of the run ``spec`` asks for, under the grid's settings ``cfg``."""
    length = spec["seq_len"] if spec["seq_len"] is not None else _default_length(cfg, spec["task"])
    return run_key({**spec, "seq_len": length, "steps": cfg["steps"], "init": init_of(spec),
                    "filler": filler_of(spec["task"], cfg["tasks"][spec["task"]])})


def run_name(spec: dict, cfg: dict, seq_len: int) -> str:
    """The run's name, its progress bar's label and its checkpoint file's stem: every field of :func:`run_key`."""
    filler = filler_of(spec["task"], cfg["tasks"][spec["task"]])
    return (f"{spec['family']}-{spec['task']}-w{spec['width']}-L{seq_len}-lr{spec['lr']:g}-seed{spec['seed']}"
            f"-steps{cfg['steps']}" + (f"-{filler}" if filler else "") + f"-init-{init_of(spec)}")


def build_model(spec: dict, task, d_model: int, cfg: dict):
    """The run's model, seeded by its seed; a spec naming an init variant has its weights drawn again by it."""
    from seqlab import models
    from seqlab.models.init import VARIANTS, redraw

    config.seed_everything(spec["seed"])
    model = models.build(spec["family"], vocab_size=task.vocab_size, seq_len=task.seq_len,
                         **family_config(spec["family"], d_model, cfg["n_layers"]))
    init = init_of(spec)
    if init != models.init_rule(spec["family"]):
        if init not in VARIANTS:
            raise ValueError(f"init: {init!r} is neither {spec['family']}'s rule nor a variant of {list(VARIANTS)}")
        redraw(model, **VARIANTS[init])
    return model


def init_of(spec: dict) -> str:
    """The init rule a spec asks for: a variant of :data:`seqlab.models.init.VARIANTS` (``"as-built"``: the
    family's own), else the family's own rule's name (:data:`seqlab.models.registry.INIT_RULES`)."""
    from seqlab.models import init_rule

    init = spec.get("init")
    return init_rule(spec["family"]) if init in (None, "as-built") else init


def run_one(spec: dict, cfg: dict, *, progress: bool = False, checkpoint_dir=None) -> dict:
    """Train one run of the grid (``spec``: family, task, seed, width, seq_len, lr, and optionally ``init``, a variant
    of :data:`seqlab.models.init.VARIANTS`) and return its record: the
    test accuracy, the loss before the first step (``initial_loss``, checked against ``ln(num_targets)``) and the
    learning curve (validation accuracy every ``eval_every`` steps, with ``steps_to_0.9`` and ``steps_to_0.99``)."""
    from seqlab import train

    start = time.perf_counter()
    family, name, seed = spec["family"], spec["task"], spec["seed"]
    args = dict(cfg["tasks"][name])
    if spec["seq_len"] is not None:
        args["seq_len"] = spec["seq_len"]
    eval_every = cfg.get("eval_every") or max(1, cfg["steps"] // 20)
    with config.one_math_thread():
        task = make_task(name, args, seed, cfg)
        target = target_parameters(cfg["reference"], spec["width"], cfg["n_layers"])
        d_model, params = matched_width(family, target, cfg["n_layers"])
        model = build_model(spec, task, d_model, cfg)
        run = run_name(spec, cfg, task.seq_len)
        with train.observe() as watched:           # the loss before step 1 is checked against ln(num_targets)
            history = train.fit(model, task, steps=cfg["steps"], batch_size=cfg["batch_size"], lr=spec["lr"],
                                seed=seed, eval_split="validation", eval_every=eval_every, progress=progress, desc=run,
                                threads=cfg.get("threads"), **checkpointing(checkpoint_dir, run, cfg["steps"]))
        test = train.evaluate(model, task, "test")
    summary = watched[-1]
    return {"family": family, "task": name, "seed": seed, "d_model": d_model, "params": params,
            "state_size": int(model.state_size(task.seq_len)), "seq_len": task.seq_len,
            "accuracy": round(float(test["accuracy"]), 6), "wall_s": round(time.perf_counter() - start, 2),
            "width": spec["width"], "target_params": target, "varied": "d_model", "lr": spec["lr"],
            "validation_accuracy": round(float(history.final["accuracy"]), 6),
            "test_loss": round(float(test["loss"]), 6), "steps": cfg["steps"], "vocab_size": task.vocab_size,
            "eval_every": eval_every, **{k: summary[k] for k in ("num_targets", "initial_loss", "curve")},
            **{f"steps_to_{t}": summary[f"steps_to_{t}"] for t in THRESHOLDS},
            "filler": filler_of(name, args), "init": init_of(spec)}


def control_specs(cfg: dict, task: str) -> list[dict]:
    """The positive control of ``task`` (the profile's ``controls``: a configuration known to solve it, with the
    threshold it must reach): one run per seed at the grid's budget, base width and length."""
    control = cfg.get("controls", {}).get(task)
    if not control:
        return []
    return [{"family": control["family"], "task": task, "seed": seed, "width": cfg["base_width"],
             "seq_len": _base_length(cfg, task), "lr": float(control["lr"]), "init": control.get("init")}
            for seed in range(cfg["seeds"])]


def control_verdicts(data: dict, cfg: dict) -> dict:
    """``{task: {"verdict", "family", "threshold", "accuracy"}}``: ``"ranked"`` when every seed of the task's
    positive control reached its threshold (test accuracy), ``"inconclusive: the control did not learn"`` when one
    missed it (the families are then not ranked on that task), ``"no control"`` when the profile has none, and
    ``"control not run yet"`` before its runs are in the file."""
    out = {}
    for task in cfg["tasks"]:
        control = cfg.get("controls", {}).get(task)
        if not control:
            out[task] = {"verdict": "no control"}
            continue
        keys = {spec_key(s, cfg) for s in control_specs(cfg, task)}
        acc = [r["accuracy"] for r in data.get("controls", []) if run_key(r) in keys]
        if len(acc) < len(keys):
            verdict = "control not run yet"
        elif min(acc) >= control["threshold"]:
            verdict = "ranked"
        else:
            verdict = "inconclusive: the control did not learn"
        out[task] = {"verdict": verdict, "family": control["family"], "threshold": control["threshold"],
                     "accuracy": acc}
    return out


def describe_run(run: dict) -> str:
    """One line per run: what was matched, by which key, and how close it came."""
    off = run["params"] / run["target_params"] - 1
    return (f"{run['family']:>18s} {run['task']:<23s} seed {run['seed']} L={run['seq_len']:<4d} lr={run['lr']:g} "
            f"{run['varied']}={run['d_model']:<4d} params={run['params']} ({off:+.1%} of {run['target_params']}) "
            f"state={run['state_size']} acc={run['accuracy']:.3f} (val {run['validation_accuracy']:.3f}) "
            f"{run['wall_s']:.0f}s")


# ----------------------------------------------------------------------------------------------- the grid


def _base_length(cfg: dict, task: str):
    return None if task != "mqar" else cfg["tasks"]["mqar"].get("seq_len")


MAX_EXTENSIONS = 2     # rates a search may add beyond each edge of the profile's grid


def best_rate(by_lr: dict, rates: list[float]) -> float:
    """The rate of ``rates`` with the best validation accuracy. Ties (a task every rate solves) go to a rate inside
    the grid before one at its edge, then to the smaller: a tie at an edge is no reason to search further."""
    rates = sorted(rates)
    top = max(by_lr[lr] for lr in rates)
    tied = [lr for lr in rates if by_lr[lr] == top]
    inside = [lr for lr in tied if len(rates) >= 3 and lr not in (rates[0], rates[-1])]
    return (inside or tied)[0]


def search_rates(by_lr: dict, cfg: dict) -> list[float]:
    """The rates one cell's search needs, given the seed-0 validation accuracies ``by_lr`` it has so far: the
    profile's ``lrs``, and while the best of them sits at an edge, the next rate beyond it (one grid step further,
    at most :data:`MAX_EXTENSIONS` a side), so that the chosen rate lies strictly inside what was searched. A
    grid of fewer than three rates (the quick profile's) is searched as it is."""
    rates = sorted(float(lr) for lr in cfg["lrs"])
    if len(rates) < 3:
        return rates
    step = rates[1] / rates[0]
    added = {"low": 0, "high": 0}
    while all(lr in by_lr for lr in rates):
        best = best_rate(by_lr, rates)
        if best == rates[0] and added["low"] < MAX_EXTENSIONS:
            rates.insert(0, float(f"{rates[0] / step:.3g}"))
            added["low"] += 1
        elif best == rates[-1] and added["high"] < MAX_EXTENSIONS:
            rates.append(float(f"{rates[-1] * step:.3g}"))
            added["high"] += 1
        else:
            break
    return rates


def _search(runs: list[dict], cfg: dict, family: str, task: str) -> dict:
    """``{lr: validation accuracy}`` of the cell's seed-0 runs at the base width and length."""
    return {float(r["lr"]): r["validation_accuracy"] for r in runs
            if r["family"] == family and r["task"] == task and r["seed"] == 0 and r["width"] == cfg["base_width"]
            and _is_base_length(r, cfg) and in_grid(r, cfg)}


def chosen_lrs(runs: list[dict], cfg: dict) -> dict:
    """``{(family, task): lr}``: the searched rate (:func:`search_rates`) whose seed-0 run at the base width and
    length has the best validation accuracy (ties: the smaller rate); only cells whose search has finished."""
    out = {}
    for family in cfg["families"]:
        for task in cfg["tasks"]:
            by_lr = _search(runs, cfg, family, task)
            rates = search_rates(by_lr, cfg)
            if all(lr in by_lr for lr in rates):
                out[(family, task)] = best_rate(by_lr, rates)
    return out


def rate_grid(runs: list[dict], cfg: dict, family: str, task: str) -> dict:
    """What the search of one cell says of itself: the rates searched, the one chosen, whether the grid was
    extended beyond the profile's rates, and whether the choice still sits at an edge (a grid of fewer than
    three rates, or one that reached :data:`MAX_EXTENSIONS`): then the rate is not known to be the best."""
    by_lr = _search(runs, cfg, family, task)
    rates = search_rates(by_lr, cfg)
    chosen = best_rate(by_lr, rates) if all(lr in by_lr for lr in rates) else None
    return {"rates": rates, "chosen": chosen, "extended": len(rates) > len(cfg["lrs"]),
            "at_edge": chosen is not None and (len(rates) < 3 or chosen in (rates[0], rates[-1]))}


def in_grid(run: dict, cfg: dict) -> bool:
    """The run was trained by this grid's setup: its steps, MQAR filler and the family's current init rule."""
    from seqlab.models import init_rule

    if run["task"] not in cfg["tasks"]:
        return False
    key = run_key(run)
    return key[6:] == (int(cfg["steps"]), filler_of(run["task"], cfg["tasks"][run["task"]]), init_rule(run["family"]))


def _is_base_length(run: dict, cfg: dict) -> bool:
    base = _base_length(cfg, run["task"])
    return base is None or run["seq_len"] == base


def plan(cfg: dict, done: list[dict]) -> tuple[list[dict], list[dict]]:
    """The runs still to do, in two phases: the seed-0 rate search (``first``) and the runs that need its choice
    (``then``, empty until every rate of a cell has run). A spec: family, task, seed, width, seq_len, lr."""
    have = {run_key(r) for r in done}
    base_w = cfg["base_width"]

    def spec(family, task, seed, width, seq_len, lr):
        s = {"family": family, "task": task, "seed": seed, "width": width, "seq_len": seq_len, "lr": float(lr)}
        return s

    def missing(s):
        return spec_key(s, cfg) not in have

    first = [spec(f, t, 0, base_w, _base_length(cfg, t), lr) for t in cfg["tasks"] for f in cfg["families"]
             for lr in search_rates(_search(done, cfg, f, t), cfg)]
    chosen = chosen_lrs(done, cfg)
    then = []                                           # the seeds of the ranking first, then the sweeps
    for t in cfg["tasks"]:
        for f in cfg["families"]:
            if (f, t) in chosen:
                then += [spec(f, t, s, base_w, _base_length(cfg, t), chosen[(f, t)]) for s in range(1, cfg["seeds"])]
    for f in cfg["families"]:                           # MQAR's sweeps: the smallest width leads
        if (f, "mqar") not in chosen:
            continue
        lr = chosen[(f, "mqar")]
        for w in sorted(cfg["widths"]):
            if w != base_w:
                then += [spec(f, "mqar", s, w, _base_length(cfg, "mqar"), lr) for s in range(cfg["seeds"])]
        if f not in cfg.get("length_sweep_families", cfg["families"]):
            continue                                    # a family the profile keeps at the base length
        for length in cfg["mqar_lengths"]:
            if length != _base_length(cfg, "mqar"):
                then += [spec(f, "mqar", s, base_w, length, lr) for s in range(cfg["seeds"])]
    for t in [t for t in cfg.get("rate_band_tasks", ()) if t in cfg["tasks"]]:    # every seed at every rate
        for f in [f for f in cfg["families"] if (f, t) in chosen]:
            rates = [lr for lr in search_rates(_search(done, cfg, f, t), cfg) if lr != chosen[(f, t)]]
            then += [spec(f, t, s, base_w, _base_length(cfg, t), lr) for lr in rates for s in range(1, cfg["seeds"])]
    return [s for s in first if missing(s)], [s for s in then if missing(s)]


@functools.lru_cache(maxsize=None)
def _task_length(name: str, args_json: str) -> int:
    from seqlab import tasks

    args = json.loads(args_json)
    return tasks.get(name, **{**args, "train_size": 1, "test_size": 1, "validation_size": 1}).seq_len


def _default_length(cfg: dict, task: str) -> int:
    """The input length task ``task`` has at the grid's arguments (built once, with one example per split)."""
    return _task_length(task, json.dumps(cfg["tasks"][task], sort_keys=True))


# ----------------------------------------------------------------------------------------------- results


def sizes(profile: str) -> dict:
    """The grid's settings in ``profile`` (quick, medium, full, or a config file or folder), as a sitting runs them."""
    return profile_sizes(SIZES, profile, {})


def default_out(profile: str) -> Path:
    """``results/arena/<profile>.json`` (a config file's or folder's stem for a path)."""
    from seqlab.results import profile_tag

    return RESULTS_DIR / f"{profile_tag(profile)}.json"


def versions() -> dict:
    import numpy
    import torch

    import seqlab
    from seqlab.results import machine

    return {"seqlab": seqlab.__version__, "torch": torch.__version__, "numpy": numpy.__version__,
            "python": platform.python_version(), "machine": machine()}


def load(path) -> dict:
    """A results file (``{"runs": [], "controls": []}`` where there is none yet; :func:`seqlab.results.read`)."""
    from seqlab import results

    return results.read(path)


def recorder(path: Path | None, data: dict, fields: dict, verbose: bool, describe=None):
    """``record(run, kind="runs")``: print the finished run and merge it into the results file under its lock
    (:func:`seqlab.results.merge`, which keeps what other sittings wrote), then refresh ``data`` from the file."""
    from seqlab import results

    def record(run: dict, kind: str = "runs") -> None:
        if verbose:
            print((describe or describe_run)(run), flush=True)
        if path is None:
            data.setdefault(kind, []).append(run)
            return
        now = time.perf_counter()
        fresh = results.merge(path, key=run_key, fields=fields, wall_s=now - record.since, **{kind: [run]})
        record.since = now
        data.clear()
        data.update(fresh)

    record.since = time.perf_counter()
    return record


def summarize(runs: list[dict], cfg: dict) -> list[dict]:
    """One row per (family, task, width, seq_len) at the chosen rate: mean and spread (sample std) over seeds."""
    import statistics

    chosen = chosen_lrs(runs, cfg)
    cells: dict = {}
    for r in runs:
        if chosen.get((r["family"], r["task"])) == float(r["lr"]) and in_grid(r, cfg):
            cells.setdefault((r["family"], r["task"], r["width"], r["seq_len"]), []).append(r)
    rows = []
    for (family, task, width, seq_len), rs in sorted(cells.items(), key=lambda kv: (TASKS.index(kv[0][1])
                                                                                   if kv[0][1] in TASKS else 99,
                                                                                   family_order(kv[0][0]),
                                                                                   kv[0][2], kv[0][3])):
        acc = [r["accuracy"] for r in rs]
        grid = rate_grid(runs, cfg, family, task)
        rows.append({"family": family, "task": task, "width": width, "seq_len": seq_len, "lr": rs[0]["lr"],
                     "lr_grid": grid["rates"], "lr_extended": grid["extended"], "lr_at_edge": grid["at_edge"],
                     "d_model": rs[0]["d_model"], "params": rs[0]["params"], "state_size": rs[0]["state_size"],
                     "seeds": len(rs), "accuracy": statistics.fmean(acc),
                     "spread": statistics.stdev(acc) if len(acc) > 1 else 0.0,
                     "wall_s": statistics.fmean(r["wall_s"] for r in rs)})
    return rows


def base_rows(rows: list[dict], cfg: dict) -> list[dict]:
    """The rows of :func:`summarize` at the base budget: the base width, and MQAR at its base length."""
    return [r for r in rows if r["width"] == cfg["base_width"] and _is_base_length(r, cfg)]


def cell_runs(runs: list[dict], cfg: dict, task: str, *, chosen_only: bool = True) -> dict:
    """``{family: [run, ...]}`` of ``task`` at the base width and length, in this grid's setup: the runs at each
    family's chosen rate (``chosen_only``, the seeds a ranking averages), or every rate it searched."""
    chosen = chosen_lrs(runs, cfg)
    out: dict = {}
    for r in sorted(runs, key=lambda r: (family_order(r["family"]), float(r["lr"]), r["seed"])):
        if r["task"] != task or r["width"] != cfg["base_width"] or not _is_base_length(r, cfg) or not in_grid(r, cfg):
            continue
        if chosen_only and chosen.get((r["family"], task)) != float(r["lr"]):
            continue
        out.setdefault(r["family"], []).append(r)
    return out


NOT_LEARNED = 0.5      # a task whose best mean stays under this is "not learned", whatever the order below it
MIN_GAP = 0.01         # means closer than one point of accuracy are a tie, however small the seeds' spreads


def rank(rows: list[dict], verdicts: dict, cfg: dict) -> dict:
    """``{task: {"verdict", "leaders", "rows"}}`` at the base budget (``rows``: :func:`summarize`'s; ``verdicts``:
    :func:`control_verdicts`'). A family is named alone only where its mean beats the runner-up's by more than
    the two seeds' spreads together (and by more than :data:`MIN_GAP`: 0.999 against 1.000 is two solutions, not an
    order); otherwise the leaders within that margin are listed as a tie. No ranking:
    while the task's control has not run or did not learn (its verdict is repeated), while a family lacks seeds
    (``"pending"``), or when the best mean is under :data:`NOT_LEARNED`."""
    base = base_rows(rows, cfg)
    out = {}
    for task in cfg["tasks"]:
        mine = sorted((r for r in base if r["task"] == task), key=lambda r: -r["accuracy"])
        control = verdicts.get(task, {"verdict": "no control"})["verdict"]
        seeds = {r["family"]: r["seeds"] for r in mine}
        leaders: list = []
        if control not in ("ranked", "no control"):
            verdict = control
        elif any(seeds.get(f, 0) < cfg["seeds"] for f in cfg["families"]):
            verdict = f"pending: not every family has {cfg['seeds']} seeds yet"
        elif mine[0]["accuracy"] < NOT_LEARNED:
            verdict = f"not learned at this budget (best below {NOT_LEARNED})"
        else:
            top = mine[0]
            leaders = [top["family"]] + [r["family"] for r in mine[1:]
                                         if top["accuracy"] - r["accuracy"] <= max(MIN_GAP, top["spread"] + r["spread"])]
            verdict = (top["family"] if len(leaders) == 1 else
                       "tie: every family" if len(leaders) == len(mine) else "tie: " + ", ".join(leaders))
        out[task] = {"verdict": verdict, "leaders": leaders, "rows": mine}
    return out


_STOPPING = None      # in a worker: the sitting's stop event (set once it has been asked to stop)


def _init_worker(stopping) -> None:
    global _STOPPING
    _STOPPING = stopping


def _worker(args):
    from seqlab.train import interrupt

    spec, cfg, checkpoint_dir = args
    if _STOPPING is not None and _STOPPING.is_set():   # a run handed over before the stop: not started
        raise interrupt.Interrupted(signal.SIGTERM, "not started: the sitting is stopping")
    with interrupt.handling():              # SIGTERM: the run saves after its step, as in one process
        return run_one(spec, cfg, checkpoint_dir=checkpoint_dir)


def _stop_workers(pool, futures, signum: int, record, stopping) -> None:
    """The sitting was asked to stop: no worker starts another run (``stopping``; the pool hands each worker a
    run ahead, which cancelling cannot take back), each running one gets the signal (it saves after its step and
    stops), then wait for them and keep every run that finished meanwhile."""
    import os

    processes = list((getattr(pool, "_processes", None) or {}).values())
    stopping.set()
    for process in processes:
        try:
            os.kill(process.pid, signum)
        except (ProcessLookupError, OSError):
            pass
    pool.shutdown(wait=True, cancel_futures=True)
    for fut in futures:
        if fut.done() and not fut.cancelled() and fut.exception() is None and not getattr(fut, "recorded", False):
            record(fut.result())


def _run_all(specs: list[dict], cfg: dict, workers: int, record, progress: bool, checkpoint_dir) -> None:
    from tqdm.auto import tqdm

    from seqlab.train import interrupt

    bar = tqdm(total=len(specs), desc="arena", disable=not progress, leave=False)
    try:
        if workers <= 1 or len(specs) <= 1:
            for spec in specs:
                record(run_one(spec, cfg, checkpoint_dir=checkpoint_dir))
                bar.update()
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")
        stopping = context.Event()
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                                 initargs=(stopping,)) as pool:
            futures = [pool.submit(_worker, (spec, cfg, checkpoint_dir)) for spec in specs]
            try:
                for fut in as_completed(futures):
                    record(fut.result())          # a worker's TrainingInterrupted (it saved) comes out here
                    fut.recorded = True
                    bar.update()
            except KeyboardInterrupt as stop:     # Ctrl-C, SIGTERM, SIGUSR1 to the sitting or to a worker
                signum = getattr(stop, "signum", signal.SIGINT)
                _stop_workers(pool, futures, signum, record, stopping)
                raise interrupt.Interrupted(signum, f"the arena stopped by {interrupt.signal_name(signum)}; every "
                                                    "finished run is in the results file"
                                            + (f", each stopped run saved under {checkpoint_dir}"
                                               if checkpoint_dir else "")) from None
    finally:
        bar.close()


def family_order(family: str) -> tuple:
    """Where ``family`` is listed: the seven of :data:`FAMILIES` in their order, then any other by name."""
    return (FAMILIES.index(family), "") if family in FAMILIES else (len(FAMILIES), family)


def _families(value, workers: int) -> list | None:
    """``families=``: names of the model registry (the profile's where None); ``workers`` > 1 spawns processes
    that import seqlab afresh, in which a family registered from outside seqlab does not exist."""
    from seqlab.models.registry import builder, names

    families = _as_list(value, "families", names())
    local = [f for f in families or () if not builder(f).__module__.startswith("seqlab.")]
    if local and workers > 1:
        raise ValueError(f"families: {local} registered in this process only (not by seqlab), which the "
                         f"workers={workers} processes do not see: run them with workers=1")
    return families


def _as_list(value, what: str, known) -> list | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    bad = [v for v in items if v not in known]
    if bad:
        raise ValueError(f"{what}: unknown {bad}; expected some of {list(known)}")
    return items


@experiment("arena")
def arena(*, profile: str | None = None, families=None, tasks=None, out="auto", workers: int = 1,
          progress: bool = True, verbose: bool = True, checkpoint_dir: str | None = None, **overrides) -> dict:
    """Every family on every task at matched size (the module docstring has the grid and the file).

    ``profile``: quick, medium, full, or a config file or folder (None: ``$SEQLAB_PROFILE``).
    ``families``: families of the model registry, as a list or a comma-separated string (the profile's by
    default: :data:`FAMILIES`); a family registered from outside seqlab runs with ``workers=1``.
    ``tasks``: a subset of the profile's tasks, as a list or a comma-separated string.
    ``out``: the results file; ``"auto"``: ``results/arena/<profile>.json``; None: nothing written or resumed.
    ``workers``: how many runs train at once (separate processes, one math thread each).
    ``progress``: a progress bar over the runs.
    ``verbose``: one line per finished run (its matched size, state and accuracy).
    ``checkpoint_dir``: save each run there and resume it (long runs of the full profile).
    Sizes (``families, seeds, steps, batch_size, n_layers, lrs, reference, base_width, widths, mqar_lengths,
    threads, train_size, test_size, validation_size, tasks``) come from the profile and may be overridden.

    ``length_sweep_families`` (optional): the families the length sweep trains (default: all).
    ``rate_band_tasks`` (optional): tasks on which every seed runs at every searched rate (default: none).
    ``controls`` (a profile's optional table ``{task: {family, lr, threshold, init, source}}``): after each task's
    grid, its positive control runs at the same budget, one run per seed, kept under the file's ``controls`` (a run
    the grid already trained with the same key is copied there, not trained again: training is deterministic).

    Returns the results file's contents plus ``"summary"`` (:func:`summarize`), ``"chosen_lr"`` and
    ``"verdicts"`` (:func:`control_verdicts`: a task whose control did not learn is not ranked).
    """
    prof = profile or config.profile()
    cfg = profile_sizes(SIZES, prof, overrides)
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected a positive int, got {workers!r}")
    cfg["families"] = _families(families, workers) or list(cfg["families"])
    if tasks is not None:
        keep = _as_list(tasks, "tasks", TASKS)
        missing = [t for t in keep if t not in cfg["tasks"]]
        if missing:
            raise ValueError(f"tasks: {missing} have no arguments in the profile's [sizes.tasks]")
        cfg["tasks"] = {t: cfg["tasks"][t] for t in keep}
    path = default_out(prof) if out == "auto" else (Path(out) if out is not None else None)
    data = load(path) if path is not None else {"runs": [], "controls": []}
    from_cli = sys.argv[1:3] == ["experiment", "arena"]
    command = (" ".join(["python -m seqlab"] + sys.argv[1:]) if from_cli
               else f"seqlab.experiments.run('arena', profile={str(prof)!r})")
    fields = {"command": command, "versions": versions(), "profile": str(prof), "config": cfg}
    data.update(fields)
    record = recorder(path, data, fields, verbose)
    for task in cfg["tasks"]:                             # task by task, so that a partial grid has whole tasks
        one = {**cfg, "tasks": {task: cfg["tasks"][task]}}
        search, _ = plan(one, data["runs"])               # seed 0 at every rate, then what needs its choice
        while search:                                     # a best rate at an edge of the grid extends it
            _run_all(search, one, workers, record, progress, checkpoint_dir)
            search, _ = plan(one, data["runs"])
        _, rest = plan(one, data["runs"])
        _run_all(rest, one, workers, record, progress, checkpoint_dir)
        have = {run_key(r) for r in data.get("controls", [])}
        controls = [s for s in control_specs(one, task) if spec_key(s, one) not in have]
        as_control = lambda run: record({**run, "control": True,      # noqa: E731
                                         "threshold": one["controls"][task]["threshold"]}, "controls")
        trained = {run_key(r): r for r in data["runs"]}
        for spec in [s for s in controls if spec_key(s, one) in trained]:   # the grid trained this very run
            as_control(trained[spec_key(spec, one)])
        controls = [s for s in controls if spec_key(s, one) not in trained]
        _run_all(controls, one, workers, as_control, progress, checkpoint_dir)
    chosen = chosen_lrs(data["runs"], cfg)
    return {**data, "summary": summarize(data["runs"], cfg),
            "chosen_lr": {f"{f}/{t}": lr for (f, t), lr in chosen.items()}, "verdicts": control_verdicts(data, cfg)}
