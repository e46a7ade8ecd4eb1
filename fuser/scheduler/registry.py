"""The scheduler registry: which schedulers accept a (sub-)fusion, asked in nvFuser's order."""
from __future__ import annotations

from typing import Callable

from fuser.ir import Fusion

from . import expr_eval, greedy, no_op, normalization, pointwise, reduction, resize, transpose
from .analysis import FusionAnalysis, SubFusion
from .runtime_info import SchedulerRuntimeInfo
from .types import REGISTRY_ORDER, SchedulerType

_REASONS: dict[SchedulerType, Callable[[SubFusion], "str | None"]] = {
    SchedulerType.no_op: no_op.reject_reason,
    SchedulerType.expr_eval: expr_eval.reject_reason,
    SchedulerType.reduction: reduction.reject_reason,
    SchedulerType.resize: resize.reject_reason,
    SchedulerType.transpose: transpose.reject_reason,
    SchedulerType.pointwise: pointwise.reject_reason,
    SchedulerType.inner_persistent: normalization.inner_reason,
    SchedulerType.outer_persistent: normalization.outer_reason,
    SchedulerType.inner_outer_persistent: normalization.inner_outer_reason,
    SchedulerType.greedy: greedy.reject_reason,
}


def reject_reason(sub: SubFusion, scheduler: SchedulerType | str) -> str | None:
    """Why `scheduler` cannot schedule `sub`, or None when it can."""
    st = SchedulerType(scheduler)
    if st is SchedulerType.none:
        raise ValueError("SchedulerType.none is for custom segmentation; it schedules nothing")
    return _REASONS[st](sub)


def propose(sub: SubFusion) -> SchedulerType | None:
    """The first scheduler in registry order that accepts `sub`."""
    for st in REGISTRY_ORDER:
        if _REASONS[st](sub) is None:
            return st
    return None


def explain(sub: SubFusion) -> dict[SchedulerType, str | None]:
    """Every scheduler's verdict on `sub`: None for accept, else the reason it refuses."""
    return {st: _REASONS[st](sub) for st in REGISTRY_ORDER}


def _whole(fusion: Fusion, runtime_info: SchedulerRuntimeInfo | None) -> SubFusion:
    if runtime_info is not None and runtime_info.fusion is not fusion:
        raise ValueError("runtime_info was made for another fusion")
    return FusionAnalysis(fusion, runtime_info).whole()


def can_schedule(fusion: Fusion, runtime_info: SchedulerRuntimeInfo | None, scheduler: SchedulerType | str) -> bool:
    """Whether `scheduler` accepts the whole of `fusion` for the call `runtime_info`
    describes (None: structure only, no size-dependent checks)."""
    return reject_reason(_whole(fusion, runtime_info), scheduler) is None


def schedulers_for(fusion: Fusion, runtime_info: SchedulerRuntimeInfo | None) -> dict[SchedulerType, str | None]:
    """Every scheduler's verdict on the whole of `fusion`."""
    return explain(_whole(fusion, runtime_info))
