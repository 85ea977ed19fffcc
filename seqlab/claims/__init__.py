"""The papers' headline claims, reproduced over several seeds: ``python -m seqlab reproduce [ID ...]``.

Three files: this one (the verdict rule and the claims as data), ``run.py`` (:func:`reproduce`: the
resumable runner and the records) and ``report.py`` (the results page, the lessons' tables).

Each :class:`Claim` is data: the paper and its statement, the metric, the arm that should win (``better``)
and its rivals, the paper's values (with the stand-in seqlab uses for the paper's data or setting), and how
one seed runs: a registered experiment at the profile's sizes, its numbers read into one value per arm.
:func:`reproduce` runs a claim over seeds ``0 .. seeds-1`` and writes

- ``<out>/<id>.json``: the claim's record (the fields of :data:`FIELDS`, plus the seeds, the per-arm means and
  standard deviations, the validation values, the sizes and per-seed details);
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
(``run.py``: seed 0 over the profile's rates times ``3 ** k``, the grid extended while an arm's best sits at its
edge; seeds 1.. at each arm's chosen rate), except in the quick profile and for a claim with ``one_rate`` (nothing
trained to compare). The verdict (:func:`verdict`) compares the seeds' means of ``better`` and of the strongest
rival (``worse``), once the claim's positive ``control`` has reached its threshold in every seed; a control that
missed makes the claim :data:`INCONCLUSIVE`.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

from seqlab import results
from seqlab.config import one_math_thread  # noqa: F401  (claims.one_math_thread, as before)
from seqlab.registry import Registry
from seqlab.results import machine, profile_tag  # noqa: F401  (claims.machine, claims.profile_tag)

__all__ = ["Claim", "Control", "INCONCLUSIVE", "CLAIMS", "FIELDS", "verdict", "strongest_rival", "summarize",
           "control_record", "reproduce", "reproduce_claim",
           "render_readme", "gather", "default_out", "machine", "RESULTS_DIR", "lesson_table", "summary_table"]

RESULTS_DIR = results.RESULTS_DIR

# The fields every claim record has; records add seeds, mean, std, validation, sizes and details.
FIELDS = ("id", "paper", "statement", "profile", "metric", "higher_is_better", "better", "worse", "arms",
          "paper_values", "verdict", "command", "wall_s", "machine")

INCONCLUSIVE = "inconclusive: the control did not learn"
VERDICTS = ("reproduced", "partly", "not reproduced", INCONCLUSIVE)


# ----------------------------------------------------------------------------------------------- the rule


def _spread(values) -> float:
    """The seeds' sample standard deviation (0 for a single seed)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def verdict(better, worse, *, higher_is_better: bool = True, better_censored=()) -> str:
    """The verdict rule on the per-seed values of the two arms a claim compares.

    ``"reproduced"``: the mean of ``better`` beats the mean of ``worse`` (in the metric's direction) by more than
    twice the larger of the two sample standard deviations; ``"partly"``: it beats it, by less; ``"not
    reproduced"`` otherwise. A censored value (a run that never reached its target: its budget is recorded, a
    bound, not a measurement) in ``better`` (``better_censored``: one bool per seed) caps the verdict at
    ``"partly"``; censored values in ``worse`` only make the comparison conservative."""
    better, worse = [float(v) for v in better], [float(v) for v in worse]
    if not better or not worse:
        raise ValueError(f"verdict: expected at least one value per arm, got {len(better)} and {len(worse)}")
    gap = statistics.fmean(better) - statistics.fmean(worse)
    gap = gap if higher_is_better else -gap
    if gap <= 0:
        return "not reproduced"
    if gap > 2 * max(_spread(better), _spread(worse)) and not any(better_censored):
        return "reproduced"
    return "partly"


def strongest_rival(arms: dict, rivals, higher_is_better: bool = True) -> str:
    """The rival arm with the best mean (``worse`` of a claim with more than two arms); ties go to the first."""
    sign = 1 if higher_is_better else -1
    return max(rivals, key=lambda arm: (sign * statistics.fmean(arms[arm]), -list(rivals).index(arm)))


# ----------------------------------------------------------------------------------------------- the claims


Path = tuple        # keys (and list indices) into an experiment's result: ("at_longest", "steps")


def _at(result, path: Path):
    for key in path:
        result = result[key]
    return result


@dataclass(frozen=True)
class Control:
    """A claim's positive control: the arm known to solve the task (``source`` says how it is known), which must
    reach ``threshold`` in every seed (the value at ``path`` of the experiment's result, the claim's ``values``
    when None); else the claim is :data:`INCONCLUSIVE` and its arms are not compared."""

    arm: str
    threshold: float
    source: str
    path: Path | None = None


@dataclass(frozen=True)
class Claim:
    """One headline claim, as data. A seed runs the registered ``experiment`` (with ``arguments``) at the profile's
    sizes (``table()``: the size table it runs at) and reads its result: ``values`` is where the per-arm numbers
    are (``{arm: number}``); ``validation`` the same on the validation split, ``censored`` which of them never
    reached their target (both optional); ``details`` names what the figure draws (``{name: path}``). A path is
    the keys into the result, ``()`` the whole of it."""

    id: str
    paper: str
    statement: str
    metric: str
    higher_is_better: bool
    better: str
    rivals: tuple[str, ...]
    paper_values: dict
    paper_data: str              # what the paper values were measured on, and seqlab's stand-in, in a few words
    stand_in: str
    experiment: str
    table: Callable
    values: Path
    arguments: dict = field(default_factory=dict)
    validation: Path | None = None
    censored: Path | None = None     # the metric can be censored (steps to a target that a run may never reach)
    details: dict = field(default_factory=dict)
    control: Control | None = None
    one_rate: str | None = None      # why it runs at its profile's one rate (no search: nothing trained to compare)
    choose: Path | None = None       # where a rate search reads each arm (default ``validation``), in the metric's way

    @property
    def arms(self) -> tuple[str, ...]:
        return (self.better, *self.rivals)

    def rate_keys(self, sizes: dict) -> tuple[str, ...]:
        """The learning rates among ``sizes``: a rate search multiplies each of them by the same factor."""
        return tuple(k for k in ("lr", "transformer_lr") if k in sizes)

    def rate_key(self, arm: str, sizes: dict) -> str:
        """The size that is ``arm``'s learning rate (the Transformer's own where the sizes give it one)."""
        return "transformer_lr" if arm == "transformer" and "transformer_lr" in sizes else "lr"

    def sizes(self, profile: str) -> dict:
        """The sizes this claim runs at in ``profile``."""
        from seqlab import experiments

        return experiments.profile_sizes(self.table(), profile, {})

    def run(self, seed: int, *, profile, folder, progress: bool, rates: dict | None = None) -> dict:
        """One seed: ``{"values": {arm: number}}``, with ``"validation"``, ``"censored"``, ``"choose"`` (what the
        rate search reads), ``"control"`` (the control arm's value) and ``"details"`` where the claim has them.
        ``rates`` (``{"lr": ..., "transformer_lr": ...}``) replace the profile's learning rates."""
        from seqlab import experiments

        if self.experiment in experiments.WITHOUT_CONFIG:     # a timing: its sizes are its arguments
            out = experiments.run(self.experiment, **self.sizes(profile), **self.arguments, seed=seed,
                                  progress=progress)
        else:
            out = experiments.run(self.experiment, **self.arguments, profile=profile, seed=seed,
                                  checkpoint_dir=folder, progress=progress, **(rates or {}))
        result = {"values": {arm: _at(out, self.values)[arm] for arm in self.arms}}
        for key in ("validation", "censored", "choose"):
            if getattr(self, key) is not None:
                result[key] = {arm: _at(out, getattr(self, key))[arm] for arm in self.arms}
        if self.control is not None:
            result["control"] = _at(out, self.control.path or self.values)[self.control.arm]
        if self.details:
            result["details"] = {name: _at(out, path) for name, path in self.details.items()}
        return result


def _table(module: str, name: str, key: str | None = None) -> Callable:
    """The size table ``seqlab.experiments.<module>.<name>`` (``[key]`` of it), imported when asked for."""
    def table():
        import importlib

        found = getattr(importlib.import_module(f"seqlab.experiments.{module}"), name)
        return found if key is None else found[key]
    return table


_EXACT_COPIES = "paper 001 Fig. 4: the exact CausalRN copies (99 %, 1.0 after convergence)"
ABLATION_ARMS = ("LightNet", "w/o TPE", "w/o LRPE", "w/o TPE and LRPE", "w/o Decay")
_ACCURACY = "test accuracy"
_COPY_ACCURACY = "test accuracy (parallel, per copied token)"

CLAIMS: dict[str, Claim] = {c.id: c for c in (
    Claim(id="causalrn-copying", paper="001 Fig. 4",
          statement="CausalRN with exact pre-activation norm copies (>= 99%) where the linear CausalRN fails",
          metric=_COPY_ACCURACY, higher_is_better=True, better="causalrn", rivals=("linear-causalrn",),
          paper_values={"causalrn": 1.0, "linear-causalrn": None}, paper_data="copying, strings of 16..256",
          stand_in="001 Fig. 4: the CausalRN reaches 99% on strings of 16..256 (1.0 after convergence, App. D); "
                   "the linear CausalRN did not converge for strings >= 128 (no number given). seqlab: the same "
                   "copying task, generated offline, on shorter strings and smaller models (the sizes in the record).",
          experiment="relation-copying", table=_table("relation", "SIZES", "copying"), values=("accuracy",),
          validation=("validation",), control=Control("causalrn", 0.99, _EXACT_COPIES)),
    Claim(id="causalrn-activation", paper="001 Fig. 2c", statement="exp beats ReLU and ELU in the same block",
          metric=_COPY_ACCURACY, higher_is_better=True, better="exp", rivals=("relu", "elu"),
          paper_values={"exp": None, "relu": None, "elu": None}, paper_data="copying, strings of 128",
          stand_in="001 Fig. 2c shows learning curves only (strings of 128): exp converges, ReLU and ELU descend "
                   "slowly; no numbers. seqlab: the same copying task on shorter strings, at one step budget.",
          experiment="relation-copying-ablation", table=_table("relation", "SIZES", "ablation"),
          arguments={"groups": ["activation"]}, values=("by_value", "activation"),
          validation=("validation_by_value", "activation"),
          control=Control("exp", 0.99, _EXACT_COPIES + " (exp is its activation)")),
    Claim(id="causalrn-copying-speed", paper="001 Fig. 2/4",
          statement="exact pre-norm CausalRN reaches 99% copying accuracy in fewer steps than a Transformer",
          metric="steps to 99% validation accuracy (a run that never gets there: its step budget, censored)",
          higher_is_better=False, better="causalrn", rivals=("transformer",),
          paper_values={"causalrn": None, "transformer": None}, paper_data="copying, strings of 16..256",
          stand_in="001 Fig. 4 plots iterations to 99% against string size (16..256), batch 320, Adam at 5e-4 for "
                   "both, 12 blocks; no numbers in the text. seqlab: one string length, small models, the accuracy "
                   "watched on a validation split instead of 320 online samples.",
          experiment="relation-copying-scaling", table=_table("relation", "SIZES", "scaling"),
          arguments={"names": ["causalrn", "transformer"]}, values=("at_longest", "steps"),
          censored=("at_longest", "censored"), choose=("at_longest", "steps"),
          control=Control("causalrn", 0.95, _EXACT_COPIES + "; a run stops once it reaches 0.99 on the validation "
                          "split, so its test accuracy where it stopped is read, at 0.95",
                          path=("at_longest", "test_accuracy")),
          details={"length": ("at_longest", "length"), "test_accuracy_at_stop": ("at_longest", "test_accuracy")}),
    Claim(id="fst-digits", paper="002 §3.2",
          statement="FST beats LRNN-only and the Transformer on sequential digits (pixel MNIST 98.3% in the paper)",
          metric=_ACCURACY, higher_is_better=True, better="fst", rivals=("lrnn", "transformer"),
          paper_values={"fst": 0.983, "lrnn": None, "transformer": None}, paper_data="pixel MNIST; seqlab: 8x8 digits",
          stand_in="002 §3.2: pixel-by-pixel MNIST (784 pixels), FST 98.3%, the Transformer 'not much beyond "
                   "chance' (no number), LRNN-only not reported there. seqlab: scikit-learn's 8x8 digits pixel by "
                   "pixel (64 pixels) stand in for pixel MNIST, at matched parameter counts.",
          experiment="fst-comparison", table=_table("lrnn", "SIZES", "digits"),
          arguments={"task": "digits", "models": ["fst", "lrnn", "transformer"]}, values=("accuracy",),
          validation=("validation",), details={"params": ("params",)},
          control=Control("lrnn", 0.9, "the best found on the 8x8 digits: the LRNN alone, 0.97 in 3 seeds at 5e-3 "
                          "(the first medium run); 0.9 marks a model that reads a digit pixel by pixel (chance 0.1)")),
    Claim(id="fst-alpha-depth", paper="002 Fig. 3", statement="the twist coefficient alpha2 is larger in deeper blocks",
          metric="alpha2 = sigmoid(p2) after training", higher_is_better=True, better="deepest_block",
          rivals=("first_block",), paper_values={"deepest_block": None, "first_block": None},
          paper_data="Long ListOps and WikiText-103; seqlab: short ListOps",
          stand_in="002 Fig. 3: alpha2 of six FST blocks trained on Long ListOps and WikiText-103 (a figure, no "
                   "numbers). seqlab: ListOps generated by the LRA rules on shorter expressions, one FST of the "
                   "paper's six blocks.",
          experiment="fst-comparison", table=_table("lrnn", "SIZES", "listops"),
          arguments={"task": "listops", "models": ["fst"]}, values=("alpha2",),
          details={"alphas": ("alphas",), "fst_test_accuracy": ("accuracy", "fst"),
                   "fst_validation_accuracy": ("validation", "fst")},
          one_rate="two blocks of one trained model are compared, not two trained models: no rate to choose per arm"),
    Claim(id="lightnet-one-scan", paper="003 Fig. 2",
          statement="one scan (additive) is faster than two (multiplicative), and the gap grows with L",
          metric="time relative to 1 scan at the longest L (forward + backward; each seed a repeated timing)",
          higher_is_better=False, better="one_scan", rivals=("two_scans",),
          paper_values={"one_scan": None, "two_scans": None}, paper_data="GPU kernels; seqlab: CPU",
          stand_in="003 Fig. 2 times both on a GPU against L (a figure, no numbers): the gap in time grows with L. "
                   "seqlab: the CPU kernels on one thread, non-causal decay attention with 4 heads of 64; the value "
                   "is 2 scans' time over 1 scan's at the longest length (the ratio at every length is in the "
                   "details and the figure).",
          experiment="decay-speed", table=_table("lightnet", "SPEED_SIZES"), values=(-1, "relative"),
          details={"rows": ()}, one_rate="a timing: nothing is trained"),
    Claim(id="lightnet-ablation", paper="003 Table 1", statement="removing decay (and TPE / LRPE) hurts",
          metric=_ACCURACY, higher_is_better=True, better="LightNet", rivals=ABLATION_ARMS[1:],
          paper_values={"LightNet": 0.7446, "w/o TPE": 0.7397, "w/o LRPE": 0.7402, "w/o TPE and LRPE": None,
                        "w/o Decay": 0.7185},
          paper_data="ImageNet-1k top-1; seqlab: 8x8 digit patches",
          stand_in="003 Table 1: ImageNet-1k top-1 of LightNet-T (6 M parameters); 'w/o TPE and LRPE' is not in "
                   "the table. seqlab: the 8x8 digits as 2x2 patches on a 4x4 grid stand in for ImageNet-1k.",
          experiment="lightnet-ablation", table=_table("lightnet", "ABLATION_SIZES"), values=("accuracy",),
          validation=("validation",),
          control=Control("LightNet", 0.5, "the full LightNet, the configuration 003 trains; no model is known to "
                          "solve the patch stand-in at this budget (0.64 in the first medium run), so 0.5, five times "
                          "chance (0.1), marks one that learned it")),
    Claim(id="gateloop-memory-horizon", paper="004 §5.1, Fig. 6-7, App. A, C.1",
          statement="data-controlled transitions beat fixed ones on Memory Horizon (test accuracy 0.43 vs 0.25)",
          metric="test accuracy (per scored token)", higher_is_better=True, better="data_controlled",
          rivals=("fixed",), paper_values={"data_controlled": 0.43, "fixed": 0.25},
          paper_data="Memory Horizon, sequences of 1024",
          stand_in="004 Fig. 6: sequences of 1024, 4 layers, 18 750 steps (App. A, C.1). seqlab: the same task "
                   "(App. A), generated offline, on shorter sequences and fewer steps.",
          experiment="gateloop-memory-horizon", table=_table("gateloop", "SIZES"), values=("accuracy",),
          validation=("validation",), details={"by_span": ("by_span",)},
          control=Control("data_controlled", 0.2, "GateLoop, the arena's Memory Horizon control (0.80-0.84 at length "
                          "32 and 3000 steps); no model is known to reach the paper's 0.43 at this budget (a twentieth "
                          "of its steps), so 0.2, ten times chance (1/51), marks one that learned to recall")),
)}


_NAMES = Registry("id", argument="claim", cutoff=0.4)     # the ids, for the error of an unknown one
for _claim in CLAIMS.values():
    _NAMES.register(_claim.id, _claim)


def get(claim_id: str) -> Claim:
    """The claim named ``claim_id``; an error that suggests the closest id otherwise."""
    if claim_id not in CLAIMS:
        raise _NAMES.unknown(claim_id)
    return CLAIMS[claim_id]


# ----------------------------------------------------------------------------------------------- records


def summarize(claim: Claim, seeds: list[int], results: list[dict]) -> dict:
    """The record's numbers from the per-seed results: arms, means, stds, worse, verdict (and censoring)."""
    arms = {arm: [r["values"][arm] for r in results] for arm in claim.arms}
    worse = strongest_rival(arms, claim.rivals, claim.higher_is_better)
    record = {"better": claim.better, "worse": worse, "arms": arms, "seeds": list(seeds),
              "mean": {a: statistics.fmean(v) for a, v in arms.items()},
              "std": {a: _spread(v) for a, v in arms.items()}}
    censored = {}
    if claim.censored:
        censored = {arm: [bool(r["censored"][arm]) for r in results] for arm in claim.arms}
        record["censored"] = censored
    record["verdict"] = verdict(arms[claim.better], arms[worse], higher_is_better=claim.higher_is_better,
                                better_censored=censored.get(claim.better, ()))
    if claim.control is not None:
        record["control"] = control_record(claim.control, [r.get("control") for r in results])
        if not record["control"]["passed"]:
            record["verdict"] = INCONCLUSIVE
    validation = {arm: [r.get("validation", {}).get(arm) for r in results] for arm in claim.arms}
    if any(v is not None for values in validation.values() for v in values):
        record["validation"] = validation
    return record


def control_record(control: Control, values: list) -> dict:
    """The control's outcome: its value per seed against its threshold; ``passed`` when every seed reached it."""
    passed = all(v is not None and v >= control.threshold for v in values)
    return {"arm": control.arm, "threshold": control.threshold, "values": values, "passed": passed,
            "source": control.source}


from seqlab.claims.run import (_check_runs_folder, command, default_out, gather,  # noqa: E402,F401
                               reproduce, reproduce_claim, write_summary)
from seqlab.claims.report import lesson_table, render_readme, summary_table  # noqa: E402,F401
