"""The arena: every causal LM family on the field's recall and memory tasks at matched size (lesson 08).

Seven families (:data:`FAMILIES`) meet eight tasks (:data:`TASKS`): Zoology's multi-query associative recall
(``mqar``), five tasks of the MAD suite (in-context, fuzzy and noisy recall, selective copying, memorization),
paper 001's copying and GateLoop's Memory Horizon. Any other family of the model registry enters by name
(``families=``; one of your own registered with ``seqlab.models.register`` too): it is matched,
trained and recorded as the seven are, and listed after them.

Matched size (:mod:`.arena_families`). The reference family (``reference``, the Transformer) at a reference width
``w`` sets a target count of parameters *excluding the token embedding, the position table and the output head*;
every other family gets the ``d_model`` whose count is nearest, and a run whose count is more than 10 % off is
refused.

The grid (:mod:`.arena_grid`, :func:`plan`):

1. every task at the base width ``base_width``: seed 0 at each learning rate of ``lrs``; the rate with the best
   *validation* accuracy is kept (:func:`chosen_lrs`) and seeds ``1 .. seeds-1`` run at it; accuracy is read on
   the *test* split. A grid of three rates or more is extended one step beyond an edge while the best rate sits
   there (:func:`search_rates`: the one search of :mod:`.rate_search`, at most two steps a side), so the
   chosen rate lies strictly inside what was searched; the summary says
   which grid each cell searched and whether its choice is still at an edge (:func:`rate_grid`);
2. the width sweep: MQAR at every reference width of ``widths`` (each family at its chosen MQAR rate), so that
   accuracy can be drawn against **state size** (floats per sequence after ``seq_len`` tokens, from the decoding
   protocol's ``model.state_size``);
3. the length sweep: MQAR at every length of ``mqar_lengths`` at the base width (the families of the optional
   ``length_sweep_families``, every family where it is not given);
4. the rate band: on the tasks of the optional ``rate_band_tasks``, every seed at every searched rate, so that
   accuracy against learning rate can be drawn with the seeds' spread (the window in which a family learns).

Results (:mod:`.arena_results` reads them; :mod:`.arena_runner` trains the runs). Each finished run is appended at
once to the results file (``results/arena/<profile>.json`` by default): ``{"command", "versions", "wall_s",
"profile", "config", "runs": [{"family", "task", "seed", "d_model", "params", "state_size", "seq_len", "accuracy",
"wall_s", "commit", "dirty", ...}]}`` (``commit``, ``dirty``: the code the run ran,
:func:`seqlab.experiments._common.code_version`); a run already in the file is skipped, so an interrupted grid
resumes where it stopped and a grid can be produced over several sittings.
``workers=2`` trains two runs at a time in separate processes (one math thread each).

This module is the experiment; the public names of the four modules it is made of stay importable from it.
"""
from __future__ import annotations

import sys
from pathlib import Path

from seqlab import config
from seqlab.experiments import experiment
from seqlab.experiments._common import code_version, profile_sizes
from seqlab.experiments.arena_families import (FAMILIES, TOLERANCE, _core_count, core_parameters,  # noqa: F401
                                              family_config, family_order, matched_width, target_parameters,
                                              width_step)
from seqlab.experiments.arena_grid import (MAX_EXTENSIONS, SIZES, TASKS, best_rate, chosen_lrs,  # noqa: F401
                                          control_specs, filler_of, in_grid, init_of, plan, rate_grid, run_key,
                                          search_rates, sizes, spec_key)
from seqlab.experiments.arena_results import (MIN_GAP, NOT_LEARNED, RESULTS_DIR, add_sitting,  # noqa: F401
                                             base_rows, cell_runs, check_same_protocol, control_replication,
                                             control_verdicts, default_out, load, load_with_delta, rank, summarize)
from seqlab.experiments.arena_runner import (build_model, describe_run, make_task, recorder, run_all,  # noqa: F401
                                            run_name, run_one, versions)
from seqlab.train import INITIAL_LOSS_TOLERANCE, THRESHOLDS, check_initial_loss, first_step_at  # noqa: F401

__all__ = ["FAMILIES", "TASKS", "SIZES", "arena", "core_parameters", "matched_width", "plan", "chosen_lrs", "in_grid",
           "run_key", "first_step_at", "search_rates", "best_rate", "rate_grid", "control_specs", "control_verdicts",
           "summarize", "base_rows", "cell_runs", "rank", "sizes",
           "load", "load_with_delta", "add_sitting", "control_replication", "default_out", "run_one", "RESULTS_DIR",
           "width_step", "family_order"]


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
    code_version()                                        # the code this sitting runs (each run records it)
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
    fields = {"command": command, "versions": versions(), "profile": str(prof), "config": cfg,
              "rate_search": {"max_extensions": MAX_EXTENSIONS}}
    data.update(fields)
    record = recorder(path, data, fields, verbose)
    for task in cfg["tasks"]:                             # task by task, so that a partial grid has whole tasks
        one = {**cfg, "tasks": {task: cfg["tasks"][task]}}
        search, _ = plan(one, data["runs"])               # seed 0 at every rate, then what needs its choice
        while search:                                     # a best rate at an edge of the grid extends it
            run_all(search, one, workers, record, progress, checkpoint_dir)
            search, _ = plan(one, data["runs"])
        _, rest = plan(one, data["runs"])
        run_all(rest, one, workers, record, progress, checkpoint_dir)
        have = {run_key(r) for r in data.get("controls", [])}
        controls = [s for s in control_specs(one, task) if spec_key(s, one) not in have]
        as_control = lambda run: record({**run, "control": True,      # noqa: E731
                                         "threshold": one["controls"][task]["threshold"]}, "controls")
        trained = {run_key(r): r for r in data["runs"]}
        for spec in [s for s in controls if spec_key(s, one) in trained]:   # the grid trained this very run
            as_control(trained[spec_key(spec, one)])
        controls = [s for s in controls if spec_key(s, one) not in trained]
        run_all(controls, one, workers, as_control, progress, checkpoint_dir)
    chosen = chosen_lrs(data["runs"], cfg)
    return {**data, "summary": summarize(data["runs"], cfg),
            "chosen_lr": {f"{f}/{t}": lr for (f, t), lr in chosen.items()}, "verdicts": control_verdicts(data, cfg)}
