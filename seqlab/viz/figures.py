"""Static plotly figure builders shared by every lesson.

Each builder takes plain data (torch tensors, NumPy arrays, lists, histories), checks its shape,
and returns a styled ``go.Figure``. Nothing here computes model math: ``seqlab.readout`` reads
values out of models, these functions only draw them.

- :func:`learning_curves`: metric against step for one run or several, train and eval splits;
- :func:`heatmap`: attention / coefficient matrices, several side by side on one colour scale;
- :func:`gate_heatmap`: a sequence x channel picture of gate values;
- :func:`coefficient_bars`: per-layer coefficients as grouped bars;
- :func:`complex_plane`: eigenvalues in the complex plane with the unit circle;
- :func:`line`, :func:`scaling_plot`: curves, and time-vs-length on log-log axes with fitted slopes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from seqlab.viz.style import CYCLIC, DIVERGING, SEQUENTIAL, color, new_figure

__all__ = ["as_array", "runs_of", "learning_curves", "heatmap", "gate_heatmap", "coefficient_bars",
           "complex_plane", "line", "scaling_plot", "fit_slopes", "log_ticks"]

# Metrics that measure the machine, not the model: never drawn unless asked for by name.
TIMING_KEYS = ("tokens_per_s", "time")
SPLIT_DASH = {"train": "solid"}   # evaluation splits are dotted with markers


# ----------------------------------------------------------------------------- input handling


def as_array(value, name: str, *, ndim: int | tuple[int, ...] | None = None, allow_complex: bool = False) -> np.ndarray:
    """``value`` (tensor, array, nested list) as a finite NumPy array, or a ``ValueError`` naming ``name``.

    ``ndim`` is the accepted number of dimensions (an int or a tuple of ints); complex values are
    refused unless ``allow_complex``.
    """
    try:
        import torch

        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            value = value.resolve_conj() if value.is_complex() else value
            if value.dtype in (torch.bfloat16, torch.float16):
                value = value.float()
            value = value.numpy()
    except ImportError:  # pragma: no cover
        pass
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: expected an array-like of numbers, got {type(value).__name__}") from err
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ValueError(f"{name}: expected numbers, got dtype {arr.dtype} (ragged or non-numeric input?)")
    if np.iscomplexobj(arr) and not allow_complex:
        raise ValueError(f"{name}: expected real values, got complex dtype {arr.dtype}; "
                         f"pass .abs(), .real, .imag or .angle() of it (or part= where the builder has it)")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            want = " or ".join(f"{d}-D" for d in allowed)
            raise ValueError(f"{name}: expected a {want} array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty array, got shape {arr.shape}")
    arr = arr.astype(np.complex128 if np.iscomplexobj(arr) else np.float64)
    finite = np.isfinite(arr.real) & np.isfinite(arr.imag) if np.iscomplexobj(arr) else np.isfinite(arr)
    if not finite.all():
        raise ValueError(f"{name}: {int((~finite).sum())} of {arr.size} values are NaN or inf")
    return arr


def _complex_part(arr: np.ndarray, part: str | None, name: str) -> tuple[np.ndarray, str]:
    """Pick the real-valued view of a possibly complex array that a colour scale can show."""
    if part is None:
        if np.iscomplexobj(arr):
            raise ValueError(f"{name}: complex values; choose part='abs', 'real', 'imag' or 'angle'")
        return arr, ""
    parts = {"abs": np.abs, "real": np.real, "imag": np.imag, "angle": np.angle}
    if part not in parts:
        raise ValueError(f"part: expected None, 'abs', 'real', 'imag' or 'angle', got {part!r}")
    return parts[part](arr).astype(np.float64), part


def _records_of(run) -> list[dict]:
    records = getattr(run, "records", run)
    if not isinstance(records, Sequence) or isinstance(records, (str, bytes)) or not all(isinstance(r, Mapping) for r in records):
        raise ValueError(f"history: expected a seqlab.train.History or a list of record dicts, got {type(run).__name__}")
    return list(records)


def runs_of(history_or_histories, labels: Sequence[str] | None = None) -> dict[str, list[dict]]:
    """Normalise what :func:`learning_curves` accepts into ``{label: records}``.

    Accepted: one ``History`` (or list of record dicts); a mapping ``{label: History}``; a list of
    histories (labelled by ``labels``, else by ``history.config["model"]`` when present, else
    ``run 1, run 2, ...``).
    """
    h = history_or_histories
    if isinstance(h, Mapping):
        runs = {str(k): _records_of(v) for k, v in h.items()}
    elif hasattr(h, "records") or (isinstance(h, Sequence) and h and all(isinstance(r, Mapping) for r in h)):
        runs = {"run": _records_of(h)}
        if labels is None:
            name = getattr(h, "config", {}).get("model") if hasattr(h, "config") else None
            labels = [str(name)] if name else None
    elif isinstance(h, Sequence) and h and not isinstance(h, (str, bytes)):
        runs = {}
        for i, item in enumerate(h):
            name = getattr(item, "config", {}).get("model") if hasattr(item, "config") else None
            runs[str(name) if name and str(name) not in runs else f"run {i + 1}"] = _records_of(item)
    else:
        raise ValueError(f"history_or_histories: expected a History, a list of histories or a {{label: History}} "
                         f"mapping, got {type(h).__name__}")
    if labels is not None:
        labels = list(labels)
        if len(labels) != len(runs):
            raise ValueError(f"labels: expected {len(runs)} labels (one per run), got {len(labels)}")
        runs = dict(zip(labels, runs.values()))
    if not runs:
        raise ValueError("history_or_histories: no runs given")
    return runs


def _ema(values: np.ndarray, smooth: float) -> np.ndarray:
    """Exponential moving average with bias correction (as TensorBoard's smoothing slider)."""
    if smooth <= 0:
        return values
    out, avg = np.empty_like(values), 0.0
    for i, v in enumerate(values):
        avg = smooth * avg + (1 - smooth) * v
        out[i] = avg / (1 - smooth ** (i + 1))
    return out


# ----------------------------------------------------------------------------- learning curves


def _splits_in(runs: dict[str, list[dict]]) -> list[str]:
    seen: list[str] = []
    for records in runs.values():
        for r in records:
            s = r.get("split", "train")
            if s not in seen:
                seen.append(s)
    return sorted(seen, key=lambda s: (s != "train", s))


def learning_curve_traces(runs: dict[str, list[dict]], metrics: Sequence[str], splits: Sequence[str],
                          smooth: float = 0.0) -> list[tuple[int, go.Scatter]]:
    """``(panel index, trace)`` for every run x metric x split that has data, in a fixed order."""
    traces = []
    for m_i, metric in enumerate(metrics):
        for r_i, (label, records) in enumerate(runs.items()):
            for split in splits:
                rows = [r for r in records if r.get("split", "train") == split and metric in r]
                if not rows:
                    continue
                steps = np.array([r["step"] for r in rows], dtype=np.int64)
                values = as_array([r[metric] for r in rows], f"history[{label!r}] {metric}", ndim=1)
                if split == "train":
                    values = _ema(values, smooth)
                traces.append((m_i, go.Scatter(
                    x=steps.tolist(), y=np.round(values, 6).tolist(),
                    name=label if split == "train" else f"{label} ({split})",
                    legendgroup=label, showlegend=m_i == 0,
                    mode="lines" if split == "train" else "lines+markers",
                    line=dict(color=color(r_i), width=2, dash=SPLIT_DASH.get(split, "dot")),
                    marker=dict(size=6),
                    hovertemplate=f"{label} {split}<br>step %{{x}}<br>{metric} %{{y:.4f}}<extra></extra>",
                )))
    return traces


def learning_curves(history_or_histories, metric: str | Sequence[str] = "loss", *, labels: Sequence[str] | None = None,
                    splits: Sequence[str] | None = None, smooth: float = 0.0, log_y: bool = False,
                    title: str | None = None, height: int | None = None) -> go.Figure:
    """Metric(s) against training step, one colour per run; evaluation splits dotted with markers.

    ``history_or_histories``: a ``History``, a list of them, or ``{label: History}`` (see :func:`runs_of`).
    ``metric``: a record key (``"loss"``, ``"accuracy"``, ...) or a list of keys, drawn side by side.
    ``splits``: which splits to draw (default: all present, ``"train"`` first). ``smooth`` in [0, 1)
    is an exponential moving average over the train curve. Timing keys (tokens/s) are drawn only
    when named explicitly: they measure the machine, not the model.
    """
    runs = runs_of(history_or_histories, labels)
    metrics = [metric] if isinstance(metric, str) else list(metric)
    if not metrics or not all(isinstance(m, str) for m in metrics):
        raise ValueError(f"metric: expected a record key or a list of keys, got {metric!r}")
    if not 0 <= smooth < 1:
        raise ValueError(f"smooth: expected a number in [0, 1), got {smooth!r}")
    present = {k for records in runs.values() for r in records for k in r}
    missing = [m for m in metrics if m not in present]
    if missing:
        keys = sorted(k for k in present if k not in ("step", "split"))
        raise ValueError(f"metric: {missing} not in the history records; available keys: {keys}")
    splits = list(splits) if splits is not None else _splits_in(runs)
    fig = new_figure(1, len(metrics), subplot_titles=metrics if len(metrics) > 1 else None, title=title,
                     height=height or 380, horizontal_spacing=0.1 if len(metrics) > 1 else None)
    for m_i, trace in learning_curve_traces(runs, metrics, splits, smooth):
        if len(metrics) > 1:
            fig.add_trace(trace, row=1, col=m_i + 1)
        else:
            fig.add_trace(trace)
    for m_i, m in enumerate(metrics):
        axis = dict(row=1, col=m_i + 1) if len(metrics) > 1 else {}
        fig.update_xaxes(title_text="step", **axis)
        fig.update_yaxes(title_text=m, type="log" if log_y and "acc" not in m else None, **axis)
        if "accuracy" in m:
            fig.update_yaxes(range=[0, 1.02], **axis)
    return fig


# ----------------------------------------------------------------------------- matrices


def _panels(matrix, name: str, part: str | None) -> tuple[list[np.ndarray], str]:
    """A 2-D matrix, a 3-D stack or a list of 2-D matrices -> list of real 2-D arrays."""
    if isinstance(matrix, (list, tuple)) and matrix and not np.isscalar(matrix[0]) and np.ndim(matrix[0]) == 2:
        arrays = [as_array(m, f"{name}[{i}]", ndim=2, allow_complex=True) for i, m in enumerate(matrix)]
    else:
        arr = as_array(matrix, name, ndim=(2, 3), allow_complex=True)
        arrays = [arr] if arr.ndim == 2 else list(arr)
    out, used = [], ""
    for i, a in enumerate(arrays):
        real, used = _complex_part(a, part, name if len(arrays) == 1 else f"{name}[{i}]")
        out.append(real)
    return out, used


def heatmap(matrix, *, titles: Sequence[str] | None = None, title: str | None = None,
            x_title: str = "key position s", y_title: str = "query position t",
            colorscale: str | None = None, zmin: float | None = None, zmax: float | None = None,
            zmid: float | None = None, part: str | None = None, x_labels: Sequence | None = None,
            y_labels: Sequence | None = None, colorbar_title: str = "", height: int | None = None) -> go.Figure:
    """Attention or coefficient matrices: row ``t`` (query/output), column ``s`` (key/input).

    ``matrix``: ``(N, M)``, a stack ``(K, N, M)`` or a list of ``(N_k, M_k)`` drawn side by side on
    one shared colour scale (so that panels compare). Signed data gets a diverging scale centred on 0;
    non-negative data the sequential one. Complex data needs ``part`` (``"abs"``, ``"real"``, ...).
    Row 0 is at the top, as the matrix is written.
    """
    panels, used = _panels(matrix, "matrix", part)
    k = len(panels)
    if titles is not None and len(titles) != k:
        raise ValueError(f"titles: expected {k} titles (one per matrix), got {len(titles)}")
    lo = min(float(p.min()) for p in panels) if zmin is None else zmin
    hi = max(float(p.max()) for p in panels) if zmax is None else zmax
    signed = lo < 0 < hi
    if colorscale is None:
        colorscale = CYCLIC if used == "angle" else (DIVERGING if signed else SEQUENTIAL)
    if zmid is None and signed and colorscale == DIVERGING:
        zmid, bound = 0.0, max(abs(lo), abs(hi))
        lo, hi = -bound, bound
    fig = new_figure(1, k, subplot_titles=list(titles) if titles else None, title=title,
                     height=height or 380, horizontal_spacing=0.06 if k > 1 else None)
    for i, p in enumerate(panels):
        for labels, size, what in ((x_labels, p.shape[1], "x_labels"), (y_labels, p.shape[0], "y_labels")):
            if labels is not None and len(labels) != size:
                raise ValueError(f"{what}: expected {size} labels for a matrix of shape {p.shape}, got {len(labels)}")
        trace = go.Heatmap(
            z=np.round(p, 6).tolist(),
            x=list(x_labels) if x_labels is not None else None,
            y=list(y_labels) if y_labels is not None else None,
            coloraxis="coloraxis",
            hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>value %{{z:.4g}}<extra></extra>",
        )
        axis = dict(row=1, col=i + 1) if k > 1 else {}
        if k > 1:
            fig.add_trace(trace, row=1, col=i + 1)
        else:
            fig.add_trace(trace)
        fig.update_xaxes(title_text=x_title, showgrid=False, **axis)
        fig.update_yaxes(title_text=y_title if i == 0 else None, autorange="reversed", showgrid=False, **axis)
    cb_title = colorbar_title or (f"{used}" if used else "")
    fig.update_layout(coloraxis=dict(colorscale=colorscale, cmin=lo, cmax=hi, cmid=zmid,
                                     colorbar=dict(title=dict(text=cb_title))))
    return fig


def gate_heatmap(values_seq_by_channel, *, titles: Sequence[str] | None = None, title: str | None = None,
                 tokens: Sequence[str] | None = None, channel_labels: Sequence[str] | None = None,
                 part: str | None = None, zmin: float | None = None, zmax: float | None = None,
                 colorscale: str | None = None, height: int | None = None) -> go.Figure:
    """Gate values over a sequence: time runs left to right, one row per channel.

    ``values_seq_by_channel``: ``(L, C)`` (sequence x channel), or ``(K, L, C)`` / a list of them for
    several layers side by side. ``tokens`` labels the sequence positions (e.g. the input text).
    Complex gates need ``part`` (``"abs"`` for the decay magnitude, ``"angle"`` for the rotation).
    """
    panels, _ = _panels(values_seq_by_channel, "values_seq_by_channel", part)
    L = panels[0].shape[0]
    if tokens is not None and len(tokens) != L:
        raise ValueError(f"tokens: expected {L} labels (one per sequence position), got {len(tokens)}")
    x_labels = [f"{i}:{t}" for i, t in enumerate(tokens)] if tokens is not None else None
    # Transposed: (C, L), so that the sequence is the x axis.
    return heatmap([p.T for p in panels], titles=titles, title=title, x_title="sequence position",
                   y_title="channel", x_labels=x_labels, y_labels=channel_labels, zmin=zmin, zmax=zmax,
                   colorscale=colorscale, colorbar_title=part or "gate",
                   height=height or max(300, min(700, 40 + 12 * panels[0].shape[1])))


# ----------------------------------------------------------------------------- bars and points


def coefficient_bars(per_layer_values, *, labels: Sequence[str] | None = None, layer_names: Sequence[str] | None = None,
                     title: str | None = None, y_title: str = "value", height: int | None = None) -> go.Figure:
    """Per-layer coefficients as grouped bars: x = layer, one colour per coefficient.

    ``per_layer_values``: ``{"alpha1": [v_layer0, v_layer1, ...], "alpha2": [...]}``, a 1-D array
    (one coefficient, per layer) or a 2-D array ``(layers, coefficients)`` with ``labels`` naming
    the coefficients.
    """
    if isinstance(per_layer_values, Mapping):
        if labels is not None:
            raise ValueError("labels: give names either as the mapping's keys or as labels=, not both")
        series = {str(k): as_array(v, f"per_layer_values[{k!r}]", ndim=1) for k, v in per_layer_values.items()}
        if not series:
            raise ValueError("per_layer_values: empty mapping")
    else:
        arr = as_array(per_layer_values, "per_layer_values", ndim=(1, 2))
        arr = arr[:, None] if arr.ndim == 1 else arr
        names = list(labels) if labels is not None else ([y_title] if arr.shape[1] == 1 else [f"c{j}" for j in range(arr.shape[1])])
        if len(names) != arr.shape[1]:
            raise ValueError(f"labels: expected {arr.shape[1]} names (one per column of shape {arr.shape}), got {len(names)}")
        series = {n: arr[:, j] for j, n in enumerate(names)}
    lengths = {len(v) for v in series.values()}
    if len(lengths) != 1:
        raise ValueError(f"per_layer_values: every coefficient needs one value per layer, got lengths "
                         f"{ {k: len(v) for k, v in series.items()} }")
    n_layers = lengths.pop()
    if layer_names is not None and len(layer_names) != n_layers:
        raise ValueError(f"layer_names: expected {n_layers} names, got {len(layer_names)}")
    x = list(layer_names) if layer_names is not None else [f"layer {i}" for i in range(n_layers)]
    fig = new_figure(title=title, height=height or 360)
    for i, (name, vals) in enumerate(series.items()):
        fig.add_trace(go.Bar(x=x, y=np.round(vals, 6).tolist(), name=name, marker_color=color(i),
                             hovertemplate=f"{name}<br>%{{x}}: %{{y:.4g}}<extra></extra>"))
    fig.update_layout(barmode="group", xaxis_title="layer", yaxis_title=y_title)
    fig.update_yaxes(zeroline=True, zerolinecolor="#888888")
    return fig


def complex_plane(eigenvalues, *, unit_circle: bool = True, labels: Sequence[str] | None = None,
                  title: str | None = None, marker_size: int = 7, height: int | None = None) -> go.Figure:
    """Eigenvalues (or gates) as points ``(Re, Im)``, on equal axes, with the unit circle.

    ``eigenvalues``: a 1-D complex array, a 2-D stack ``(K, N)`` (one group per row, named by
    ``labels``) or ``{label: values}``. Inside the circle is stable decay (``|lambda| < 1``).
    """
    if isinstance(eigenvalues, Mapping):
        groups = {str(k): as_array(v, f"eigenvalues[{k!r}]", allow_complex=True).ravel() for k, v in eigenvalues.items()}
    else:
        arr = as_array(eigenvalues, "eigenvalues", ndim=(1, 2), allow_complex=True)
        rows = [arr] if arr.ndim == 1 else list(arr)
        names = list(labels) if labels is not None else (["eigenvalues"] if arr.ndim == 1 else [f"group {i}" for i in range(len(rows))])
        if len(names) != len(rows):
            raise ValueError(f"labels: expected {len(rows)} labels (one per row of shape {arr.shape}), got {len(names)}")
        groups = dict(zip(names, rows))
    fig = new_figure(title=title, height=height or 460, width=None)
    extent = 1.0
    for i, (name, vals) in enumerate(groups.items()):
        vals = vals.astype(np.complex128)
        extent = max(extent, float(np.abs(vals).max()))
        fig.add_trace(go.Scatter(x=np.round(vals.real, 6).tolist(), y=np.round(vals.imag, 6).tolist(), mode="markers",
                                 name=name, marker=dict(size=marker_size, color=color(i), opacity=0.8),
                                 hovertemplate=f"{name}<br>Re %{{x:.4f}}<br>Im %{{y:.4f}}<extra></extra>"))
    if unit_circle:
        fig.add_shape(type="circle", xref="x", yref="y", x0=-1, y0=-1, x1=1, y1=1,
                      line=dict(color="#888888", dash="dash", width=1))
    lim = 1.1 * extent
    fig.update_xaxes(title_text="Re", range=[-lim, lim], zeroline=True, zerolinecolor="#BBBBBB")
    fig.update_yaxes(title_text="Im", range=[-lim, lim], zeroline=True, zerolinecolor="#BBBBBB",
                     scaleanchor="x", scaleratio=1)
    return fig


# ----------------------------------------------------------------------------- curves


def _series(ys, n: int | None, labels: Sequence[str] | None, name: str) -> dict[str, np.ndarray]:
    if isinstance(ys, Mapping):
        out = {str(k): as_array(v, f"{name}[{k!r}]", ndim=1) for k, v in ys.items()}
        if labels is not None:
            raise ValueError("labels: give names either as the mapping's keys or as labels=, not both")
    else:
        arr = as_array(ys, name, ndim=(1, 2))
        rows = [arr] if arr.ndim == 1 else list(arr)
        names = list(labels) if labels is not None else ([name] if arr.ndim == 1 else [f"{name} {i}" for i in range(len(rows))])
        if len(names) != len(rows):
            raise ValueError(f"labels: expected {len(rows)} labels (one per row of shape {arr.shape}), got {len(names)}")
        out = dict(zip(names, rows))
    if n is not None:
        for k, v in out.items():
            if len(v) != n:
                raise ValueError(f"{name}[{k!r}]: expected {n} values (one per x), got {len(v)}")
    return out


def log_ticks(values) -> dict:
    """Axis settings for a log axis over ``values``: ticks at 1-2-5 x 10^k labelled in full ("200", "0.05").

    Plotly's default log ticks label the minor ticks with their leading digit only ("2, 5, 1, 2"), which
    reads as nonsense; this lists them explicitly. Spans over three decades keep only the powers of ten.
    """
    v = np.asarray([x for x in np.ravel(np.asarray(values, dtype=float)) if np.isfinite(x) and x > 0])
    if v.size == 0:
        raise ValueError("values: a log axis needs at least one positive finite value")
    lo, hi = np.floor(np.log10(v.min())), np.ceil(np.log10(v.max()))
    steps = (1,) if hi - lo > 3 else (1, 2, 5)
    ticks = [m * 10.0 ** k for k in np.arange(lo, hi + 1) for m in steps]
    ticks = [t for t in ticks if v.min() / 1.5 <= t <= v.max() * 1.5] or [10.0 ** lo]
    return dict(type="log", tickvals=[float(f"{t:.6g}") for t in ticks], ticktext=[f"{t:g}" for t in ticks])


def line(x, ys, *, labels: Sequence[str] | None = None, title: str | None = None, x_title: str = "x",
         y_title: str = "y", log_x: bool = False, log_y: bool = False, mode: str = "lines",
         height: int | None = None) -> go.Figure:
    """Curves over a shared ``x``: ``ys`` is 1-D, ``(K, N)`` (named by ``labels``) or ``{label: values}``."""
    xs = as_array(x, "x", ndim=1)
    series = _series(ys, len(xs), labels, "ys")
    fig = new_figure(title=title, height=height or 380)
    for i, (name, vals) in enumerate(series.items()):
        fig.add_trace(go.Scatter(x=np.round(xs, 6).tolist(), y=np.round(vals, 6).tolist(), mode=mode, name=name,
                                 line=dict(color=color(i), width=2), marker=dict(size=6)))
    fig.update_xaxes(title_text=x_title, **(log_ticks(xs) if log_x else {}))
    fig.update_yaxes(title_text=y_title, **(log_ticks(np.concatenate(list(series.values()))) if log_y else {}))
    return fig


def fit_slopes(lengths, times_by_mode) -> dict[str, float]:
    """Least-squares slope of ``log(time)`` against ``log(length)`` for each mode.

    Slope ~1 is linear time, ~2 quadratic. ``times_by_mode``: ``{mode: times}``, one time per length.
    """
    ls = as_array(lengths, "lengths", ndim=1)
    if len(ls) < 2:
        raise ValueError(f"lengths: need at least 2 lengths to fit a slope, got {len(ls)}")
    series = _series(times_by_mode, len(ls), None, "times_by_mode")
    for k, v in [("lengths", ls)] + [(f"times_by_mode[{m!r}]", t) for m, t in series.items()]:
        if (v <= 0).any():
            raise ValueError(f"{k}: log-log axes need positive values, got min {v.min():.3g}")
    return {m: float(np.polyfit(np.log(ls), np.log(t), 1)[0]) for m, t in series.items()}


def scaling_plot(lengths, times_by_mode, *, title: str | None = None, y_title: str = "time (s)",
                 x_title: str = "sequence length L", show_fit: bool = True, height: int | None = None) -> go.Figure:
    """Time against length on log-log axes, one colour per mode, legend showing each fitted slope.

    ``times_by_mode``: ``{mode: [time at each length]}``. A dashed line shows each fit
    ``time = c * L^slope``; the slopes are also in ``fig.layout.meta["slopes"]``.
    """
    ls = as_array(lengths, "lengths", ndim=1)
    slopes = fit_slopes(ls, times_by_mode)
    series = _series(times_by_mode, len(ls), None, "times_by_mode")
    fig = new_figure(title=title, height=height or 420)
    for i, (mode, t) in enumerate(series.items()):
        fig.add_trace(go.Scatter(x=ls.tolist(), y=t.tolist(), mode="lines+markers", name=f"{mode} (slope {slopes[mode]:.2f})",
                                 legendgroup=mode, line=dict(color=color(i), width=2), marker=dict(size=7)))
        if show_fit:
            b = float(np.polyfit(np.log(ls), np.log(t), 1)[1])
            fig.add_trace(go.Scatter(x=ls.tolist(), y=np.exp(b + slopes[mode] * np.log(ls)).tolist(), mode="lines",
                                     name=f"{mode} fit", legendgroup=mode, showlegend=False,
                                     line=dict(color=color(i), width=1, dash="dash"), hoverinfo="skip"))
    fig.update_xaxes(title_text=x_title, **log_ticks(ls))
    fig.update_yaxes(title_text=y_title, **log_ticks(np.concatenate(list(series.values()))))
    fig.update_layout(meta={"slopes": {k: round(v, 4) for k, v in slopes.items()}})
    return fig
