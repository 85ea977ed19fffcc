"""A live learning curve: a training callback that redraws a plotly ``FigureWidget`` during ``fit``.

Usage in a notebook (one run, or several runs racing in one figure)::

    live = viz.LivePlot(["loss", "accuracy"])
    h1 = fit(transformer, task, ..., callbacks=[live.run("transformer")])
    h2 = fit(linear, task, ..., callbacks=[live.run("linear transformer")])

When a ``fit`` ends, the live widget becomes the same figure, static, in the same place (:meth:`close`);
the next run drawn into it makes it live again there.

``LivePlot`` itself is also a callback: used directly it names each run after the model
(``model.model_name``) when ``fit`` starts.

Outside a Jupyter kernel (a terminal, a test) nothing is drawn: the records are only collected,
and :meth:`LivePlot.figure` gives the static figure. In a kernel without ``anywidget`` (which
plotly's ``FigureWidget`` needs) the figure is redrawn as a static output instead.

After :meth:`close` (at the end of every ``fit``), the live widget is replaced by its static figure and
closed, so the saved notebook shows the final curves without keeping the widget (plotly's widget carries its whole
JavaScript bundle, about 5 MB, in a notebook's saved widget state).
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

from seqlab.viz.figures import learning_curves

__all__ = ["LivePlot", "in_notebook"]


def in_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, Notebook, nbconvert, nbval), False elsewhere."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def _figure_widget_available() -> bool:
    try:
        import anywidget  # noqa: F401  (plotly >= 6 builds FigureWidget on anywidget)
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


# Widgets this module closed. When the kernel closes a widget's comm, JupyterLab answers with a comm
# message of its own for it (and may still send plotly's last relayout); the kernel, which no longer knows
# the comm, then logs "No such comm: <id>" into JupyterLab's log console. For the ids closed here that line
# is expected and harmless (ipywidgets' maintainers, jupyter-widgets/ipywidgets#3525): it is dropped.
_CLOSED_IDS: set[str] = set()


class _ClosedCommEchoes(logging.Filter):
    """Drops the comm package's "No such comm: <id>" warning for the widgets in :data:`_CLOSED_IDS` only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "No such comm: %s" and record.args and record.args[0] in _CLOSED_IDS)


_ECHO_FILTER = _ClosedCommEchoes()


def _close_widget(widget) -> None:
    """Close ``widget``'s comm; JupyterLab's answers for it are not logged as errors (see above)."""
    comm_logger = logging.getLogger("Comm")           # comm.base_comm's logger, which ipykernel uses
    if _ECHO_FILTER not in comm_logger.filters:
        comm_logger.addFilter(_ECHO_FILTER)
    _CLOSED_IDS.add(widget.model_id)
    widget.close()


def _mimebundle(fig: go.Figure) -> dict:
    # What plotly's "plotly_mimetype" renderer emits. Passed raw, because a Figure displayed as an
    # object renders itself through plotly and would drop the display id that lets it be updated.
    return {"application/vnd.plotly.v1+json": json.loads(pio.to_json(fig, validate=False))}


class _Run:
    """The callback for one named run of a :class:`LivePlot` (see :meth:`LivePlot.run`)."""

    def __init__(self, plot: "LivePlot", label: str):
        self.plot, self.label = plot, label

    def on_fit_start(self, model, task) -> None:
        self.plot._start(self.label)

    def __call__(self, history, record: dict) -> None:
        self.plot._add(self.label, record)

    def on_fit_end(self, history) -> None:
        self.plot.close()


class _NamedRuns:
    """The callback of :meth:`LivePlot.named`: the k-th fit it sees is drawn as ``labels[k]``."""

    def __init__(self, plot: "LivePlot", labels: list[str]):
        self.plot, self.labels, self.current = plot, labels, None

    def on_fit_start(self, model, task) -> None:
        k = len([label for label in self.labels if label in self.plot.runs])
        if k >= len(self.labels):
            raise ValueError(f"labels: {len(self.labels)} names given, but fit number {k + 1} started")
        self.current = self.labels[k]
        self.plot._start(self.current)

    def __call__(self, history, record: dict) -> None:
        self.plot._add(self.current if self.current is not None else self.labels[0], record)

    def on_fit_end(self, history) -> None:
        self.plot.close()


class LivePlot:
    """Training callback drawing learning curves live (see the module docstring).

    ``metrics``: record keys to draw side by side (default loss and accuracy). ``splits``: which
    splits to draw (default: all that appear). ``min_interval``: seconds between redraws (the last
    state is always drawn at evaluations and at the end of ``fit``). ``display``: ``None`` = draw when
    in a notebook, ``False`` = never draw (collect only).
    """

    def __init__(self, metrics: str | Sequence[str] = ("loss", "accuracy"), *, splits: Sequence[str] | None = None,
                 title: str | None = None, min_interval: float = 0.5, smooth: float = 0.0,
                 display: bool | None = None, height: int | None = None):
        self.metrics = [metrics] if isinstance(metrics, str) else list(metrics)
        if not self.metrics:
            raise ValueError("metrics: expected at least one record key")
        self.splits = list(splits) if splits is not None else None
        self.title, self.min_interval, self.smooth, self.height = title, min_interval, smooth, height
        self.show = in_notebook() if display is None else bool(display)
        self.runs: dict[str, list[dict]] = {}
        self.widget: go.FigureWidget | None = None
        self._handle = None
        self._last_draw = 0.0
        self._current: str | None = None
        self._layout_key: tuple | None = None

    # -- callback protocol (used directly, one run per fit, named after the model)
    def on_fit_start(self, model, task) -> None:
        name = getattr(model, "model_name", type(model).__name__)
        label, n = name, 2
        while label in self.runs:
            label, n = f"{name} #{n}", n + 1
        self._start(label)

    def __call__(self, history, record: dict) -> None:
        if self._current is None:
            self._start(f"run {len(self.runs) + 1}")
        self._add(self._current, record)

    def on_fit_end(self, history) -> None:
        self.close()

    def run(self, label: str) -> _Run:
        """A callback that feeds the run ``label`` of this plot (several runs race in one figure)."""
        if not isinstance(label, str) or not label:
            raise ValueError(f"label: expected a non-empty string, got {label!r}")
        return _Run(self, label)

    def named(self, labels: Sequence[str]) -> _NamedRuns:
        """One callback for an experiment that fits several models in turn: the k-th fit is drawn as ``labels[k]``."""
        labels = list(labels)
        if not labels or not all(isinstance(x, str) and x for x in labels) or len(set(labels)) != len(labels):
            raise ValueError(f"labels: expected distinct non-empty strings, got {labels!r}")
        return _NamedRuns(self, labels)

    # -- state
    def _start(self, label: str) -> None:
        self.runs[label] = []
        self._current = label

    def _add(self, label: str, record: dict) -> None:
        if label not in self.runs:
            self._start(label)
        self.runs[label].append(dict(record))
        self._refresh(force=record.get("split", "train") != "train")

    def figure(self) -> go.Figure:
        """The static learning-curves figure of everything recorded so far."""
        if not any(self.runs.values()):
            raise ValueError("LivePlot: no records yet; pass it to fit(..., callbacks=[...]) first")
        metrics = [m for m in self.metrics if any(m in r for rs in self.runs.values() for r in rs)]
        return learning_curves({k: v for k, v in self.runs.items() if v}, metrics or self.metrics, splits=self.splits,
                               smooth=self.smooth, title=self.title, height=self.height)

    # -- drawing
    def _refresh(self, force: bool = False) -> None:
        if not self.show or not any(self.runs.values()):
            return
        now = time.monotonic()
        if not force and now - self._last_draw < self.min_interval:
            return
        self._last_draw = now
        fig = self.figure()
        if not _figure_widget_available():
            self._show_static(fig)
            return
        key = tuple((t.name, t.xaxis, t.yaxis) for t in fig.data)
        if self.widget is None or key != self._layout_key:
            self._show_widget(fig)
            self._layout_key = key
            return
        with self.widget.batch_update():
            for live, new in zip(self.widget.data, fig.data):
                live.x, live.y = new.x, new.y

    def _show_widget(self, fig: go.Figure) -> None:
        from IPython.display import display

        if self.widget is None:
            self.widget = go.FigureWidget(fig)
            # The widget's own text/plain repr holds random trace uids: show a fixed one instead.
            bundle = {"application/vnd.jupyter.widget-view+json": {"model_id": self.widget.model_id,
                                                                   "version_major": 2, "version_minor": 0},
                      "text/plain": "LivePlot (live learning curves)"}
            if self._handle is None:
                self._handle = display(bundle, raw=True, display_id=True)
            else:   # the next run of a race: live again, in the same place
                self._handle.update(bundle, raw=True)
        else:  # a new run or metric appeared: new traces, same widget
            with self.widget.batch_update():
                self.widget.data = ()
                self.widget.add_traces(list(fig.data))
                self.widget.layout = fig.layout

    def _show_static(self, fig: go.Figure) -> None:
        from IPython.display import display

        if self._handle is None:
            self._handle = display(_mimebundle(fig), raw=True, display_id=True)
        else:
            self._handle.update(_mimebundle(fig), raw=True)

    def close(self) -> None:
        """Replace the live widget by its static figure (:meth:`figure`) and close the widget.

        Returns nothing, so that ``live.close()`` as a cell's last line does not draw it twice.
        """
        if not any(self.runs.values()):
            return
        fig = self.figure()
        if self._handle is not None:
            self._handle.update(_mimebundle(fig), raw=True)
        if self.widget is not None:
            _close_widget(self.widget)
            self.widget = None
