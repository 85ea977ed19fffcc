"""seqlab: an interactive workbench for linear-time sequence models.

Layers of the package, in the one direction imports flow:
``ops`` (tensor functions, each equation in all its modes; Triton kernels in ``kernels``)
-> ``layers`` (nn.Modules) -> ``models`` (whole models, ``build(name, ...)``).
``tasks`` makes data, ``train`` fits models, ``viz`` and ``readout`` read models and ops;
``generate`` (from ``seqlab.sampling``) samples from a causal language model; ``load(path)`` returns the
trained model a checkpoint holds.
"""
from seqlab import config, ops  # noqa: F401

__version__ = "0.1.0"


def __getattr__(name):
    # Heavier sub-packages load on first use, so `import seqlab` stays quick.
    import importlib

    if name in {"layers", "models", "tasks", "train", "viz", "readout", "sampling", "kernels",
                "experiments", "exercises"}:
        return importlib.import_module(f"seqlab.{name}")
    if name == "load":
        from seqlab.train import load_model

        return load_model
    if name == "generate":
        from seqlab.sampling import generate

        return generate
    raise AttributeError(f"module 'seqlab' has no attribute {name!r}")
