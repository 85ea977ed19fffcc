"""Deprecated name of :mod:`seqlab.readout` (it shadowed the standard library's ``inspect``).

``from seqlab import inspect`` keeps working and warns; use ``from seqlab import readout``.
"""
import warnings

from seqlab.readout import *  # noqa: F401,F403
from seqlab.readout import __all__  # noqa: F401

warnings.warn("seqlab.inspect is deprecated: it is now seqlab.readout (`from seqlab import readout`); "
              "the old name shadowed the standard library's inspect module", DeprecationWarning, stacklevel=2)
