"""Schedulers: which kind of kernel can run a (sub-)fusion, and (later) how.

The segmenter asks `propose(sub_fusion)`; tests and tools ask `can_schedule(fusion,
runtime_info, scheduler)`. Both answer from the fusion's structure and the call's
`SchedulerRuntimeInfo`.
"""
from .analysis import FusionAnalysis, SubFusion
from .registry import can_schedule, explain, propose, reject_reason, schedulers_for
from .runtime_info import DeviceLimits, SchedulerRuntimeInfo
from .types import REGISTRY_ORDER, SchedulerType

__all__ = [
    "SchedulerType",
    "REGISTRY_ORDER",
    "SchedulerRuntimeInfo",
    "DeviceLimits",
    "FusionAnalysis",
    "SubFusion",
    "can_schedule",
    "schedulers_for",
    "explain",
    "propose",
    "reject_reason",
]
