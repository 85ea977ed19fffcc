"""The figures the claims write: a figure as a PNG (kaleido with a Chromium) else its plotly JSON, a claim record's
figure beside it, and one kaleido browser shared by all the figures of a call."""
from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["save_png", "save_claim_figure", "figure_server"]


def save_claim_figure(record: dict, out: Path) -> str:
    """The record's figure as ``<id>.png`` (kaleido), else its plotly JSON as ``<id>.plotly.json``; the file
    name, relative to ``out``."""
    from seqlab.viz.claims import claim_figure

    return save_png(claim_figure(record), out / f"{record['id']}.png", out / f"{record['id']}.plotly.json").name


def save_png(fig, png: Path, fallback: Path) -> Path:
    """``fig`` as the PNG ``png`` (kaleido with a Chromium), else its plotly JSON as ``fallback``; the path
    written."""
    from seqlab.viz.nbstate import NO_BROWSER, browser_found

    try:
        import warnings

        import plotly.io as pio

        if not browser_found():
            raise RuntimeError(NO_BROWSER)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            png.write_bytes(pio.to_image(fig, format="png", width=fig.layout.width or 900,
                                         height=fig.layout.height or 420))
        return png
    except Exception as err:   # no kaleido or no Chromium: the figure's JSON, drawn by plotly anywhere
        print(f"figure: no PNG ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
              f"writing the plotly JSON instead", file=sys.stderr)
        fig.write_json(str(fallback))
        return fallback


class figure_server:
    """One kaleido browser for all the figures of a call (each figure alone would start its own)."""

    def __enter__(self):
        from seqlab.viz.nbstate import browser_found

        try:
            import kaleido

            if not browser_found():
                raise RuntimeError("no browser")
            kaleido.start_sync_server(silence_warnings=True)
            self.kaleido = kaleido
        except Exception:       # no kaleido or no browser: figures fall back to their JSON
            self.kaleido = None
        return self

    def __exit__(self, *exc):
        if self.kaleido is not None:
            self.kaleido.stop_sync_server(silence_warnings=True)
        return False
