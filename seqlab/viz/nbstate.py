"""Make executed notebooks fit to commit: drop bulky widget state, give every figure a static PNG.

``jupyter nbconvert --execute`` saves the state of every widget a notebook created in its
metadata. plotly's ``FigureWidget`` (an ``anywidget``) carries plotly's whole JavaScript bundle
(about 5 MB) in that state, even after it was closed; sliders and output widgets are small and
worth keeping (JupyterLab shows them, with their last output, in a notebook that was not run).

    python -m seqlab.viz.nbstate notebooks/00_welcome.ipynb [more.ipynb ...]

drops every widget model whose saved state is larger than ``--max-kb`` (default 200 kB) and
prints what it removed. (``--ExecutePreprocessor.store_widget_state=False`` is no substitute:
nbclient then fails on notebooks with ``interact`` output widgets.)

Static figures. A plotly output holds only the figure's JSON, which JupyterLab draws; ``nbconvert``,
GitHub's viewer and other readers draw nothing from it. ``--png`` adds an ``image/png`` rendering of each
plotly output (kaleido, with the system's Chromium) beside its JSON: JupyterLab still draws the
interactive figure, the others show the picture. nbval does not compare PNGs, so they never fail a check.

Saving from JupyterLab. With "Save Widget State Automatically" on, ipywidgets' JupyterLab manager marks a
notebook modified as soon as it restores the widgets saved in it (every restored model is "registered"), and
the state it then saves holds only the models its kernel made: an untouched lesson left open is autosaved with
its saved widgets gone (reported to ipywidgets as "Reopening and saving a notebook with a stored widget
state will delete that state"), and JavaScript writes ``1.0`` as ``1``. ``workbench.py lab``
runs JupyterLab with :func:`keep_saved_widgets` as its contents manager's pre-save hook: a save that changes
nothing but the widget state (and the spelling of numbers) writes the file as it was, byte for byte; any other
save keeps every saved widget model that an output still shows.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

__all__ = ["drop_large_widget_state", "add_static_figures", "browser_found", "keep_saved_widgets"]

STATE_KEY = "application/vnd.jupyter.widget-state+json"
VIEW_KEY = "application/vnd.jupyter.widget-view+json"
PLOTLY_KEY = "application/vnd.plotly.v1+json"
PNG_KEY = "image/png"
# JupyterLab's command-line option that installs the hook (workbench.py lab and the browser test use it)
LAB_SAVE_HOOK = "--ContentsManager.pre_save_hook=seqlab.viz.nbstate.keep_saved_widgets"
# The folder of seqlab's own JupyterLab extension, seqlab-widget-restore: a notebook's widget restores run one at a
# time, so a saved widget is never drawn as "model not found" on a fresh open (its remoteEntry.js says why)
LAB_EXTENSIONS = Path(__file__).resolve().parent / "labextension"
# Everything JupyterLab is started with for the lessons (workbench.py lab builds the same list without seqlab)
# restarts answer once the new kernel does (seqlab.viz.labkernels: no "Got events for closed stream" in the terminal)
LAB_KERNEL_MANAGER = "--ServerApp.kernel_manager_class=seqlab.viz.labkernels.ReadyRestartKernelManager"
LAB_ARGS = [LAB_SAVE_HOOK, f"--LabApp.extra_labextensions_path={LAB_EXTENSIONS}", LAB_KERNEL_MANAGER]
_MODEL_REF = re.compile(r'IPY_MODEL_([0-9a-f]{32})|"model_id": "([0-9a-f]{32})"')


def _comparable(nb) -> dict:
    """A notebook as plain JSON values without its widget state, lines joined as nbformat reads them: a save
    from JupyterLab compares equal to the file when nothing else changed (``1 == 1.0`` in Python)."""
    import nbformat

    data = json.loads(nbformat.writes(nbformat.from_dict(json.loads(json.dumps(nb)))))
    data.get("metadata", {}).pop("widgets", None)
    return nbformat.reads(json.dumps(data), as_version=nbformat.NO_CONVERT)


def _shown_models(nb: dict, saved: dict, kept: dict) -> list[str]:
    """The saved models (of ``saved``) that ``nb``'s outputs show and ``kept`` lacks, with every model they
    refer to (children, layouts, output widgets' own outputs)."""
    frontier = [m.group(1) or m.group(2) for m in _MODEL_REF.finditer(json.dumps(nb.get("cells", [])))]
    found: list[str] = []
    while frontier:
        mid = frontier.pop()
        if mid in kept or mid in found or mid not in saved:
            continue
        found.append(mid)
        frontier += [m.group(1) or m.group(2) for m in _MODEL_REF.finditer(json.dumps(saved[mid]))]
    return found


def keep_saved_widgets(model: dict, path: str, contents_manager, **kwargs) -> None:
    """A Jupyter server pre-save hook (module doc): a notebook saved with nothing changed but its widget state is
    written as the file already is; otherwise the widget models its outputs still show are kept from the file."""
    import nbformat

    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    os_path = os.path.join(contents_manager.root_dir, path.strip("/"))
    if not os.path.isfile(os_path):
        return
    disk = _last_saved(os_path)
    if _comparable(model["content"]) == _comparable(disk):
        # nothing of the learner's changed: the file, byte for byte, its cells marked trusted as the file's
        # signature says (unmarked cells make the server warn that the notebook is not trusted)
        contents_manager.notary.mark_cells(disk, contents_manager.notary.check_signature(disk))
        model["content"] = disk
        return
    saved = disk.metadata.get("widgets", {}).get(STATE_KEY, {}).get("state", {})
    widgets = model["content"].setdefault("metadata", {}).setdefault("widgets", {})
    kept = widgets.setdefault(STATE_KEY, {"state": {}, "version_major": 2, "version_minor": 0}).setdefault("state", {})
    for mid in _shown_models(model["content"], saved, kept):
        kept[mid] = saved[mid]


def _last_saved(os_path: str, tries: int = 50, wait_s: float = 0.02):
    """The notebook at ``os_path`` as last saved whole. jupyter_server writes a notebook in place, after copying it
    to an intermediate file (``.~name``) that it restores if the write fails; a save that overlaps another (an
    autosave beside the widget manager's, at a lesson's open) finds the file truncated while that copy holds the
    last whole version. Read whichever parses, for up to ``tries * wait_s`` seconds, then raise the file's error."""
    import nbformat
    from jupyter_server.services.contents.fileio import path_to_intermediate

    for _ in range(tries):
        for candidate in (os_path, path_to_intermediate(os_path)):
            try:
                return nbformat.read(candidate, as_version=nbformat.NO_CONVERT)
            except (OSError, ValueError):       # absent, or half written (nbformat's NotJSONError is a ValueError)
                continue
        time.sleep(wait_s)
    return nbformat.read(os_path, as_version=nbformat.NO_CONVERT)


def drop_large_widget_state(path: str | Path, max_bytes: int = 200_000) -> list[str]:
    """Remove widget models whose JSON state exceeds ``max_bytes`` from the notebook at ``path``.

    Returns the names of the removed models (``"<model_name> <model_id>"``); rewrites the file only
    when something was removed.
    """
    import nbformat

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    state = nb.metadata.get("widgets", {}).get(STATE_KEY, {}).get("state", {})
    removed = [f"{m.get('model_name')} {mid}" for mid, m in state.items() if len(json.dumps(m)) > max_bytes]
    for entry in removed:
        del state[entry.split()[-1]]
    if removed:
        if not state:
            nb.metadata.pop("widgets")
        nbformat.write(nb, path)
    return removed


def figure_outputs(nb) -> list[dict]:
    """Every output of ``nb`` (an nbformat notebook) that carries a plotly figure."""
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
            if PLOTLY_KEY in out.get("data", {})]


NO_BROWSER = ("static figures need a Chromium or Chrome browser for kaleido (Debian: apt-get install chromium; "
              "or kaleido's own: python -c 'import kaleido; kaleido.get_chrome_sync()')")


def browser_found() -> bool:
    """Whether kaleido has a Chromium or Chrome to draw with. Without one its export waits forever instead of
    failing, so every export here asks first."""
    import shutil

    try:
        from choreographer.browsers.chromium import Chromium    # how kaleido itself looks for one
    except ImportError:
        Chromium = None
    if Chromium is not None:
        try:
            return Chromium.find_browser(skip_local=False) is not None
        except Exception:  # noqa: BLE001  (another choreographer: look on the PATH as below)
            pass
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
    return any(shutil.which(n) for n in names)


# A static figure's PNG: at most this many pixels (a 660 x 380 figure). It is the fallback picture for nbconvert and
# GitHub; the interactive plotly figure beside it keeps the full size, so the PNG can stay small enough that a
# lesson of many figures keeps under the size a lesson may weigh (tests/lessons/test_lessons.py).
STATIC_PIXELS = 250_000


def static_scale(width: int, height: int, pixels: int = STATIC_PIXELS) -> float:
    """The scale of a figure's PNG: 1 up to ``pixels`` pixels, smaller beyond, so that a tall many-panel figure
    does not weigh a lesson down (its interactive plotly version keeps the full size)."""
    return min(1.0, (pixels / (width * height)) ** 0.5)


def add_static_figures(path: str | Path, width: int = 800, height: int = 450) -> int:
    """Add a PNG of each plotly output that lacks one (the figure's own width and height where it sets them,
    else ``width`` x ``height``, scaled down to :data:`STATIC_PIXELS` pixels). Returns how many were added;
    rewrites the file only when some were."""
    import base64
    import warnings

    import nbformat
    import plotly.io as pio

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    todo = [out for out in figure_outputs(nb) if PNG_KEY not in out["data"]]
    if not todo:
        return 0
    try:
        import kaleido
    except ImportError as err:
        raise RuntimeError("static figures need kaleido (the dev extra: pip install -e '.[dev]') and a Chromium "
                           "or Chrome browser (Debian: apt-get install chromium)") from err
    if not browser_found():
        raise RuntimeError(NO_BROWSER)
    kaleido.start_sync_server(silence_warnings=True)      # one browser for all the figures
    try:
        for out in todo:
            fig = out["data"][PLOTLY_KEY]
            layout = fig.get("layout", {})
            with warnings.catch_warnings():     # "kopts ignored with a server": plotly.js comes from the server
                warnings.simplefilter("ignore", UserWarning)
                w, h = layout.get("width") or width, layout.get("height") or height
                png = pio.to_image(fig, format="png", validate=False, width=w, height=h, scale=static_scale(w, h))
            out["data"][PNG_KEY] = base64.b64encode(png).decode("ascii")
    finally:
        kaleido.stop_sync_server(silence_warnings=True)
    nbformat.write(nb, path)
    return len(todo)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m seqlab.viz.nbstate", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--max-kb", type=int, default=200, help="largest widget state kept, in kB (default 200)")
    parser.add_argument("--png", action="store_true", help="also add a static PNG to every plotly figure output")
    args = parser.parse_args(argv)
    for nb in args.notebooks:
        removed = drop_large_widget_state(nb, args.max_kb * 1000)
        print(f"{nb}: removed {len(removed)} widget model(s){': ' + ', '.join(removed) if removed else ''}")
        if args.png:
            print(f"{nb}: added {add_static_figures(nb)} static figure(s)")


if __name__ == "__main__":
    main()
