"""Sharded fusions over devices (nvFuser's `multidevice`): DeviceMesh, the Communicator
over torch.distributed's default group, and sharding propagation (a pre-segmentation
pass that inserts the reshardings the host program runs as communications)."""
from .communicator import Communicator
from .mesh import DeviceMesh
from .sharding import Sharding

__all__ = ["Communicator", "DeviceMesh", "Sharding"]
