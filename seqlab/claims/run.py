"""Running a claim over seeds (:func:`reproduce`): each seed's runs checkpointed and kept, the record, its figure,
``claims.json`` and the results page gathered after each claim.

:func:`reproduce` runs a claim over seeds ``0 .. seeds-1`` and writes

- ``<out>/<id>.json``: the claim's record (:func:`seqlab.claims.record.claim_record`);
- ``<out>/<id>.png``: its figure (``seqlab.viz.claims``; exported by kaleido with a Chromium, else the
  figure's JSON as ``<id>.plotly.json``);
- ``<out>/claims.json`` (``{"claims": [record, ...]}``, every finished claim in the order of :data:`CLAIMS`) and
  ``<out>/README.md`` (:func:`render_readme`), gathered again after each claim.

``<out>`` is ``results/`` for the medium profile and ``results/<profile>/`` for any other. Each seed's runs
are checkpointed under ``<out>/.runs/<profile>/<id>/seed<k>/`` (git-ignored) and its numbers kept there once
it finishes, so an interrupted claim resumes where it stopped; a claim already written in this profile with
these seeds is skipped (``redo=True`` runs it again from scratch).

Numbers. Every run is watched on a validation split (the medium sizes give each task one): choices are made
there, and the value a claim reports is read once from the test split. Each arm's learning rate is chosen there
(seed 0 over the profile's rates times ``3 ** k``, the grid extended while an arm's best sits at its edge; seeds
1.. at each arm's chosen rate), except in the quick profile and for a claim with ``one_rate`` (nothing trained to
compare).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from seqlab import config, results
from seqlab.claims.catalogue import CLAIMS, get
from seqlab.claims.claim import Claim
from seqlab.claims.figures import figure_server, save_claim_figure, save_png
from seqlab.claims.recall_report import sweep_figure, sweep_file
from seqlab.claims.record import claim_record
from seqlab.claims.report import arena_figures, arena_file, render_readme
from seqlab.config import one_math_thread
from seqlab.experiments.rate_search import MAX_EXTENSIONS, at_edge, best_rate, extend_grid
from seqlab.results import RESULTS_DIR, profile_tag

__all__ = ["reproduce", "reproduce_claim", "write_summary", "gather", "default_out"]


def default_out(profile: str) -> Path:
    """``results/`` for the medium profile (the committed results), ``results/<profile>/`` for any other."""
    tag = profile_tag(profile)
    return RESULTS_DIR if tag == "medium" else RESULTS_DIR / tag


def _read(path: Path) -> dict | None:
    """A claim's JSON file; None where there is none. A corrupted one raises ``ResultsError`` naming it (it is
    never taken for a missing file, so never overwritten by the next run)."""
    return results.read_json(path)


def _write(path: Path, data) -> None:
    """JSON, written to this writer's own temporary file and moved into place (``seqlab.results.write_json``)."""
    results.write_json(path, data)


def gather(out: str | os.PathLike) -> dict:
    """``{"claims": [...]}``: every claim record in ``out``, in the order of :data:`CLAIMS`."""
    out = Path(out)
    records = [_read(out / f"{cid}.json") for cid in CLAIMS]
    return {"claims": [r for r in records if r is not None]}


# Sizes renamed since records were first written: TrainConfig's field names, and one spelling of a task's splits.
RENAMED_SIZES = {"task_kwargs": "task_config", "n_train": "train_size", "n_validation": "validation_size",
                 "n_test": "test_size"}


def current_names(sizes):
    """``sizes`` as a record written now would hold them: a record or a runs folder written before the renaming
    (:data:`RENAMED_SIZES`) is the same run at the same sizes."""
    if isinstance(sizes, dict):
        return {RENAMED_SIZES.get(k, k): current_names(v) for k, v in sizes.items()}
    return sizes


# ----------------------------------------------------------------------------------------------- running


def _check_runs_folder(folder: Path, sizes: dict) -> None:
    """A claim's runs folder belongs to one set of sizes: a folder of other sizes is refused, naming them."""
    path = folder / "sizes.json"
    saved = current_names(_read(path))
    current = json.loads(json.dumps(sizes))
    if saved is None:
        _write(path, current)
    elif saved != current:
        keys = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        diff = "; ".join(f"{k}: {saved.get(k)!r} there, {current.get(k)!r} now" for k in keys)
        raise ValueError(f"redo: {folder} holds runs at other sizes ({diff}); pass --redo (redo=True) to start "
                         "them again")


RATE_STEP = 3               # a rate search's grid: the profile's rates times 3 ** k
SEARCH = (-1, 0, 1)        # the k a search starts from: a third of the profile's rates, them, three times them


def searched(claim: Claim, profile: str) -> bool:
    """Whether the claim's rates are searched in ``profile``: every claim that compares trained arms, in every
    profile but the quick one (a lesson's minutes: its one rate, as the arena's quick grid)."""
    return claim.one_rate is None and profile_tag(profile) != "quick"


def rates_at(claim: Claim, sizes: dict, k: int) -> dict:
    """The profile's learning rates times ``RATE_STEP ** k`` (3 significant digits)."""
    return {key: float(f"{sizes[key] * RATE_STEP ** k:.3g}") for key in claim.rate_keys(sizes)}


def _run_seed(claim: Claim, seed: int, folder: Path, profile: str, progress: bool, k: int | None = None,
              sizes: dict | None = None) -> dict:
    """One seed's result (at the rates ``rates_at(k)``, ``k`` None: the profile's, unsearched): read back where it
    finished before, else run (resuming its checkpoints) and kept. A run whose loss diverged is kept as
    ``{"diverged": why}`` (a rate too large: a search moves away from it)."""
    where = folder / f"seed{seed}" / ("" if k is None else f"rate{k:+d}")
    path = where / "result.json"
    done = _read(path)
    if done is not None:
        return done
    partial_path = where / "interrupted_s.json"
    before = (_read(partial_path) or {}).get("seconds", 0.0)
    start = time.perf_counter()
    from seqlab import train

    rates = None if k is None else rates_at(claim, sizes, k)
    try:
        with train.observe() as runs:      # every trained run: its start (checked), its curve, its steps to 0.9/0.99
            result = claim.run(seed, profile=profile, folder=str(where), progress=progress, rates=rates)
    except FloatingPointError as err:
        if k is None:
            raise
        result, runs = {"diverged": str(err)}, []
    except BaseException:
        _write(partial_path, {"seconds": before + time.perf_counter() - start})
        raise
    result = json.loads(json.dumps({**result, "runs": runs, "rates": rates,
                                    "wall_s": before + time.perf_counter() - start}))
    _write(path, result)
    return result


def _score(claim: Claim, result: dict, arm: str) -> float:
    """What a search ranks ``arm`` by at one rate: its validation value (``choose`` where the claim's metric is
    itself read on the validation split), larger is better; a diverged run ranks last."""
    if "diverged" in result:
        return float("-inf")
    key = "choose" if claim.choose is not None else "validation"
    value = result.get(key, {}).get(arm)
    if value is None:
        raise ValueError(f"{claim.id}: a rate search chooses on the validation split, and this profile's sizes "
                         "give the experiment none (add validation_size or the task's validation split)")
    return float(value) if claim.higher_is_better else -float(value)


def search_grid(scores: dict) -> list[int]:
    """The k one arm's search needs, given its scores so far (``{k: score}``): :data:`SEARCH`, extended one k
    beyond an edge while its best sits there (the one search of :mod:`seqlab.experiments.rate_search`, at most
    :data:`MAX_EXTENSIONS` a side), so that the chosen rate lies strictly inside what was searched."""
    return extend_grid(scores, list(SEARCH), lambda k: k - 1, lambda k: k + 1)


def _search(claim: Claim, folder: Path, profile: str, progress: bool, sizes: dict) -> tuple[dict, dict]:
    """Seed 0 over the rate grid, extended arm by arm (:func:`search_grid`): ``({k: result}, {arm: grid})``."""
    by_k: dict[int, dict] = {}
    needed = list(SEARCH)
    while any(k not in by_k for k in needed):
        for k in needed:
            if k not in by_k:
                by_k[k] = _run_seed(claim, 0, folder, profile, progress, k, sizes)
        grids = {arm: search_grid({k: _score(claim, r, arm) for k, r in by_k.items()}) for arm in claim.arms}
        needed = sorted(set().union(*grids.values()))
    return by_k, grids


def _searched_seeds(claim: Claim, seeds: list[int], folder: Path, profile: str, progress: bool,
                    sizes: dict) -> tuple[list[dict], dict]:
    """Every seed with each arm at the rate its seed-0 search chose: the experiment runs once per distinct chosen
    rate and each arm is read from its own rate's run. Returns the per-seed results and the search's record."""
    by_k, grids = _search(claim, folder, profile, progress, sizes)
    chosen = {arm: best_rate({k: _score(claim, by_k[k], arm) for k in grids[arm]}, grids[arm]) for arm in claim.arms}
    out = []
    for seed in seeds:
        runs = {k: (by_k[k] if seed == 0 else _run_seed(claim, seed, folder, profile, progress, k, sizes))
                for k in sorted(set(chosen.values()))}
        diverged = [f"rate x{RATE_STEP}^{k}: {r['diverged']}" for k, r in runs.items() if "diverged" in r]
        if diverged:
            raise FloatingPointError(f"{claim.id}, seed {seed}: a chosen rate diverged ({'; '.join(diverged)})")
        out.append(_combine(claim, runs, chosen, seed, by_k))
    search = {}
    for arm in claim.arms:
        key, grid = claim.rate_key(arm, sizes), grids[arm]
        search[arm] = {"key": key, "lr_grid": [rates_at(claim, sizes, k)[key] for k in grid],
                       "chosen_lr": rates_at(claim, sizes, chosen[arm])[key],
                       "validation": [None if "diverged" in by_k[k] else
                                      by_k[k]["choose" if claim.choose is not None else "validation"][arm]
                                      for k in grid],
                       "extended": len(grid) > len(SEARCH), "max_extensions": MAX_EXTENSIONS,
                       "at_edge": at_edge(chosen[arm], grid)}     # only once the extensions ran out
    return out, search


def _combine(claim: Claim, runs: dict, chosen: dict, seed: int, searched_runs: dict) -> dict:
    """One seed's result from its runs at the chosen rates (``{k: result}``): each arm read from its own rate's
    run, the control from the control arm's, the ``details`` (what the figure draws) from the ``better`` arm's run;
    every trained run of the seed kept (seed 0: the whole search)."""
    result = {}
    for key in ("values", "validation", "censored", "choose"):
        if key in runs[chosen[claim.better]]:
            result[key] = {arm: runs[chosen[arm]][key][arm] for arm in claim.arms}
    if claim.control is not None:
        result["control"] = runs[chosen[claim.control.arm]]["control"]
    if "details" in runs[chosen[claim.better]]:
        result["details"] = runs[chosen[claim.better]]["details"]
    kept = searched_runs if seed == 0 else runs
    result["runs"] = [{**run, "lr_factor": f"{RATE_STEP}^{k}"} for k in sorted(kept) for run in kept[k]["runs"]]
    result["wall_s"] = sum(r["wall_s"] for r in kept.values())
    return result


def reproduce_claim(claim_id: str, *, profile: str | None = None, seeds: int = 3, out=None, redo: bool = False,
                    progress: bool = True) -> dict:
    """Run one claim over seeds ``0 .. seeds-1`` (or read it back) and write its record and figure. Every run is
    on one CPU math thread (:func:`one_math_thread`), so that a seed's numbers do not depend on what ran before.

    Returns the record. A record already written in this profile for these seeds and sizes is returned as it is
    (nothing runs) unless ``redo``; ``redo`` also throws away the claim's kept seeds and checkpoints."""
    from tqdm.auto import tqdm

    claim = get(claim_id)
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds: expected a positive int, got {seeds!r}")
    profile = profile or config.profile()
    out = Path(out) if out is not None else default_out(profile)
    tag, seed_list = profile_tag(profile), list(range(seeds))
    sizes = claim.sizes(profile)
    existing = _read(out / f"{claim.id}.json")
    search = searched(claim, profile)
    if not redo and existing and (existing.get("profile"), existing.get("seeds")) == (tag, seed_list) \
            and current_names(existing.get("sizes")) == json.loads(json.dumps(sizes)) and bool(existing.get("rate_search")) == search:
        return existing
    folder = out / ".runs" / tag / claim.id
    if redo and folder.exists():
        shutil.rmtree(folder)
    _check_runs_folder(folder, sizes)
    with one_math_thread():
        if search:
            seed_results, rate_search = _searched_seeds(claim, seed_list, folder, profile, progress, sizes)
        else:
            seed_results = [_run_seed(claim, seed, folder, profile, progress)
                            for seed in tqdm(seed_list, desc=f"{claim.id} ({tag})", disable=not progress, unit="seed")]
            rate_search = None
    record = claim_record(claim, profile, seed_list, seed_results, sizes)
    record["rate_search"] = rate_search
    if rate_search is None:
        record["one_rate"] = claim.one_rate or f"the {tag} profile runs each claim at its one rate"
    record = json.loads(json.dumps(record))
    out.mkdir(parents=True, exist_ok=True)
    record["figure"] = save_claim_figure(record, out)
    _write(out / f"{claim.id}.json", record)
    return record


def reproduce(ids=None, *, profile: str | None = None, seeds: int = 3, out=None, redo: bool = False,
              progress: bool = True) -> list[dict]:
    """Run the claims ``ids`` (all of :data:`CLAIMS` when empty) one after the other; after each, gather
    ``claims.json`` and ``README.md`` in ``out`` again. Returns their records."""
    ids = list(ids or CLAIMS)
    for cid in ids:
        get(cid)
    profile = profile or config.profile()
    out = Path(out) if out is not None else default_out(profile)
    records = []
    with figure_server():
        for cid in ids:
            records.append(reproduce_claim(cid, profile=profile, seeds=seeds, out=out, redo=redo, progress=progress))
            write_summary(out)
    return records


def write_summary(out) -> None:
    """``claims.json`` and ``README.md`` of the folder ``out``, from the claim records in it."""
    from filelock import FileLock

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out / "claims.json.lock")):    # two reproduce sittings side by side: the last gather has all
        gathered = gather(out)
        _write(out / "claims.json", gathered)
        if arena_file(out).is_file():                 # the medium arena's figures, drawn from its grid as it stands
            for name, fig in arena_figures(out).items():
                save_png(fig, arena_file(out).with_name(f"medium-{name}.png"),
                         arena_file(out).with_name(f"medium-{name}.json"))
        if sweep_file(out).is_file():                 # the recall sweep's figure, from its record as it stands
            png = sweep_file(out).with_suffix(".png")
            save_png(sweep_figure(out), png, png.with_suffix(".plotly.json"))
        _write_text(out / "README.md", render_readme(gathered, notes_dir=out / "notes"))


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as err:
        raise results.ResultsError(results.write_failure(path, err)) from err
