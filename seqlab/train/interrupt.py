"""Stopping a long run cleanly when the machine asks: Ctrl-C (SIGINT), SIGTERM and SIGUSR1.

Schedulers stop a job with SIGTERM (SLURM, Kubernetes; torchrun forwards it to its workers and kills them
shortly after), and SLURM can send SIGUSR1 ahead of a time limit. Two places listen:

- while ``seqlab.train.fit`` runs its steps (:func:`stepping`), each of the three signals only sets a flag;
  the loop reads it between two steps (:func:`requested`), writes its checkpoint and raises
  :class:`TrainingInterrupted`: no optimizer step is ever half applied. A second signal while the first is pending
  stops at once (a step that hangs can still be broken);
- around a whole command (:func:`handling`: ``train``, ``experiment``, ``reproduce``), SIGTERM and SIGUSR1 outside
  a training loop raise :class:`Interrupted` at once, as Ctrl-C raises ``KeyboardInterrupt``.

A command that stops this way exits with ``128 + signal`` (:func:`exit_code`): 130 for Ctrl-C, 143 for SIGTERM.
What a signal cannot announce (``kill -9``, a node that fails) loses at most one period of the periodic saves
``fit`` makes when it has a checkpoint: :data:`CHECKPOINT_EVERY` steps or :data:`CHECKPOINT_SECONDS` seconds.
Handlers are installed from the main thread only; elsewhere (a thread of a notebook's kernel) nothing changes.

For tests, :func:`hold_for_signal` stops a run at a chosen step until it is signalled (``SEQLAB_HOLD_AT``), so a
test sends its signal at that step, whatever the machine's load.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

__all__ = ["Interrupted", "TrainingInterrupted", "SIGNALS", "CHECKPOINT_EVERY", "CHECKPOINT_SECONDS", "handling", "stepping", "requested",
           "take", "exit_code", "signal_name", "HOLD_AT", "hold_for_signal"]

CHECKPOINT_EVERY = 500           # steps between two periodic saves of a run that has a checkpoint ...
CHECKPOINT_SECONDS = 300.0       # ... or seconds of wall time, whichever comes first
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))
_state = {"requested": None}
HOLD_AT = "SEQLAB_HOLD_AT"      # tests only: "STEP:FOLDER" (hold_for_signal)
HOLD_LIMIT_S = 600.0            # a held run that nobody signals fails after this long instead of hanging


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def exit_code(signum: int) -> int:
    """The shell's code for a process ended by ``signum``: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum)


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal (``signum``). A ``KeyboardInterrupt``: whatever stops on Ctrl-C stops on it."""

    def __init__(self, signum: int = signal.SIGINT, message: str | None = None):
        self.signum = int(signum)
        super().__init__(message or f"stopped by {signal_name(signum)}")

    def __reduce__(self):                   # crosses process boundaries (the arena's workers) intact
        return (type(self), (self.signum, str(self)))


class TrainingInterrupted(Interrupted):
    """Ctrl-C, SIGTERM or SIGUSR1 during ``seqlab.train.fit`` (``signum``): ``step`` optimizer steps
    were done and, with a checkpoint, saved to ``checkpoint`` (``None`` without one; ``saved=False`` when a forced
    second signal came inside an optimizer step: the file then holds its last periodic save). Still a
    ``KeyboardInterrupt``: whatever stops on Ctrl-C stops on it."""

    def __init__(self, step: int, checkpoint: str | None, signum: int = signal.SIGINT, saved: bool = True):
        self.step, self.checkpoint, self.saved = step, checkpoint, saved
        if not checkpoint:
            where = " (no checkpoint was asked for: nothing saved)"
        elif saved:
            where = f", saved to {checkpoint}"
        else:
            where = f" inside a step: {checkpoint} keeps its last save"
        super().__init__(signum, f"stopped by {signal_name(signum)} at step {step}{where}")

    def __reduce__(self):
        return (type(self), (self.step, self.checkpoint, self.signum, self.saved))


def requested() -> int | None:
    """The signal a training loop has been asked to stop by, if any."""
    return _state["requested"]


def take() -> int | None:
    """:func:`requested`, cleared: the loop that stops for it has consumed it."""
    signum, _state["requested"] = _state["requested"], None
    return signum


def _flag(signum, frame) -> None:
    if _state["requested"] is not None:     # the second signal: stop now
        _state["requested"] = None
        raise Interrupted(signum)
    _state["requested"] = signum


def _raise(signum, frame) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _installed(handler, signals):
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, old in before.items():
            signal.signal(s, old)


def stepping():
    """Inside: SIGINT, SIGTERM and SIGUSR1 set the stop flag that a training loop reads between steps."""
    return _installed(_flag, (signal.SIGINT, *SIGNALS))


def handling():
    """Inside: SIGTERM and SIGUSR1 raise :class:`Interrupted` (as Ctrl-C raises ``KeyboardInterrupt``)."""
    return _installed(_raise, SIGNALS)


def hold_for_signal(step: int) -> None:
    """Tests only: with ``SEQLAB_HOLD_AT=STEP:FOLDER`` in the environment, a training loop that has finished step
    STEP writes ``FOLDER/<pid>.held`` and waits there until a signal asks it to stop (:func:`requested`); it then
    stops at that step. A test waits for the file, signals the run (or its launcher) and knows the step it stops
    at, instead of guessing it from the run's progress. Raises ``RuntimeError`` after :data:`HOLD_LIMIT_S` s."""
    at, _, folder = os.environ.get(HOLD_AT, "").partition(":")
    if not at or int(at) != step:
        return
    with open(os.path.join(folder, f"{os.getpid()}.held"), "w") as marker:
        marker.write(str(step))
    deadline = time.monotonic() + HOLD_LIMIT_S
    while requested() is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{HOLD_AT}: held at step {step} for {HOLD_LIMIT_S:g} s and no signal came")
        time.sleep(0.01)
