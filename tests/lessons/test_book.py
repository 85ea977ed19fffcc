"""``workbench.py book``: the lessons as a Sphinx book (MyST-NB, sphinx-book-theme), read from disk with the network
off in Debian's Chromium (the fixtures are in ``conftest.py``).

Checked on the built site: every local link and asset of every page resolves to a file of the site; every page
loads with no failed request and no request off the disk (MathJax 3's fonts included); every equation is
typeset by the shipped MathJax 3 and every figure drawn by the shipped plotly.js, its title clear of plotly's
toolbar; no page logs a console error; the sidebar lists every lesson on every page; every widget still shows
the widget's default (slider handle position and value); the search page finds a word of lesson 05 and shows an
excerpt around it, read as prose (no TeX, no lesson's navigation line); long listings are folded."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
from helpers import REPO



def _load_book_tool():
    """``tools/book.py``: build tooling beside ``workbench.py``, not a module of the runtime package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("seqlab_book", REPO / "tools" / "book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


seqlab_book = _load_book_tool()

LESSONS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MATHJAX_FONTS = Path("_static/mathjax/output/chtml/fonts/woff-v2")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("book") / "book"
    return out, seqlab_book.build(out, quiet=True)


# ----------------------------------------------------------------------------- the site on disk
class _Links(HTMLParser):
    """Every ``href`` and ``src`` of a page."""

    def __init__(self):
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.targets += [value for name, value in attrs if name in ("href", "src") and value]


def _local_targets(page: Path) -> list[str]:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return [t for t in parser.targets if not urlsplit(t).scheme and not t.startswith(("#", "//"))]


def test_the_book_has_a_page_per_lesson_a_search_page_and_mathjax_3_with_its_fonts(site):
    out, pages = site
    assert [p.name for p in pages] == ["index.html"] + [f"{p.stem}.html" for p in LESSONS]
    assert all(p.exists() for p in pages) and (out / "search.html").exists() and (out / "searchindex.js").exists()
    fonts = sorted((out / MATHJAX_FONTS).glob("*.woff"))
    assert len(fonts) >= 20 and "MathJax_Main-Regular.woff" in {f.name for f in fonts}
    assert (out / "_static/mathjax/tex-chtml.js").exists()     # its version is read in the browser (MathJax.version)
    index = (out / "index.html").read_text(encoding="utf-8")
    for lesson in LESSONS:     # each lesson linked with its one-line summary
        assert f'href="{lesson.stem}.html"' in index
        assert seqlab_book.SUMMARIES[lesson.stem[:2]].split(":")[0].split("`")[0][:20] in index
    for url in ("arxiv.org/abs/2406.16168", "openreview.net/forum?id=I1484gDBr4", "arxiv.org/abs/2311.01927"):
        assert url in index, f"the references lack {url}"


def test_every_local_link_of_the_book_resolves(site):
    """Every link and asset a page names (lesson to lesson, previous / next, sidebar, scripts, styles, images)
    is a file of the site; no page points at a notebook."""
    out, _ = site
    missing, pages = [], sorted(out.glob("*.html"))     # the pages (_static holds templates the theme ships)
    for page in pages:
        for target in _local_targets(page):
            path = unquote(urlsplit(target).path)
            if not path:
                continue
            assert not path.endswith(".ipynb"), f"{page.name} links to a notebook: {target}"
            if not (page.parent / path).exists():
                missing.append(f"{page.relative_to(out)} -> {target}")
    assert len(pages) > len(LESSONS)
    assert not missing, f"{len(missing)} dead links, e.g. {missing[:10]}"


def test_lessons_link_to_each_other_as_built_pages(site):
    out, _ = site
    for lesson in LESSONS[1:-1]:
        body = (out / f"{lesson.stem}.html").read_text(encoding="utf-8")
        linked = {t for t in _local_targets(out / f"{lesson.stem}.html") if re.fullmatch(r"0\d_\w+\.html(#.*)?", t)}
        assert len(linked) >= 2, f"{lesson.name}: links to other lessons {linked}"
        assert 'class="prev-next-area"' in body or "prev-next" in body, f"{lesson.name} has no previous / next"


def test_long_listings_are_folded_in_the_book():
    """A printed source listing (``inspect.getsource``) is tagged ``hide-output``; short outputs are not."""
    folded = {}
    for lesson in LESSONS:
        nb = nbformat.read(lesson, as_version=4)
        folded[lesson.stem[:2]] = seqlab_book.fold_long_listings(nb)
        for cell in nb.cells:
            if cell.cell_type == "code" and "getsource" in cell.source and cell.outputs:
                assert "hide-output" in cell.metadata.get("tags", []), f"{lesson.name}: a listing left open"
    assert all(folded[n] >= 1 for n in ("01", "02", "03", "04", "05")), folded
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="1\n")])])
    assert seqlab_book.fold_long_listings(nb) == 0 and "tags" not in nb.cells[0].metadata


def test_the_book_refuses_to_overwrite_a_folder_that_is_not_a_book(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a book"):
        seqlab_book.build(tmp_path, quiet=True)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_an_inline_equation_reads_as_plain_text_in_the_search_excerpts():
    m = seqlab_book.math_as_text
    assert m(r"\(|a|\)") == "|a|"
    assert m(r"\(h_t = \operatorname{diag}(a_t)\, h_{t-1} + k_t^\top v_t\)") == "h_t = diag(a_t) h_(t-1) + k_tᵀ v_t"
    assert m(r"\(O = \mathrm{Softmax}(QK^\top/\sqrt d)V\)") == "O = Softmax(QKᵀ/√d)V"
    assert m(r"\(\lambda = \exp(-\exp(\nu) + i\exp(\theta))\)") == "λ = exp(-exp(ν) + i exp(θ))"
    assert m(r"\[\mathbf y=\frac1n\sum_i f_\theta(\mathbf x_i)\]") == "y=1/n Σ_i f_θ(x_i)"
    assert m(r"\(\frac{1}{\sqrt{d_k}} \le \lceil \log_2 L \rceil\)") == "1/(√(d_k)) ≤ ⌈ log_2 L ⌉"
    assert m(r"\(\bar h_0, \{1, \dots, n\}\)") == "h\u0304_0, {1, …, n}"


def test_the_search_excerpt_text_leaves_out_what_is_marked_no_search_and_writes_math_plainly():
    """``_MainText`` (the text the search page cuts its excerpts from): a paragraph marked ``no-search`` (a lesson's
    navigation line) and a display equation are left out; an inline equation is written as plain text."""
    page = ('<html><body><header>theme</header><article role="main">\n<section id="one">\n'
            '<h1>One<a class="headerlink" href="#one">#</a></h1>\n'
            '<p class="seqlab-navigation no-search"><strong>Previous:</strong> <a href="05.html">05 · GateLoop</a> · '
            '<strong>Next:</strong> none</p>\n'
            '<p>A transition <span class="math notranslate nohighlight no-search">\\(|a| \\le 1\\)</span> keeps the '
            'state bounded:</p>\n'
            '<div class="math notranslate nohighlight no-search" id="equation-x">\\[h_t = a_t h_{t-1}\\]</div>\n'
            '<p>and so on.</p>\n</section>\n</article></body></html>')
    light = seqlab_book._MainText().main(page)
    assert light.startswith('<div role="main">') and '<div id="one">' in light and "equation-x" not in light
    text = " ".join(re.sub(r"<[^>]+>", " ", light).split())
    assert text == "One A transition |a| ≤ 1 keeps the state bounded: and so on."


def test_every_lesson_has_a_one_line_summary_for_the_front_page():
    assert sorted(seqlab_book.SUMMARIES) == sorted(p.stem[:2] for p in LESSONS)


def _excerpt_texts(out: Path) -> dict[str, str]:
    """The text the search page cuts its excerpts from (``_static/seqlab-search.js``), page by page, as Sphinx's
    searchtools reads it (the ``textContent`` of the page's main content)."""
    import html
    import json

    script = (out / "_static" / "seqlab-search.js").read_text(encoding="utf-8")
    head = "window.SEQLAB_PAGE_TEXT = "
    assert script.startswith(head)
    pages = json.JSONDecoder().raw_decode(script, len(head))[0]
    return {name: html.unescape(re.sub(r"<[^>]+>", "", text)) for name, text in pages.items()}


def _tex_commands(nb_path: Path) -> set[str]:
    """The TeX commands (``\\frac``, ``\\mathbf``...) a lesson's markdown writes inside its equations."""
    nb = nbformat.read(nb_path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return {cmd for math in re.findall(r"\$\$.+?\$\$|\$.+?\$", text, re.S)
            for cmd in re.findall(r"\\([A-Za-z]{2,})", math)}


def test_the_search_excerpts_read_as_prose_without_tex_or_the_navigation_line(site):
    """Every lesson's excerpt text holds no TeX delimiter nor any TeX command its equations use, its inline
    equations as plain text, and no navigation line ("Previous: ... · Next: ...", lesson 00's "Next: ..."), which
    the page itself still shows; Sphinx's index holds neither TeX nor the navigation line's words."""
    import json

    out, _ = site
    texts = _excerpt_texts(out)
    index = (out / "searchindex.js").read_text(encoding="utf-8")
    terms = json.loads(index[index.index("(") + 1:index.rindex(")")])["terms"]
    for lesson in LESSONS:
        text = texts[f"{lesson.stem}.html"]
        assert len(text) > 2000, f"{lesson.name}: {len(text)} characters of excerpt text"
        raw = [d for d in ("\\(", "\\)", "\\[", "\\]", "$$") if d in text]
        assert not raw, f"{lesson.name}: TeX delimiters {raw} in the search excerpts"
        commands = _tex_commands(lesson)
        left = sorted({m for m in re.findall(r"\\([A-Za-z]{2,})", text) if m in commands})
        assert not left, f"{lesson.name}: TeX commands {left} in the search excerpts"
        assert "Previous:" not in text and "Next:" not in text, f"{lesson.name}: the navigation line is in the excerpts"
        page = (out / f"{lesson.stem}.html").read_text(encoding="utf-8")
        assert "seqlab-navigation" in page and "<strong>Next:</strong>" in page, f"{lesson.name}: no navigation line"
    assert "h_t" in texts["06_chunkwise_parallel_form.html"]        # an inline equation, as plain text
    for term in ("mathbf", "operatornam", "frac", "previou"):
        assert term not in terms, f"the search index holds {term!r}"


# ----------------------------------------------------------------------------- the site in a browser, offline
MATH_DONE_JS = "() => window.MathJax && MathJax.startup && MathJax.startup.promise && MathJax.startup.document"


@pytest.fixture(scope="module")
def offline_page(browser, chromium_executable):
    """A page in a context with the network off; what it asks off the disk and what fails are recorded."""
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
    asked, failed, fonts, errors = [], [], [], []
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://")
                  else (asked.append(route.request.url), route.abort()))
    page = context.new_page()
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.on("requestfinished", lambda r: fonts.append(r.url) if r.url.endswith(".woff") else None)
    page.on("console", lambda m: errors.append(f"{page.url.rsplit('/', 1)[-1]}: {m.text}") if m.type == "error"
            else None)
    page.on("pageerror", lambda e: errors.append(f"{page.url.rsplit('/', 1)[-1]}: {e}"))
    yield page, asked, failed, fonts, errors
    context.close()


def _typeset(page) -> None:
    page.wait_for_function(MATH_DONE_JS, timeout=60_000)
    page.evaluate("() => MathJax.startup.promise")


def _figures_in(nb_path: Path) -> int:
    """Plotly figures a lesson's committed outputs hold, those inside saved widget outputs included."""
    nb = nbformat.read(nb_path, as_version=4)
    state = nb.metadata.get("widgets", {}).get(seqlab_book.WIDGET_STATE, {}).get("state", {})

    def widget(model_id: str) -> int:
        model = state.get(model_id)
        if model is None:
            return 0
        s = model["state"]
        return (sum(widget(c.removeprefix("IPY_MODEL_")) for c in s.get("children", []))
                + sum(count(o) for o in s.get("outputs", []) if model["model_name"] == "OutputModel"))

    def count(out) -> int:
        data = out.get("data", {})
        return (1 if seqlab_book.PLOTLY in data else widget(data[seqlab_book.WIDGET]["model_id"])
                if seqlab_book.WIDGET in data else 0)

    return sum(count(o) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_every_page_loads_offline_with_its_equations_and_figures_drawn(site, offline_page):
    """Each page from disk, network off: no failed request and nothing asked of the network (MathJax 3's fonts
    load from the site); every equation typeset by MathJax 3 (no raw TeX, no MathJax error); every figure of
    the lesson drawn; the sidebar links every lesson."""
    out, pages = site
    page, asked, failed, fonts, errors = offline_page
    for path in pages:
        page.goto(path.as_uri())
        _typeset(page)
        assert page.evaluate("() => MathJax.version").startswith("3."), path.name
        math = page.locator("main .math").count()
        typeset = page.locator("main mjx-container").count()
        assert typeset >= math > 0, f"{path.name}: {typeset} equations typeset of {math}"
        assert page.locator("mjx-merror").count() == 0, f"{path.name}: a MathJax error"
        text = page.inner_text("main")
        assert "$$" not in text and "\\frac" not in text, f"{path.name}: raw TeX left on the page"
        sidebar = page.inner_text(".bd-sidebar-primary nav")
        assert all(f"{p.stem[:2]} ·" in sidebar for p in LESSONS), f"{path.name}: the sidebar lacks a lesson"
        if path.name == "index.html":
            continue
        want = _figures_in(REPO / "notebooks" / f"{path.stem}.ipynb")
        assert want > 0, f"{path.stem} has no figure"
        page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {want}",
                               timeout=60_000)
        drawn = page.eval_on_selector_all(".js-plotly-plot", "els => els.filter(e => e.querySelector("
                                          "'.main-svg') && e.getBoundingClientRect().height > 50).length")
        assert drawn == want, f"{path.name}: {drawn} figures drawn, the lesson has {want}"
        under = page.eval_on_selector_all(".js-plotly-plot", TITLE_UNDER_TOOLBAR_JS)
        assert not under, f"{path.name}: plotly's toolbar covers the title of {under}"
    assert not errors, f"console errors: {errors[:5]}"
    assert not asked, f"the book asked the network for {asked[:5]}"
    assert not failed, f"requests failed: {failed[:5]}"
    assert any("MathJax_Main-Regular" in f for f in fonts), f"MathJax's fonts were not loaded: {fonts[:5]}"


def test_the_search_page_finds_a_word_of_lesson_05_offline_with_an_excerpt(site, offline_page):
    """From disk, the search lists the pages that hold the word, each with an excerpt of its text around it."""
    out, _ = site
    page, asked, failed, _, errors = offline_page
    for word in ("GateLoop", "associative"):
        page.goto((out / "search.html").as_uri() + f"?q={word}")
        page.wait_for_selector("#search-results li a", timeout=30_000)
        page.wait_for_function("() => /found|did not match/i.test("
                               "(document.querySelector('#search-results .search-summary') || {}).innerText)",
                               timeout=30_000)
        page.wait_for_function("() => [...document.querySelectorAll('#search-results li')]"
                               ".every(li => li.querySelector('p.context'))", timeout=30_000)
        hits = page.eval_on_selector_all("#search-results li", "els => els.map(li => ["
                                         "li.querySelector('a').getAttribute('href'), "
                                         "li.querySelector('p.context').innerText])")
        assert any(h.startswith("05_gateloop_surrogate_attention.html") for h, _ in hits), hits
        for href, excerpt in hits:
            # Sphinx cuts the excerpt around the word's stem ("associ" for "associative")
            assert word.lower()[:6] in excerpt.lower() and len(excerpt) > 60, f"{word}: {href} excerpt {excerpt!r}"
            # prose: no TeX (lesson 06 showed \(|a|\)) and no navigation line (06's names lesson 05, GateLoop)
            assert not re.search(r"\\[()\[\]]|\$\$|Previous:", excerpt), f"{word}: {href} excerpt {excerpt!r}"
    assert not asked and not failed and not errors, (asked, failed, errors)


# ----------------------------------------------------------------------------- widget stills and figure titles
TITLE_UNDER_TOOLBAR_JS = """els => els.filter(f => {
    const bar = f.querySelector('.modebar'), title = f.querySelector('.gtitle');
    if (!bar || !title) return false;
    const a = bar.getBoundingClientRect(), b = title.getBoundingClientRect();
    return a.width > 0 && b.width > 0 && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
}).map(f => (f.querySelector('.gtitle') || {}).textContent)"""

STILLS_JS = """els => els.map(e => {
    const track = e.querySelector('.seqlab-slider-track').getBoundingClientRect();
    const handle = e.querySelector('.seqlab-slider-handle').getBoundingClientRect();
    return {label: e.querySelector('.seqlab-slider-label').textContent,
            at: (handle.left + handle.width / 2 - track.left) / track.width,
            value: e.querySelector('.seqlab-slider-readout').textContent,
            ticks: [...e.querySelectorAll('.seqlab-slider-tick')].map(t => t.textContent)};
})"""


def _sliders_shown(nb_path: Path) -> list[dict]:
    """The sliders a lesson's committed outputs show, in page order, as the saved widget state defines them:
    description, where the handle sits on the track (0 to 1), the value and the option labels."""
    import math

    nb = nbformat.read(nb_path, as_version=4)
    state = nb.metadata.get("widgets", {}).get(seqlab_book.WIDGET_STATE, {}).get("state", {})
    found = []

    def widget(model_id: str) -> None:
        model = state.get(model_id)
        if model is None:
            return
        name, s = model["model_name"], model["state"]
        for child in s.get("children", []):
            widget(child.removeprefix("IPY_MODEL_"))
        if name == "OutputModel":
            for out in s.get("outputs", []):
                output(out)
        if name == "SelectionSliderModel":
            labels = s["_options_labels"]
            found.append({"label": s.get("description", ""), "at": s["index"] / (len(labels) - 1),
                          "value": labels[s["index"]], "ticks": labels})
        elif name == "FloatLogSliderModel":
            exponent = math.log(s["value"]) / math.log(s["base"])
            found.append({"label": s.get("description", ""), "at": (exponent - s["min"]) / (s["max"] - s["min"]),
                          "value": s["value"], "ticks": []})
        elif name.endswith("SliderModel") and "Range" not in name:
            found.append({"label": s.get("description", ""), "ticks": [], "value": s["value"],
                          "at": (s["value"] - s["min"]) / (s["max"] - s["min"])})

    def output(out) -> None:
        if seqlab_book.WIDGET in out.get("data", {}):
            widget(out["data"][seqlab_book.WIDGET]["model_id"])

    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            output(out)
    return found


def test_every_widget_still_shows_the_widgets_default(site, offline_page):
    """Each slider still in the book sits where the widget's default puts it and reads its value: a selection
    slider's handle at index / (n - 1) with its options labelled, a log slider's at log_base(value) between its
    exponents, any other at value between min and max (lessons 04, 06 and 08 hold them)."""
    out, _ = site
    page, *_ = offline_page
    seen = 0
    for lesson in LESSONS:
        want = _sliders_shown(lesson)
        page.goto((out / f"{lesson.stem}.html").as_uri())
        drawn = page.eval_on_selector_all(".seqlab-slider", STILLS_JS)
        assert len(drawn) == len(want), f"{lesson.name}: {len(drawn)} slider stills, the lesson shows {len(want)}"
        for got, w in zip(drawn, want):
            assert got["label"] == w["label"], (lesson.name, got, w)
            assert got["at"] == pytest.approx(w["at"], abs=0.01), f"{lesson.name}: {w['label']} at {got['at']}"
            if w["ticks"]:
                assert got["value"] == w["value"] and got["ticks"] == w["ticks"], (lesson.name, got, w)
            else:
                assert float(got["value"]) == pytest.approx(w["value"], rel=0.01), (lesson.name, got, w)
        seen += len(want)
    assert seen >= 7, f"only {seen} slider stills in the book"    # 04's four, 06's two, 08's three
