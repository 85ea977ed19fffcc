"""nn.Module blocks, one family per file: baselines (attention), relation (CausalRN/BiRN),
lrnn (LRNN/FST), lightnet, gateloop, delta (DeltaNet, Gated DeltaNet); and conv, the short convolution a block
may put on its mixing layer's input (``short_conv``). Each block maps ``(B, L, D) -> (B, L, D)``."""
from seqlab.layers.conv import *  # noqa: F401,F403
from seqlab.layers.attention import *  # noqa: F401,F403
from seqlab.layers.relation import *  # noqa: F401,F403
from seqlab.layers.lrnn import *  # noqa: F401,F403
from seqlab.layers.lightnet import *  # noqa: F401,F403
from seqlab.layers.gateloop import *  # noqa: F401,F403
from seqlab.layers.delta import *  # noqa: F401,F403
