"""The one look every seqlab figure shares: colours, font, template, and small layout helpers.

Defined once here; every builder in ``seqlab.viz`` (and the family modules beside it) goes through
:func:`new_figure` / :func:`apply_style`, so that all lessons look alike.

The template is deliberately small (a few layout attributes, no per-trace defaults), because
plotly embeds the whole template in every figure's JSON, and every figure is committed inside a
notebook.
"""
from __future__ import annotations

import os

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

__all__ = ["COLORS", "SEQUENTIAL", "DIVERGING", "CYCLIC", "FONT", "TEMPLATE", "TEMPLATE_NAME", "color",
           "new_figure", "apply_style", "use_stable_renderer"]

# Okabe-Ito's eight, distinguishable with the common colour-vision deficiencies, and its usual grey as a ninth (the
# arena's nine families each get their own); order = order of runs.
COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000", "#999999")
SEQUENTIAL = "Viridis"   # magnitudes: gates, attention weights, |coefficients|
DIVERGING = "RdBu_r"     # signed values, centred on 0 (zmid=0)
CYCLIC = "Twilight"      # phases / angles
FONT = dict(family="Inter, Helvetica Neue, Arial, sans-serif", size=13, color="#222222")

TEMPLATE_NAME = "seqlab"
TEMPLATE = go.layout.Template(
    layout=dict(
        font=FONT,
        colorway=list(COLORS),
        paper_bgcolor="white",
        plot_bgcolor="white",
        title=dict(x=0.02, xanchor="left", font=dict(size=16)),
        xaxis=dict(showgrid=True, gridcolor="#E6E6E6", zeroline=False, linecolor="#444444", ticks="outside",
                   automargin=True),
        yaxis=dict(showgrid=True, gridcolor="#E6E6E6", zeroline=False, linecolor="#444444", ticks="outside",
                   automargin=True),
        legend=dict(bgcolor="rgba(255,255,255,0.8)", borderwidth=0),
        margin=dict(l=60, r=20, t=60, b=50),
        hovermode="closest",
    )
)
pio.templates[TEMPLATE_NAME] = TEMPLATE


def color(i: int) -> str:
    """The colour of run/series number ``i`` (cycles through :data:`COLORS`)."""
    return COLORS[i % len(COLORS)]


def apply_style(fig: go.Figure, *, title: str | None = None, height: int | None = None, width: int | None = None,
                **layout) -> go.Figure:
    """Give ``fig`` the seqlab look (template, title, size) and return it."""
    fig.update_layout(template=TEMPLATE, **layout)
    if title is not None:
        fig.update_layout(title_text=title)
    if height is not None:
        fig.update_layout(height=height)
    if width is not None:
        fig.update_layout(width=width)
    return fig


def new_figure(rows: int = 1, cols: int = 1, *, subplot_titles=None, title: str | None = None,
               height: int | None = None, width: int | None = None, **subplot_kw) -> go.Figure:
    """An empty styled figure, with a grid of ``rows x cols`` panels when either is > 1."""
    if rows == 1 and cols == 1 and not subplot_titles:
        fig = go.Figure()
    else:
        fig = make_subplots(rows=rows, cols=cols, subplot_titles=subplot_titles, **subplot_kw)
    return apply_style(fig, title=title, height=height, width=width)


def use_stable_renderer() -> str | None:
    """Inside a Jupyter kernel, render figures as the plain plotly mimetype.

    ``plotly_mimetype`` puts only the figure JSON in the output (JupyterLab, VS Code and nteract
    draw it with plotly's own extension). Renderers that add HTML embed a random ``<div id>`` in
    the output, which would change on every run and break the notebook checks (nbval). A renderer
    chosen by the user (``PLOTLY_RENDERER``) or a hosted service (Colab, Kaggle) is left alone.
    Returns the renderer in force.
    """
    if os.environ.get("PLOTLY_RENDERER"):
        return pio.renderers.default
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with jupyterlab
        return pio.renderers.default
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return pio.renderers.default
    if pio.renderers.default in ("colab", "kaggle", "databricks", "cocalc", "azure"):
        return pio.renderers.default
    pio.renderers.default = "plotly_mimetype"
    return pio.renderers.default
