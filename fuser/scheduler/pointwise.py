"""pointwise: elementwise work over one iteration space, which one output spans."""
from __future__ import annotations

from .analysis import ATEN, REDUCTION, RESIZE, SubFusion


def structure_reason(sub: SubFusion) -> str | None:
    """Why the sub-fusion is not an elementwise one (shared by transpose and resize)."""
    if "pointwise" not in sub.memo:
        sub.memo["pointwise"] = _structure_reason(sub)
    return sub.memo["pointwise"]


def _structure_reason(sub: SubFusion) -> str | None:
    if REDUCTION in sub.kinds:
        return "has a reduction"
    if ATEN in sub.kinds:
        return "has an ATen-only op"
    if sub.lookup_produced_inside():
        return "an index op's lookup tensor is computed in the segment, not read from memory"
    if not sub.outputs:
        return "has no outputs"
    if sub.reference(sub.outputs, sub.concrete_classes()) is None:
        return "no output spans every axis the segment iterates over"
    return None


def reject_reason(sub: SubFusion) -> str | None:
    if RESIZE in sub.kinds:
        return "has slice, pad or cat (the resize scheduler's)"
    return structure_reason(sub)
