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
  figure it showed by default, a slider at its value (a selection slider with its options labelled, a log
  slider at ``log_base(value)`` between its exponents: :func:`slider_still`), a progress bar where it
  ended. Moving it needs the lesson open in JupyterLab.

A figure's title is set below plotly's toolbar (:func:`clear_of_the_toolbar`). The search page shows an excerpt
around each hit from the pages' text shipped beside it (:func:`search_excerpts`: a browser refuses Sphinx's
fetch of a page on disk). The excerpts and the search index read as prose: the equations and each lesson's
navigation line ("Previous: ... · Next: ...") are kept out of the index (:func:`keep_out_of_search`), the
display equations out of the excerpts, and an inline equation is written there as plain text
(:func:`math_as_text`: ``\\(|a|\\)`` reads ``|a|``).
"""
from __future__ import annotations

import argparse
import html
import re
import shutil
import sys
import tempfile
import warnings
from html.parser import HTMLParser
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
    "08": "The arena: nine families on eight memory tasks at one parameter budget, which model for what, and what "
          "to build next: the read-back error of an outer-product state, and short convolutions.",
    "09": "The delta rule: DeltaNet reads before it writes, its transition the identity minus rank one; the chunked "
          "UT form for all chunks at once, Gated DeltaNet's decay, and MQAR against the Linear Transformer.",
    "10": "Writing the kernels: ten Triton puzzles, from a block's cumulative sum to the UT transform, checked in "
          "Triton's CPU interpreter, with a picture of what each program reads and writes.",
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


TOOLBAR_PX = 36    # plotly's toolbar (zoom, pan, download...) spans the top 2-28 px of a figure, at its right


def clear_of_the_toolbar(spec: dict) -> dict:
    """``spec`` with its title set below plotly's toolbar: the title's top ``TOOLBAR_PX`` below the figure's top
    (a long title reaches under the toolbar otherwise), and the top margin grown to hold the title's lines and
    any subplot titles above the plot."""
    import copy

    spec = copy.deepcopy(spec)
    layout = spec.setdefault("layout", {})
    title = layout.get("title")
    if isinstance(title, str):
        title = layout["title"] = {"text": title}
    if not isinstance(title, dict) or not title.get("text"):
        return spec
    lines = str(title["text"]).count("<br") + 1
    size = (title.get("font") or {}).get("size") or 17
    title.update(yref="container", y=1, yanchor="top", pad={**(title.get("pad") or {}), "t": TOOLBAR_PX})
    above = any(a.get("yref") == "paper" and (a.get("y") or 0) >= 1 for a in layout.get("annotations", []))
    margin = layout.setdefault("margin", {})
    need = TOOLBAR_PX + int(lines * size * 1.3) + (24 if above else 8)
    default = ((layout.get("template") or {}).get("layout", {}).get("margin") or {}).get("t") or 100
    margin["t"] = max(margin.get("t") or default, need)
    return spec


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
        return pio.to_html(clear_of_the_toolbar(spec), full_html=False,
                           include_plotlyjs="_static/plotly.min.js" if first else False,
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
            return _slider_html(label, *slider_still(name, s))
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


def slider_still(name: str, s: dict) -> tuple[float, str, list[tuple[float, str]]]:
    """A slider's handle position on its track (0 at the left end, 1 at the right), its readout and its tick
    labels (position, label), from its saved state ``s`` as ipywidgets draws them: a selection slider's handle
    at ``index / (n - 1)`` of its ``n`` options, labelled; a log slider's at ``log_base(value)`` between its
    exponents ``min`` and ``max``; any other at ``value`` between ``min`` and ``max``."""
    import math

    if name == "SelectionSliderModel":
        labels = [str(x) for x in s.get("_options_labels", [])]
        index = s.get("index") or 0
        n = len(labels)
        position = index / (n - 1) if n > 1 else 0.0
        readout = labels[index] if 0 <= index < n else ""
        return position, readout, [(i / (n - 1) if n > 1 else 0.0, t) for i, t in enumerate(labels)]
    low, high = float(s.get("min", 0)), float(s.get("max", 100))
    value = s.get("value", low)
    if name == "FloatLogSliderModel":
        base = float(s.get("base", 10))
        where = math.log(value, base) if value and value > 0 else low
    else:
        where = float(value)
    position = min(max((where - low) / (high - low), 0.0), 1.0) if high > low else 0.0
    spec = str(s.get("readout_format", "d" if name.startswith("Int") else ".2f")).lstrip("~")
    try:
        readout = format(int(value) if spec.endswith("d") else float(value), spec)
    except (TypeError, ValueError):
        readout = str(value)
    return position, readout, []


def _slider_html(label: str, position: float, readout: str, ticks: list[tuple[float, str]]) -> str:
    """A disabled slider drawn in HTML: its description, a track filled up to the handle, the handle, the
    readout, and the option labels under the track (a selection slider)."""
    pct = f"{100 * position:.3f}%"
    marks = "".join(f'<span class="seqlab-slider-tick" style="position:absolute;left:{100 * p:.3f}%;'
                    f'transform:translateX(-50%);white-space:nowrap">{html.escape(t)}</span>' for p, t in ticks)
    return (f'<div class="seqlab-widget seqlab-slider" role="slider" aria-disabled="true" aria-label="{label}" '
            f'aria-valuetext="{html.escape(readout)}" data-position="{position:.6f}" '
            'style="display:flex;align-items:center;gap:12px;margin:6px 0">'
            f'<span class="seqlab-slider-label" style="min-width:9em;text-align:right">{label}</span>'
            '<span class="seqlab-slider-track" style="position:relative;display:inline-block;width:18em;height:4px;'
            f'background:#d0d0d0;border-radius:2px;margin:{"10px 0 22px" if ticks else "10px 0"}">'
            f'<span style="position:absolute;left:0;top:0;height:4px;width:{pct};background:#2196f3;'
            'border-radius:2px"></span>'
            f'<span class="seqlab-slider-handle" style="position:absolute;left:{pct};top:50%;width:14px;height:14px;'
            'margin:-7px 0 0 -7px;box-sizing:border-box;border-radius:50%;background:#fff;border:2px solid #2196f3">'
            '</span>'
            f'<span style="position:absolute;left:0;right:0;top:12px;font-size:0.75em;color:#555">{marks}</span>'
            f'</span><b class="seqlab-slider-readout">{html.escape(readout)}</b></div>')


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
    # the search lists an excerpt around each hit; Sphinx fetches it from the page, which a browser refuses on
    # file:// (CORS), so the site ships the pages' text for the search page (search_excerpts)
    "html_show_search_summary": True,
    "html_context": {"default_mode": "light"},   # the theme's colour mode (unset, the theme logs an error on load)
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


# An inline equation in the search excerpts: its TeX as plain text (math_as_text).
TEX_SYMBOLS = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "zeta": "ζ",
    "eta": "η", "theta": "θ", "iota": "ι", "kappa": "κ", "lambda": "λ", "mu": "μ", "nu": "ν", "xi": "ξ", "pi": "π",
    "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ", "varphi": "φ", "chi": "χ", "psi": "ψ", "omega": "ω",
    "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Xi": "Ξ", "Pi": "Π", "Sigma": "Σ", "Phi": "Φ",
    "Psi": "Ψ", "Omega": "Ω", "times": "×", "cdot": "·", "odot": "⊙", "otimes": "⊗", "circ": "∘", "bullet": "•",
    "pm": "±", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "approx": "≈", "sim": "~",
    "in": "∈", "to": "→", "rightarrow": "→", "leftarrow": "←", "mapsto": "↦", "infty": "∞", "sum": "Σ", "prod": "Π",
    "partial": "∂", "nabla": "∇", "sqrt": "√", "dots": "…", "ldots": "…", "cdots": "⋯", "mid": "|", "lVert": "‖",
    "rVert": "‖", "Vert": "‖", "langle": "⟨", "rangle": "⟩", "lceil": "⌈", "rceil": "⌉", "lfloor": "⌊",
    "rfloor": "⌋", "ell": "ℓ", "top": "ᵀ", "quad": " ", "qquad": " ",
}
TEX_ACCENTS = {"bar": "\u0304", "hat": "\u0302", "tilde": "\u0303", "dot": "\u0307"}
TEX_WRAPPERS = ("mathbf|mathrm|mathit|mathcal|mathbb|mathsf|boldsymbol|bm|operatorname|text|textrm|textbf|texttt|"
                "textit|mbox|underbrace|overbrace|overline|underline|overleftarrow|overrightarrow|vec|widehat|"
                "widetilde")
TEX_DROPPED = r"\\(?:begin|end|tag|label)\s*\{[^{}]*\}|\\(?:left|right|[bB]igg?[lr]?|displaystyle|nonumber|notag)\b"


def math_as_text(tex: str) -> str:
    """An equation's TeX (``\\(...\\)``, ``\\[...\\]`` or ``$$...$$`` as Sphinx writes it) as plain text for the
    search excerpts: delimiters gone, Greek letters and operators as their Unicode signs (``\\odot`` ⊙, ``^\\top``
    ᵀ), fonts and environments unwrapped, ``\\frac{a}{b}`` as ``a/b``, a group after ``_`` or ``^`` in parentheses."""
    s = tex.strip()
    for left, right in (("\\(", "\\)"), ("\\[", "\\]"), ("$$", "$$"), ("$", "$")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left):len(s) - len(right)]
            break
    s = s.replace("\\{", "\x01").replace("\\}", "\x02").replace("\\|", "‖").replace("\\\\", " ").replace("&", " ")
    s = re.sub(r"\\[,;:! ]", " ", s)
    s = re.sub(TEX_DROPPED, "", s)
    s = re.sub(r"\^\s*(?:\{\s*\\top\s*\}|\\top)", "ᵀ", s)
    for _ in range(4):      # innermost groups first
        s = re.sub(rf"\\(?:{TEX_WRAPPERS})\s*\{{([^{{}}]*)\}}", r"\1", s)
        s = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}",
                   lambda m: f"{_grouped(m[1])}/{_grouped(m[2])}", s)
        s = re.sub(r"\\(" + "|".join(TEX_ACCENTS) + r")\s*\{([^{}]*)\}",
                   lambda m: m[2] + TEX_ACCENTS[m[1]] if len(m[2].strip()) == 1 else m[2], s)
        s = re.sub(r"\\sqrt\s*\{([^{}]*)\}", lambda m: "√" + _grouped(m[1]), s)
    s = re.sub(r"\\[dt]?frac\s*(\w)\s*(\w)", r"\1/\2", s)
    s = re.sub(rf"\\(?:{TEX_WRAPPERS})\b\s*", "", s)
    s = re.sub(r"\\(" + "|".join(TEX_ACCENTS) + r")\b\s*(\\[A-Za-z]+|\w)", lambda m: m[2] + TEX_ACCENTS[m[1]], s)
    s = re.sub(r"\\sqrt\s*(\w)", r"√\1", s)
    s = re.sub(r"\\([A-Za-z]+)", _symbol, s)
    s = re.sub(r"([_^])\s*\{([^{}]*)\}", lambda m: m[1] + _grouped(m[2]), s)
    s = re.sub(r"\\(.)", r"\1", s).replace("{", "").replace("}", "").replace("\x01", "{").replace("\x02", "}")
    return re.sub(r"\s+", " ", s).strip()


def _grouped(text: str) -> str:
    text = text.strip()
    return text if re.fullmatch(r"\w|\\?[A-Za-z]+|\d+", text) else f"({text})"


def _symbol(m: re.Match) -> str:
    """A TeX command as its sign (a command the table lacks, ``\\log`` say, as its name), set off by a space from
    a letter or digit just before it (``i\\exp`` reads ``i exp``)."""
    sign = TEX_SYMBOLS.get(m[1], m[1])
    before = m.string[m.start() - 1] if m.start() else " "
    return " " + sign if (before.isalnum() and (sign[0].isalnum() or sign in "ΣΠ")) else sign


NO_SEARCH = "no-search"     # Sphinx's class for a node its search index skips (sphinx.search.WordCollector)


def is_navigation(paragraph) -> bool:
    """A lesson's navigation line: a paragraph that opens with **Previous:** or **Next:** and links to a lesson
    ("**Previous:** [04 · ...](04_....ipynb) · **Next:** [06 · ...](06_....ipynb)"; MyST's target is the lesson's
    name once the lesson is a page of the book)."""
    from docutils import nodes

    first = next((c for c in paragraph.children if c.astext().strip()), None)   # MyST may open with an empty text
    targets = [str(n.get("reftarget") or n.get("refuri") or "") for n in paragraph.findall(nodes.Element)]
    return (isinstance(first, nodes.strong) and first.astext().strip() in ("Previous:", "Next:")
            and any(re.fullmatch(r"/?\d\d_\w+(\.ipynb|\.html)?(#.*)?", t) for t in targets))


def keep_out_of_search(app, doctree) -> None:
    """On ``doctree-read``: mark every equation and each lesson's navigation line ``no-search``, so that Sphinx's
    index holds the lessons' prose and neither TeX (``operatorname``, ``mathbf``) nor the neighbours' titles, and
    :class:`_MainText` leaves them out of the excerpts (an inline equation there as :func:`math_as_text`)."""
    from docutils import nodes

    for node in [*doctree.findall(nodes.math), *doctree.findall(nodes.math_block)]:
        node["classes"].append(NO_SEARCH)
    for node in [p for p in doctree.findall(nodes.paragraph) if is_navigation(p)]:
        node["classes"] += [NO_SEARCH, "seqlab-navigation"]


class _MainText(HTMLParser):
    """A built page's article (``<article>``, in ``[role=main]``) as light HTML: its text, and the sections and other
    elements with an ``id`` (the anchors the search links to); no scripts, styles, header links or figures, nothing
    marked ``no-search`` (:func:`keep_out_of_search`: the navigation line, the display equations), and each inline
    equation (``<span class="math">``) as plain text (:func:`math_as_text`)."""

    SKIP = {"script", "style"}
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.stack: list[tuple[str, bool, bool]] = []   # (tag, emitted, skipped)
        self.depth_main = None
        self.math: list[str] | None = None     # the TeX of the inline equation being read
        self.depth_math = None

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        in_main = self.depth_main is not None
        skipped = bool(self.stack and self.stack[-1][2])
        if in_main and not skipped and tag == "span" and "math" in classes:
            self.math, self.depth_math = [], len(self.stack)
        skip = (tag in self.SKIP or "headerlink" in classes or NO_SEARCH in classes or "math" in classes or skipped)
        emit = in_main and not skip and bool(a.get("id"))
        if emit:
            self.parts.append(f'<div id="{html.escape(a["id"])}">')
        if not in_main and tag == "article":     # the page's text, without the theme's header
            self.depth_main = len(self.stack)
        self.stack.append((tag, emit, skip))

    def handle_endtag(self, tag):
        if tag in self.VOID or not any(t == tag for t, _, _ in self.stack):
            return
        while self.stack:
            t, emit, _ = self.stack.pop()
            if emit:
                self.parts.append("</div>")
            if self.depth_math is not None and len(self.stack) == self.depth_math:
                self.parts.append(html.escape(math_as_text("".join(self.math))))
                self.math = self.depth_math = None
            if self.depth_main is not None and len(self.stack) == self.depth_main:
                self.depth_main = None
            if t == tag:
                break

    def handle_data(self, data):
        if self.math is not None:
            self.math.append(data)
        elif self.depth_main is not None and not (self.stack and self.stack[-1][2]):
            self.parts.append(html.escape(data))

    def main(self, page: str) -> str:
        self.feed(page)
        return '<div role="main">' + re.sub(r"\s+", " ", "".join(self.parts)) + "</div>"


SEARCH_SHIM = """
// The search page's excerpts: Sphinx fetches each page found to cut an excerpt from it, which a browser refuses
// for a page on disk (file://); this answers those requests from the pages' text shipped in this file.
(function () {
  var pages = window.SEQLAB_PAGE_TEXT || {};
  var fetched = window.fetch ? window.fetch.bind(window) : null;
  window.fetch = function (input, init) {
    var url = typeof input === "string" ? input : input.url;
    var name = decodeURIComponent(new URL(url, document.baseURI).pathname.split("/").pop());
    if (Object.prototype.hasOwnProperty.call(pages, name))
      return Promise.resolve(new Response(pages[name], {headers: {"Content-Type": "text/html"}}));
    return fetched(input, init);
  };
})();
"""


def search_excerpts(out: Path) -> None:
    """Ship the text of every page for the search page's excerpts (``SEARCH_SHIM``): ``_static/seqlab-search.js``
    holds each page's main content as light HTML (:class:`_MainText`), and ``search.html`` loads it before
    Sphinx's search."""
    import json

    texts = {page.name: _MainText().main(page.read_text(encoding="utf-8")) for page in sorted(out.glob("*.html"))
             if page.name not in ("search.html", "genindex.html")}
    (out / "_static" / "seqlab-search.js").write_text(
        "window.SEQLAB_PAGE_TEXT = " + json.dumps(texts, ensure_ascii=False) + ";\n" + SEARCH_SHIM,
        encoding="utf-8")
    search = out / "search.html"
    page = search.read_text(encoding="utf-8")
    tag = re.search(r'<script[^>]*src="[^"]*searchtools\.js[^"]*"[^>]*></script>', page)
    if tag is None:
        raise BookWarnings("search.html loads no searchtools.js: the search excerpts cannot be added")
    search.write_text(page[:tag.start()] + '<script src="_static/seqlab-search.js"></script>\n' + page[tag.start():],
                      encoding="utf-8")


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
            app.connect("doctree-read", keep_out_of_search)
            app.build()
    if said.getvalue().strip():
        raise BookWarnings("the book built with warnings:\n" + said.getvalue())
    search_excerpts(out)
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
