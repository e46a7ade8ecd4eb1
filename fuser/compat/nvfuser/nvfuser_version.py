"""`nvfuser.nvfuser_version`: `Version` and `__version__` (the same objects under any name)."""
import sys

from fuser.compat import version as _version

# imported as `nvfuser.nvfuser_version` too: that name resolves to the one module
sys.modules[__name__] = _version
