"""Pictures for lesson 02 (the unrolled linear recurrence, paper 002 §2.1).

Only draws: impulse responses and eigenvalues are computed by ``seqlab.ops`` in the lesson and
passed in as arrays.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from seqlab.viz.figures import as_array
from seqlab.viz.style import color, new_figure

__all__ = ["impulse_figure"]


def impulse_figure(response, eigenvalues, *, title: str | None = None, height: int | None = None) -> go.Figure:
    """Left: the impulse response ``h_t = lambda^(t-1)`` (``t = 1..L``, the impulse being ``x_1 = 1``) of one
    channel, real part, imaginary part and the envelope ``|h_t|``. Right: the eigenvalue(s) on the complex plane
    with the unit circle.

    ``response``: complex ``(L,)``; ``eigenvalues``: complex ``(K,)``, the first one being the channel shown.
    """
    h = as_array(response, "response", ndim=1, allow_complex=True).astype(np.complex128)
    lam = as_array(eigenvalues, "eigenvalues", ndim=1, allow_complex=True).astype(np.complex128)
    t = np.arange(1, len(h) + 1)  # h[0] is h_1: the impulse x_1 = 1 gives h_t = lambda^(t-1)
    fig = new_figure(1, 2, subplot_titles=["impulse response h_t = lambda^(t-1)", "lambda on the complex plane"],
                     title=title, height=height or 400, column_widths=[0.62, 0.38], horizontal_spacing=0.1)
    for i, (name, vals) in enumerate((("Re h_t", h.real), ("Im h_t", h.imag), ("|h_t|", np.abs(h)))):
        fig.add_trace(go.Scatter(x=t.tolist(), y=np.round(vals, 6).tolist(), mode="lines", name=name,
                                 line=dict(color=color(i), width=2, dash="dot" if name == "|h_t|" else None)),
                      row=1, col=1)
    fig.update_xaxes(title_text="t (the impulse is x_1 = 1)", row=1, col=1)
    fig.update_yaxes(title_text="h_t", row=1, col=1)
    circle = np.exp(1j * np.linspace(0, 2 * np.pi, 181))
    fig.add_trace(go.Scatter(x=np.round(circle.real, 6).tolist(), y=np.round(circle.imag, 6).tolist(), mode="lines",
                             name="|lambda| = 1", line=dict(color="#888888", dash="dash", width=1)), row=1, col=2)
    fig.add_trace(go.Scatter(x=np.round(lam.real, 6).tolist(), y=np.round(lam.imag, 6).tolist(), mode="markers",
                             name="lambda", marker=dict(size=11, color=color(3))), row=1, col=2)
    lim = 1.1 * max(1.0, float(np.abs(lam).max()))
    fig.update_xaxes(title_text="Re", range=[-lim, lim], row=1, col=2)
    fig.update_yaxes(title_text="Im", range=[-lim, lim], scaleanchor="x2", scaleratio=1, row=1, col=2)
    return fig
