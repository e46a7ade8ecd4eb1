"""resize: elementwise work with slices, pads and concatenations."""
from __future__ import annotations

from . import pointwise
from .analysis import RESIZE, SubFusion


def reject_reason(sub: SubFusion) -> str | None:
    if RESIZE not in sub.kinds:
        return "has no slice, pad or cat"
    return pointwise.structure_reason(sub)
