"""Pictures for the LRNN / FST lesson (paper 002): the twist drawn, and per-block read-outs.

Only draws: the values come from ``seqlab.readout`` (``fst_alphas``, ``fst_representation_changes``)
and ``seqlab.experiments.lrnn``.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from seqlab.viz.figures import as_array
from seqlab.viz.style import DIVERGING, new_figure

__all__ = ["twist_figure", "mask_figure"]


def twist_figure(x, *, title: str | None = None, height: int | None = None) -> go.Figure:
    """One sequence ``x: (L, D)`` before and after the twist: left ``(L, D)`` with positions as rows,
    right ``x^T: (D, L)`` with features as rows — the axis the transposed LRNN runs along."""
    arr = as_array(x, "x", ndim=2)
    L, D = arr.shape
    bound = float(np.abs(arr).max()) or 1.0
    fig = new_figure(1, 2, subplot_titles=[f"x: (L={L}, D={D}), LRNN 1 runs down the positions",
                                           f"x^T: (D={D}, L={L}), LRNN 2 runs down the features"],
                     title=title, height=height or 420, horizontal_spacing=0.1)
    for col, (m, rows, cols) in enumerate(((arr, "position t", "feature d"), (arr.T, "feature d", "position t")), 1):
        fig.add_trace(go.Heatmap(z=np.round(m, 5).tolist(), coloraxis="coloraxis",
                                 hovertemplate=f"{rows} %{{y}}<br>{cols} %{{x}}<br>%{{z:.3g}}<extra></extra>"),
                      row=1, col=col)
        fig.update_xaxes(title_text=cols, showgrid=False, row=1, col=col)
        fig.update_yaxes(title_text=rows + " (the scan axis)", autorange="reversed", showgrid=False, row=1, col=col)
    fig.update_layout(coloraxis=dict(colorscale=DIVERGING, cmin=-bound, cmax=bound, cmid=0.0))
    return fig


def mask_figure(masks: dict, *, title: str | None = None, height: int | None = None) -> go.Figure:
    """0/1 weight masks side by side, ``{name: (rows, cols) array}`` (1 = the weight is used)."""
    names = list(masks)
    fig = new_figure(1, len(names), subplot_titles=names, title=title, height=height or 340,
                     horizontal_spacing=0.08)
    for i, name in enumerate(names, 1):
        m = as_array(masks[name], f"masks[{name!r}]", ndim=2)
        fig.add_trace(go.Heatmap(z=m.astype(float).tolist(), colorscale=[[0, "#f0f0f0"], [1, "#3b4cc0"]],
                                 zmin=0, zmax=1, showscale=False,
                                 hovertemplate="row %{y}<br>col %{x}<br>used %{z}<extra></extra>"), row=1, col=i)
        fig.update_yaxes(autorange="reversed", showgrid=False, row=1, col=i)
        fig.update_xaxes(showgrid=False, row=1, col=i)
    return fig
