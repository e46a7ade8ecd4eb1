"""Segmentation: cutting a fusion into kernels (see `segmenter`)."""
from __future__ import annotations

from typing import Any, Sequence

from fuser.ir import Fusion
from fuser.scheduler import SchedulerRuntimeInfo, SchedulerType

from .segmented_fusion import SegmentedEdge, SegmentedFusion, SegmentedGroup
from .segmenter import SegmentationError, ShouldMerge, segment_fusion


def segment(fd_or_fusion: Any, inputs: Sequence[Any], *, custom_should_merge: ShouldMerge | None = None) -> SegmentedFusion:
    """Segment a FusionDefinition (or a Fusion) for `inputs`.

    With `custom_should_merge(group1, group2) -> bool` no scheduler is asked: groups merge
    when the predicate says so and every group's scheduler is `none`.
    """
    fusion = fd_or_fusion if isinstance(fd_or_fusion, Fusion) else _fusion_of(fd_or_fusion)
    info = SchedulerRuntimeInfo(fusion, _flatten(inputs))
    return segment_fusion(fusion, info, custom_should_merge=custom_should_merge)


def _fusion_of(fd: Any) -> Fusion:
    from fuser.frontend import FusionDefinition

    if not isinstance(fd, FusionDefinition):
        raise TypeError(f"segment() takes a FusionDefinition or a Fusion, got {type(fd).__name__}")
    fd._ensure_defined()
    return fd.fusion


def _flatten(inputs: Sequence[Any]) -> list[Any]:
    from fuser.frontend.fusion_definition import _flatten_inputs

    return _flatten_inputs(inputs)


__all__ = [
    "segment",
    "segment_fusion",
    "SegmentedFusion",
    "SegmentedGroup",
    "SegmentedEdge",
    "SegmentationError",
    "SchedulerType",
]
