"""Keep executed notebooks small: drop bulky widget state before committing them.

``jupyter nbconvert --execute`` saves the state of every widget a notebook created in its
metadata. plotly's ``FigureWidget`` (an ``anywidget``) carries plotly's whole JavaScript bundle
(about 5 MB) in that state, even after it was closed; sliders and output widgets are small and
worth keeping (JupyterLab shows them, with their last output, in a notebook that was not run).

    python -m seqlab.viz.nbstate notebooks/00_welcome.ipynb [more.ipynb ...]

drops every widget model whose saved state is larger than ``--max-kb`` (default 200 kB) and
prints what it removed. (``--ExecutePreprocessor.store_widget_state=False`` is no substitute:
nbclient then fails on notebooks with ``interact`` output widgets.)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["drop_large_widget_state"]

STATE_KEY = "application/vnd.jupyter.widget-state+json"


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m seqlab.viz.nbstate", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--max-kb", type=int, default=200, help="largest widget state kept, in kB (default 200)")
    args = parser.parse_args(argv)
    for nb in args.notebooks:
        removed = drop_large_widget_state(nb, args.max_kb * 1000)
        print(f"{nb}: removed {len(removed)} widget model(s){': ' + ', '.join(removed) if removed else ''}")


if __name__ == "__main__":
    main()
