"""`nvfuser.pytorch_utils`: fuser's dtype conversions (the same module under any name)."""
import sys

from fuser import pytorch_utils as _pytorch_utils

sys.modules[__name__] = _pytorch_utils
