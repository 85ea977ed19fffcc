"""The one learning-rate search, used by the arena (:func:`seqlab.experiments.arena_grid.search_rates`) and by the
claims (:func:`seqlab.claims.run.search_grid`).

A search runs seed 0 at every point of a geometric grid of rates (``r_0 * s ** k``) and keeps the point with the
best validation score (:func:`best_rate`). While that best sits at an edge of the grid, the grid is extended one
step beyond that edge (:func:`extend_grid`), at most :data:`MAX_EXTENSIONS` steps a side: the chosen rate then lies
strictly inside what was searched, or the search says it is still at an edge once the extensions ran out.

The rule's records. Every record made since the rule was one says ``max_extensions``. Before, the arena's grid
(``results/arena/``) already stopped at 2 steps a side; the claims' searches (``results/*.json`` whose
``rate_search`` lacks ``max_extensions``) went up to 3 a side.
"""
from __future__ import annotations

from typing import Callable, Hashable

__all__ = ["MAX_EXTENSIONS", "best_rate", "extend_grid", "at_edge"]

MAX_EXTENSIONS = 2      # grid steps a search may add beyond each edge of its starting grid


def best_rate(scores: dict, points: list) -> Hashable:
    """The point of ``points`` with the best score (``scores[point]``, larger is better). Ties (a task every rate
    solves) go to a point inside the grid before one at its edge, then to the smaller: a tie at an edge is no reason
    to search further."""
    points = sorted(points)
    top = max(scores[p] for p in points)
    tied = [p for p in points if scores[p] == top]
    inside = [p for p in tied if len(points) >= 3 and p not in (points[0], points[-1])]
    return (inside or tied)[0]


def extend_grid(scores: dict, grid: list, lower: Callable, higher: Callable) -> list:
    """The points a search needs, given the scores it has so far (``{point: score}``): ``grid`` (sorted), and while
    its best (:func:`best_rate`) sits at an edge, the next point beyond that edge (``lower(first)`` or
    ``higher(last)``: one grid step), at most :data:`MAX_EXTENSIONS` a side. The search is finished when every
    point returned has a score."""
    points = sorted(grid)
    added = {"low": 0, "high": 0}
    while all(p in scores for p in points):
        best = best_rate(scores, points)
        if best == points[0] and added["low"] < MAX_EXTENSIONS:
            points.insert(0, lower(points[0]))
            added["low"] += 1
        elif best == points[-1] and added["high"] < MAX_EXTENSIONS:
            points.append(higher(points[-1]))
            added["high"] += 1
        else:
            break
    return points


def at_edge(chosen, points: list) -> bool:
    """Whether a chosen point is not known to be the best: a grid of fewer than three, or a choice at its edge (the
    extensions ran out)."""
    return chosen is not None and (len(points) < 3 or chosen in (min(points), max(points)))
