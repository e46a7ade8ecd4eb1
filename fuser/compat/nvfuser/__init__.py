"""An importable stand-in for `nvfuser`: `sys.modules["nvfuser"] = fuser.compat.nvfuser`
lets unmodified nvFuser scripts (and Thunder's nvFuser executor) run on fuser.

It reports the nvFuser frontend version it implements (`version()`); fuser keeps its
own `fuser.__version__`. Submodules (`nvfuser._C`, `nvfuser.nvfuser_version`,
`nvfuser.pytorch_utils`, `nvfuser.multidevice`) import under either name and are the same objects.
"""
from fuser import pytorch_utils  # noqa: F401 - nvFuser's submodule
from fuser.compat.version import NVFUSER_VERSION as __version__

from . import _C, multidevice, nvfuser_version  # noqa: F401 - nvFuser's submodules
from fuser.multidevice import DeviceMesh  # noqa: F401 - nvFuser's older top-level name
from ._C import *  # noqa: F401,F403 - nvFuser re-exports its extension's names
from ._C import __all__ as _C_names


def version() -> "nvfuser_version.Version":
    """The nvFuser frontend version fuser implements (a Version: compares with strings)."""
    return __version__


def enable_automatic_serialization() -> None:
    """Accepted for nvFuser scripts; fuser caches kernels on disk by itself."""


def disable_automatic_serialization() -> None:
    """Accepted for nvFuser scripts; fuser caches kernels on disk by itself."""


__all__ = [
    *_C_names,
    "version",
    "pytorch_utils",
    "nvfuser_version",
    "multidevice",
    "DeviceMesh",
    "enable_automatic_serialization",
    "disable_automatic_serialization",
]
