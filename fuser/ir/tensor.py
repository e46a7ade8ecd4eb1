"""TensorView: a tensor value in a fusion, described by its TensorDomain."""
from __future__ import annotations

from .base import Val
from .domain import IterDomain, MemoryType, TensorDomain
from .dtype import DataType


class TensorView(Val):
    """A tensor: its dtype, its domains (root, logical, allocation, loop), where it lives."""

    kind = "tv"
    #: the DeviceMesh a sharded fusion places it on (fuser.multidevice), None otherwise
    device_mesh = None

    def __init__(self, domain: TensorDomain, dtype: DataType, memory_type: MemoryType = MemoryType.Local) -> None:
        if dtype is DataType.Null:
            raise TypeError("a TensorView needs a concrete dtype, not DataType.Null")
        super().__init__(dtype)
        self.domain = domain
        self.memory_type = memory_type

    # --- the user's view ------------------------------------------------------------
    @property
    def logical(self) -> list[IterDomain]:
        return self.domain.logical

    @property
    def root(self) -> list[IterDomain]:
        return self.domain.maybe_root

    @property
    def allocation(self) -> list[IterDomain]:
        return self.domain.maybe_allocation

    @property
    def loop(self) -> list[IterDomain]:
        return self.domain.loop

    def logical_no_reductions(self) -> list[IterDomain]:
        """The axes of the tensor a user gets back (reduction axes are gone)."""
        return self.domain.no_reductions()

    @property
    def ndim(self) -> int:
        return len(self.logical_no_reductions())

    def tensor_axes(self) -> list[IterDomain]:
        """The axes the torch tensor passed for (or holding) this tensor has one dim each
        for, in dim order: its logical axes, or, for a fusion input whose logical domain
        adds broadcasts to its root, the root's (see `TensorDomain.added_broadcasts`)."""
        return self.domain.tensor_axes()
