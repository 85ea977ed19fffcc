"""What a claim is, as data (:class:`Claim`, with its positive :class:`Control`), and how one seed of it runs: a
registered experiment at the profile's sizes, its numbers read into one value per arm."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

__all__ = ["KeyPath", "Control", "Claim", "read_at"]

KeyPath = tuple     # keys (and list indices) into an experiment's result: ("at_longest", "steps")


def read_at(result, path: KeyPath):
    """The value of ``result`` at ``path`` (``()``: the whole of it)."""
    for key in path:
        result = result[key]
    return result


@dataclass(frozen=True)
class Control:
    """A claim's positive control: the arm known to solve the task (``source`` says how it is known), which must
    reach ``threshold`` in every seed (the value at ``path`` of the experiment's result, the claim's ``values``
    when None); else the claim is :data:`INCONCLUSIVE` and its arms are not compared."""

    arm: str
    threshold: float
    source: str
    path: KeyPath | None = None


@dataclass(frozen=True)
class Claim:
    """One headline claim, as data. A seed runs the registered ``experiment`` (with ``arguments``) at the profile's
    sizes (``table()``: the size table it runs at) and reads its result: ``values`` is where the per-arm numbers
    are (``{arm: number}``); ``validation`` the same on the validation split, ``censored`` which of them never
    reached their target (both optional); ``details`` names what the figure draws (``{name: path}``). A path is
    the keys into the result, ``()`` the whole of it."""

    id: str
    paper: str
    statement: str
    metric: str
    higher_is_better: bool
    better: str
    rivals: tuple[str, ...]
    paper_values: dict
    paper_data: str              # what the paper values were measured on, and seqlab's stand-in, in a few words
    stand_in: str
    experiment: str
    table: Callable
    values: KeyPath
    arguments: dict = field(default_factory=dict)
    validation: KeyPath | None = None
    censored: KeyPath | None = None  # the metric can be censored (steps to a target that a run may never reach)
    details: dict = field(default_factory=dict)
    control: Control | None = None
    one_rate: str | None = None      # why it runs at its profile's one rate (no search: nothing trained to compare)
    choose: KeyPath | None = None    # where a rate search reads each arm (default ``validation``), in the metric's way

    @property
    def arms(self) -> tuple[str, ...]:
        return (self.better, *self.rivals)

    def rate_keys(self, sizes: dict) -> tuple[str, ...]:
        """The learning rates among ``sizes``: a rate search multiplies each of them by the same factor."""
        return tuple(k for k in ("lr", "transformer_lr") if k in sizes)

    def rate_key(self, arm: str, sizes: dict) -> str:
        """The size that is ``arm``'s learning rate (the Transformer's own where the sizes give it one)."""
        return "transformer_lr" if arm == "transformer" and "transformer_lr" in sizes else "lr"

    def sizes(self, profile: str) -> dict:
        """The sizes this claim runs at in ``profile``."""
        from seqlab import experiments

        return experiments.profile_sizes(self.table(), profile, {})

    def run(self, seed: int, *, profile, folder, progress: bool, rates: dict | None = None) -> dict:
        """One seed: ``{"values": {arm: number}}``, with ``"validation"``, ``"censored"``, ``"choose"`` (what the
        rate search reads), ``"control"`` (the control arm's value) and ``"details"`` where the claim has them.
        ``rates`` (``{"lr": ..., "transformer_lr": ...}``) replace the profile's learning rates."""
        from seqlab import experiments

        if self.experiment in experiments.WITHOUT_CONFIG:     # a timing: its sizes are its arguments
            out = experiments.run(self.experiment, **self.sizes(profile), **self.arguments, seed=seed,
                                  progress=progress)
        else:
            out = experiments.run(self.experiment, **self.arguments, profile=profile, seed=seed,
                                  checkpoint_dir=folder, progress=progress, **(rates or {}))
        result = {"values": {arm: read_at(out, self.values)[arm] for arm in self.arms}}
        for key in ("validation", "censored", "choose"):
            if getattr(self, key) is not None:
                result[key] = {arm: read_at(out, getattr(self, key))[arm] for arm in self.arms}
        if self.control is not None:
            result["control"] = read_at(out, self.control.path or self.values)[self.control.arm]
        if self.details:
            result["details"] = {name: read_at(out, path) for name, path in self.details.items()}
        return result
