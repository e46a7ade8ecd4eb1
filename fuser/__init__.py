"""fuser: a fusion code generator for NVIDIA GPUs with nvFuser's Python API.

    from fuser import FusionDefinition, DataType
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.relu(t0))
    (out,) = fd.execute([torch.randn(4, 8)])
"""
from . import multidevice, pytorch_utils
from .frontend import FusionCache, FusionDefinition, Scalar, Tensor, Vector, clone
from .ir import DataType, ParallelType
from .runtime.descriptor import compute_contiguity, compute_tensor_descriptor

__version__ = "0.1.0"


def version() -> str:
    """fuser's version string."""
    return __version__


__all__ = [
    "FusionDefinition",
    "FusionCache",
    "DataType",
    "ParallelType",
    "Tensor",
    "Scalar",
    "Vector",
    "clone",
    "version",
    "compute_contiguity",
    "compute_tensor_descriptor",
    "pytorch_utils",
    "multidevice",
]
