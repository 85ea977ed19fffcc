"""nn.Module blocks, one family per file: baselines (attention), relation (CausalRN/BiRN),
lrnn (LRNN/FST), lightnet, gateloop. Each block maps ``(B, L, D) -> (B, L, D)``."""
from seqlab.layers.attention import *  # noqa: F401,F403
from seqlab.layers.relation import *  # noqa: F401,F403
from seqlab.layers.lrnn import *  # noqa: F401,F403
from seqlab.layers.lightnet import *  # noqa: F401,F403
from seqlab.layers.gateloop import *  # noqa: F401,F403
