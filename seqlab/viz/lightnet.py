"""LightNet pictures (paper 003): c_ts matrices, positional kernels on a grid, 1 scan vs 2 scan, ablations.

Builders only draw what ``seqlab.ops`` / ``seqlab.readout`` / ``seqlab.experiments`` computed.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from seqlab.viz.figures import as_array, heatmap, scaling_plot
from seqlab.viz.style import color, new_figure

__all__ = ["coefficient_matrices", "grid_kernels", "scan_speed_plot", "ablation_bars"]


def coefficient_matrices(matrices, titles: Sequence[str], *, title: str | None = None) -> go.Figure:
    """Theorem 3.1's ``c_ts`` matrices side by side on one colour scale (row t = output, column s = input)."""
    return heatmap([as_array(m, "matrices[i]", ndim=2) for m in matrices], titles=list(titles), title=title,
                   x_title="input position s", y_title="output position t", colorbar_title="c_ts")


def grid_kernels(kernels, shape, titles: Sequence[str], *, title: str | None = None) -> go.Figure:
    """Positional kernels seen from one grid point: each ``(N,)`` vector drawn as the ``shape`` grid."""
    panels = [as_array(k, "kernels[i]", ndim=1).reshape(shape) for k in kernels]
    return heatmap(panels, titles=list(titles), title=title, x_title="column", y_title="row")


def scan_speed_plot(rows: list[dict], *, title: str | None = None) -> go.Figure:
    """Fig. 2: forward and backward time of the 1 scan and the 2 scan against L (log-log, fitted slopes)."""
    lengths = [r["L"] for r in rows]
    times = {"1 scan fwd": [r["one_fwd_ms"] / 1e3 for r in rows], "2 scan fwd": [r["two_fwd_ms"] / 1e3 for r in rows],
             "1 scan bwd": [r["one_bwd_ms"] / 1e3 for r in rows], "2 scan bwd": [r["two_bwd_ms"] / 1e3 for r in rows]}
    return scaling_plot(lengths, times, title=title or "non-causal decay attention: 1 scan vs 2 scans (Fig. 2)")


def ablation_bars(rows: list[dict], *, metric: str = "accuracy", title: str | None = None,
                  chance: float | None = None) -> go.Figure:
    """One bar per variant (``rows``: dicts with ``variant`` and ``metric``), an optional chance line."""
    names = [r["variant"] for r in rows]
    values = np.array([float(r[metric]) for r in rows])
    fig = new_figure(title=title or f"ablation: test {metric}", height=360)
    fig.add_trace(go.Bar(x=names, y=np.round(values, 4).tolist(), marker_color=[color(i) for i in range(len(rows))],
                         text=[f"{v:.3f}" for v in values], textposition="outside"))
    if chance is not None:
        fig.add_hline(y=chance, line_dash="dot", annotation_text="chance")
    fig.update_yaxes(title_text=metric, range=[0, 1.05] if "accuracy" in metric else None)
    return fig
