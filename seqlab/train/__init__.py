"""The training floor: the loop (:mod:`.loop`), its configuration (:mod:`.config`), checkpoints
(:mod:`.checkpoint`), histories (:mod:`.history`), signals and interruption (:mod:`.interrupt`), data-parallel
runs under torchrun (:mod:`.distributed`) and the learning-rate schedule (:mod:`.schedule`).

``seqlab.train.fit(model, task, TrainConfig(...))`` and ``seqlab.train.evaluate(model, task)`` are the public
road; every name below is importable from here as before the floor became a package.
"""
from seqlab.train.loop import *  # noqa: F401,F403
from seqlab.train.loop import StopTraining, fit, evaluate, __all__  # noqa: F401
from seqlab.train.history import observing, record_run  # noqa: F401
