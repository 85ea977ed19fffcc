"""The lessons are written for a graduate student new to the topic: plain prose by a measure (``tools/prose.py``),
and a first screen that invites (short, a question, papers by their titles, a first code cell that shows something)."""
import importlib.util
import json
import re
import sys

import pytest
from helpers import REPO

LESSONS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
FIRST_SCREEN_WORDS = 180        # markdown words before the first code cell
PAPER_NUMBER = re.compile(r"\b00[0-4]\b")     # the repository's numbers of the papers


def _prose():
    """``tools/prose.py``: tooling beside ``workbench.py``, not a module of the runtime package."""
    spec = importlib.util.spec_from_file_location("seqlab_prose", REPO / "tools" / "prose.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def _cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem[:2])
def test_prose_meets_the_targets(path):
    stats = _prose().prose_stats(_cells(path))
    assert stats.sentences >= 30, f"{path.name}: {stats.sentences} sentences measured"
    assert not stats.misses(), f"{path.name}: {'; '.join(stats.misses())}"


def test_the_measure_finds_what_it_should():
    prose = _prose()
    long = "Long " + " ".join(["word"] * 44) + "."
    cells = [{"cell_type": "markdown", "source": [f"Short one here (aside) (more). {long}\n\n# A heading is not prose\n\n"
                                                  "See [the paper](https://x.org/a_b.c) and $x_t = a x_{t-1}$ now."]}]
    stats = prose.prose_stats(cells)
    assert stats.sentences == 3 and stats.over_40 == pytest.approx(1 / 3) and stats.parens == pytest.approx(2 / 3)
    assert stats.max_paragraph == 5 + 45 and stats.median == 6
    assert "parens" in " ".join(stats.misses()) and "over_40" in " ".join(stats.misses())


def _first_screen(path) -> tuple[list[dict], dict]:
    cells = _cells(path)
    first_code = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    return cells[:first_code], cells[first_code]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem[:2])
def test_the_first_screen_is_short_names_papers_by_title_and_shows_something(path):
    markdown, first_code = _first_screen(path)
    text = " ".join(re.sub(r"\]\([^)]*\)", "]", "".join(c["source"])) for c in markdown)   # link URLs out
    words = len(re.findall(r"[A-Za-z0-9][\w'’-]*", re.sub(r"<[^>]+>", " ", text)))
    assert words <= FIRST_SCREEN_WORDS, f"{path.name}: {words} words before the first code cell"
    numbers = PAPER_NUMBER.findall(text)
    assert not numbers, f"{path.name}: the first screen names papers by the repository's numbers {numbers}"
    shown = [o for o in first_code.get("outputs", []) if o.get("output_type") in ("stream", "display_data",
                                                                                   "execute_result")]
    assert shown, f"{path.name}: the first code cell shows nothing"
