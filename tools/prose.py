"""Prose statistics of the lessons' markdown cells, for plain writing (the same measure as the project's
``prose_stats.py``).

Per notebook: sentences counted, median words a sentence, 90th percentile, the share of sentences over 40 words,
parentheses a sentence, and the longest paragraph in words. Display maths, inline maths, code spans, HTML tags and
link targets are removed first (each cell on its own), as are headings, tables, images and list markers.

    python3 tools/prose.py notebooks/*.ipynb
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass

# The targets every lesson meets (a sentence's median length, long sentences, asides, the longest paragraph).
TARGETS = {"median": 18, "over_40": 0.05, "parens": 0.4, "max_paragraph": 150}


def plain_text(md: str) -> str:
    """A markdown cell as the words a reader reads: maths and code as ``X``, links as their text, no HTML tags."""
    md = re.sub(r"\$\$.*?\$\$", " X ", md, flags=re.S)
    md = re.sub(r"\$[^$\n]*\$", " X ", md)
    md = re.sub(r"`[^`]*`", " X ", md)
    md = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", md)
    return re.sub(r"<[^>]+>", " ", md)


def cell_sentences(md: str) -> tuple[list[tuple[int, int]], list[int]]:
    """(words, parentheses) of each sentence of three words or more, and the words of each paragraph."""
    sents, paras = [], []
    for p in re.split(r"\n\s*\n", plain_text(md)):
        if not p.strip() or p.lstrip().startswith(("#", "|", "![")):
            continue
        p = re.sub(r"^\s*(?:[*\-]|\d+\.)\s+", "", p, flags=re.M).replace("\n", " ")
        paras.append(len(p.split()))
        for s in re.split(r"(?<=[.!?:;])\s+(?=[A-Z*(\"'])", p):
            words = s.split()
            if len(words) >= 3:
                sents.append((len(words), s.count("(")))
    return sents, paras


@dataclass
class ProseStats:
    sentences: int
    median: float
    p90: int
    over_40: float
    parens: float
    max_paragraph: int

    def misses(self) -> list[str]:
        """The targets this text misses, in words."""
        return [f"{k} {getattr(self, k):.3g} > {v}" for k, v in TARGETS.items() if getattr(self, k) > v]


def prose_stats(cells: list[dict]) -> ProseStats:
    sents, paras = [], []
    for c in cells:
        if c["cell_type"] == "markdown":
            s, p = cell_sentences("".join(c["source"]))
            sents += s
            paras += p
    n = sorted(w for w, _ in sents)
    return ProseStats(len(n), statistics.median(n), n[int(0.9 * (len(n) - 1))], sum(w > 40 for w in n) / len(n),
                      sum(p for _, p in sents) / len(sents), max(paras))


def main(paths: list[str]) -> None:
    print(f"{'lesson':44s} {'sent':>5s} {'median':>6s} {'p90':>4s} {'>40 w':>6s} {'( /sent':>7s} {'max para':>8s}")
    for path in paths:
        s = prose_stats(json.load(open(path, encoding="utf-8"))["cells"])
        print(f"{path.split('/')[-1]:44s} {s.sentences:5d} {s.median:6.0f} {s.p90:4d} {s.over_40:6.0%} "
              f"{s.parens:7.2f} {s.max_paragraph:8d}  {'; '.join(s.misses()) or 'meets the targets'}")


if __name__ == "__main__":
    main(sys.argv[1:] or sys.exit(__doc__))
