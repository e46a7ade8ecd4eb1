"""Running a defined fusion: bind and validate inputs, segment (once per input
signature), run the segments, return outputs."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .binding import Binding, bind_inputs

#: input signatures remembered per fusion before the oldest is forgotten
MAX_SIGNATURES = 64


def signature(binding: Binding) -> tuple:
    """What a segmentation may depend on: each tensor's sizes, strides, dtype and device;
    each scalar's type and, for integers (sizes), its value."""
    sig = []
    for x in binding.tensors:
        if isinstance(x, torch.Tensor):
            sig.append((tuple(x.shape), tuple(x.stride()), x.dtype, x.device))
        elif isinstance(x, (bool, int)):
            sig.append((type(x), x))
        else:
            sig.append(type(x))
    return tuple(sig)


def segmented_runner(entry: Any, binding: Binding):
    """The entry's runner for this call's input signature, segmenting on first sight."""
    from fuser.scheduler import SchedulerRuntimeInfo
    from fuser.segment import segment_fusion

    from .segmented import SegmentedRunner

    key = signature(binding)
    runner = entry.executors.get(key)
    if runner is None:
        fusion = entry.fusion
        seg = segment_fusion(fusion, SchedulerRuntimeInfo(fusion, binding.tensors, binding=binding))
        runner = SegmentedRunner(seg)
        if len(entry.executors) >= MAX_SIGNATURES:
            entry.executors.pop(next(iter(entry.executors)))
        entry.executors[key] = runner
    return runner


def run(entry: Any, inputs: Sequence[Any], *, device: Any = None) -> list[torch.Tensor]:
    """Execute a cached fusion on `inputs`: aliased outputs are written into their inputs
    and left out of the returned list."""
    fusion = entry.fusion
    binding = bind_inputs(fusion, inputs, device=torch.device(device) if device is not None else None)
    outs = segmented_runner(entry, binding).run(binding)
    results = []
    for val, out in zip(fusion.outputs, outs):
        alias = fusion.output_aliases.get(val)
        if alias is None:
            results.append(out)
        else:
            binding.tensors[fusion.inputs.index(alias)].copy_(out)
    return results
