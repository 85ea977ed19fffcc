"""A claim's record: the numbers its seeds' results come to (:func:`summarize`, with the control's outcome,
:func:`control_record`), the command that reproduces it (:func:`command`) and the whole record as
``<out>/<id>.json`` holds it (:func:`claim_record`: the fields of :data:`FIELDS`, plus the seeds, the per-arm means
and standard deviations, the validation values, the sizes and per-seed details)."""
from __future__ import annotations

import json
import statistics
import time

from seqlab import config
from seqlab.claims.claim import Claim, Control
from seqlab.claims.verdicts import INCONCLUSIVE, spread, strongest_rival, verdict
from seqlab.results import machine, profile_tag

__all__ = ["FIELDS", "summarize", "control_record", "command", "claim_record"]

# The fields every claim record has; records add seeds, mean, std, validation, sizes and details.
FIELDS = ("id", "paper", "statement", "profile", "metric", "higher_is_better", "better", "worse", "arms",
          "paper_values", "verdict", "command", "wall_s", "machine")


def summarize(claim: Claim, seeds: list[int], results: list[dict]) -> dict:
    """The record's numbers from the per-seed results: arms, means, stds, worse, verdict (and censoring)."""
    arms = {arm: [r["values"][arm] for r in results] for arm in claim.arms}
    worse = strongest_rival(arms, claim.rivals, claim.higher_is_better)
    record = {"better": claim.better, "worse": worse, "arms": arms, "seeds": list(seeds),
              "mean": {a: statistics.fmean(v) for a, v in arms.items()},
              "std": {a: spread(v) for a, v in arms.items()}}
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


def command(claim_id: str, profile: str, seeds: int) -> str:
    """The command that reproduces one claim's record."""
    where = f"SEQLAB_PROFILE={profile} " if profile in config.PROFILES else ""
    flag = "" if profile in config.PROFILES else f" --profile {profile}"
    return f"{where}python -m seqlab reproduce {claim_id}{flag} --seeds {seeds}"


def claim_record(claim: Claim, profile: str, seeds: list[int], results: list[dict], sizes: dict) -> dict:
    """The claim's record from its seeds' results (before the rate search and the figure are added)."""
    numbers = summarize(claim, seeds, results)
    record = {"id": claim.id, "paper": claim.paper, "statement": claim.statement, "profile": profile_tag(profile),
              "metric": claim.metric, "higher_is_better": claim.higher_is_better, "better": numbers["better"],
              "worse": numbers["worse"], "arms": numbers["arms"], "paper_values": dict(claim.paper_values),
              "verdict": numbers["verdict"], "command": command(claim.id, profile, len(seeds)),
              "wall_s": round(sum(r["wall_s"] for r in results), 1), "machine": machine()}
    record.update({k: v for k, v in numbers.items() if k not in record})
    record.update({"paper_data": claim.paper_data, "stand_in": claim.stand_in, "experiment": claim.experiment,
                   "sizes": sizes,
                   "seed_wall_s": [round(r["wall_s"], 1) for r in results],
                   "details": [r.get("details") for r in results],
                   "runs": [r.get("runs", []) for r in results],
                   "finished": time.strftime("%Y-%m-%d %H:%M:%S")})
    return json.loads(json.dumps(record))
