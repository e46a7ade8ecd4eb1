"""Running a defined fusion: bind and validate inputs, segment (once per input
signature), run the segments, return outputs.

A call whose input signature was seen before skips validation and segmentation: the
signature (sizes, strides, dtypes, devices, data alignment, integer scalars' values)
fixes everything they decided, so a cached execute only looks the runner up and launches.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from fuser.ir import RNGOp, Scalar, fusion_str
from fuser.options import dump, dump_enabled
from fuser.preseg import PresegFusion, enabled_passes, run_passes

from .binding import Binding, bind_inputs
from .info import runtime_info

#: input signatures remembered per fusion before the oldest is forgotten
MAX_SIGNATURES = 64


def signature(inputs: Sequence[Any], device: Any = None, free: frozenset[int] = frozenset()) -> tuple:
    """What validation and segmentation depend on: each tensor's sizes, strides, dtype,
    device and data alignment (which accesses a kernel may vectorise); each scalar's
    type and, for integers (sizes), its value, except at the positions in `free`
    (`value_free_inputs`); the requested device."""
    sig: list[Any] = [device]
    for k, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            cuda = x.is_cuda
            sig.append((x.shape, x.stride(), x.dtype, x.get_device() if cuda else x.device.type,
                        x.data_ptr() % 16 if cuda else 0))
        elif isinstance(x, (bool, int)):
            sig.append((type(x),) if k in free else (type(x), x))
        else:
            sig.append(type(x))
    return tuple(sig)


def value_free_inputs(fusion: Any) -> frozenset[int]:
    """Positions of the integer scalar inputs that only RNG ops read, as their rng_seed or
    rng_offset: their values pick random streams (kernel parameters filled at each launch)
    and decide nothing a runner fixes, so a new seed or offset per call (Thunder's
    uniform_philox) reuses the runner. Cached on the fusion."""
    got = fusion.__dict__.get("_value_free_inputs")
    if got is None:
        def seeds_only(e: Any, v: Any) -> bool:
            return isinstance(e, RNGOp) and e.has_seed and v not in e.inputs[:-2]

        got = fusion._value_free_inputs = frozenset(
            k for k, v in enumerate(fusion.inputs)
            if isinstance(v, Scalar) and v.dtype.is_integral and v.uses and all(seeds_only(e, v) for e in v.uses))
    return got


def segmented_runner(entry: Any, inputs: Sequence[Any], device: Any = None, binding: Binding | None = None):
    """The entry's runner for this call's input signature, validating the inputs and
    segmenting on first sight of it."""
    key = signature(inputs, device, value_free_inputs(entry.fusion))
    runner = entry.executors.get(key)
    if runner is None:
        from fuser.segment import segment_fusion

        from .segmented import SegmentedRunner

        fusion = entry.fusion
        dev = torch.device(device) if device is not None else None
        if binding is None:
            binding = bind_inputs(fusion, inputs, device=dev)
        pre = preseg_fusion(entry)
        if pre.fusion is not fusion:
            # the passes' copy has its own values (and inputs it reads the same tensors as)
            fusion = pre.fusion
            binding = bind_inputs(fusion, inputs, device=dev)
        if dump_enabled("fusion_ir_preseg"):
            dump("fusion_ir_preseg", "Fusion IR after pre-segmenter optimization passes:\n" + fusion_str(fusion))
        seg = segment_fusion(fusion, runtime_info(fusion, binding.tensors, binding=binding))
        runner = SegmentedRunner(seg, binding)
        runner.preseg = pre
        if len(entry.executors) >= MAX_SIGNATURES:
            entry.executors.pop(next(iter(entry.executors)))
        entry.executors[key] = runner
    return runner


def preseg_fusion(entry: Any) -> PresegFusion:
    """The entry's fusion after the pre-segmentation passes FUSER_DISABLE leaves on (made
    once per set of enabled passes: the passes do not depend on the inputs)."""
    key = enabled_passes()
    got = entry.preseg.get(key)
    if got is None:
        got = entry.preseg[key] = run_passes(entry.fusion)
    return got


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
