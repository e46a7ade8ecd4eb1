"""Running a defined fusion: bind and validate inputs, segment (once per input
signature), run the segments, return outputs.

A call whose input signature was seen before skips validation and segmentation: the
signature (sizes, strides, dtypes, devices, data alignment, integer scalars' values)
fixes everything they decided, so a cached execute only looks the runner up and launches.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .binding import Binding, bind_inputs
from .info import runtime_info

#: input signatures remembered per fusion before the oldest is forgotten
MAX_SIGNATURES = 64


def signature(inputs: Sequence[Any], device: Any = None) -> tuple:
    """What validation and segmentation depend on: each tensor's sizes, strides, dtype,
    device and data alignment (which accesses a kernel may vectorise); each scalar's
    type and, for integers (sizes), its value; the requested device."""
    sig: list[Any] = [device]
    for x in inputs:
        if isinstance(x, torch.Tensor):
            cuda = x.is_cuda
            sig.append((x.shape, x.stride(), x.dtype, x.get_device() if cuda else x.device.type,
                        x.data_ptr() % 16 if cuda else 0))
        elif isinstance(x, (bool, int)):
            sig.append((type(x), x))
        else:
            sig.append(type(x))
    return tuple(sig)


def segmented_runner(entry: Any, inputs: Sequence[Any], device: Any = None, binding: Binding | None = None):
    """The entry's runner for this call's input signature, validating the inputs and
    segmenting on first sight of it."""
    key = signature(inputs, device)
    runner = entry.executors.get(key)
    if runner is None:
        from fuser.segment import segment_fusion

        from .segmented import SegmentedRunner

        fusion = entry.fusion
        if binding is None:
            binding = bind_inputs(fusion, inputs, device=torch.device(device) if device is not None else None)
        seg = segment_fusion(fusion, runtime_info(fusion, binding.tensors, binding=binding))
        runner = SegmentedRunner(seg, binding)
        if len(entry.executors) >= MAX_SIGNATURES:
            entry.executors.pop(next(iter(entry.executors)))
        entry.executors[key] = runner
    return runner


def run(entry: Any, inputs: Sequence[Any], *, device: Any = None) -> list[torch.Tensor]:
    """Execute a cached fusion on `inputs`: aliased outputs are written into their inputs
    and left out of the returned list."""
    runner = segmented_runner(entry, inputs, device)
    entry.last_runner = runner
    outs = runner.run(inputs)
    fusion = entry.fusion
    if not fusion.output_aliases:
        return outs
    results = []
    for val, out in zip(fusion.outputs, outs):
        alias = fusion.output_aliases.get(val)
        if alias is None:
            results.append(out)
        else:
            inputs[fusion.inputs.index(alias)].copy_(out)
    return results
