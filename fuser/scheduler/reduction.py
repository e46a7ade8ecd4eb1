"""reduction: reductions over the same axes, with elementwise work before and after that
does not reuse the reduced axes."""
from __future__ import annotations

from .analysis import ATEN, REDUCTION, RESIZE, SubFusion


def structure_reason(sub: SubFusion) -> str | None:
    """Checks shared with the persistent schedulers: reductions present, no other kind of
    work, and the reductions' axes cover the segment."""
    if REDUCTION not in sub.kinds:
        return "has no reduction"
    if ATEN in sub.kinds:
        return "has an ATen-only op"
    if RESIZE in sub.kinds:
        return "has slice, pad or cat"
    if sub.lookup_produced_inside():
        return "an index op's lookup tensor is computed in the segment, not read from memory"
    covered: set[int] = set()
    for r in sub.reductions():
        covered |= r.iter_classes | r.red_classes
    if not sub.concrete_classes() <= sub.covered_by(covered):
        return "some axis is neither iterated nor reduced by the reductions"
    return None


def reject_reason(sub: SubFusion) -> str | None:
    why = structure_reason(sub)
    if why is not None:
        return why
    if sub.reductions_in_series():
        return "a reduction reads another reduction's result"
    reds = sub.reductions()
    if any(not r.same_axes(reds[0]) for r in reds[1:]):
        return "reductions over different axes"
    if sub.post_reduction_broadcast_resolved():
        return "a reduction's result is broadcast back over its reduced axes (persistent)"
    return None
