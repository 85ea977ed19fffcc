"""Data: synthetic generators and real data sets as HuggingFace ``datasets``, offline, cached under ``data/``.

``seqlab.tasks.<name>(...)`` returns a :class:`Task`; every argument has a quick-profile default.
"""
from seqlab.tasks.base import IGNORE, Task  # noqa: F401
from seqlab.tasks.copying import copying  # noqa: F401
from seqlab.tasks.digits import digits  # noqa: F401
from seqlab.tasks.listops import listops  # noqa: F401
from seqlab.tasks.text import text  # noqa: F401
from seqlab.tasks.memory_horizon import memory_horizon  # noqa: F401
from seqlab.tasks.recall import mqar  # noqa: F401
from seqlab.tasks.mad import (fuzzy_in_context_recall, in_context_recall, memorization,  # noqa: F401
                              noisy_in_context_recall, selective_copying)

from seqlab.registry import Registry

NAMES = ("copying", "digits", "listops", "text", "memory_horizon", "mqar", "in_context_recall",
         "noisy_in_context_recall", "fuzzy_in_context_recall", "selective_copying", "memorization")
TASKS = Registry("task", argument="task")
for _name in NAMES:
    TASKS.register(_name, globals()[_name])


def get(name: str, **kwargs) -> Task:
    """A task by name (for the command line)."""
    task = TASKS.lookup(name)(**kwargs)
    task.task_config = dict(kwargs)     # what rebuilds it: checkpoints carry this
    return task
