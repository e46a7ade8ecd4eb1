"""Iteration domains, the transforms between them, and a tensor's domains."""
from __future__ import annotations

import enum
from typing import Sequence

from .base import Expr, Scalar, Val, current_fusion
from .dtype import DataType


class IterType(enum.Enum):
    """What an axis is: iterated over, reduced, or a broadcast of extent 1."""

    Iteration = "i"
    Reduction = "r"
    Broadcast = "b"


class ParallelType(enum.Enum):
    """How a loop axis maps onto the GPU; the value is its printed name."""

    Serial = "S"
    BIDx = "blockIdx.x"
    BIDy = "blockIdx.y"
    BIDz = "blockIdx.z"
    TIDx = "threadIdx.x"
    TIDy = "threadIdx.y"
    TIDz = "threadIdx.z"
    Vectorize = "V"
    Unroll = "UR"
    Unswitch = "US"
    Stream = "StreamIdx"
    #: nvFuser's Python spelling (`ParallelType.stream`)
    stream = "StreamIdx"
    #: sharded over the devices of the tensor's DeviceMesh: each holds one block of the axis
    DIDx = "DIDx"
    #: nvFuser's Python spellings (`ParallelType.mesh_x`, `ParallelType.grid_x`, ...)
    mesh_x = "DIDx"
    grid_x = "blockIdx.x"
    grid_y = "blockIdx.y"
    grid_z = "blockIdx.z"
    block_x = "threadIdx.x"
    block_y = "threadIdx.y"
    block_z = "threadIdx.z"
    vectorize = "V"
    unroll = "UR"
    unswitch = "US"
    serial = "S"

    @property
    def is_block(self) -> bool:
        return self in (ParallelType.BIDx, ParallelType.BIDy, ParallelType.BIDz)

    @property
    def is_thread(self) -> bool:
        return self in (ParallelType.TIDx, ParallelType.TIDy, ParallelType.TIDz)


class MemoryType(enum.Enum):
    """Where a tensor lives; the value is the letter in its printed name (`T3_g`)."""

    Global = "g"
    Local = "l"
    Shared = "s"


def _as_extent(extent: Scalar | int) -> Scalar:
    if isinstance(extent, Scalar):
        if not extent.dtype.is_integral:
            raise TypeError(f"an extent must be an integer scalar, got {extent.dtype}")
        return extent
    return Scalar(DataType.Int, int(extent))


class IterDomain(Val):
    """One axis of a tensor: `[start, start + extent)` iterated as `iter_type`.

    A broadcast axis has extent 1; an *expanded* broadcast also has `expanded_extent`,
    the size it presents to the user while occupying no memory (stride 0).
    """

    kind = "id"

    def __init__(
        self,
        extent: Scalar | int,
        iter_type: IterType = IterType.Iteration,
        *,
        expanded_extent: Scalar | int | None = None,
        parallel_type: ParallelType = ParallelType.Serial,
        is_rfactor_product: bool = False,
        start: Scalar | int = 0,
    ) -> None:
        super().__init__(DataType.Int)
        self.extent = _as_extent(extent)
        self.start = self.fusion._zero() if isinstance(start, int) and start == 0 else _as_extent(start)
        self.iter_type = iter_type
        self.expanded_extent = _as_extent(expanded_extent) if expanded_extent is not None else None
        if self.expanded_extent is not None and iter_type is not IterType.Broadcast:
            raise ValueError("only a broadcast IterDomain can have an expanded extent")
        self.parallel_type = parallel_type
        self.is_rfactor_product = is_rfactor_product

    @property
    def is_reduction(self) -> bool:
        return self.iter_type is IterType.Reduction

    @property
    def is_broadcast(self) -> bool:
        return self.iter_type is IterType.Broadcast

    @property
    def is_iteration(self) -> bool:
        return self.iter_type is IterType.Iteration

    @property
    def has_expanded_extent(self) -> bool:
        return self.expanded_extent is not None

    @property
    def user_extent(self) -> Scalar:
        """The extent a user sees: the expanded one for an expanded broadcast."""
        return self.expanded_extent if self.expanded_extent is not None else self.extent

    def clone_like(
        self,
        *,
        iter_type: IterType | None = None,
        extent: Scalar | int | None = None,
        expanded_extent: Scalar | int | None | bool = False,
        is_rfactor_product: bool = False,
    ) -> "IterDomain":
        """A fresh IterDomain with this one's properties, some replaced.

        `expanded_extent=False` keeps the current expanded extent; None drops it.
        """
        return IterDomain(
            self.extent if extent is None else extent,
            self.iter_type if iter_type is None else iter_type,
            expanded_extent=self.expanded_extent if expanded_extent is False else expanded_extent,
            is_rfactor_product=is_rfactor_product,
            start=self.start,
        )


class Split(Expr):
    """`in` -> (`outer`, `inner`) by `factor`; `inner_split` says which side has the factor."""

    attr_names = ("factor", "inner_split")
    tensor_level = False


class Merge(Expr):
    """(`outer`, `inner`) -> `out` with extent outer * inner."""

    tensor_level = False


class Resize(Expr):
    """`in` widened by `left_expand` and `right_expand` (negative: narrowed), for pad and slice."""

    attr_names = ("left_expand", "right_expand")
    tensor_level = False


class TensorDomain:
    """A tensor's axes: root (as defined), logical (as seen), allocation (memory order), loop.

    `root` is None when it equals `logical`; `allocation` is None when it is `logical`.
    `contiguity` has one entry per allocation axis: True/False, None for broadcast and
    reduction axes.
    """

    def __init__(
        self,
        logical: Sequence[IterDomain],
        *,
        root: Sequence[IterDomain] | None = None,
        allocation: Sequence[IterDomain] | None = None,
        contiguity: Sequence[bool | None] | None = None,
    ) -> None:
        self.logical: list[IterDomain] = list(logical)
        self.root: list[IterDomain] | None = list(root) if root is not None else None
        self.allocation: list[IterDomain] | None = list(allocation) if allocation is not None else None
        self.loop: list[IterDomain] = list(self.logical)
        alloc = self.maybe_allocation
        if contiguity is None:
            contiguity = [None if (i.is_broadcast or i.is_reduction) else True for i in alloc]
        if len(contiguity) != len(alloc):
            raise ValueError(f"contiguity has {len(contiguity)} entries for {len(alloc)} allocation axes")
        self.contiguity: list[bool | None] = list(contiguity)

    @property
    def maybe_root(self) -> list[IterDomain]:
        return self.root if self.root is not None else self.logical

    @property
    def maybe_allocation(self) -> list[IterDomain]:
        return self.allocation if self.allocation is not None else self.logical

    @property
    def has_root(self) -> bool:
        return self.root is not None

    def no_reductions(self) -> list[IterDomain]:
        return [i for i in self.logical if not i.is_reduction]

    def added_broadcasts(self) -> list[IterDomain]:
        """The broadcast axes the logical domain inserts among the root's axes with no
        transform between them (`T7[iS{i0}, bS{1}]` with root `(iS{i0})`); [] unless the
        logical domain is exactly the root, in order, plus such axes.

        A fusion input of this form (seed 000, folded broadcasts) is passed as a tensor of
        its root: the added axes exist in no memory.
        """
        if self.root is None:
            return []
        root = [i for i in self.root if not i.is_reduction]
        held = set(root)
        logical = self.no_reductions()
        added = [i for i in logical if i not in held]
        if not added or [i for i in logical if i in held] != root:
            return []
        if not all(i.is_broadcast and i.definition is None for i in added):
            return []
        return added

    def tensor_axes(self) -> list[IterDomain]:
        """The axes a torch tensor holding this tensor has one dim each for, in dim order:
        the logical axes (no reductions), or the root's where the logical domain only adds
        broadcasts to it (`added_broadcasts`)."""
        if self.added_broadcasts():
            return [i for i in self.root if not i.is_reduction]
        return self.no_reductions()

    def all_ids(self) -> list[IterDomain]:
        """Every IterDomain of every domain, each once, root first."""
        seen: dict[IterDomain, None] = {}
        for dom in (self.maybe_root, self.logical, self.maybe_allocation, self.loop):
            for i in dom:
                seen.setdefault(i, None)
        return list(seen)


def split(id_: IterDomain, factor: Scalar | int, inner_split: bool = True) -> tuple[IterDomain, IterDomain]:
    """Split `id_` into (outer, inner); with inner_split the inner extent is `factor`."""
    from .extent import ceil_div

    factor = _as_extent(factor)
    rest = ceil_div(id_.extent, factor)
    outer_extent, inner_extent = (rest, factor) if inner_split else (factor, rest)
    outer = IterDomain(outer_extent, id_.iter_type, parallel_type=ParallelType.Serial, is_rfactor_product=True)
    inner = IterDomain(inner_extent, id_.iter_type, parallel_type=ParallelType.Serial, is_rfactor_product=True)
    Split([id_], [outer, inner], factor=factor, inner_split=inner_split)
    return outer, inner


def merge(outer: IterDomain, inner: IterDomain) -> IterDomain:
    """Merge two IterDomains into one of extent outer * inner."""
    from .extent import mul

    if outer.is_broadcast and inner.is_broadcast:
        iter_type = IterType.Broadcast
    elif outer.is_reduction or inner.is_reduction:
        if not (outer.is_reduction or outer.is_broadcast) or not (inner.is_reduction or inner.is_broadcast):
            raise ValueError(f"cannot merge a reduction axis with an iteration axis: {outer!r}, {inner!r}")
        iter_type = IterType.Reduction
    else:
        iter_type = IterType.Iteration
    out = IterDomain(mul(outer.extent, inner.extent), iter_type, is_rfactor_product=True)
    Merge([outer, inner], [out])
    return out


def resize(id_: IterDomain, left: Scalar | int, right: Scalar | int, new_extent: Scalar | int) -> IterDomain:
    """`id_` widened by `left`/`right` (negative narrows) to `new_extent`, for pad, slice, cat."""
    left_s = left if isinstance(left, Scalar) else Scalar(DataType.Int, left)
    right_s = right if isinstance(right, Scalar) else Scalar(DataType.Int, right)
    out = IterDomain(new_extent, IterType.Iteration, is_rfactor_product=True)
    Resize([id_], [out], left_expand=left_s, right_expand=right_s)
    return out


__all__ = [
    "IterType",
    "ParallelType",
    "MemoryType",
    "IterDomain",
    "Split",
    "Merge",
    "Resize",
    "TensorDomain",
    "split",
    "merge",
    "resize",
    "current_fusion",
]
