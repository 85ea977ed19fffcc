"""The lessons as a static site that reads without installing anything: ``python3 workbench.py book``
(or ``python -m seqlab.book``) writes ``build/book/``: ``index.html`` (the lessons and the papers) and one
``NN_name.html`` per lesson, from the committed notebooks and their outputs.

Pages are made by nbconvert's HTML exporter (the ``lab`` template). Everything they need ships once in
the site, from installed packages, and nothing is fetched from a network: ``plotly.min.js`` from plotly,
MathJax 2 from ``jupyter-server-mathjax``. Two output kinds nbconvert cannot draw offline are rewritten
first, by :class:`StaticOutputs`:

- a plotly figure (``application/vnd.plotly.v1+json``) becomes plotly's own HTML (a ``div`` and a
  ``Plotly.newPlot`` call, ``plotly.io.to_html``): drawn and interactive;
- a widget (``application/vnd.jupyter.widget-view+json``) becomes a still of its saved state: the
  figure it showed by default, a slider at its value, a progress bar where it ended. Moving it needs
  the lesson open in JupyterLab.
"""
from __future__ import annotations

import argparse
import html
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"

# The papers, as the README's references table lists them.
REFERENCES = [
    ("000", "Linear-Time Sequence Modeling with MLPs (Causal Relation Networks, long version)",
     "anonymous (under double-blind review)", "", ""),
    ("001", "An All-MLP Sequence Modeling Architecture That Excels at Copying",
     "Chenwei Cui, Zehao Yan, Gedeon Muhawenayo, Hannah Kerner", "2024", "https://arxiv.org/abs/2406.16168"),
    ("002", "Linear Recurrent Neural Networks with a Feature-Sequence Twist",
     "anonymous (under double-blind review)", "", "https://openreview.net/forum?id=I1484gDBr4"),
    ("003", "You Only Scan Once: Efficient Multi-dimension Sequential Modeling with LightNet",
     "Zhen Qin, Yuxin Mao, Xuyang Shen, Dong Li, Jing Zhang, Yuchao Dai, Yiran Zhong", "2024",
     "https://arxiv.org/abs/2405.21022"),
    ("004", "GateLoop: Fully Data-Controlled Linear Recurrence for Sequence Modeling", "Tobias Katsch", "2023",
     "https://arxiv.org/abs/2311.01927"),
]


class StaticOutputs:
    """Rewrites one notebook's plotly and widget outputs as self-contained HTML (see the module docstring)."""

    def __init__(self, nb):
        widgets = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {})
        self.state = widgets.get("state", {})
        self.figures = 0

    # -- outputs -------------------------------------------------------------------------------------
    def rewrite(self, nb) -> None:
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = [self.output(o) for o in cell.outputs]
        nb.metadata.pop("widgets", None)   # with no widget state the template loads no widget manager (a CDN)

    def output(self, out):
        data = out.get("data", {})
        if PLOTLY in data:
            return _html_output(out, self.figure_html(data[PLOTLY]))
        if WIDGET in data:
            return _html_output(out, self.widget_html(data[WIDGET]["model_id"]))
        return out

    def figure_html(self, spec: dict) -> str:
        import plotly.io as pio

        self.figures += 1
        # the first figure of a page loads plotly.js from the site's folder, the others reuse it
        return pio.to_html(spec, full_html=False, include_plotlyjs="directory" if self.figures == 1 else False,
                           div_id=f"figure-{self.figures}", config={"responsive": True})

    def outputs_html(self, outputs: list) -> str:
        parts = []
        for out in outputs:
            data = out.get("data", {})
            if PLOTLY in data:
                parts.append(self.figure_html(data[PLOTLY]))
            elif WIDGET in data:
                parts.append(self.widget_html(data[WIDGET]["model_id"]))
            elif "text/html" in data:
                parts.append(_text(data["text/html"]))
            elif "image/png" in data:
                parts.append(f'<img src="data:image/png;base64,{_text(data["image/png"])}">')
            elif "text/plain" in data or out.get("output_type") == "stream":
                parts.append(f"<pre>{html.escape(_text(data.get('text/plain', out.get('text', ''))))}</pre>")
        return "".join(parts)

    # -- widgets: a still of the saved state ---------------------------------------------------------
    def widget_html(self, model_id: str) -> str:
        model = self.state.get(model_id)
        if model is None:
            return '<p class="seqlab-widget"><em>(an interactive widget: open the lesson in JupyterLab)</em></p>'
        name, s = model["model_name"], model["state"]
        label = html.escape(str(s.get("description", "")))
        if name in ("HBoxModel", "VBoxModel", "GridBoxModel", "TabModel", "AccordionModel"):
            direction = "row" if name == "HBoxModel" else "column"
            inner = "".join(self.widget_html(c.removeprefix("IPY_MODEL_")) for c in s.get("children", []))
            return f'<div class="seqlab-widget" style="display:flex;flex-direction:{direction};gap:6px">{inner}</div>'
        if name == "OutputModel":
            return self.outputs_html(s.get("outputs", []))
        if name in ("HTMLModel", "HTMLMathModel"):
            return f"<span>{s.get('value', '')}</span>"
        if name in ("LabelModel",):
            return f"<span>{html.escape(str(s.get('value', '')))}</span>"
        if name.endswith("ProgressModel"):
            return f'<progress value="{s.get("value", 0)}" max="{s.get("max", 100)}"></progress>'
        if name.endswith("SliderModel") and not name.endswith("RangeSliderModel"):
            return (f'<label class="seqlab-widget">{label} <input type="range" disabled min="{s.get("min", 0)}" '
                    f'max="{s.get("max", 100)}" step="{s.get("step", 1)}" value="{s.get("value", 0)}"> '
                    f'{html.escape(str(s.get("value", "")))}</label>')
        if name in ("DropdownModel", "SelectModel", "RadioButtonsModel", "ToggleButtonsModel"):
            labels = s.get("_options_labels", [])
            index = s.get("index")
            chosen = labels[index] if isinstance(index, int) and 0 <= index < len(labels) else ""
            return f'<label class="seqlab-widget">{label} <b>{html.escape(str(chosen))}</b></label>'
        if name in ("CheckboxModel", "ToggleButtonModel"):
            return f'<label class="seqlab-widget">{label}: <b>{bool(s.get("value"))}</b></label>'
        if "value" in s and not isinstance(s["value"], (list, dict)):
            return f'<label class="seqlab-widget">{label} <b>{html.escape(str(s["value"]))}</b></label>'
        return ""


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _html_output(out, body: str):
    import nbformat

    return nbformat.v4.new_output("display_data", data={"text/html": body})


def lesson_title(nb) -> str:
    """The first heading of a lesson, without its ``#``."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return ""


# nbconvert's lab template with its two network loads removed: require.js (needed only by widget managers,
# which a still does not use) and mermaid.js (no lesson draws a mermaid diagram).
_TEMPLATE = {
    "conf.json": json.dumps({"base_template": "lab", "mimetypes": {"text/html": True}}),
    "index.html.j2": "{%- extends 'lab/index.html.j2' -%}\n"
                     "{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}\n"
                     "{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}\n",
}


def _exporter(template_dir: Path):
    from nbconvert import HTMLExporter

    folder = template_dir / "seqlab_book"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in _TEMPLATE.items():
        (folder / name).write_text(text)
    return HTMLExporter(template_name="seqlab_book", extra_template_basedirs=[str(template_dir)],
                        mathjax_url=f"mathjax/MathJax.js?config={MATHJAX_CONFIG}")


def _index(lessons: list[tuple[str, str]]):
    """The front page as a notebook of markdown cells, exported like the lessons."""
    import nbformat

    rows = "\n".join(f"| [{title}]({page}) |" for page, title in lessons)
    refs = "\n".join(f"| {n} | {title} | {authors} | {year or '—'} | " + (f"[{url}]({url})" if url else "—") + " |"
                     for n, title, authors, year, url in REFERENCES)
    cells = [
        "# seqlab: linear-time sequence models, derived, checked and trained\n\n"
        "The lessons as they were last run (quick profile, on a CPU), with every figure drawn. Figures are "
        "interactive (zoom, hover); widgets show their default view: to move them, open the lesson in "
        "JupyterLab (`python3 workbench.py lab`).",
        "## Lessons\n\n| lesson |\n|---|\n" + rows,
        "## References\n\n| # | paper | authors | year | where |\n|---|---|---|---|---|\n" + refs,
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(c) for c in cells])
    nb.metadata["title"] = "seqlab"
    return nb


def build(out: Path = ROOT / "build" / "book", notebooks: Path = ROOT / "notebooks") -> list[Path]:
    """Write the site to ``out`` and return the pages written."""
    import nbformat
    import plotly
    import jupyter_server_mathjax

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", out / "plotly.min.js")
    mathjax = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(mathjax, out / "mathjax", dirs_exist_ok=True)
    templates = tempfile.TemporaryDirectory()
    exporter, pages, lessons = _exporter(Path(templates.name)), [], []
    for path in sorted(Path(notebooks).glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        title = lesson_title(nb)
        StaticOutputs(nb).rewrite(nb)
        nb.metadata["title"] = title
        body, _ = exporter.from_notebook_node(nb)
        page = out / f"{path.stem}.html"
        page.write_text(body, encoding="utf-8")
        pages.append(page)
        lessons.append((page.name, title))
    body, _ = exporter.from_notebook_node(_index(lessons))
    index = out / "index.html"
    index.write_text(body, encoding="utf-8")
    templates.cleanup()
    return [index, *pages]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "book")
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks")
    args = parser.parse_args(argv)
    pages = build(args.out, args.notebooks)
    print(f"wrote {len(pages)} pages to {args.out} (open {args.out / 'index.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
