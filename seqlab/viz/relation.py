"""Pictures for the CausalRN / BiRN lesson (papers 000, 001), built on the shared ``seqlab.viz`` look.

- :func:`pair_matrix`: the pairwise hidden values ``psi(p_i + q_j)`` of one feature as a heat map.
- :func:`ablation_figure`: 001 Fig. 2 / 000 Fig. 3-4: test accuracy against step, one panel per group.
- :func:`iterations_figure`: 001 Fig. 4: iterations to 99 % accuracy against string length.
- :func:`cls_heatmap_figure`: 000 Fig. 7: input images beside the BiRN CLS heat maps.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from seqlab.viz.figures import as_array, heatmap, learning_curve_traces, runs_of
from seqlab.viz.style import SEQUENTIAL, color, new_figure

__all__ = ["pair_matrix", "ablation_figure", "iterations_figure", "cls_heatmap_figure"]


def pair_matrix(pairs, *, title: str | None = None, height: int | None = 380) -> go.Figure:
    """``pairs``: ``(L_query, L_key)`` values of ``psi(pre(p_i + q_j))`` for one hidden feature
    (zeros above the diagonal for a causal block). Row ``j`` is the query, column ``i`` the key."""
    return heatmap(as_array(pairs, "pairs", ndim=2), title=title, x_title="key i", y_title="query j",
                   colorbar_title="psi", height=height)


def ablation_figure(result: dict, *, metric: str = "accuracy", split: str = "test", title: str | None = None) -> go.Figure:
    """``result`` from ``seqlab.experiments.run("relation-copying-ablation")``: one panel per group,
    ``metric`` on ``split`` against the training step. The first variant of each group (the proposed one) has
    the same colour in every panel; every other variant has a colour of its own."""
    groups = result["groups"]
    names = list(groups)
    fig = new_figure(1, len(names), subplot_titles=names, title=title, height=440, horizontal_spacing=0.05)
    next_colour = 1
    for g_i, group in enumerate(names):
        runs = runs_of(dict(groups[group]))
        for v_i, (_, trace) in enumerate(learning_curve_traces(runs, [metric], [split])):
            # the first variant of every group is the proposed configuration: one colour for it in every panel,
            # and a colour of its own for every other variant of the figure, so a colour never means two things
            c = color(0) if v_i == 0 else color(next_colour)
            next_colour += v_i > 0
            trace.line.color = c
            if trace.marker is not None:
                trace.marker.color = c
            trace.showlegend = True
            trace.legendgroup = f"{group}/{trace.legendgroup}"
            trace.name = f"{group}: " + trace.name.replace(f" ({split})", "")
            fig.add_trace(trace, row=1, col=g_i + 1)
        fig.update_xaxes(title_text="step", row=1, col=g_i + 1)
        fig.update_yaxes(range=[0, 1.02], row=1, col=g_i + 1)
    fig.update_yaxes(title_text=f"{split} {metric}", row=1, col=1)
    # the legend sits below the "step" axis titles (anchored by its top edge, with room kept in the margin)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.3, x=0, xanchor="left"),
                      margin=dict(b=130))
    return fig


def iterations_figure(result: dict, *, title: str | None = None) -> go.Figure:
    """``result`` from ``"relation-copying-scaling"``: iterations to the threshold against length.
    Runs that never reached it are drawn as open markers at ``max_steps`` ("not reached")."""
    lengths = list(result["lengths"])
    cap = result["max_steps"]
    fig = new_figure(title=title, height=380)
    for i, (name, its) in enumerate(result["iterations"].items()):
        reached = [(L, s) for L, s in zip(lengths, its) if s is not None]
        missed = [L for L, s in zip(lengths, its) if s is None]
        fig.add_trace(go.Scatter(x=[L for L, _ in reached], y=[s for _, s in reached], mode="lines+markers", name=name,
                                 legendgroup=name, line=dict(color=color(i), width=2), marker=dict(size=8)))
        if missed:
            fig.add_trace(go.Scatter(x=missed, y=[cap] * len(missed), mode="markers", name=f"{name}: not reached",
                                     legendgroup=name, marker=dict(color=color(i), size=11, symbol="x-open")))
    fig.update_xaxes(title_text="string length", type="log", tickvals=lengths)
    fig.update_yaxes(title_text="iterations to 99% accuracy")
    return fig


def cls_heatmap_figure(images, heatmaps, labels=None, *, title: str | None = None) -> go.Figure:
    """Two rows: the input images ``(n, H, W)`` and the CLS heat maps ``(n, rows, cols)``."""
    imgs = as_array(images, "images", ndim=3)
    heat = as_array(heatmaps, "heatmaps", ndim=3)
    if len(imgs) != len(heat):
        raise ValueError(f"heatmaps: expected {len(imgs)} maps (one per image), got {len(heat)}")
    n = len(imgs)
    names = [f"label {int(v)}" for v in labels] if labels is not None else [f"#{i}" for i in range(n)]
    fig = new_figure(2, n, subplot_titles=names + [""] * n, title=title, height=340, horizontal_spacing=0.02,
                     vertical_spacing=0.08)
    for i in range(n):
        fig.add_trace(go.Heatmap(z=np.round(imgs[i], 4).tolist(), colorscale="Greys", showscale=False,
                                 hovertemplate="pixel %{y},%{x}: %{z}<extra></extra>"), row=1, col=i + 1)
        fig.add_trace(go.Heatmap(z=np.round(heat[i], 6).tolist(), coloraxis="coloraxis",
                                 hovertemplate="patch %{y},%{x}: %{z:.4f}<extra></extra>"), row=2, col=i + 1)
    fig.update_xaxes(showticklabels=False, showgrid=False)
    fig.update_yaxes(showticklabels=False, showgrid=False, autorange="reversed", scaleanchor=None)
    fig.update_layout(coloraxis=dict(colorscale=SEQUENTIAL, colorbar=dict(title=dict(text="CLS share"))))
    return fig
