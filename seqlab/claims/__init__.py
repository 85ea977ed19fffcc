"""The papers' headline claims, reproduced over several seeds: ``python -m seqlab reproduce [ID ...]``.

Each claim is data (:class:`Claim`): the paper and its statement, the metric, the arm that should win and its
rivals, the paper's values (with seqlab's stand-in for the paper's data or setting), and how one seed runs. The
modules, in the order a claim goes through them:

- ``claim.py``: :class:`Claim` and its positive :class:`Control`; ``catalogue.py``: the eight claims
  (:data:`CLAIMS`, :func:`get`);
- ``run.py``: :func:`reproduce`, the resumable runner over seeds, with each arm's learning rate searched;
- ``verdicts.py``: the verdict rule (:func:`verdict`, :func:`strongest_rival`); ``record.py``: a claim's record
  (:data:`FIELDS`, :func:`summarize`, :func:`command`);
- ``figures.py``, ``report.py``, ``recall_report.py``: its figure, the results page and the lessons' tables.
"""
from __future__ import annotations

from seqlab.claims.catalogue import ABLATION_ARMS, CLAIMS, get
from seqlab.claims.claim import Claim, Control
from seqlab.claims.record import FIELDS, command, control_record, summarize
from seqlab.claims.report import lesson_table, render_readme, summary_table
from seqlab.claims.run import (_check_runs_folder, default_out, gather, reproduce, reproduce_claim,  # noqa: F401
                               write_summary)
from seqlab.claims.verdicts import INCONCLUSIVE, VERDICTS, strongest_rival, verdict
from seqlab.config import one_math_thread
from seqlab.results import RESULTS_DIR, machine, profile_tag

__all__ = ["Claim", "Control", "INCONCLUSIVE", "CLAIMS", "FIELDS", "verdict", "strongest_rival", "summarize",
           "control_record", "reproduce", "reproduce_claim",
           "render_readme", "gather", "default_out", "machine", "RESULTS_DIR", "lesson_table", "summary_table",
           "ABLATION_ARMS", "VERDICTS", "get", "command", "write_summary", "one_math_thread", "profile_tag"]
