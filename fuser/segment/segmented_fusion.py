"""SegmentedFusion: a fusion cut into groups that one kernel each runs, and the tensors
passed between them through memory."""
from __future__ import annotations

from typing import Any, Sequence

from fuser.ir import Expr, Fusion, Scalar, TensorView, Val
from fuser.scheduler import SchedulerRuntimeInfo, SchedulerType


class SegmentedGroup:
    """One segment: the expressions one kernel computes.

    `exprs` are in the complete fusion's topological order and include the copies this
    group recomputes instead of reading (forwarded unary chains from inputs and factories,
    scalar arithmetic, rematerialised intermediates). `inputs` are what it reads: fusion
    inputs and other groups' outputs; `outputs` what it writes: fusion outputs and tensors
    a later group reads.
    """

    def __init__(self, id: int, exprs: Sequence[Expr], inputs: Sequence[Val], outputs: Sequence[Val],  # noqa: A002
                 scheduler: SchedulerType, expr_indices: Sequence[int], owned: Sequence[Expr], level: int = 0) -> None:
        self.id = id
        self.exprs: list[Expr] = list(exprs)
        self.inputs: list[Val] = list(inputs)
        self.outputs: list[Val] = list(outputs)
        self.scheduler: SchedulerType = scheduler
        #: positions of `exprs` in the complete fusion's exprs(), for printing
        self.expr_indices: list[int] = list(expr_indices)
        #: the exprs this group is the home of (the rest are recomputed copies)
        self.owned: list[Expr] = list(owned)
        self.level = level
        self._fusion: tuple[Fusion, dict[Any, Any]] | None = None

    def fusion(self) -> Fusion:
        """This segment as a Fusion of its own (built once)."""
        return self.fusion_and_map()[0]

    def fusion_and_map(self) -> tuple[Fusion, dict[Any, Any]]:
        """The segment's Fusion and the complete fusion's Vals → the segment's."""
        if self._fusion is None:
            complete = self.exprs[0].fusion if self.exprs else None
            if complete is None:
                raise ValueError(f"group {self.id} has no expressions")
            self._fusion = complete.clone_subgraph(self.exprs, self.inputs, self.outputs)
        return self._fusion

    def __repr__(self) -> str:
        return f"SegmentedGroup(id={self.id}, scheduler={self.scheduler.value}, exprs={len(self.exprs)})"


class SegmentedEdge:
    """A tensor one group writes and a later group reads."""

    __slots__ = ("val", "from_group", "to_group")

    def __init__(self, val: TensorView, from_group: SegmentedGroup, to_group: SegmentedGroup) -> None:
        self.val = val
        self.from_group = from_group
        self.to_group = to_group

    def __repr__(self) -> str:
        return f"SegmentedEdge({self.val!r}: g{self.from_group.id} -> g{self.to_group.id})"


class SegmentedFusion:
    """The segments of one fusion for one call's inputs, in an order they can run in."""

    def __init__(self, fusion: Fusion, groups: Sequence[SegmentedGroup], edges: Sequence[SegmentedEdge],
                 runtime_info: SchedulerRuntimeInfo | None) -> None:
        self.complete_fusion = fusion
        self.groups: list[SegmentedGroup] = list(groups)
        self.edges: list[SegmentedEdge] = list(edges)
        self.runtime_info = runtime_info

    @property
    def inputs(self) -> list[Val]:
        return self.complete_fusion.inputs

    @property
    def outputs(self) -> list[Val]:
        return self.complete_fusion.outputs

    def edge_vals(self) -> list[TensorView]:
        """Each tensor passed between groups, once."""
        return list(dict.fromkeys(e.val for e in self.edges))

    def inter_segment_bytes(self) -> int:
        """Bytes of the intermediates written by one group and read by another, for the
        inputs this segmentation was made for (each tensor counted once, at its stored
        size: broadcast axes, expanded or not, take no space)."""
        info = self._info("inter_segment_bytes")
        return sum(info.stored_bytes(v) for v in self.edge_vals())

    def _info(self, what: str) -> SchedulerRuntimeInfo:
        if self.runtime_info is None:
            raise ValueError(f"{what}() needs the inputs the segmentation was made for")
        return self.runtime_info

    def __str__(self) -> str:
        from .printer import segmented_fusion_str

        return segmented_fusion_str(self)

    def __repr__(self) -> str:
        kinds = ", ".join(g.scheduler.value for g in self.groups)
        return f"SegmentedFusion({len(self.groups)} groups: {kinds}; {len(self.edge_vals())} edge tensors)"


def scalar_inputs_used(fusion: Fusion, exprs: Sequence[Expr], tensors: Sequence[TensorView],
                       tensor_inputs: Sequence[TensorView]) -> list[Scalar]:
    """The symbolic scalars a group needs bound besides its tensor inputs: scalar inputs
    of the fusion its exprs read, and extents (of its tensors) that come from tensors it
    does not read, e.g. `full([t0.size(0)])` in a group without t0. Fusion inputs first,
    in the fusion's order, then the rest by name."""
    bound: set[int] = set()  # extents the group's own tensor inputs bind
    for tv in tensor_inputs:
        for i in tv.logical_no_reductions():
            bound.add(id(i.extent))
            if i.expanded_extent is not None:
                bound.add(id(i.expanded_extent))
    found: dict[Scalar, None] = {}
    seen: set[int] = set()
    stack: list[Val] = [v for e in exprs for v in e.inputs if isinstance(v, Scalar)]
    for tv in tensors:
        for i in tv.domain.all_ids():
            stack.append(i.extent)
            if i.expanded_extent is not None:
                stack.append(i.expanded_extent)
    while stack:
        v = stack.pop()
        if id(v) in seen or id(v) in bound:
            continue
        seen.add(id(v))
        if v.definition is not None:
            stack.extend(x for x in v.definition.inputs if isinstance(x, Scalar))
        elif isinstance(v, Scalar) and not v.is_const:
            found[v] = None
    first = [v for v in fusion.inputs if v in found]
    rest = sorted((v for v in found if not v.is_fusion_input), key=lambda v: v.name)
    return first + rest
