"""Running a SegmentedFusion: its groups in order, each intermediate freed after its
last reader. Until kernels exist every group runs on the reference executor, so each
segmentation is checked end to end on any device."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from fuser.ir import Fusion, Scalar, TensorView, Val
from fuser.segment import SegmentedFusion, SegmentedGroup

from .binding import Binding, BindingPlan
from .reference import ReferenceExecutor


class _GroupRun:
    """One group's own Fusion and how its inputs and outputs map to the complete fusion's."""

    __slots__ = ("group", "fusion", "inputs", "outputs", "intermediate")

    def __init__(self, group: SegmentedGroup) -> None:
        self.group = group
        self.fusion, memo = group.fusion_and_map()
        self.inputs: list[Val] = list(group.inputs)
        self.outputs: list[Val] = list(group.outputs)
        complete_inputs = set(group.exprs[0].fusion.inputs) if group.exprs else set()
        #: per input: whether it is another group's output (laid out by us, not the user)
        self.intermediate = [v not in complete_inputs for v in self.inputs]


class SegmentedRunner:
    """Runs one SegmentedFusion (made for one input signature) on inputs of that signature."""

    def __init__(self, seg: SegmentedFusion) -> None:
        self.seg = seg
        self.runs = [_GroupRun(g) for g in seg.groups]
        fusion = seg.complete_fusion
        keep = set(fusion.outputs) | set(fusion.inputs)
        last: dict[Val, int] = {}
        for k, r in enumerate(self.runs):
            for v in r.inputs:
                last[v] = k
        #: per group: the intermediates no later group reads
        self.free_after: list[list[Val]] = [[] for _ in self.runs]
        for v, k in last.items():
            if v not in keep:
                self.free_after[k].append(v)

    def run(self, binding: Binding) -> list[Any]:
        fusion = self.seg.complete_fusion
        env: dict[Val, Any] = dict(binding.extents)
        env.update(zip(fusion.inputs, binding.tensors))
        for k, r in enumerate(self.runs):
            args = [_as_declared(env[v], v) if inter else env[v] for v, inter in zip(r.inputs, r.intermediate)]
            outs = _run_group(r.fusion, args, binding.device)
            env.update(zip(r.outputs, outs))
            for v in self.free_after[k]:
                env.pop(v, None)
        return [_output(env, v, fusion, binding) for v in fusion.outputs]


def _run_group(fusion: Fusion, args: Sequence[Any], device: torch.device) -> list[Any]:
    binding = BindingPlan.of(fusion).bind(args, device)
    ex = ReferenceExecutor(fusion, binding.device)
    ex.bind(binding)
    return ex.run()


def _output(env: dict[Val, Any], v: Val, fusion: Fusion, binding: Binding) -> Any:
    got = env.get(v)
    if got is not None:
        return got
    if isinstance(v, Scalar):  # host arithmetic on scalars: no group computes it
        ex = ReferenceExecutor(fusion, binding.device)
        ex.bind(binding)
        return ex.value(v)
    raise RuntimeError(f"no segment produced the fusion output {v!r}")


def _as_declared(x: Any, tv: Val) -> Any:
    """An intermediate laid out as a group input declares it: dense in logical order,
    stride 0 along expanded broadcast axes."""
    if not isinstance(x, torch.Tensor) or not isinstance(tv, TensorView):
        return x
    ids = tv.logical_no_reductions()
    expanded = [d for d, i in enumerate(ids) if i.has_expanded_extent]
    if not expanded:
        return x if x.is_contiguous() else x.contiguous()
    if all(x.stride(d) == 0 or x.shape[d] <= 1 for d in expanded):
        base = x
        for d in expanded:
            base = base.narrow(d, 0, min(1, x.shape[d]))
        if base.is_contiguous():
            return x
    base = x
    for d in expanded:
        base = base.narrow(d, 0, min(1, x.shape[d]))
    return base.contiguous().expand(x.shape)
