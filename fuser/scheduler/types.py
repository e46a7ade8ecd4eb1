"""The kinds of kernel a segment can become."""
from __future__ import annotations

import enum


class SchedulerType(str, enum.Enum):
    """A scheduler, named as nvFuser prints it; compares equal to its lower-case name."""

    no_op = "no_op"
    expr_eval = "expr_eval"
    reduction = "reduction"
    resize = "resize"
    transpose = "transpose"
    pointwise = "pointwise"
    inner_persistent = "inner_persistent"
    outer_persistent = "outer_persistent"
    inner_outer_persistent = "inner_outer_persistent"
    #: a scatter with the elementwise work producing its operands (nvFuser's greedy scheduler
    #: is the one that takes scatter)
    greedy = "greedy"
    #: custom segmentation (a caller's should-merge predicate): no scheduler is asked
    none = "none"
    #: a FusionDefinition subclass's schedule(): the whole fusion as one kernel whose loop nest
    #: the user wrote (split/merge/reorder/parallelize); never proposed by the registry
    user = "user"

    def __str__(self) -> str:
        return self.value


#: the order the registry asks schedulers in, as nvFuser's registry does; the first to accept wins
REGISTRY_ORDER: tuple[SchedulerType, ...] = (
    SchedulerType.no_op,
    SchedulerType.expr_eval,
    SchedulerType.reduction,
    SchedulerType.resize,
    SchedulerType.transpose,
    SchedulerType.pointwise,
    SchedulerType.inner_persistent,
    SchedulerType.outer_persistent,
    SchedulerType.inner_outer_persistent,
    SchedulerType.greedy,
)
