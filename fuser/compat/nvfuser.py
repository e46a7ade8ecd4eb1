"""An importable stand-in for `nvfuser`: `sys.modules["nvfuser"] = fuser.compat.nvfuser`
lets unmodified nvFuser scripts run on fuser."""
import sys as _sys

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
    version,
)

# `from nvfuser.pytorch_utils import ...` resolves through sys.modules: register the
# submodule under both names (setdefault: a real nvfuser installation keeps its own)
_sys.modules.setdefault(__name__ + ".pytorch_utils", pytorch_utils)
_sys.modules.setdefault("nvfuser.pytorch_utils", pytorch_utils)
