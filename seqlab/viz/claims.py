"""The figure of a reproduced claim (``python -m seqlab reproduce``), drawn from its JSON record alone.

Left: every arm's value for each seed (dots), their mean ± std (a bar) and the paper's value where it gives
one (a diamond; measured on the paper's data, not seqlab's stand-in). Right, for the claims whose record
carries more: GateLoop's accuracy against the required memory span (004 Fig. 7), the FST's alpha2 by block
(002 Fig. 3), or the 2-scan / 1-scan time ratio against the length (003 Fig. 2).
"""
from __future__ import annotations

import statistics

import plotly.graph_objects as go

from seqlab.viz.style import color, new_figure

__all__ = ["claim_figure"]


def claim_figure(record: dict) -> go.Figure:
    """A ``go.Figure`` of one claim record (the JSON ``seqlab.claims`` writes)."""
    detail = _DETAILS.get(record["id"])
    details = [d for d in record.get("details") or [] if d]
    panels = 2 if detail and details else 1
    titles = ["per seed, mean ± std" + (", paper ◆" if _has_paper(record) else ""), detail[0] if panels == 2 else ""]
    fig = new_figure(1, panels, subplot_titles=titles[:panels], height=440, width=460 * panels + 80,
                     title=f"{record['id']} ({record['profile']}): {record['verdict']}")
    fig.update_layout(margin=dict(t=90))
    _arms(fig, record)
    if panels == 2:
        detail[1](fig, details)
    return fig


def _has_paper(record: dict) -> bool:
    return any(v is not None for v in record.get("paper_values", {}).values())


def _arms(fig: go.Figure, record: dict) -> None:
    for i, (arm, values) in enumerate(record["arms"].items()):
        censored = record.get("censored", {}).get(arm, [False] * len(values))
        fig.add_trace(go.Scatter(x=[arm] * len(values), y=values, mode="markers", showlegend=False,
                                 marker=dict(color=color(i), size=9, symbol=["x" if c else "circle" for c in censored]),
                                 hovertext=[f"seed {s}" + (" (censored)" if c else "")
                                            for s, c in zip(record["seeds"], censored)]), row=1, col=1)
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        fig.add_trace(go.Scatter(x=[arm], y=[statistics.fmean(values)], mode="markers", showlegend=False,
                                 marker=dict(color=color(i), size=22, symbol="line-ew-open", line=dict(width=3)),
                                 error_y=dict(type="data", array=[std], color=color(i), width=8)), row=1, col=1)
        paper = record.get("paper_values", {}).get(arm)
        if paper is not None:
            fig.add_trace(go.Scatter(x=[arm], y=[paper], mode="markers", showlegend=False, hovertext=["paper"],
                                     marker=dict(color="#000000", size=11, symbol="diamond-open")), row=1, col=1)
    fig.update_yaxes(title_text=record["metric"].split(" (")[0], row=1, col=1)


def _by_span(fig: go.Figure, details: list[dict]) -> None:
    """004 Fig. 7: test accuracy against the required memory span, the seeds' mean per arm."""
    for i, arm in enumerate(details[0]["by_span"]):
        rows = [d["by_span"][arm] for d in details]
        spans = [r["span_lo"] for r in rows[0]]
        means = [statistics.fmean(rs[k]["accuracy"] for rs in rows if k < len(rs)) for k in range(len(spans))]
        fig.add_trace(go.Scatter(x=spans, y=means, mode="lines+markers", name=arm, line=dict(color=color(i))),
                      row=1, col=2)
    fig.update_xaxes(type="log", title_text="required memory span", row=1, col=2)
    fig.update_yaxes(title_text="test accuracy", row=1, col=2)


def _alphas(fig: go.Figure, details: list[dict]) -> None:
    """002 Fig. 3: alpha2 of every FST block, one line per seed."""
    for seed, d in enumerate(details):
        fig.add_trace(go.Scatter(x=[a["block"] for a in d["alphas"]], y=[a["alpha2"] for a in d["alphas"]],
                                 mode="lines+markers", name=f"seed {seed}", line=dict(color=color(seed))), row=1, col=2)
    fig.update_xaxes(title_text="FST block", row=1, col=2)
    fig.update_yaxes(title_text="alpha2", row=1, col=2)


def _ratios(fig: go.Figure, details: list[dict]) -> None:
    """003 Fig. 2 as a ratio: 2 scans / 1 scan against the length, one line per repeated timing."""
    for seed, d in enumerate(details):
        fig.add_trace(go.Scatter(x=[r["L"] for r in d["rows"]], y=[r["ratio"] for r in d["rows"]],
                                 mode="lines+markers", name=f"timing {seed}", line=dict(color=color(seed))),
                      row=1, col=2)
    fig.update_xaxes(type="log", title_text="sequence length L", row=1, col=2)
    fig.update_yaxes(title_text="2 scans / 1 scan", row=1, col=2)


_DETAILS = {
    "gateloop-memory-horizon": ("accuracy by memory span (mean over seeds)", _by_span),
    "fst-alpha-depth": ("alpha2 by block", _alphas),
    "lightnet-one-scan": ("time ratio by length", _ratios),
}
