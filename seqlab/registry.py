"""One registry for every name a user types: models, tasks, experiments, claims and exercises.

A :class:`Registry` maps names to what they stand for (a builder, a task, an experiment function, a claim, an
exercise); ``@registry.register(name)`` fills it, a name registered twice is refused (unless it is replaced on
purpose), :meth:`Registry.unregister` takes a name out again, and :meth:`Registry.lookup` refuses an unknown name
with the nearest known one ("did you mean ...?") and the list of them all.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["Registry"]


class Registry(Mapping):
    """``name -> entry``. ``what``: the kind of name in messages (``"model"``); ``argument``: the argument that
    carried it (``"name"``, ``"claim"``); ``cutoff``: how near a name must be to be suggested (difflib's ratio)."""

    def __init__(self, what: str, *, argument: str | None = None, cutoff: float = 0.6):
        self.what, self.argument, self.cutoff = what, argument, cutoff
        self._entries: dict[str, Any] = {}

    def register(self, name: str, entry: Any = None, *, replace: bool = False):
        """``@registry.register(name)`` above a function, or ``registry.register(name, entry)``. ``replace=True``
        puts ``entry`` in the place of one already registered under ``name`` (a notebook cell run again)."""
        def add(value):
            if name in self._entries and not replace:
                raise ValueError(f"{self.what} {name!r} is registered twice (replace=True replaces it)")
            self._entries[name] = value
            return value

        return add if entry is None else add(entry)

    def unregister(self, name: str):
        """Remove ``name`` and return its entry; :meth:`unknown`'s error where it is not here."""
        entry = self.lookup(name)
        del self._entries[name]
        return entry

    def names(self) -> list[str]:
        return sorted(self._entries)

    def unknown(self, name) -> ValueError:
        """The error for a name that is not here: the nearest one, then every one."""
        near = difflib.get_close_matches(str(name), list(self._entries), n=1, cutoff=self.cutoff)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        where = f"{self.argument}: " if self.argument else ""
        return ValueError(f"{where}unknown {self.what} {name!r}{hint} (valid: {', '.join(self._entries)})")

    def lookup(self, name):
        """The entry of ``name``; :meth:`unknown`'s error otherwise."""
        if name not in self._entries:
            raise self.unknown(name)
        return self._entries[name]

    def __getitem__(self, name):
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what}: {', '.join(self._entries)})"
