"""Running a defined fusion: bind and validate inputs, segment and lower to a host
program (once per input signature), evaluate it, return outputs.

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
from fuser.runtime.binding import Binding, bind_inputs, check_one_device
from fuser.runtime.info import runtime_info

from .evaluator import HostIrEvaluator
from .lower import insert_deallocations, lower_communications, lower_segmented
from .communication import ensure_groups, settle
from .agreement import agree
from .sharded import sharded_fusion, sharded_should_merge
from .streams import has_stream_axes, lower_streams, should_merge

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


def segmented_runner(entry: Any, inputs: Sequence[Any], device: Any = None, binding: Binding | None = None,
                     placements: tuple | None = None):
    """The entry's HostIrEvaluator for this call's input signature, validating the inputs,
    segmenting and lowering to host IR on first sight of it. `placements`: ((input
    position, Sharding), ...) of DTensor inputs, which shard the fusion as annotations do
    (a partial output then stays partial)."""
    key = signature(inputs, device, value_free_inputs(entry.fusion))
    if placements:
        key = (key, placements)
    runner = entry.executors.get(key)
    if runner is None:
        from fuser.segment import segment_fusion

        fusion = entry.fusion
        dev = torch.device(device) if device is not None else None
        # (the signature holds each tensor's device: a cached call was checked at its first)
        check_one_device(inputs, fusion)
        sharded = None
        if placements or entry.sharded:
            # shardings propagated, reshardings inserted (a copy, once per input placement);
            # the pre-segmentation passes are left to its segments, ordinary fusions on blocks
            # (they would rewrite placed inputs)
            sharded, pre = sharded_fusion(entry, placements, keep_partial=bool(placements))
            fusion = sharded.fusion
            binding = bind_inputs(fusion, inputs, device=dev)
        else:
            if binding is None:
                binding = bind_inputs(fusion, inputs, device=dev)
            pre = preseg_fusion(entry)
            if pre.fusion is not fusion:
                # the passes' copy has its own values (and inputs it reads the same tensors as)
                fusion = pre.fusion
                binding = bind_inputs(fusion, inputs, device=dev)
        if dump_enabled("fusion_ir_preseg"):
            dump("fusion_ir_preseg", "Fusion IR after pre-segmenter optimization passes:\n" + fusion_str(fusion))
        info = runtime_info(fusion, binding.tensors, binding=binding)
        # stream-parallel expressions are kept apart from the others (seed 004)
        streams = getattr(entry, "stream_loops", True) and has_stream_axes(fusion)
        merge = should_merge if streams else None
        if sharded is not None:
            merge = sharded_should_merge(sharded, merge)
        seg = segment_fusion(fusion, info, custom_should_merge=merge) if merge else segment_fusion(fusion, info)
        runner = lower_and_prepare(fusion, seg, binding, _aliases(entry.fusion, fusion), streams, sharded)
        runner.preseg = pre
        runner.sharded = sharded
        if len(entry.executors) >= MAX_SIGNATURES:
            entry.executors.pop(next(iter(entry.executors)))
        entry.executors[key] = runner
    return runner


def lower_and_prepare(fusion: Any, seg: Any, binding: Binding, aliases: dict | None = None,
                      streams: bool = False, sharded: Any = None) -> HostIrEvaluator:
    """The evaluator of `seg`'s host program (with stream loops when `streams`, with the
    communications of `sharded`, a ShardedFusion), dumped with FUSER_DUMP=host_ir."""
    program = lower_segmented(seg, aliases)
    if sharded is not None:
        program = lower_communications(program, sharded)
    if streams:
        program = lower_streams(program)
    program = insert_deallocations(program)
    if dump_enabled("host_ir"):
        dump("host_ir", str(program))
    runner = HostIrEvaluator(program, binding)
    runner.seg = seg
    return runner


def _aliases(defined: Any, fusion: Any) -> dict:
    """`fusion`'s outputs aliased to its inputs (add_output(alias_input=)), found by
    position in the defined fusion (the pre-segmentation copy keeps the order)."""
    if not defined.output_aliases:
        return {}
    return {fusion.outputs[defined.outputs.index(o)]: fusion.inputs[defined.inputs.index(i)]
            for o, i in defined.output_aliases.items()}


def preseg_fusion(entry: Any) -> PresegFusion:
    """The entry's fusion after the pre-segmentation passes FUSER_DISABLE leaves on (made
    once per set of enabled passes: the passes do not depend on the inputs)."""
    key = enabled_passes()
    got = entry.preseg.get(key)
    if got is None:
        got = entry.preseg[key] = run_passes(entry.fusion)
    return got


def run(entry: Any, inputs: Sequence[Any], *, device: Any = None, placements: tuple | None = None,
        runner: Any = None) -> list[torch.Tensor]:
    """Execute a cached fusion on `inputs` (with `runner`, `runner_for`'s already: the
    profiler's); aliased outputs are written into their inputs and left out of the
    returned list."""
    if runner is None:
        runner = runner_for(entry, inputs, device, placements)
    entry.last_runner = runner
    outs = runner.run(inputs)
    if entry.sharded or placements:
        settle()  # (a program that never communicates)
    fusion = entry.fusion
    if not fusion.output_aliases:
        return outs
    results = []
    for val, out in zip(fusion.outputs, outs):
        alias = fusion.output_aliases.get(val)
        if alias is None:
            results.append(out)
        else:
            target = inputs[fusion.inputs.index(alias)]
            if out is not target:  # the host program wrote it elsewhere: its input was read later
                target.copy_(out)
    return results


def runner_for(entry: Any, inputs: Sequence[Any], device: Any = None, placements: tuple | None = None):
    """The runner for this call: `segmented_runner`'s, agreed on by every rank for a
    sharded fusion (`agreed_runner`: a rank that fails raises on every rank instead of
    leaving the others waiting in a collective)."""
    if placements or entry.sharded:
        return agreed_runner(entry, inputs, device, placements)
    return segmented_runner(entry, inputs, device)


def agreed_runner(entry: Any, inputs: Sequence[Any], device: Any = None, placements: tuple | None = None):
    """A sharded fusion's runner for this call, once every rank could make its own (a rank
    that fails raises on every rank instead of leaving the others in a collective), with
    the process groups its communications use made on every rank."""
    try:
        runner = segmented_runner(entry, inputs, device, placements=placements)
        failure = None
    except Exception as err:  # every rank must hear of it before it raises
        runner, failure = None, err
    teams = runner.program.teams if runner is not None else ()
    # a call that can start issues its local work while the ranks agree, unless it must
    # first make process groups with every rank
    agree(inputs, failure, defer=not teams)
    ensure_groups(teams)
    return runner


class FusionEntry:
    """An executor cache entry for a fusion run as it is, one device's work with no stream
    loops of its own: a host unit's segment (PostOnStream runs one iteration's slices, a
    sharded fusion's segment one device's blocks) or a user-scheduled definition."""

    __slots__ = ("fusion", "executors", "preseg", "last_runner")
    stream_loops = False
    sharded = False

    def __init__(self, fusion: Any) -> None:
        self.fusion = fusion
        self.executors: dict = {}
        self.preseg: dict = {}
        self.last_runner = None


def run_unit(unit: Any, args: Sequence[Any], device: Any, outputs: Sequence[Any] | None = None) -> list[Any]:
    """Run a host unit's fusion on `args` through the executor (segmented and compiled for
    their signature, cached on the unit); a one-kernel unit writes `outputs` when given
    and laid out as it writes."""
    entry = unit.cache.get("entry")
    if entry is None:
        entry = unit.cache["entry"] = FusionEntry(unit.fusion)
    return segmented_runner(entry, args, device).run(args, outputs)
