"""seqlab.viz: every builder makes the traces it promises, on the data it was given, and refuses bad input."""
import json

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
import torch.nn as nn
from helpers import check

from seqlab import viz
from seqlab.viz.style import TEMPLATE_NAME


def _records(n=10, loss0=2.0, every_eval=5):
    out = []
    for s in range(n):
        out.append({"step": s, "split": "train", "loss": loss0 / (s + 1), "accuracy": s / n, "lr": 1e-3,
                    "tokens_per_s": 1000.0 + s, "time": 0.1 * s})
        if (s + 1) % every_eval == 0:
            out.append({"step": s, "split": "test", "loss": loss0 / (s + 2), "accuracy": (s + 1) / n})
    return out


class _History:  # the duck type of seqlab.train.History the builders rely on
    def __init__(self, records, model=None):
        self.records, self.config = records, ({"model": model} if model else {})


def _styled(fig):
    assert isinstance(fig, go.Figure)
    assert fig.layout.template.layout.colorway == viz.COLORS
    json.dumps(fig.to_plotly_json(), default=str)  # serialisable
    return fig


# ----------------------------------------------------------------------------- learning curves


def test_learning_curves_one_run_data_match_records():
    recs = _records()
    fig = _styled(viz.learning_curves(_History(recs), "loss"))
    names = [t.name for t in fig.data]
    assert names == ["run", "run (test)"]
    train = [r for r in recs if r["split"] == "train"]
    assert list(fig.data[0].x) == [r["step"] for r in train]
    np.testing.assert_allclose(fig.data[0].y, [r["loss"] for r in train], rtol=1e-5)
    assert fig.data[1].line.dash == "dot" and fig.data[0].line.dash == "solid"


def test_learning_curves_compare_runs_side_by_side_metrics():
    runs = {"transformer": _History(_records(loss0=2.0)), "linear": _History(_records(loss0=3.0))}
    fig = _styled(viz.learning_curves(runs, ["loss", "accuracy"]))
    # 2 metrics x 2 runs x (train + test)
    assert len(fig.data) == 8
    assert {t.xaxis for t in fig.data} == {"x", "x2"}
    # one colour per run, the same in both panels; legend entries only once
    by_label = {}
    for t in fig.data:
        by_label.setdefault(t.legendgroup, set()).add(t.line.color)
    assert all(len(c) == 1 for c in by_label.values()) and len(by_label) == 2
    assert sum(bool(t.showlegend) for t in fig.data) == 4
    assert tuple(fig.layout.yaxis2.range) == (0, 1.02)


def test_learning_curves_labels_smoothing_and_splits():
    h1, h2 = _History(_records(), model="transformer"), _History(_records(), model="linear-transformer")
    fig = viz.learning_curves([h1, h2], splits=["train"])
    assert [t.name for t in fig.data] == ["transformer", "linear-transformer"]
    fig = viz.learning_curves([h1, h2], labels=["A", "B"], smooth=0.5, splits=["train"])
    assert [t.name for t in fig.data] == ["A", "B"]
    raw = np.array([r["loss"] for r in h1.records if r["split"] == "train"])
    smoothed = np.array(fig.data[0].y)
    # bias-corrected EMA, written as the weighted mean it is: sum_j (1-s) s^(i-j) v_j / (1 - s^(i+1))
    s = 0.5
    expected = [sum((1 - s) * s ** (i - j) * raw[j] for j in range(i + 1)) / (1 - s ** (i + 1)) for i in range(len(raw))]
    np.testing.assert_allclose(smoothed, expected, rtol=1e-5)
    assert smoothed[0] == pytest.approx(raw[0])


def test_learning_curves_bad_input():
    with pytest.raises(ValueError, match="metric.*perplexity.*available keys"):
        viz.learning_curves(_History(_records()), "perplexity")
    with pytest.raises(ValueError, match="labels: expected 2"):
        viz.learning_curves([_History(_records()), _History(_records())], labels=["only one"])
    with pytest.raises(ValueError, match="history_or_histories"):
        viz.learning_curves(42)
    with pytest.raises(ValueError, match="smooth"):
        viz.learning_curves(_History(_records()), smooth=1.0)
    with pytest.raises(ValueError, match="NaN or inf"):
        viz.learning_curves([{"step": 0, "split": "train", "loss": float("nan")}])


def test_learning_curves_json_is_deterministic():
    a = viz.learning_curves(_History(_records()), ["loss", "accuracy"]).to_json()
    b = viz.learning_curves(_History(_records()), ["loss", "accuracy"]).to_json()
    assert a == b and "uid" not in a


# ----------------------------------------------------------------------------- live plot


def test_liveplot_outside_a_notebook_collects_and_builds_the_static_figure():
    live = viz.LivePlot(["loss", "accuracy"])
    assert not live.show  # pytest is not a Jupyter kernel
    for label in ("transformer", "linear"):
        cb = live.run(label)
        cb.on_fit_start(None, None)
        for r in _records():
            cb(None, r)
        cb.on_fit_end(None)
    assert live.widget is None  # nothing drawn
    fig = live.figure()
    assert sorted({t.legendgroup for t in fig.data}) == ["linear", "transformer"]
    assert fig.to_json() == viz.learning_curves(live.runs, ["loss", "accuracy"]).to_json()


def test_liveplot_as_plain_callback_names_runs_after_the_model():
    class M:
        model_name = "transformer"

    live = viz.LivePlot("loss")
    for _ in range(2):
        live.on_fit_start(M(), None)
        for r in _records(3, every_eval=100):
            live(None, r)
    assert list(live.runs) == ["transformer", "transformer #2"]
    with pytest.raises(ValueError, match="no records"):
        viz.LivePlot().figure()
    with pytest.raises(ValueError, match="label"):
        viz.LivePlot().run("")


def test_liveplot_named_labels_successive_fits():
    live = viz.LivePlot("loss")
    cb = live.named(["data-controlled", "fixed"])
    for _ in range(2):
        cb.on_fit_start(None, None)
        for r in _records(3, every_eval=100):
            cb(None, r)
        cb.on_fit_end(None)
    assert list(live.runs) == ["data-controlled", "fixed"] and all(live.runs.values())
    with pytest.raises(ValueError, match="2 names given, but fit number 3"):
        cb.on_fit_start(None, None)
    with pytest.raises(ValueError, match="labels: expected distinct"):
        live.named(["a", "a"])


def test_liveplot_drives_a_figure_widget():
    pytest.importorskip("anywidget")
    live = viz.LivePlot(["loss"], display=True, min_interval=0.0)
    live._show_widget = lambda fig: setattr(live, "widget", go.FigureWidget(fig))  # no IPython display here
    cb = live.run("transformer")
    recs = _records(6, every_eval=100)
    for r in recs[:3]:
        cb(None, r)
    assert isinstance(live.widget, go.FigureWidget)
    # the widget's traces follow the records as they arrive
    live._layout_key = tuple((t.name, t.xaxis, t.yaxis) for t in live.figure().data)
    for r in recs[3:]:
        cb(None, r)
    assert list(live.widget.data[0].x) == [r["step"] for r in recs]


def test_liveplot_turns_static_when_a_fit_ends_and_live_again_in_place(monkeypatch):
    """The saved notebook keeps the final curves as a figure, not a multi-MB widget; a race of two runs
    stays one output."""
    pytest.importorskip("anywidget")
    import IPython.display

    shown = []

    class Handle:
        def update(self, obj, raw=False):
            shown.append(("update", sorted(obj)))

    def display(obj, raw=False, display_id=False):
        shown.append(("display", sorted(obj)))
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    live = viz.LivePlot(["loss"], display=True, min_interval=0.0)
    for label in ("transformer", "linear transformer"):
        cb = live.run(label)
        cb.on_fit_start(None, None)
        for r in _records(3, every_eval=100):
            cb(None, r)
        assert isinstance(live.widget, go.FigureWidget), "live while the run trains"
        cb.on_fit_end(None)
        assert live.widget is None, "closed when the run ends"
    assert [kind for kind, _ in shown].count("display") == 1
    assert shown[-1] == ("update", ["application/vnd.plotly.v1+json"])
    assert ("update", ["application/vnd.jupyter.widget-view+json", "text/plain"]) in shown   # live again, in place


# ----------------------------------------------------------------------------- matrices


def test_heatmap_single_and_side_by_side_share_one_scale():
    a = torch.rand(5, 7)
    fig = _styled(viz.heatmap(a))
    assert len(fig.data) == 1 and np.array(fig.data[0].z).shape == (5, 7)
    np.testing.assert_allclose(fig.data[0].z, a.numpy(), atol=1e-6)
    assert fig.layout.yaxis.autorange == "reversed"          # row 0 on top, as written
    assert fig.layout.coloraxis.colorscale[0][1] == go.Figure(go.Heatmap(colorscale=viz.SEQUENTIAL)).data[0].colorscale[0][1]

    stack = torch.randn(3, 4, 4)
    fig = viz.heatmap(stack, titles=["h0", "h1", "h2"])
    assert len(fig.data) == 3 and all(t.coloraxis == "coloraxis" for t in fig.data)
    bound = float(stack.abs().max())
    assert fig.layout.coloraxis.cmin == pytest.approx(-bound) and fig.layout.coloraxis.cmax == pytest.approx(bound)
    assert [a.text for a in fig.layout.annotations] == ["h0", "h1", "h2"]

    fig = viz.heatmap([np.eye(3), np.ones((2, 5))])            # a list of differently shaped matrices
    assert [np.array(t.z).shape for t in fig.data] == [(3, 3), (2, 5)]


def test_heatmap_complex_needs_a_part_and_bad_shapes_fail():
    z = torch.randn(4, 4, dtype=torch.complex64)
    with pytest.raises(ValueError, match="complex.*part="):
        viz.heatmap(z)
    fig = viz.heatmap(z, part="abs")
    np.testing.assert_allclose(fig.data[0].z, z.abs().numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match=r"matrix: expected a 2-D or 3-D array, got shape \(4,\)"):
        viz.heatmap(torch.zeros(4))
    with pytest.raises(ValueError, match="titles: expected 2"):
        viz.heatmap(torch.zeros(2, 3, 3), titles=["one"])
    with pytest.raises(ValueError, match="x_labels: expected 3"):
        viz.heatmap(torch.zeros(3, 3), x_labels=["a", "b"])
    with pytest.raises(ValueError, match="NaN or inf"):
        viz.heatmap(torch.tensor([[0.0, float("inf")]]))


def test_gate_heatmap_puts_sequence_on_x():
    g = torch.rand(12, 5)  # (L, C)
    fig = _styled(viz.gate_heatmap(g, tokens=list("abcdefghijkl")))
    z = np.array(fig.data[0].z)
    assert z.shape == (5, 12)
    np.testing.assert_allclose(z, g.T.numpy(), atol=1e-6)
    assert list(fig.data[0].x)[:2] == ["0:a", "1:b"]
    fig = viz.gate_heatmap(torch.rand(2, 12, 5), titles=["layer 0", "layer 1"])
    assert len(fig.data) == 2
    fig = viz.gate_heatmap(torch.polar(torch.rand(6, 3), torch.rand(6, 3)), part="angle")
    assert fig.layout.coloraxis.colorbar.title.text == "angle"
    with pytest.raises(ValueError, match="tokens: expected 12"):
        viz.gate_heatmap(g, tokens=["x"])
    with pytest.raises(ValueError, match="part: expected"):
        viz.gate_heatmap(g, part="phase")


# ----------------------------------------------------------------------------- bars, points, curves


def test_coefficient_bars():
    fig = _styled(viz.coefficient_bars({"alpha1": [0.1, 0.5, 0.9], "alpha2": torch.tensor([1.0, -1.0, 0.0])}))
    assert [t.name for t in fig.data] == ["alpha1", "alpha2"] and all(isinstance(t, go.Bar) for t in fig.data)
    assert list(fig.data[0].x) == ["layer 0", "layer 1", "layer 2"]
    np.testing.assert_allclose(fig.data[1].y, [1.0, -1.0, 0.0])
    assert fig.layout.barmode == "group"
    fig = viz.coefficient_bars(np.arange(6.0).reshape(3, 2), labels=["a", "b"], layer_names=["l1", "l2", "l3"])
    np.testing.assert_allclose(fig.data[1].y, [1, 3, 5])
    with pytest.raises(ValueError, match="one value per layer"):
        viz.coefficient_bars({"a": [1, 2], "b": [1, 2, 3]})
    with pytest.raises(ValueError, match="labels: expected 2"):
        viz.coefficient_bars(np.zeros((3, 2)), labels=["a"])


def test_complex_plane():
    lam = torch.polar(torch.tensor([0.5, 0.9, 0.99]), torch.tensor([0.0, 1.0, -2.0]))
    fig = _styled(viz.complex_plane(lam))
    np.testing.assert_allclose(fig.data[0].x, lam.real.numpy(), atol=1e-6)
    np.testing.assert_allclose(fig.data[0].y, lam.imag.numpy(), atol=1e-6)
    circle = fig.layout.shapes[0]
    assert circle.type == "circle" and (circle.x0, circle.x1) == (-1, 1)
    assert fig.layout.yaxis.scaleanchor == "x"
    assert len(viz.complex_plane(lam, unit_circle=False).layout.shapes) == 0
    fig = viz.complex_plane({"layer 0": lam, "layer 1": lam * 0.5})
    assert [t.name for t in fig.data] == ["layer 0", "layer 1"]
    with pytest.raises(ValueError, match="labels: expected 2"):
        viz.complex_plane(torch.stack([lam, lam]), labels=["x"])


def test_line_and_scaling_plot_slopes():
    x = np.arange(1, 6)
    fig = _styled(viz.line(x, {"a": x ** 2, "b": x}))
    assert [t.name for t in fig.data] == ["a", "b"]
    with pytest.raises(ValueError, match=r"ys\['a'\]: expected 5 values"):
        viz.line(x, {"a": [1, 2]})
    lengths = np.array([64, 128, 256, 512, 1024])
    times = {"linear": 3e-6 * lengths, "quadratic": 1e-8 * lengths ** 2.0}
    slopes = viz.fit_slopes(lengths, times)
    assert slopes["linear"] == pytest.approx(1.0) and slopes["quadratic"] == pytest.approx(2.0)
    fig = _styled(viz.scaling_plot(lengths, times))
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.data[0].name == "linear (slope 1.00)" and fig.data[2].name == "quadratic (slope 2.00)"
    assert fig.layout.meta["slopes"] == {"linear": 1.0, "quadratic": 2.0}
    with pytest.raises(ValueError, match="positive"):
        viz.fit_slopes(lengths, {"bad": np.zeros(5)})
    with pytest.raises(ValueError, match="at least 2"):
        viz.fit_slopes([8], {"m": [1.0]})


def test_log_ticks_label_every_tick_in_full():
    ticks = viz.log_ticks([64, 1024])
    assert ticks["tickvals"] == [50.0, 100.0, 200.0, 500.0, 1000.0]
    assert ticks["ticktext"] == ["50", "100", "200", "500", "1000"]
    wide = viz.log_ticks([2e-6, 3e-1])          # over three decades: powers of ten only
    assert wide["ticktext"] == ["1e-05", "0.0001", "0.001", "0.01", "0.1"]
    fig = viz.scaling_plot([64, 128, 256], {"m": [1e-3, 2e-3, 4e-3]})
    assert list(fig.layout.xaxis.ticktext) == ["50", "100", "200"]
    assert list(fig.layout.yaxis.ticktext) == ["0.001", "0.002", "0.005"]
    with pytest.raises(ValueError, match="values: a log axis needs"):
        viz.log_ticks([0, -1])


def test_template_is_registered_once_and_small():
    import plotly.io as pio

    assert TEMPLATE_NAME in pio.templates
    assert len(json.dumps(viz.TEMPLATE.to_plotly_json())) < 2000  # it is embedded in every committed figure


# ----------------------------------------------------------------------------- seqlab.readout (generic read-outs)


class _Block(nn.Module):
    def __init__(self, d, alpha):
        super().__init__()
        self.mix = nn.Linear(d, d)
        self.alpha1 = nn.Parameter(torch.tensor(alpha))

    def forward(self, x):
        return x + self.alpha1 * self.mix(x)


class _Tiny(nn.Module):
    def __init__(self, vocab=11, d=8, depth=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(_Block(d, 0.1 * (i + 1)) for i in range(depth))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def test_readout_capture_per_layer_predict():
    from seqlab import readout

    model = _Tiny().train()
    tokens = torch.randint(0, 11, (2, 5))
    caught = readout.capture(model, tokens, _Block)
    assert list(caught) == ["blocks.0", "blocks.1", "blocks.2"]
    # the caught output of the last block, through the head, is the model's output
    check(model.head(caught["blocks.2"]), model(tokens).detach(), 1e-6, "head(last block) vs model")
    assert model.training  # mode restored
    assert list(readout.capture(model, tokens, "blocks.1.mix")) == ["blocks.1.mix"]
    with pytest.raises(ValueError, match="no sub-module named"):
        readout.capture(model, tokens, ["blocks.9"])
    with pytest.raises(ValueError, match=r"tokens: expected integer tokens .* got shape \(2, 5\), dtype torch.float32"):
        readout.capture(model, tokens.float(), _Block)

    assert readout.per_layer(model, "alpha1") == pytest.approx([0.1, 0.2, 0.3])
    assert viz.coefficient_bars({"alpha1": readout.per_layer(model, "alpha1")}).data[0].y == pytest.approx((0.1, 0.2, 0.3))
    with pytest.raises(ValueError, match="missing 'alpha9'"):
        readout.per_layer(model, "alpha9")

    pred = readout.predict(model, tokens)
    assert pred.shape == (2, 5) and torch.equal(pred, model(tokens).argmax(-1))
    assert readout.predict(model, tokens[0]).shape == (5,)
    out = readout.logits(model, tokens)
    assert out.device.type == "cpu" and not out.requires_grad and model.training
    assert torch.equal(out, model.eval()(tokens).detach()), "logits: the model's output in eval mode"
    model.train()
    assert readout.parameter_count(model) == sum(p.numel() for p in model.parameters())


def test_nbstate_drops_only_bulky_widget_state(tmp_path):
    import nbformat

    from seqlab.viz.nbstate import STATE_KEY, drop_large_widget_state

    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {STATE_KEY: {"version_major": 2, "version_minor": 0, "state": {
        "a" * 32: {"model_name": "AnyModel", "state": {"_esm": "x" * 300_000}},
        "b" * 32: {"model_name": "IntSliderModel", "state": {"value": 3}},
    }}}
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert drop_large_widget_state(path) == ["AnyModel " + "a" * 32]
    kept = nbformat.read(path, as_version=4).metadata["widgets"][STATE_KEY]["state"]
    assert list(kept) == ["b" * 32]
    assert drop_large_widget_state(path) == []  # nothing left to drop


def test_static_figures_add_a_png_beside_each_plotly_output(tmp_path):
    """What ``workbench.py execute`` does to every lesson: a PNG (kaleido, system Chromium) beside the JSON."""
    import base64
    import struct

    import nbformat
    import plotly.io as pio

    from seqlab.viz.nbstate import PLOTLY_KEY, PNG_KEY, add_static_figures

    fig = viz.new_figure(title="two points")
    fig.add_scatter(x=[0, 1], y=[1, 0])
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("fig")
    cell.outputs = [nbformat.v4.new_output("display_data", data={PLOTLY_KEY: json.loads(pio.to_json(fig))}),
                    nbformat.v4.new_output("stream", text="no figure here")]
    nb.cells = [cell]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert add_static_figures(path, width=320, height=200) == 1
    data = nbformat.read(path, as_version=4).cells[0].outputs[0]["data"]
    png = base64.b64decode(data[PNG_KEY])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (320, fig.layout.height or 200)
    assert PLOTLY_KEY in data                                            # JupyterLab still draws the JSON
    assert add_static_figures(path) == 0                                 # already there: untouched


def test_without_a_browser_static_figures_fail_at_once_naming_the_fix(tmp_path, monkeypatch):
    """kaleido without a Chromium waits forever; the export asks first and says what to install."""
    import nbformat
    import plotly.io as pio

    from seqlab.viz import nbstate

    monkeypatch.setattr(nbstate, "browser_found", lambda: False)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("fig")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        nbstate.PLOTLY_KEY: json.loads(pio.to_json(viz.new_figure(title="t")))})]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "nb.ipynb")
    with pytest.raises(RuntimeError, match="apt-get install chromium"):
        nbstate.add_static_figures(tmp_path / "nb.ipynb")


def test_closed_live_widgets_leave_no_comm_warning_only_for_themselves():
    """JupyterLab answers a closed widget's comm; the kernel's "No such comm" for it is dropped, others kept."""
    import logging

    from seqlab.viz import live

    class Closable:
        model_id = "a" * 32
        closed = False

        def close(self):
            self.closed = True

    widget = Closable()
    live._close_widget(widget)
    assert widget.closed
    comm_logger = logging.getLogger("Comm")

    def record(comm_id):
        return logging.LogRecord("Comm", logging.WARNING, __file__, 1, "No such comm: %s", (comm_id,), None)

    assert not all(f.filter(record("a" * 32)) for f in comm_logger.filters)      # ours: dropped
    assert all(f.filter(record("b" * 32)) for f in comm_logger.filters)          # anyone else's: kept


def test_impulse_figure_starts_at_t1():
    from seqlab.viz.scan import impulse_figure
    lam = 0.9 * np.exp(0.3j)
    h = lam ** np.arange(6)                      # h_t = lambda^(t-1), t = 1..6
    fig = impulse_figure(h, [lam, np.conj(lam)])
    assert list(fig.data[0].x) == [1, 2, 3, 4, 5, 6]
    assert fig.data[2].y[0] == pytest.approx(1.0) and fig.data[2].y[1] == pytest.approx(0.9)
    with pytest.raises(ValueError, match="response"):
        impulse_figure(np.zeros((2, 2)), [lam])


def test_learning_curves_band_draws_the_mean_and_the_seeds_range():
    from seqlab.viz.arena import learning_curves_band

    runs = [{"curve": [[0, 0.1], [10, 0.5], [20, 0.9]]}, {"curve": [[0, 0.1], [10, 0.7], [20, 1.0]]}]
    fig = learning_curves_band({"a": runs}, title="t")
    band, line = fig.data
    assert list(line.x) == [0, 10, 20] and list(line.y) == pytest.approx([0.1, 0.6, 0.95])
    assert list(band.y) == [0.1, 0.7, 1.0, 0.9, 0.5, 0.1]          # highest forward, lowest back
    with pytest.raises(ValueError, match="different steps"):
        learning_curves_band({"a": runs + [{"curve": [[0, 0.1], [5, 0.2]]}]}, title="t")


def test_accuracy_vs_rate_draws_each_familys_window_with_its_seeds():
    from seqlab.viz.arena import accuracy_vs_rate

    runs = [{"family": "a", "lr": lr, "accuracy": acc} for lr, acc in ((1e-3, 0.2), (1e-3, 0.4), (3e-3, 0.9),
                                                                        (3e-3, 1.0), (1e-2, 0.3))]
    runs.append({"family": "b", "lr": 1e-3, "accuracy": 0.5})
    fig = accuracy_vs_rate(runs, title="t")
    band, line = fig.data[:2]
    assert list(line.x) == [1e-3, 3e-3, 1e-2] and list(line.y) == pytest.approx([0.3, 0.95, 0.3])
    assert list(band.y) == [0.4, 1.0, 0.3, 0.3, 0.9, 0.2] and line.name == "a (2 seeds)"
    assert fig.layout.xaxis.type == "log" and fig.data[3].name == "b (1 seed)"
    with pytest.raises(ValueError, match="runs"):
        accuracy_vs_rate([], title="t")


def test_the_arenas_panels_keep_one_colour_per_family_and_its_legend_once():
    from seqlab.viz.arena import curves_by_task, rates_by_task

    def run(family, lr, seed, acc):
        return {"family": family, "task": "t", "lr": lr, "seed": seed, "accuracy": acc,
                "curve": [[0, 0.0], [10, acc]]}

    by_task = {"mqar": {"a": [run("a", 1e-3, 0, 0.4), run("a", 1e-3, 1, 0.6)], "b": [run("b", 1e-3, 0, 0.9)]},
               "copying": {"b": [run("b", 1e-3, 0, 1.0), run("b", 3e-3, 0, 0.5)]}}
    fig = curves_by_task({"mqar": by_task["mqar"], "copying": {"b": by_task["copying"]["b"][:1]}}, title="t")
    lines = [d for d in fig.data if d.name]
    assert [(d.name, d.showlegend) for d in lines] == [("a", True), ("b", True), ("b", False)]
    assert lines[1].line.color == lines[2].line.color != lines[0].line.color        # b keeps its colour
    assert list(lines[0].y) == pytest.approx([0.0, 0.5]) and lines[2].xaxis == "x2"
    rates = rates_by_task(by_task, title="t")
    b_copying = [d for d in rates.data if d.name == "b"][-1]
    assert list(b_copying.x) == [1e-3, 3e-3] and list(b_copying.y) == pytest.approx([1.0, 0.5])
    assert rates.layout.xaxis.type == rates.layout.xaxis2.type == "log"
    with pytest.raises(ValueError, match="different steps"):
        curves_by_task({"mqar": {"a": [run("a", 1e-3, 0, 0.4), {**run("a", 1e-3, 1, 0.4), "curve": [[0, 0.1]]}]}},
                       title="t")


def test_a_task_example_reads_at_the_notebook_width_every_label_in_its_cell():
    """The arena lesson's strip: 16 tokens a row at 12 px in a 720 px figure (JupyterLab's and the book's column),
    every scored position showing its label."""
    from seqlab.experiments import arena
    from seqlab.tasks import IGNORE
    from seqlab.viz.arena import example_figure

    quick = arena.SIZES["quick"]
    task = arena.make_task("mqar", quick["tasks"]["mqar"], 0, quick)
    fig = example_figure(task)
    heat = fig.data[0]
    assert fig.layout.width <= 760 and heat.textfont.size >= 12 and all(len(row) == 16 for row in heat.z)
    labels = task.tensors("test")["labels"][0].tolist()
    shown = [cell for row in heat.text for cell in row]
    assert [("→" in c) for c in shown[:len(labels)]] == [lab != IGNORE for lab in labels]
    assert len(heat.z) == -(-task.seq_len // 16)


def test_a_static_figure_is_scaled_down_to_its_pixel_budget_and_never_up():
    from seqlab.viz.nbstate import STATIC_PIXELS, static_scale

    assert static_scale(640, 390) == 1.0 and static_scale(400, 300) == 1.0
    assert static_scale(800, 450) < 1                          # the default size of a figure that sets none
    s = static_scale(840, 1100)
    assert 0.5 < s < 1 and abs(840 * s * 1100 * s - STATIC_PIXELS) < 1
