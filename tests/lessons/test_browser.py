"""The tour renders in a real browser: JupyterLab + Debian's Chromium, driven by pytest-playwright.

What a learner sees is checked, not only what the kernel computes: the test starts JupyterLab on
127.0.0.1 (a free port, a random token, a temporary root with a copy of the tour stripped of its
outputs), opens ``00_welcome.ipynb`` in headless Chromium, runs all cells, and asserts that

- every code cell ran (the last one has an execution count, none is an error),
- the plotly figures are drawn (``.js-plotly-plot`` outputs with their SVG and curves in the DOM),
- the ipywidgets explorer is live: moving its slider changes its output.

A screenshot of the figure and of the widget goes to ``test-artifacts/`` (git-ignored).

Browser: ``/usr/bin/chromium`` (Debian's ``chromium`` package; ``SEQLAB_CHROMIUM`` overrides the
path; the fixtures are in ``conftest.py``). Playwright never downloads a browser here. Without Chromium
the test fails under CI (``CI`` set) and is skipped elsewhere.

JupyterLab settings: the "news" toast (which would cover the notebook) is switched off in
``<sys.prefix>/share/jupyter/lab/settings/overrides.json`` (merged, never clobbered; the same file
``workbench.py`` writes for learners). The test's own user settings live in a temporary
``JUPYTERLAB_SETTINGS_DIR`` (cells all attached to the DOM: windowing mode ``none``), so a
learner's settings neither affect the test nor are changed by it.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import REPO
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from seqlab.viz.nbstate import LAB_ARGS

TOUR = REPO / "notebooks" / "00_welcome.ipynb"
FIRST_OPEN = "first_open.ipynb"     # the committed tour, opened without running it
ARTIFACTS = REPO / "test-artifacts"
# The JupyterLab settings every learner gets (also written by workbench.py): no news toast.
LAB_OVERRIDES = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
                 "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}
SERVER_START_S = 90       # JupyterLab up and answering
RUN_ALL_S = 240           # every cell of the tour, quick profile, in the browser's kernel


def write_lab_overrides(prefix: str | os.PathLike = sys.prefix) -> Path:
    """Merge :data:`LAB_OVERRIDES` into ``<prefix>/share/jupyter/lab/settings/overrides.json``."""
    path = Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    current = json.loads(path.read_text()) if path.exists() and path.read_text().strip() else {}
    merged = dict(current)
    for plugin, values in LAB_OVERRIDES.items():
        merged[plugin] = {**values, **current.get(plugin, {})}
    if merged != current:
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(merged, indent=2) + "\n")
        os.replace(tmp, path)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stripped_copy(src: Path, dst: Path) -> None:
    """The tour without outputs or execution counts, so that what the browser shows came from running it."""
    import nbformat

    nb = nbformat.read(src, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, dst)


def _user_settings(root: Path, autosave_s: int = 120) -> dict:
    """A fresh JupyterLab user-settings folder: all cells attached to the DOM, no news, widget state saved (as
    for learners) and autosave every ``autosave_s`` seconds (JupyterLab's default: 120)."""
    settings = root / "user-settings"
    files = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                            "checkForUpdates": False},
        "@jupyter-widgets/jupyterlab-manager/plugin.jupyterlab-settings": {"saveState": True},
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": True,
                                                                         "autosaveInterval": autosave_s},
    }
    for rel, value in files.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))
    workspaces = root / "workspaces"
    workspaces.mkdir()
    return {"JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(workspaces)}


@contextlib.contextmanager
def _jupyterlab(root: Path, notebooks: Path, trusted: list[Path], autosave_s: int = 120):
    """JupyterLab on 127.0.0.1 serving ``notebooks`` as ``workbench.py lab`` runs it (its save hook; ``trusted``
    trusted as the lessons it copies are, in the test's own notary database): yields (base_url, token)."""
    write_lab_overrides()
    token, port = secrets.token_hex(16), _free_port()
    env = {**os.environ, **_user_settings(root, autosave_s), "SEQLAB_PROFILE": "quick", "PYTHONUNBUFFERED": "1",
           "JUPYTER_RUNTIME_DIR": str(root / "runtime"), "JUPYTER_DATA_DIR": str(root / "data")}
    if trusted:
        subprocess.run([sys.executable, "-m", "jupyter", "trust", *map(str, trusted)], env=env, check=True,
                       capture_output=True)
    env.pop("JUPYTER_TOKEN", None)
    log = open(root / "jupyterlab.log", "w")
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={notebooks}", "--LabApp.expose_app_in_browser=True", *LAB_ARGS]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    proc = subprocess.Popen(cmd, cwd=notebooks, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{(root / 'jupyterlab.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer within {SERVER_START_S} s:\n"
                            f"{(root / 'jupyterlab.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(root / "jupyterlab.log", ARTIFACTS / f"jupyterlab-{root.name}.log")


@pytest.fixture(scope="module")
def lab(tmp_path_factory, chromium_executable):
    """A JupyterLab server serving a stripped copy of the tour and the tour as committed: yields (base_url, token)."""
    if not TOUR.exists():
        pytest.fail(f"{TOUR} is missing")
    root = tmp_path_factory.mktemp("lab")
    notebooks = root / "notebooks"
    notebooks.mkdir()
    _stripped_copy(TOUR, notebooks / TOUR.name)
    # the tour as committed, trusted: opened without running, its saved widgets must render
    shutil.copy(TOUR, notebooks / FIRST_OPEN)
    with _jupyterlab(root, notebooks, [notebooks / FIRST_OPEN]) as server:
        yield server


# ----------------------------------------------------------------------------- page helpers


def _prompts(page) -> list[str]:
    """The input prompts of the code cells, in order ("[ ]:", "[*]:", "[3]:")."""
    return page.eval_on_selector_all(".jp-Notebook .jp-CodeCell .jp-InputPrompt", "els => els.map(e => e.textContent.trim())")


KERNEL_IDLE_JS = """() => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const kernel = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!kernel && kernel.connectionStatus === "connected" && kernel.status === "idle";
}"""


def _wait_kernel_idle(page, timeout_s: float) -> None:
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=timeout_s * 1000)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=timeout_s * 1000)


def _run_all(page) -> None:
    """Run all cells; retry until the first code cell has run (a command sent before the kernel
    is fully connected can be dropped)."""
    for attempt in range(5):
        _wait_kernel_idle(page, 60)
        # Fire and forget: the command's promise settles only when every cell has run (or never,
        # when the kernel dropped the request), and page.evaluate has no timeout of its own.
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            first = _prompts(page)[0]
            if first in ("[1]:", "[*]:") or re.fullmatch(r"\[\d+\]:", first):
                return
            time.sleep(0.5)
    pytest.fail(f"'Run All' never started the first cell (prompts: {_prompts(page)[:3]})")


def _wait_all_ran(page, timeout_s: float = RUN_ALL_S) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        prompts = _prompts(page)
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                              ":has-text('Traceback')").count()
        if errors:
            break
        if prompts and all(re.fullmatch(r"\[\d+\]:", p) for p in prompts):
            return prompts
        time.sleep(1)
    _screenshot(page, "tour-failed.png")
    texts = page.eval_on_selector_all(".jp-OutputArea-output", "els => els.map(e => e.innerText).join('\\n---\\n')")
    pytest.fail(f"the tour did not run to the end in the browser (prompts {_prompts(page)}); outputs:\n{texts[-4000:]}")


def _screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path))
    return path


def _widget_output_text(widget) -> str:
    return widget.locator(".widget-output, .jp-OutputArea").first.inner_text()


def _log_console_text(page) -> str:
    """The text of JupyterLab's log console (kernel messages no cell shows, such as "No such comm")."""
    page.evaluate("() => window.jupyterapp.commands.execute('logconsole:open', {insertMode: 'split-bottom'})")
    panel = page.locator(".jp-LogConsolePanel").first
    panel.wait_for(state="attached", timeout=30_000)
    page.wait_for_timeout(1000)
    return panel.inner_text()


def test_tour_runs_and_renders_in_chromium(lab, page):
    base, token = lab
    page.set_default_timeout(60_000)
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(f"{base}/lab/tree/{TOUR.name}?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=SERVER_START_S * 1000)
    _run_all(page)
    prompts = _wait_all_ran(page)
    assert len(prompts) >= 5, prompts
    # Run All leaves no error in JupyterLab's log console, nor comm errors in the browser's console
    log = _log_console_text(page)
    assert "No such comm" not in log and "error" not in log.lower(), f"log console: {log[:1000]}"
    assert not [e for e in errors if "comm" in e.lower()], errors

    # plotly figures are drawn: the map's heatmaps, the race (the live widget, replaced by its final static figure), the
    # static learning curves, the widget's and the default example's figures. JupyterLab draws an
    # output when it scrolls into view: scroll to each, then find the plot div, its SVG and curves.
    outputs = page.locator(".jp-OutputArea-output.jp-RenderedPlotly")  # plotly's JupyterLab renderer
    n_figures = outputs.count()
    assert n_figures >= 3, f"expected the tour's plotly figures, found {n_figures} plotly outputs"
    for i in range(n_figures):
        out = outputs.nth(i)
        out.scroll_into_view_if_needed()
        out.locator(".plot-container svg.main-svg").first.wait_for(state="visible", timeout=30_000)
        if out.locator("g.scatterlayer path.js-line").count() == 0 and out.locator("g.heatmaplayer image").count():
            continue                      # the map's heatmaps (lesson 00 §3): drawn as images, no curves
        assert out.locator("g.scatterlayer path.js-line").count() >= 2, f"plotly figure {i} has no curves"
    race = outputs.filter(has_text="transformer").first
    race.scroll_into_view_if_needed()
    assert "transformer" in race.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    race.screenshot(path=str(ARTIFACTS / "tour-figure.png"))

    # the widget explorer: moving its slider changes its output
    widget = page.locator(".jp-OutputArea-output .widget-interact, .jp-OutputArea-output .widget-vbox").first
    widget.scroll_into_view_if_needed()
    slider = widget.locator(".widget-slider .noUi-handle, .slider .noUi-handle").first
    page.wait_for_function("el => el.innerText.trim().length > 0",
                           arg=widget.locator(".widget-output").first.element_handle(), timeout=30_000)
    before = _widget_output_text(widget)
    slider.focus()
    slider.press("ArrowRight")
    page.wait_for_function("([el, old]) => el.innerText !== old",
                           arg=[widget.locator(".widget-output").first.element_handle(), before], timeout=30_000)
    after = _widget_output_text(widget)
    assert after != before
    shot = _screenshot(page, "tour-widget.png")
    assert shot.stat().st_size > 10_000


def test_a_lesson_opens_with_its_widgets_rendered(lab, page):
    """What a learner sees on first open, before running anything: the saved slider and progress bars
    rendered as widgets, not as their text fallbacks (``interactive(children=...``, ``0%|  | 0/150``)."""
    base, token = lab
    page.set_default_timeout(60_000)
    page.goto(f"{base}/lab/tree/{FIRST_OPEN}?token={token}&reset")    # the tour's tab of the other test closed
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=SERVER_START_S * 1000)
    slider = page.locator(".jp-OutputArea-output .widget-slider").first
    slider.scroll_into_view_if_needed()
    slider.wait_for(state="visible", timeout=60_000)
    assert page.locator(".jp-OutputArea-output .widget-hprogress, .jp-OutputArea-output .progress").count() >= 1
    page.wait_for_timeout(2000)
    texts = page.eval_on_selector_all(".jp-OutputArea-output", "els => els.map(e => e.innerText)")
    as_text = [t[:200] for t in texts if "interactive(children=" in t or "0%|" in t]   # the text fallbacks
    assert not as_text, f"widgets shown as text: {as_text}"
    _assert_saved_controls_wait_for_the_kernel(page, FIRST_OPEN)
    assert page.evaluate(CONTROLS_JS, CONTROLS), "the tour's saved controls were not found"
    _screenshot(page, "first-open-widget.png")
    # after Run All the kernel's widgets replace the saved ones: every control is live, no hint is left
    _run_all(page)
    _wait_all_ran(page)
    controls = page.evaluate(CONTROLS_JS, CONTROLS)
    assert controls, "Run All drew no controls"
    assert all(c["usable"] and HINT not in c["hint"] for c in controls), f"not live after Run All: {controls}"


# ----------------------------------------------------------------------------- every lesson, opened as it is
LESSONS = sorted((REPO / "notebooks").glob("0*.ipynb"))
AUTOSAVE_S = 1            # JupyterLab's autosave interval in this server, s (the default is 120 s)
SAVED_S = 60              # failure guard: the page's saves have ended and nothing is left to save
RESTORE_PLUGIN = "seqlab-widget-restore:plugin"     # seqlab/viz/labextension, loaded through LAB_ARGS
OPENS = 3                 # fresh opens of each lesson (its kernel shut down in between)
LESSON_RUN_ALL_S = 900    # failure guard: a lesson's Run All in the browser (about a minute on an idle machine)


@pytest.fixture(scope="module")
def lessons_lab(tmp_path_factory, chromium_executable):
    """Every lesson as committed, trusted (``workbench.py lab`` trusts the lessons it copies), autosave every
    :data:`AUTOSAVE_S` s: yields (base_url, token, folder)."""
    root = tmp_path_factory.mktemp("lessons")
    folder = root / "my_notebooks"
    folder.mkdir()
    copied = {}
    for lesson in LESSONS:
        copied[lesson.name] = lesson.read_bytes()       # what each copy must stay (the lesson may change meanwhile)
        (folder / lesson.name).write_bytes(copied[lesson.name])
    with _jupyterlab(root, folder, sorted(folder.glob("*.ipynb")), autosave_s=AUTOSAVE_S) as (base, token):
        yield base, token, folder, copied


def _widget_views(path: Path) -> int:
    """Widget outputs a lesson's cells show (its saved widgets render there on open)."""
    from seqlab.viz.nbstate import VIEW_KEY

    nb = json.loads(path.read_text(encoding="utf-8"))
    return sum(VIEW_KEY in out.get("data", {}) for cell in nb["cells"] for out in cell.get("outputs", []))


def _shut_down_kernels(base: str, token: str) -> None:
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
        sessions = json.loads(r.read())
    for session in sessions:
        request = urllib.request.Request(f"{base}/api/sessions/{session['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(request, timeout=10).close()


def _wait_widgets_settled(page, views: int, timeout_s: float) -> None:
    """Wait until each of the lesson's ``views`` saved widget outputs is either drawn or says it failed
    ("Error displaying widget", which the assertions then catch): the widget manager's restore has ended.
    Only the notebook's own outputs count, not those drawn inside a widget."""
    page.wait_for_function(
        """views => {
            const outs = [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')]
                .filter(o => !o.parentElement.closest('.jupyter-widgets'));
            const settled = outs.filter(o => o.querySelector('.jupyter-widgets')
                                             || o.innerText.includes('Error displaying widget'));
            return settled.length === views && !outs.some(o => o.innerText.includes('Loading widget...'));
        }""", arg=views, timeout=timeout_s * 1000)


# The open notebook's saves, counted from its document context's saveState signal ("started", then "completed" or
# "failed"), and whether the page is at rest: no save is under way and the document holds nothing unsaved (only a
# modified document is autosaved), so no write of the lesson from this page is pending or in flight.
TRACK_SAVES_JS = """() => {
    const context = window.jupyterapp.shell.currentWidget.context;
    const saves = window.seqlabSaves = {started: 0, ended: 0};
    context.saveState.connect((_, state) => { if (state === 'started') saves.started++; else saves.ended++; });
    window.seqlabAtRest = () => saves.ended >= saves.started && !context.model.dirty;
}"""
SAVES_JS = """() => ({...window.seqlabSaves, dirty: window.jupyterapp.shell.currentWidget.context.model.dirty,
                     dialogs: [...document.querySelectorAll('.jp-Dialog')].map(d => d.innerText)})"""
# What JupyterLab shows of a document with unsaved changes: its model's flag and the dot on its tab.
DIRTY_JS = """() => ({model: window.jupyterapp.shell.currentWidget.context.model.dirty,
                     tabs: document.querySelectorAll('.lm-TabBar-tab.jp-mod-dirty').length})"""
# The controls (sliders, menus, buttons, boxes) drawn in the notebook's outputs, as seqlab-widget-restore marks them:
# for each, whether it can be used (not inert, not inside an inert element), whether the red broken-chain icon is
# drawn beside it, and the hint line its output shows.
CONTROLS = (".widget-slider, .widget-dropdown, .widget-select, .widget-toggle-buttons, .widget-radio, .widget-play, "
            ".widget-button, .jupyter-button, .widget-checkbox, .widget-text, .widget-textarea")
CONTROLS_JS = """selector => [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')]
    .filter(o => !o.parentElement.closest('.jp-OutputArea-output'))
    .flatMap(o => [...o.querySelectorAll(selector)].map(c => ({
        name: (c.querySelector('.widget-label') || {}).innerText || c.className,
        usable: !c.closest('[inert]'),
        icon: [...o.querySelectorAll('.jupyter-widgets-disconnected')]
                  .some(d => !['none', 'normal'].includes(getComputedStyle(d, '::before').content)),
        hint: getComputedStyle(o, '::before').content})))"""
HINT = "run this cell to make them live"
CONTROL_MODELS = r"^(?:\w*Slider|Dropdown|Select\w*|\w*Buttons?|Checkbox|\w*Text|Textarea|Play|Combobox|\w*Picker|TagsInput|FileUpload)Model$"


def _file_stamp(path: Path) -> tuple | None:
    """``path``'s modification time and size, or None while jupyter_server writes it (in place, after copying it to
    its intermediate file ``.~<name>``, which it removes once the write is whole)."""
    from jupyter_server.services.contents.fileio import path_to_intermediate

    if os.path.exists(path_to_intermediate(str(path))):
        return None
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def _bytes_at_rest(page, path: Path, tries: int = 20) -> bytes:
    """``path`` as the open page last saved it: read once the page is at rest (:data:`TRACK_SAVES_JS`: what the
    lesson's opening changed, such as its restored widgets, has been autosaved), by a read that no save overlapped
    (the page began none meanwhile and the server wrote none: no intermediate file, the same time and size before
    and after). A read that met a save is made again."""
    for _ in range(tries):
        try:
            page.wait_for_function("() => window.seqlabAtRest()", timeout=SAVED_S * 1000)
        except PlaywrightTimeout:
            pytest.fail(f"{path.name}: the page still had a save pending after {SAVED_S} s: {page.evaluate(SAVES_JS)}")
        started, stamp = page.evaluate("() => window.seqlabSaves.started"), _file_stamp(path)
        data = path.read_bytes()
        if stamp is not None and _file_stamp(path) == stamp and page.evaluate(
                "n => window.seqlabSaves.started === n && window.seqlabAtRest()", started):
            return data
    pytest.fail(f"{path.name}: each of {tries} reads met a save")


def _keep_changed(saved: bytes, copied: bytes, name: str, attempt: int) -> str:
    """Keep the bytes the browser saved in place of a lesson in ``test-artifacts/`` and say what differs from the
    lesson as copied (the fields that differ, not the bytes: a lesson is a megabyte)."""
    ARTIFACTS.mkdir(exist_ok=True)
    kept = ARTIFACTS / f"changed-open{attempt}-{name}"
    kept.write_bytes(saved)
    try:
        now, then = json.loads(saved.decode("utf-8")), json.loads(copied.decode("utf-8"))
    except ValueError as err:
        return f"kept as {kept}; not JSON: {err}"
    diffs = [f"metadata.{k}" for k in sorted(set(now.get("metadata", {})) | set(then.get("metadata", {})))
             if now.get("metadata", {}).get(k) != then.get("metadata", {}).get(k)]
    if len(now.get("cells", [])) != len(then.get("cells", [])):
        diffs.append(f"{len(now.get('cells', []))} cells, not {len(then.get('cells', []))}")
    else:
        diffs += [f"cell {i}.{k}" for i, (a, b) in enumerate(zip(now["cells"], then["cells"]))
                  for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return f"kept as {kept}; differs in {', '.join(diffs[:12]) or 'bytes only (same JSON)'}"


def _saved_controls(path: Path) -> bool:
    """Whether the widget state saved in a lesson holds a control (a slider, menu, button or box)."""
    from seqlab.viz.nbstate import STATE_KEY

    state = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("widgets", {})
    models = state.get(STATE_KEY, {}).get("state", {}).values()
    return any(re.search(CONTROL_MODELS, m.get("model_name", "")) for m in models)


def _assert_saved_controls_wait_for_the_kernel(page, name: str, expected: bool | None = None) -> None:
    """Before the kernel has run a widget's cell, its saved controls cannot be used, no broken-chain icon is drawn,
    and the output says how to make them live."""
    controls = page.evaluate(CONTROLS_JS, CONTROLS)
    if expected is not None:
        assert bool(controls) == expected, f"{name}: {len(controls)} saved controls drawn, expected some: {expected}"
    usable = [c["name"] for c in controls if c["usable"]]
    assert not usable, f"{name}: saved controls usable before the kernel made them: {usable}"
    assert not any(c["icon"] for c in controls), f"{name}: the broken-chain icon is drawn"
    no_hint = [c["name"] for c in controls if HINT not in c["hint"]]
    assert not no_hint, f"{name}: saved controls without the hint line: {no_hint}"


def _assert_live_after_run_all(page, url: str, name: str, expected: bool) -> None:
    """Run All in a fresh open: the kernel's widgets replace the saved ones, every control can be used and no hint
    line is left."""
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=SERVER_START_S * 1000)
    _run_all(page)
    _wait_all_ran(page, LESSON_RUN_ALL_S)
    controls = page.evaluate(CONTROLS_JS, CONTROLS)
    assert bool(controls) == expected, f"{name}: {len(controls)} controls after Run All, expected some: {expected}"
    dead = [c["name"] for c in controls if not c["usable"] or HINT in c["hint"]]
    assert not dead, f"{name}: controls not live after Run All: {dead}"


def _close_all_without_a_prompt(page, name: str) -> None:
    """File > Close All Tabs closes the lesson at once: a save prompt would keep it open."""
    page.evaluate("() => { window.jupyterapp.commands.execute('application:close-all'); }")
    try:
        page.wait_for_function("() => !document.querySelector('.jp-NotebookPanel')", timeout=30_000)
    except PlaywrightTimeout:
        dialogs = page.eval_on_selector_all(".jp-Dialog", "els => els.map(d => d.innerText)")
        pytest.fail(f"{name} did not close: {dialogs or 'no dialog'}")


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem[:2])
def test_opening_a_lesson_never_changes_it_and_its_widgets_render_every_time(lessons_lab, page, lesson):
    """A lesson opened and left open (autosave every second, widget state saved, as for learners) is not marked
    modified (no unsaved dot, no save, File > Close All closes it without a prompt), its saved controls are inert
    with the hint line until the kernel runs their cell, and it stays byte-identical on disk, compared once its
    widgets are drawn and the page is at rest (the page says so); at each of :data:`OPENS` fresh opens (its kernel
    shut down in between) its saved widgets are drawn and none says "Error displaying widget: model not found"
    (seqlab-widget-restore runs the widget manager's restores one at a time: without it, which widgets lose that
    race changes per open). After the opens, Run All makes every control live."""
    base, token, folder, copied = lessons_lab
    path, committed = folder / lesson.name, copied[lesson.name]
    views = _widget_views(path)
    page.set_default_timeout(60_000)
    try:
        for attempt in range(OPENS):
            page.goto(f"{base}/lab/tree/{lesson.name}?token={token}&reset")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=SERVER_START_S * 1000)
            _wait_kernel_idle(page, 90)
            page.evaluate(TRACK_SAVES_JS)
            _wait_widgets_settled(page, views, 60)
            saved = _bytes_at_rest(page, path)
            unchanged = saved == committed    # a bool: pytest would diff a megabyte for hours
            assert unchanged, f"{lesson.name} changed on disk after open {attempt + 1}: " \
                              f"{_keep_changed(saved, committed, lesson.name, attempt + 1)}"
            assert page.evaluate(DIRTY_JS) == {"model": False, "tabs": 0}, \
                f"{lesson.name}, open {attempt + 1}: marked modified although nothing was edited"
            assert page.evaluate("() => window.seqlabSaves.started") == 0, f"{lesson.name}: saved at open"
            _assert_saved_controls_wait_for_the_kernel(page, lesson.name, _saved_controls(path))
            assert page.evaluate(f"() => window.jupyterapp.isPluginActivated('{RESTORE_PLUGIN}')"), "not loaded"
            lost = page.locator(".jp-OutputArea-output:has-text('Error displaying widget')").count()
            assert lost == 0, f"{lesson.name}, open {attempt + 1}: {lost} widgets not displayed (model not found)"
            waiting = page.locator(".jp-OutputArea-output:has-text('Loading widget...')").count()
            assert waiting == 0, f"{lesson.name}, open {attempt + 1}: {waiting} widgets still loading"
            drawn = page.locator(".jp-OutputArea-output .jupyter-widgets").count()
            assert (drawn > 0) == (views > 0), f"open {attempt + 1}: {drawn} widgets drawn, {views} saved"
            _close_all_without_a_prompt(page, lesson.name)
            _shut_down_kernels(base, token)
        _assert_live_after_run_all(page, f"{base}/lab/tree/{lesson.name}?token={token}&reset", lesson.name,
                                   _saved_controls(path))
    except BaseException:
        _screenshot(page, f"open-{lesson.stem[:2]}.png")
        raise
    finally:
        _shut_down_kernels(base, token)
