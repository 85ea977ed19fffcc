"""The verdict rule: how a claim's two compared arms, each a list of per-seed values, become one verdict.

The verdict (:func:`verdict`) compares the seeds' means of ``better`` and of the strongest rival (``worse``,
:func:`strongest_rival`); a claim whose positive control missed its threshold in some seed is :data:`INCONCLUSIVE`
instead (:func:`seqlab.claims.record.summarize`)."""
from __future__ import annotations

import statistics

__all__ = ["INCONCLUSIVE", "VERDICTS", "spread", "verdict", "strongest_rival"]

INCONCLUSIVE = "inconclusive: the control did not learn"
VERDICTS = ("reproduced", "partly", "not reproduced", INCONCLUSIVE)


def spread(values) -> float:
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
    if gap > 2 * max(spread(better), spread(worse)) and not any(better_censored):
        return "reproduced"
    return "partly"


def strongest_rival(arms: dict, rivals, higher_is_better: bool = True) -> str:
    """The rival arm with the best mean (``worse`` of a claim with more than two arms); ties go to the first."""
    sign = 1 if higher_is_better else -1
    return max(rivals, key=lambda arm: (sign * statistics.fmean(arms[arm]), -list(rivals).index(arm)))
