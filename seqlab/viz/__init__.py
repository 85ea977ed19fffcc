"""Plotly figures for every lesson, with one shared look (``seqlab.viz.style``).

Static builders (``seqlab.viz.figures``) take tensors, arrays or training histories and return a
``go.Figure``; :class:`LivePlot` (``seqlab.viz.live``) is a ``fit`` callback that draws learning
curves live in a notebook. Family-specific pictures live beside them (``seqlab.viz.relation``,
``lrnn``, ``lightnet``, ``scan``), with the arena's and the claims' (``arena``, ``claims``), and reuse these helpers.

``viz`` only draws: values are read out of models by ``seqlab.readout`` and computed by
``seqlab.ops``; nothing in the math imports ``viz``.

Importing ``seqlab.viz`` inside a Jupyter kernel selects plotly's plain mimetype renderer, whose
output is the figure's JSON alone (no random HTML ids), so executed notebooks compare exactly.
"""
from seqlab.viz.figures import (as_array, coefficient_bars, complex_plane, fit_slopes, gate_heatmap, heatmap,
                                learning_curves, line, log_ticks, runs_of, scaling_plot)
from seqlab.viz.live import LivePlot, in_notebook
from seqlab.viz.style import (COLORS, CYCLIC, DIVERGING, SEQUENTIAL, TEMPLATE, apply_style, color, new_figure,
                              use_stable_renderer)

use_stable_renderer()

__all__ = ["learning_curves", "LivePlot", "heatmap", "gate_heatmap", "coefficient_bars", "complex_plane", "line",
           "scaling_plot", "fit_slopes", "log_ticks", "as_array", "runs_of", "in_notebook", "COLORS", "SEQUENTIAL", "DIVERGING",
           "CYCLIC", "TEMPLATE", "apply_style", "color", "new_figure", "use_stable_renderer"]
