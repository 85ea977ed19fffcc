"""The recall sweep's picture (lesson 08, ``results/README.md``): MQAR test accuracy against state size, one panel per
number of key-value pairs (Zoology, arXiv 2312.04927, Fig. 2; Based, arXiv 2402.18668, Fig. 2), drawn from the
record's cells (``seqlab.experiments.recall_sweep_plan.cell_rows``) and, where given, its frontier
(``seqlab.experiments.recall_sweep_results.frontier``).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go

from seqlab.viz.style import color, new_figure

__all__ = ["recall_vs_state", "SYMBOLS", "TAYLOR_SYMBOLS", "TAYLOR_CONV_SYMBOL", "STILL_LEARNING",
           "STILL_LEARNING_LABEL"]

# a family's sweep over its state knob is a line; the other groups are single points in the family's colour
SYMBOLS = {"state": "circle", "short-conv": "diamond", "feature-map": "square", "ablation": "x", "reference": "star"}
# Points of one family share its colour, so two of its additions must differ in shape: the Taylor map by its number of
# features (a square for 4, a triangle for 8), and with the short convolution an hourglass (the convolution alone: a
# diamond).
TAYLOR_SYMBOLS = {4: "square", 8: "triangle-up"}
TAYLOR_CONV_SYMBOL = "hourglass"
_ADDED = {"short-conv": "short conv", "feature-map": "Taylor map", "ablation": "no TPE"}
# a finished cell with a seed still learning at the cap: an open marker with a dot (a cell still running: open)
STILL_LEARNING = "-open-dot"
STILL_LEARNING_LABEL = "open, dotted: a seed still learning at the cap"


def _seeds(seeds) -> str:
    return ", ".join(map(str, seeds))


def _hover(r: dict) -> str:
    seeds = " / ".join(f"{a:.3f}" for a in r["accuracy"])
    layer = f" ({r['state_per_layer']:,} a layer)" if r.get("state_per_layer") is not None else ""
    notes = ([f"still learning at the cap: seed {_seeds(r['still_learning'])}"] if r.get("still_learning") else []) \
        + ([f"rose at the end: seed {_seeds(r['rose'])}"] if r.get("rose") and not r.get("still_learning") else []) \
        + ([f"no commit recorded: seed {_seeds(r['no_commit'])}"] if r.get("no_commit") else []) \
        + ([f"dirty code: seed {_seeds(r['dirty'])}"] if r.get("dirty") else []) \
        + ([f"protocol: {r['protocol']}"] if r.get("protocol") else [])
    return (f"{r['cell']}<br>{r['pairs']} pairs, state {r['state_size']:,} floats{layer}<br>d_model {r['d_model']}, "
            f"{r['params']:,} parameters ({r['budget']:.2f}x)<br>lr {r['chosen_lr']:g}: {seeds}"
            + ("" if r["status"] == "done" else f"<br>{r['status']}") + "".join(f"<br>{n}" for n in notes))


def _open(r: dict) -> str:
    """The marker's variant: open while seeds are running, open with a dot when a seed was still learning."""
    return "-open" if r["status"] != "done" else STILL_LEARNING if r.get("still_learning") else ""


def _symbol(r: dict) -> str:
    """The marker of a cell's group, told apart within a family (its colour) by the Taylor map's features."""
    if r["group"] == "feature-map":
        return TAYLOR_SYMBOLS.get(r["knobs"].get("feature_dim"), SYMBOLS["feature-map"])
    if r["group"] == "short-conv" and "feature_dim" in r["knobs"]:
        return TAYLOR_CONV_SYMBOL
    return SYMBOLS[r["group"]]


def _label(r: dict) -> str:
    extra = [_ADDED[r["group"]]] if r["group"] in _ADDED else []
    if r["group"] == "feature-map" or (r["group"] == "short-conv" and "feature_dim" in r["knobs"]):
        extra = [f"Taylor {r['knobs']['feature_dim']}"] + (["conv"] if r["group"] == "short-conv" else [])
    return f"{r['family']} ({', '.join(extra)})" if extra else r["family"]


def recall_vs_state(rows: list[dict], *, frontier: dict | None = None, level: float | None = 0.9,
                    title: str = "MQAR recall against state size") -> go.Figure:
    """Test accuracy against state size (floats held per sequence at decoding, log axis), a panel per number of
    pairs. Each family's ``state`` cells are a line through the seeds' mean, with the seeds' lowest and highest as a
    band; the other groups are points in the family's colour (a diamond: a short convolution; a square: the Taylor
    map of 4 features, a triangle: of 8, an hourglass: the Taylor map with the short convolution; an x: LightNet
    without TPE), the reference a star. A cell whose seeds are still running is an open marker at the mean of the
    seeds in; a finished cell with a seed still learning at the cap (``still_learning``: undecided, not "does not
    recall") an open marker with a dot, named in the legend. The hover says the state per layer (Zoology's unit),
    the protocol and the seeds whose run recorded no commit or dirty code. ``frontier`` (``{pairs: [(state,
    accuracy, cell), ...]}``): a dashed step through the best accuracy reached at each state or below. ``level``: a dotted line, labelled in the first panel (the accuracy a cell must
    reach in every seed to count as recalling)."""
    shown = [r for r in rows if r["accuracy"]]
    pairs = sorted({r["pairs"] for r in rows})
    families = list(dict.fromkeys(r["family"] for r in rows))
    fig = new_figure(1, len(pairs), subplot_titles=[f"{p} key-value pairs" for p in pairs], shared_yaxes=True,
                     title=title, height=560, width=max(760, 330 * len(pairs)), horizontal_spacing=0.04)
    legend: set = set()
    states = [r["state_size"] for r in rows]
    span = [math.log10(min(states) / 1.5), math.log10(max(states) * 1.5)]     # one x range: the panels compare
    for col, p in enumerate(pairs, start=1):
        for i, family in enumerate(families):
            c = "#222222" if any(r["group"] == "reference" for r in rows if r["family"] == family) else color(i)
            mine = [r for r in shown if r["pairs"] == p and r["family"] == family]
            line = sorted((r for r in mine if r["group"] == "state"), key=lambda r: r["state_size"])
            if len(line) > 1:
                xs = [r["state_size"] for r in line]
                lo, hi = [min(r["accuracy"]) for r in line], [max(r["accuracy"]) for r in line]
                fig.add_trace(go.Scatter(x=xs + xs[::-1], y=hi + lo[::-1], fill="toself", fillcolor=c, opacity=0.18,
                                         line=dict(width=0), hoverinfo="skip", showlegend=False), row=1, col=col)
            for group in dict.fromkeys(r["group"] for r in mine):
                pts = sorted((r for r in mine if r["group"] == group), key=lambda r: r["state_size"])
                for key in dict.fromkeys(_label(r) for r in pts):
                    sub = [r for r in pts if _label(r) == key]
                    fig.add_trace(go.Scatter(
                        x=[r["state_size"] for r in sub], y=[sum(r["accuracy"]) / len(r["accuracy"]) for r in sub],
                        mode="lines+markers" if group == "state" and len(sub) > 1 else "markers", name=key,
                        legendgroup=key, showlegend=key not in legend, line=dict(color=c, width=2),
                        marker=dict(symbol=[_symbol(r) + _open(r) for r in sub], color=c,
                                    size=13 if group == "reference" else 9, line=dict(color=c, width=1.5)),
                        error_y=dict(type="data", symmetric=False, width=3, thickness=1,
                                     array=[max(r["accuracy"]) - sum(r["accuracy"]) / len(r["accuracy"]) for r in sub],
                                     arrayminus=[sum(r["accuracy"]) / len(r["accuracy"]) - min(r["accuracy"])
                                                 for r in sub]) if group != "state" else None,
                        hovertext=[_hover(r) for r in sub], hovertemplate="%{hovertext}<extra></extra>"),
                        row=1, col=col)
                    legend.add(key)
        if frontier and frontier.get(p):
            pts = frontier[p]
            fig.add_trace(go.Scatter(x=[s for s, _, _ in pts], y=[a for _, a, _ in pts], mode="lines",
                                     line=dict(color="#888888", dash="dash", shape="hv", width=1.5), name="frontier",
                                     legendgroup="frontier", showlegend="frontier" not in legend,
                                     hovertext=[c for _, _, c in pts],
                                     hovertemplate="frontier: %{hovertext}<br>%{y:.3f}<extra></extra>"),
                          row=1, col=col)
            legend.add("frontier")
        if level is not None:
            label = dict(annotation_text=f"{level:g}: recalled in every seed", annotation_position="bottom left",
                         annotation_font=dict(size=11, color="#666666")) if col == 1 else {}
            fig.add_hline(y=level, line=dict(color="#999999", dash="dot", width=1), row=1, col=col, **label)
        fig.update_xaxes(type="log", dtick=1, range=span, title_text="state size (floats, log scale)", row=1, col=col)
        fig.update_yaxes(range=[-0.02, 1.02], row=1, col=col,
                         title_text="test accuracy (band: the seeds' range)" if col == 1 else None)
    if any(r.get("still_learning") and r["status"] == "done" for r in shown):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=STILL_LEARNING_LABEL, hoverinfo="skip",
                                 marker=dict(symbol="circle" + STILL_LEARNING, color="#666666", size=9)), row=1, col=1)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0), margin=dict(b=170))
    return fig
