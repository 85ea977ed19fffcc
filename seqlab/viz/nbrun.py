"""Execute a notebook headlessly, as ``jupyter nbconvert --execute --inplace`` does, without its Output-widget stall.

    python -m seqlab.viz.nbrun notebooks/00_welcome.ipynb [more.ipynb ...] [--timeout 300]

nbclient (which nbconvert runs) plays the part of a frontend for the Output widget that ``interact`` captures its
function's output in: it echoes every captured output back to the kernel as a ``comm_msg`` on the shell channel.
It sends that echo from the coroutine that reads IOPub, while another coroutine is waiting on the same shell socket
for the cell's ``execute_reply``. A send on a ZeroMQ socket handles the socket's pending events, the reply's arrival
among them, and the waiting poll (woken by edges of the socket's file descriptor) can miss it: nbclient then sees
the reply only when the cell's timeout ends, reads it, and goes on without an error. A cell of one second stalls for
the whole timeout with its kernel idle, in some runs and not others (lesson 00's ``interact`` cell, in one run of
four seen here on the Triton-interpreter path under load; ``tests/viz/test_nbrun.py`` provokes it).

:class:`LessonClient` holds the echoes back until the cell's reply has come, and sends them between cells, when
nothing waits on the socket. The kernel receives the same updates in the same order, and the widget state saved in
the notebook is nbclient's own (its mimic writes it directly), so the file is what nbconvert writes, without the
stall."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.output_widget import OutputWidget

__all__ = ["LessonClient", "execute_notebook"]


class HeldBackOutputWidget(OutputWidget):
    """nbclient's Output-widget mimic whose echoes to the kernel wait for :meth:`LessonClient.send_held_back`."""

    def _publish_msg(self, msg_type: str, data: dict | None = None, metadata: dict | None = None,
                     buffers: list | None = None, **keys: Any) -> None:
        self.executor.held_back.append(lambda: super(HeldBackOutputWidget, self)._publish_msg(
            msg_type, data=data, metadata=metadata, buffers=buffers, **keys))


class LessonClient(NotebookClient):
    """A ``NotebookClient`` that sends the Output-widget echoes between cells, never while a reply is awaited."""

    def __init__(self, nb, **kwargs):
        super().__init__(nb, **kwargs)
        self.held_back: list = []
        self.widget_registry = {**self.widget_registry,
                                "@jupyter-widgets/output": {"OutputModel": HeldBackOutputWidget}}

    def send_held_back(self) -> int:
        """Send the echoes held back so far, in order; returns how many."""
        sends, self.held_back = self.held_back, []
        for send in sends:
            send()
        return len(sends)

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        finally:
            self.send_held_back()


def execute_notebook(path: str | Path, timeout: int = 300, kernel_name: str = "python3") -> None:
    """Run every cell of the notebook at ``path`` in a fresh kernel started in its folder, and save it in place,
    as ``jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=TIMEOUT`` does."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    LessonClient(nb, timeout=timeout, kernel_name=kernel_name,
                 resources={"metadata": {"path": str(path.resolve().parent)}}).execute()
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m seqlab.viz.nbrun", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=300, help="seconds a cell may take (default 300)")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        print(f"executing {path} ...", flush=True)
        execute_notebook(path, timeout=args.timeout)


if __name__ == "__main__":
    main()
