"""The lessons as a book that reads like a course, without installing anything: ``python3 workbench.py book``
(or ``python tools/book.py``) builds ``build/book/`` from the committed lessons and their outputs, with the
Jupyter Book 1 stack: Sphinx, MyST-NB (which reads the notebooks without running them) and the
sphinx-book-theme. The site has a sidebar with every lesson and its sections, previous / next at the foot of
each page, the links between lessons pointing at the built pages, an offline full-text search (``search.html``),
a front page with each lesson's one-line summary and the references, and the long source listings folded.
Everything it needs ships in the site; nothing is fetched from a network: MathJax 3 and its fonts from
``sphinx-mathjax-offline``, ``plotly.min.js`` from plotly.

Two output kinds MyST-NB cannot draw offline are rewritten first, by :class:`StaticOutputs`:

- a plotly figure (``application/vnd.plotly.v1+json``) becomes plotly's own HTML (a ``div`` and a
  ``Plotly.newPlot`` call, ``plotly.io.to_html``): drawn and interactive;
- a widget (``application/vnd.jupyter.widget-view+json``) becomes a still of its saved state: the
  figure it showed by default, a slider at its value, a progress bar where it ended. Moving it needs
  the lesson open in JupyterLab.
"""
from __future__ import annotations

import argparse
import html
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
FOLD_LINES = 25      # a printed output longer than this is folded in the book (fold_long_listings)

# Each lesson in one line, for the book's front page (the README's table says more).
SUMMARIES = {
    "00": "The tour: what this machine gives you, every family as one recurrence, a Transformer and a Linear "
          "Transformer raced live.",
    "01": "From Deep Sets to Causal Relation Networks: how `exp` makes an all-MLP mixer linear-time, and a memory "
          "that copies.",
    "02": "A linear RNN unrolled into a sum of powers; the stable complex parameterisation; every linear recurrence "
          "as $c_{ts} = g_s / g_t$; the parallel scan.",
    "03": "The Feature-Sequence Twist block built step by step, and trained against an LRNN and a Transformer.",
    "04": "LightNet: linear attention with decay, Theorem 3.1, and why additive decay needs one scan where "
          "multiplicative decay needs two.",
    "05": "GateLoop: data-controlled linear recurrence as a recurrence, an associative scan and a surrogate "
          "attention; what the gates learn.",
    "06": "The chunkwise-parallel form derived once from $h_t = a_t h_{t-1} + x_t$: why relative decays live in "
          "log space, what it costs in FLOPs and bytes, the chunk size measured, the Triton kernel read beside the "
          "equations, and GLA, Lightning Attention and Mamba-2 on one map.",
    "07": "Train in parallel, decode as a recurrence: every family's state, checked step by step, and what it "
          "costs.",
    "08": "The arena: seven families on eight memory tasks at one parameter budget, which model for what, and what "
          "to build next: the delta rule, in a capstone that enters its own family into the arena.",
}

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
        nb.metadata.pop("widgets", None)   # with widget state MyST-NB would load the widget manager from a CDN

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
        # the first figure of a page loads plotly.js from the site's _static folder, the others reuse it
        first = self.figures == 1
        return pio.to_html(spec, full_html=False, include_plotlyjs="_static/plotly.min.js" if first else False,
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


def fold_long_listings(nb, max_lines: int = FOLD_LINES) -> int:
    """Tag ``hide-output`` on every code cell whose printed text runs past ``max_lines`` lines (the source
    listings a lesson prints with ``inspect.getsource``): the book shows them folded, one click to open.
    Returns how many cells were tagged."""
    folded = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines = sum(len(_text(o.get("text", o.get("data", {}).get("text/plain", ""))).splitlines())
                    for o in cell.outputs if "text/html" not in o.get("data", {}))
        if lines > max_lines:
            tags = cell.metadata.setdefault("tags", [])
            if "hide-output" not in tags:
                tags.append("hide-output")
            folded += 1
    return folded


def _index_page(lessons: list[tuple[str, str]]) -> str:
    """The front page (MyST markdown): each lesson with its one-line summary, the references, and the
    table of contents that makes the sidebar and the previous / next links."""
    missing = [name for name, _ in lessons if name[:2] not in SUMMARIES]
    if missing:
        raise ValueError(f"SUMMARIES has no one-line summary for {missing}: add one in tools/book.py")
    rows = "\n".join(f"| [{title}]({name}.ipynb) | {SUMMARIES[name[:2]]} |" for name, title in lessons)
    refs = "\n".join(f"| {n} | *{title}* | {authors} | {year or '—'} | " + (f"<{url}>" if url else "—") + " |"
                     for n, title, authors, year, url in REFERENCES)
    toc = "\n".join(name for name, _ in lessons)
    return (
        "# seqlab: linear-time sequence models, derived, checked and trained\n\n"
        "Each lesson derives a paper's equations, checks every step numerically, trains a small model and shows "
        "what it learned. This book is the lessons as they were last run (quick profile, on a CPU), with every "
        "output kept: figures are interactive (zoom, hover), widgets show their default view. To move a widget or "
        "run a cell, open the lesson in JupyterLab: `python3 workbench.py lab`.\n\n"
        "## The lessons\n\n| lesson | what it teaches |\n|---|---|\n" + rows + "\n\n"
        "## References\n\nThe lessons cite the papers by these numbers.\n\n"
        "| # | paper | authors | year | where |\n|---|---|---|---|---|\n" + refs + "\n\n"
        "```{toctree}\n:hidden:\n:maxdepth: 2\n\n" + toc + "\n```\n"
    )


# Sphinx's configuration (conf.py of the staged sources): MyST-NB reads the committed lessons without running
# them; sphinx-mathjax-offline ships MathJax 3 and its fonts in _static/mathjax.
CONF = {
    "project": "seqlab",
    "author": "the seqlab authors",
    "extensions": ["myst_nb", "sphinx-mathjax-offline"],
    "exclude_patterns": ["_build", "**.ipynb_checkpoints"],
    "nb_execution_mode": "off",
    "nb_output_stderr": "remove",
    "myst_enable_extensions": ["dollarmath", "amsmath"],
    "myst_heading_anchors": 3,
    "mathjax_path": "mathjax/tex-chtml.js",
    "html_theme": "sphinx_book_theme",
    "html_title": "seqlab",
    "html_static_path": ["_static"],
    "html_copy_source": False,      # the staged copies are not the lessons: download those from the repository
    "html_show_sourcelink": False,
    "html_show_search_summary": False,   # a summary is fetched from the page: refused on file:// (CORS)
    "html_theme_options": {"home_page_in_toc": True, "show_navbar_depth": 1, "show_toc_level": 2,
                           "use_download_button": False, "use_fullscreen_button": False},
    "suppress_warnings": ["myst.header"],   # the lessons number their own sections (## 1., ### a.)
}


def _stage(notebooks: Path, src: Path) -> list[tuple[str, str]]:
    """Sphinx's source folder: the lessons with their figures and widgets rewritten (StaticOutputs) and their
    long listings folded, the front page, conf.py and plotly.js. Returns (name, title) per lesson."""
    import nbformat
    import plotly

    lessons = []
    (src / "_static").mkdir(parents=True)
    shutil.copy(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", src / "_static" / "plotly.min.js")
    for path in sorted(Path(notebooks).glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        StaticOutputs(nb).rewrite(nb)
        fold_long_listings(nb)
        nbformat.write(nb, src / path.name)
        lessons.append((path.stem, lesson_title(nb)))
    if not lessons:
        raise FileNotFoundError(f"no lesson (NN_name.ipynb) in {notebooks}")
    (src / "index.md").write_text(_index_page(lessons), encoding="utf-8")
    (src / "conf.py").write_text("".join(f"{k} = {v!r}\n" for k, v in CONF.items()), encoding="utf-8")
    return lessons


def _clear(out: Path) -> None:
    """Empty ``out`` when it holds an earlier book; refuse to touch any other folder."""
    if not out.exists() or not any(out.iterdir()):
        return
    if not ((out / ".buildinfo").exists() or (out / "index.html").exists()):
        raise FileExistsError(f"--out {out} is a folder with files that are not a book (no index.html): "
                              "give an empty or new folder")
    shutil.rmtree(out)


class BookWarnings(RuntimeError):
    """Sphinx warned while building the book (a broken link between lessons, a bad equation, ...)."""


def build(out: Path = ROOT / "build" / "book", notebooks: Path = ROOT / "notebooks", quiet: bool = False) -> list[Path]:
    """Build the book into ``out`` and return its front page and its lesson pages. Any Sphinx warning fails
    the build (:class:`BookWarnings`, every warning listed)."""
    import io

    from sphinx.application import Sphinx

    out = Path(out).resolve()
    _clear(out)
    with tempfile.TemporaryDirectory(prefix="seqlab-book-") as tmp:
        src = Path(tmp) / "src"
        lessons = _stage(notebooks, src)
        said = io.StringIO()
        with warnings.catch_warnings():     # the theme's and MyST's use of APIs Sphinx 11 will remove: theirs
            warnings.filterwarnings("ignore", message=".* is deprecated. Check CHANGES for Sphinx API")
            app = Sphinx(str(src), str(src), str(out), str(Path(tmp) / "doctrees"), "html",
                         status=None if quiet else sys.stdout, warning=said, freshenv=True)
            app.build()
    if said.getvalue().strip():
        raise BookWarnings("the book built with warnings:\n" + said.getvalue())
    return [out / "index.html", *(out / f"{name}.html" for name, _ in lessons)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "book")
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks")
    args = parser.parse_args(argv)
    try:
        pages = build(args.out, args.notebooks)
    except (BookWarnings, FileExistsError, FileNotFoundError, ValueError) as error:
        print(f"book: {error}", file=sys.stderr)
        return 1
    print(f"wrote the book to {args.out}: {len(pages)} pages, a search page and the index "
          f"(open {args.out / 'index.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
