"""Segmenting a FusionDefinition (or a Fusion) for given inputs: the entry point tests and
tools use to look at a segmentation without running it."""
from __future__ import annotations

from typing import Any, Sequence

from fuser.ir import Fusion
from fuser.runtime.info import runtime_info
from fuser.segment import SegmentedFusion, ShouldMerge, segment_fusion


def segment(fd_or_fusion: Any, inputs: Sequence[Any], *, custom_should_merge: ShouldMerge | None = None) -> SegmentedFusion:
    """Segment a FusionDefinition (or a Fusion) for `inputs`.

    With `custom_should_merge(group1, group2) -> bool` no scheduler is asked: groups merge
    when the predicate says so and every group's scheduler is `none`.
    """
    from .fusion_definition import FusionDefinition, _flatten_inputs

    if isinstance(fd_or_fusion, Fusion):
        fusion = fd_or_fusion
    elif isinstance(fd_or_fusion, FusionDefinition):
        fd_or_fusion._ensure_defined()
        fusion = fd_or_fusion.fusion
    else:
        raise TypeError(f"segment() takes a FusionDefinition or a Fusion, got {type(fd_or_fusion).__name__}")
    info = runtime_info(fusion, _flatten_inputs(inputs))
    return segment_fusion(fusion, info, custom_should_merge=custom_should_merge)
