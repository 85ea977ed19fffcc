"""``seqlab.viz.nbrun``: lessons executed headlessly never send the Output widget's echoes on the shell socket while
a cell's reply is awaited there (the race that stalled ``interact`` cells for their whole timeout under nbclient),
and save the same captured output in the widget state as nbclient does.

Checked by what is sent when, not by how long anything takes: each echo records whether a reply was being awaited."""
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.output_widget import OutputWidget

from seqlab.viz import nbrun

REAL_POLL, REAL_PUBLISH = NotebookClient._async_poll_for_reply, OutputWidget._publish_msg
CELLS = ["import ipywidgets as widgets",
         "def show(x=3):\n    for i in range(40):\n        print('line', i, x, flush=True)\n"
         "widgets.interact(show, x=(0, 10));",
         "print('after')"]


def _run(client_class, monkeypatch):
    """Execute the three cells with ``client_class``; returns the notebook and, for every echo sent, whether a
    reply was awaited on the shell socket at that moment."""
    awaiting, echoes = [False], []

    async def poll(self, *args, **kwargs):
        awaiting[0] = True
        try:
            return await REAL_POLL(self, *args, **kwargs)
        finally:
            awaiting[0] = False

    def publish(self, *args, **kwargs):
        echoes.append(awaiting[0])
        return REAL_PUBLISH(self, *args, **kwargs)

    monkeypatch.setattr(NotebookClient, "_async_poll_for_reply", poll)
    monkeypatch.setattr(OutputWidget, "_publish_msg", publish)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    client_class(nb, timeout=600, kernel_name="python3").execute()
    return nb, echoes


def _captured(nb) -> str:
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    return "".join(o.get("text", "") for model in state.values() if model["model_name"] == "OutputModel"
                   for o in model["state"].get("outputs", []))


@pytest.mark.slow      # two Jupyter kernels
def test_echoes_wait_for_the_reply_and_the_saved_widget_keeps_the_output(monkeypatch):
    stock, stock_echoes = _run(NotebookClient, monkeypatch)
    held, held_echoes = _run(nbrun.LessonClient, monkeypatch)
    assert any(stock_echoes), "nbclient's own mimic sends while a reply is awaited (the hazard)"
    assert held_echoes and not any(held_echoes), "every echo is sent between cells"
    assert len(held_echoes) == len(stock_echoes)
    assert "line 39 3" in _captured(held) and _captured(held) == _captured(stock)
    assert held.cells[2].outputs[0]["text"] == "after\n"


def test_execute_notebook_saves_in_place(tmp_path):
    path = tmp_path / "lesson.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nprint(os.getcwd())")]),
                   path)
    nbrun.execute_notebook(path, timeout=600)
    cell = nbformat.read(path, as_version=4).cells[0]
    assert cell.execution_count == 1 and cell.outputs[0]["text"].strip() == str(tmp_path.resolve())
