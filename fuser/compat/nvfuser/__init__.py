"""An importable stand-in for `nvfuser`: `sys.modules["nvfuser"] = fuser.compat.nvfuser`
lets unmodified nvFuser scripts (and Thunder's nvFuser executor) run on fuser.

It reports the nvFuser frontend version it implements (`version()`); fuser keeps its
own `fuser.__version__`. Submodules (`nvfuser._C`, `nvfuser.nvfuser_version`,
`nvfuser.pytorch_utils`) import under either name and are the same objects.
"""
from fuser import (  # noqa: F401 - re-exported as nvfuser's names
    DataType,
    FusionCache,
    FusionDefinition,
    Scalar,
    Tensor,
    Vector,
    clone,
    compute_contiguity,
    compute_tensor_descriptor,
    pytorch_utils,
)
from fuser.compat.version import NVFUSER_VERSION as __version__

from . import _C, nvfuser_version  # noqa: F401 - nvFuser's submodules
from ._C import FusionProfile, KernelProfile, serialize  # noqa: F401


def version() -> "nvfuser_version.Version":
    """The nvFuser frontend version fuser implements (a Version: compares with strings)."""
    return __version__


def enable_automatic_serialization() -> None:
    """Accepted for nvFuser scripts; fuser caches kernels on disk by itself."""


def disable_automatic_serialization() -> None:
    """Accepted for nvFuser scripts; fuser caches kernels on disk by itself."""


__all__ = [
    "DataType",
    "FusionCache",
    "FusionDefinition",
    "Scalar",
    "Tensor",
    "Vector",
    "clone",
    "compute_contiguity",
    "compute_tensor_descriptor",
    "version",
    "pytorch_utils",
    "nvfuser_version",
    "serialize",
    "enable_automatic_serialization",
    "disable_automatic_serialization",
]
