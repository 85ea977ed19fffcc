"""Every equation of the papers as pure tensor functions, each in all its equivalent modes.

One file per op family; each reads top to bottom as: the paper's equation, the float64-exact
naive form, then the fast forms (and ``mode="triton"`` through ``seqlab.kernels``).
"""
from seqlab.ops._checks import below, check_mode, check_tensor, relative_error  # noqa: F401
from seqlab.ops.decay import *  # noqa: F401,F403
from seqlab.ops.delta import *  # noqa: F401,F403
from seqlab.ops.gateloop import *  # noqa: F401,F403
from seqlab.ops.lru import *  # noqa: F401,F403
from seqlab.ops.positional import *  # noqa: F401,F403
from seqlab.ops.relation import *  # noqa: F401,F403
from seqlab.ops.scan import *  # noqa: F401,F403
