"""`nvfuser._C`: the classes nvFuser's extension module exposes (isinstance checks such
as Thunder's `isinstance(x, nvfuser._C.Scalar)` see fuser's classes)."""
import sys

from fuser import (  # noqa: F401 - nvFuser's extension names
    DataType,
    FusionCache,
    ParallelType,
    FusionDefinition,
    Scalar,
    Tensor,
    Vector,
    clone,
    compute_contiguity,
    compute_tensor_descriptor,
)
from fuser.frontend.profile import FusionProfile, KernelProfile  # noqa: F401

#: the base nvFuser's Python FusionDefinition derives from
_FusionDefinition = FusionDefinition


def serialize() -> None:
    """Accepted for nvFuser scripts: fuser's kernel cache is on disk already."""


# imported as `nvfuser._C` too: one module under both names
sys.modules[__name__] = sys.modules.get("fuser.compat.nvfuser._C", sys.modules[__name__])

__all__ = [
    "DataType",
    "ParallelType",
    "FusionCache",
    "FusionDefinition",
    "Scalar",
    "Tensor",
    "Vector",
    "clone",
    "compute_contiguity",
    "compute_tensor_descriptor",
    "FusionProfile",
    "KernelProfile",
    "serialize",
]
