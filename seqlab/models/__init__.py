"""Whole models and the registry: ``seqlab.models.build(name, *, vocab_size, num_classes=None, seq_len=None, **config)``.

Each family module registers its builders on import.
"""
from seqlab.models.common import SequenceModel, count_parameters  # noqa: F401
from seqlab.models.registry import build, config_keys, init_rule, names, register, unregister  # noqa: F401
from seqlab.models import baselines, relation, lrnn, lightnet, gateloop, delta  # noqa: F401,E402
