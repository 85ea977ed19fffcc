"""Pictures of the arena (lesson 08), drawn from its summary rows (``seqlab.experiments.arena.summarize``) and
its tasks: one example of a task, the family x task accuracy grid, accuracy against state size and against
length (one line per family, mean ± spread over seeds), the training time per family, and learning curves read
from run records (one line per group, the seeds as a band), and accuracy against learning rate (the window in
which each family learns, the seeds as a band).
"""
from __future__ import annotations

import plotly.graph_objects as go

from seqlab.viz.style import SEQUENTIAL, color, new_figure

__all__ = ["example_figure", "accuracy_grid", "accuracy_vs_state", "accuracy_vs_length", "training_time",
           "learning_curves_band", "accuracy_vs_rate", "curves_by_task", "rates_by_task"]

IGNORE = -100


def example_figure(task, index: int = 0, split: str = "test", *, width: int = 720, per_row: int = 16) -> go.Figure:
    """One example of ``task``: its input tokens in rows of ``per_row``, the scored positions marked with their
    labels (the token the model must put out there). The default size reads at 12 px in JupyterLab's notebook
    column and in the book's (about 720 px wide)."""
    data = task.tensors(split)
    ids, labels = data["input_ids"][index].tolist(), data["labels"][index].tolist()
    names = [task.itos[i] if task.itos else str(i) for i in ids]
    scored = [lab != IGNORE for lab in labels]
    text = [f"{n}<br><b>→{task.itos[lab] if task.itos else lab}</b>" if s else n
            for n, lab, s in zip(names, labels, scored)]
    rows = -(-len(ids) // per_row)
    z = [[None] * per_row for _ in range(rows)]
    cells = [[""] * per_row for _ in range(rows)]
    for t, (s, label) in enumerate(zip(scored, text)):
        z[t // per_row][t % per_row] = 1.0 if s else 0.0
        cells[t // per_row][t % per_row] = label
    fig = new_figure(height=100 + 52 * rows, width=width,
                     title=f"{task.name}: one {split} example ({sum(scored)} scored positions, bold: the label)")
    fig.add_trace(go.Heatmap(z=z, text=cells, texttemplate="%{text}", textfont=dict(size=12), showscale=False,
                             colorscale=[[0, "#F2F2F2"], [1, "#FFD28A"]], zmin=0, zmax=1, xgap=1, ygap=1,
                             hovertemplate="position %{customdata}<extra></extra>",
                             customdata=[[r * per_row + c for c in range(per_row)] for r in range(rows)]))
    fig.update_xaxes(showticklabels=False, showgrid=False)
    fig.update_yaxes(autorange="reversed", showticklabels=False, showgrid=False)
    return fig


def accuracy_grid(rows: list[dict], *, title: str = "test accuracy at matched size (mean over seeds)") -> go.Figure:
    """Family x task heatmap of the mean accuracy (rows: one per family and task, at one width and length)."""
    families = list(dict.fromkeys(r["family"] for r in rows))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    cell = {(r["family"], r["task"]): r for r in rows}
    z = [[cell[(f, t)]["accuracy"] if (f, t) in cell else None for t in tasks] for f in families]
    text = [[(f"{cell[(f, t)]['accuracy']:.2f}" + (f"±{cell[(f, t)]['spread']:.2f}" if cell[(f, t)]["seeds"] > 1
                                                     else "")) if (f, t) in cell else "" for t in tasks]
            for f in families]
    fig = new_figure(height=120 + 42 * len(families), width=max(700, 130 * len(tasks) + 200), title=title)
    fig.add_trace(go.Heatmap(z=z, x=tasks, y=families, text=text, texttemplate="%{text}", colorscale=SEQUENTIAL,
                             zmin=0, zmax=1, colorbar=dict(title="accuracy")))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickangle=-25)
    return fig


def _lines(rows: list[dict], x_key: str, *, title: str, x_title: str, log_x: bool) -> go.Figure:
    fig = new_figure(height=440, width=760, title=title)
    for i, family in enumerate(dict.fromkeys(r["family"] for r in rows)):
        mine = sorted((r for r in rows if r["family"] == family), key=lambda r: r[x_key])
        fig.add_trace(go.Scatter(x=[r[x_key] for r in mine], y=[r["accuracy"] for r in mine], name=family,
                                 mode="lines+markers", line=dict(color=color(i)),
                                 error_y=dict(type="data", array=[r["spread"] for r in mine], width=4),
                                 customdata=[[r["d_model"], r["params"], r["seeds"]] for r in mine],
                                 hovertemplate=f"{family}<br>{x_key}=%{{x}}<br>accuracy %{{y:.3f}}<br>"
                                               "d_model %{customdata[0]}, %{customdata[1]} parameters, "
                                               "%{customdata[2]} seeds<extra></extra>"))
    fig.update_xaxes(title_text=x_title, type="log" if log_x else "linear",
                     **({"dtick": 1} if log_x else {}))       # ticks at the powers of ten, labelled in full
    fig.update_yaxes(title_text="test accuracy (mean ± spread over seeds)", range=[-0.02, 1.02])
    fig.update_layout(legend=dict(title="family"))
    return fig


def accuracy_vs_state(rows: list[dict], *, title: str = "MQAR: accuracy against state size") -> go.Figure:
    """MQAR accuracy against the floats a family holds per sequence after ``seq_len`` tokens (log axis)."""
    return _lines(rows, "state_size", title=title, x_title="state size (floats per sequence, log scale)", log_x=True)


def accuracy_vs_length(rows: list[dict], *, title: str = "MQAR: accuracy against sequence length") -> go.Figure:
    """MQAR accuracy against the sequence length at the base width."""
    return _lines(rows, "seq_len", title=title, x_title="sequence length", log_x=False)


def training_time(rows: list[dict], *, title: str = "training time per run (mean over tasks and seeds)") -> go.Figure:
    """Mean wall-clock seconds of one run per family (rows at the base width and lengths)."""
    families = list(dict.fromkeys(r["family"] for r in rows))
    means = []
    for family in families:
        mine = [r["wall_s"] for r in rows if r["family"] == family]
        means.append(sum(mine) / len(mine))
    fig = new_figure(height=380, width=720, title=title)
    fig.add_trace(go.Bar(x=families, y=means, marker_color=[color(i) for i in range(len(families))],
                         text=[f"{m:.0f} s" if m >= 10 else f"{m:.1f} s" for m in means], textposition="outside"))
    fig.update_yaxes(title_text="seconds per run (one CPU thread)")
    return fig


def learning_curves_band(groups: dict[str, list[dict]], *, title: str,
                         y_title: str = "validation accuracy") -> go.Figure:
    """Accuracy against step for each group of run records (``{label: [run, ...]}``, each run with a ``curve`` of
    ``[step, accuracy]``, the same steps in every seed): the seeds' mean as a line, their lowest and highest as a
    band around it."""
    fig = new_figure(height=420, width=760, title=title)
    for i, (label, runs) in enumerate(groups.items()):
        if not runs:
            raise ValueError(f"groups: {label!r} has no runs")
        steps = [s for s, _ in runs[0]["curve"]]
        if any([s for s, _ in r["curve"]] != steps for r in runs):
            raise ValueError(f"groups: the runs of {label!r} were evaluated at different steps")
        values = [[a for _, a in r["curve"]] for r in runs]
        _band(fig, i, f"{label} ({len(runs)} seeds)", steps, [list(v) for v in zip(*values)],
              hover="step %{x}<br>mean %{y:.3f}")
    fig.update_xaxes(title_text="step")
    # the rotated title on two lines, each shorter than the plot is tall, so that it stays clear of the figure's title
    fig.update_yaxes(title_text=f"{y_title}<br>(band: the seeds' range)", title_standoff=8, range=[-0.02, 1.02])
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.25, xanchor="left", x=0),
                      margin=dict(t=70, b=110))
    return fig


def _band(fig: go.Figure, i: int, label: str, x: list, values: list[list[float]], *, hover: str,
          mode: str = "lines") -> None:
    """One group's mean as a line, its seeds' lowest and highest as a band around it."""
    lo, hi = [min(v) for v in values], [max(v) for v in values]
    mean = [sum(v) / len(v) for v in values]
    fig.add_trace(go.Scatter(x=x + x[::-1], y=hi + lo[::-1], fill="toself", fillcolor=color(i), opacity=0.2,
                             line=dict(width=0), hoverinfo="skip", showlegend=False))
    fig.add_trace(go.Scatter(x=x, y=mean, name=label, mode=mode, line=dict(color=color(i), width=2),
                             hovertemplate=f"{label}<br>{hover}<extra></extra>"))


def accuracy_vs_rate(runs: list[dict], *, title: str, key: str = "accuracy") -> go.Figure:
    """Each family's ``key`` (test accuracy by default) against the learning rate, from run records of one cell
    (family, task, width, length) per family: the seeds' mean as a line, their range as a band; a rate with a
    single seed is drawn as a point without band. The window in which a family learns is where its line is high."""
    if not runs:
        raise ValueError("runs: expected at least one run record")
    fig = new_figure(height=420, width=760, title=title)
    for i, family in enumerate(dict.fromkeys(r["family"] for r in runs)):
        by_lr: dict = {}
        for r in runs:
            if r["family"] == family:
                by_lr.setdefault(float(r["lr"]), []).append(r[key])
        rates = sorted(by_lr)
        seeds = max(len(v) for v in by_lr.values())
        _band(fig, i, f"{family} ({seeds} seed{'s' if seeds > 1 else ''})", rates, [by_lr[lr] for lr in rates],
              hover="lr %{x:.3g}<br>mean %{y:.3f}", mode="lines+markers")
    fig.update_xaxes(title_text="learning rate", type="log")
    fig.update_yaxes(title_text=f"{'test' if key == 'accuracy' else key.replace('_', ' ')} (band: the seeds' range)",
                     range=[-0.02, 1.02])
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.25, xanchor="left", x=0), margin=dict(b=110))
    return fig


def _panels(by_task: dict[str, dict[str, list[dict]]], *, title: str, x_of, y_key: str, x_title: str,
            y_title: str, log_x: bool, cols: int) -> go.Figure:
    """One panel per task (``{task: {family: [run, ...]}}``), one colour per family in every panel (its place in
    the legend, shown once), the seeds' mean as a line and their range as a band."""
    tasks = list(by_task)
    rows = -(-len(tasks) // cols)
    families = list(dict.fromkeys(f for groups in by_task.values() for f in groups))
    fig = new_figure(rows, cols, subplot_titles=tasks, title=title, height=80 + 230 * rows + 90, width=420 * cols,
                     vertical_spacing=0.25 / rows, horizontal_spacing=0.07)
    for k, task in enumerate(tasks):
        row, col = k // cols + 1, k % cols + 1
        for family, runs in by_task[task].items():
            i = families.index(family)
            xs, values = x_of(runs, y_key)
            lo, hi = [min(v) for v in values], [max(v) for v in values]
            mean = [round(sum(v) / len(v), 6) for v in values]     # the records' precision, not float noise
            fig.add_trace(go.Scatter(x=xs + xs[::-1], y=hi + lo[::-1], fill="toself", fillcolor=color(i),
                                     opacity=0.2, line=dict(width=0), hoverinfo="skip", showlegend=False),
                          row=row, col=col)
            fig.add_trace(go.Scatter(x=xs, y=mean, name=family, legendgroup=family, showlegend=k == 0,
                                     mode="lines+markers" if log_x else "lines",
                                     line=dict(color=color(i), width=2), marker=dict(size=5),
                                     hovertemplate=f"{task}<br>{family}<br>%{{x}}: mean %{{y:.3f}}<extra></extra>"),
                          row=row, col=col)
        last_row = k + cols >= len(tasks)           # the x title once, under the lowest panel of each column
        fig.update_xaxes(title_text=x_title if last_row else None, type="log" if log_x else "linear", row=row, col=col,
                         **({"dtick": 1} if log_x else {}))
        fig.update_yaxes(range=[-0.02, 1.02], row=row, col=col, title_text=y_title if col == 1 else None)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.08, xanchor="left", x=0),
                      margin=dict(b=100))
    return fig


def _curve_values(runs: list[dict], key: str):
    steps = [s for s, _ in runs[0]["curve"]]
    if any([s for s, _ in r["curve"]] != steps for r in runs):
        raise ValueError(f"runs: the seeds of {runs[0]['family']}/{runs[0]['task']} were evaluated at different steps")
    return steps, [list(v) for v in zip(*([a for _, a in r["curve"]] for r in runs))]


def _rate_values(runs: list[dict], key: str):
    by_lr: dict = {}
    for r in runs:
        by_lr.setdefault(float(r["lr"]), []).append(r[key])
    rates = sorted(by_lr)
    return rates, [by_lr[lr] for lr in rates]


def curves_by_task(by_task: dict[str, dict[str, list[dict]]], *, title: str, cols: int = 2) -> go.Figure:
    """Validation accuracy against step, a panel per task, a line per family (the seeds' mean; band: their range),
    from ``{task: {family: [run, ...]}}`` (``seqlab.experiments.arena.cell_runs``: the runs at each family's chosen
    rate, every one with a ``curve`` of ``[step, accuracy]``)."""
    return _panels(by_task, title=title, x_of=_curve_values, y_key="curve", x_title="step",
                   y_title="validation accuracy", log_x=False, cols=cols)


def rates_by_task(by_task: dict[str, dict[str, list[dict]]], *, title: str, cols: int = 2,
                  key: str = "accuracy") -> go.Figure:
    """Test accuracy (``key``) against the learning rate, a panel per task, a line per family (the mean over the
    seeds run at each rate; band: their range; a rate with one seed is a point), from ``{task: {family: [run,
    ...]}}`` (``seqlab.experiments.arena.cell_runs(..., chosen_only=False)``). Where a line is high is the window
    in which the family learns."""
    return _panels(by_task, title=title, x_of=_rate_values, y_key=key, x_title="learning rate",
                   y_title="test accuracy" if key == "accuracy" else key.replace("_", " "), log_x=True, cols=cols)
