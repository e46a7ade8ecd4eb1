"""Segmentation: cutting a fusion into kernels (see `segmenter`)."""
from __future__ import annotations

from fuser.scheduler import SchedulerType

from .segmented_fusion import SegmentedEdge, SegmentedFusion, SegmentedGroup
from .segmenter import SegmentationError, ShouldMerge, segment_fusion


__all__ = [
    "segment_fusion",
    "SegmentedFusion",
    "SegmentedGroup",
    "SegmentedEdge",
    "SegmentationError",
    "ShouldMerge",
    "SchedulerType",
]
