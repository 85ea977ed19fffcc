"""What every lesson file must be before anyone runs it: opened in JupyterLab it is not marked modified
(its kernel name is the one JupyterLab writes), it links the papers it follows, every figure also carries a
static PNG (for nbconvert and GitHub), and it stays small."""
import base64
import json
from pathlib import Path

import pytest

LESSONS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("0*.ipynb"))


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_file(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["metadata"]["kernelspec"] == {"display_name": "Python 3 (ipykernel)", "language": "python",
                                            "name": "python3"}, "JupyterLab rewrites any other kernel name on open"
    head = "".join(nb["cells"][0]["source"])
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    where = text if path.name.startswith("00") else head        # lesson 00 has the whole bibliography
    assert "arxiv.org/abs/" in where or "openreview.net/forum" in where, "the papers are linked"
    assert path.stat().st_size < 1.5e6, f"{path.name} is {path.stat().st_size / 1e6:.2f} MB"
    figures = [o["data"] for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
               if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert figures, "every lesson draws a plotly figure"
    missing = sum("image/png" not in data for data in figures)
    assert not missing, (f"{missing} of {len(figures)} figures have no static PNG for nbconvert and GitHub: "
                         "re-execute with python3 workbench.py execute")
    for data in figures:
        assert base64.b64decode(data["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_there_are_eight_lessons():
    assert [p.name[:2] for p in LESSONS] == ["00", "01", "02", "03", "04", "05", "06", "07"]
