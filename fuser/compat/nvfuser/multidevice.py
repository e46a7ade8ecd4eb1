"""`nvfuser.multidevice`: DeviceMesh, Communicator and Sharding are fuser.multidevice's."""
import sys

from fuser import multidevice as _multidevice

# imported as `nvfuser.multidevice` too: one module under both names
sys.modules[__name__] = _multidevice
