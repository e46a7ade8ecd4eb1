"""The runtime's side of a call's `SchedulerRuntimeInfo`: binding the inputs and evaluating
extents (the reference executor's scalar arithmetic), which schedulers read but never do."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from fuser.ir import Fusion
from fuser.scheduler.runtime_info import DeviceLimits, SchedulerRuntimeInfo

from .binding import Binding, bind_inputs
from .reference import ReferenceExecutor


def runtime_info(fusion: Fusion, inputs: Sequence[Any], *, binding: Binding | None = None,
                 device: torch.device | None = None, device_limits: DeviceLimits | None = None) -> SchedulerRuntimeInfo:
    """The SchedulerRuntimeInfo of `fusion` called with `inputs` (torch tensors, meta
    included, and numbers) on `device` (default: the inputs'); `binding`: the call's
    validated binding when the caller has it."""
    if binding is None:
        binding = bind_inputs(fusion, inputs, device=device)
    evaluator = ReferenceExecutor(fusion, binding.device)
    evaluator.bind(binding)
    return SchedulerRuntimeInfo(fusion, binding, evaluator.value, device_limits=device_limits)
