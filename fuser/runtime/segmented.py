"""Running a SegmentedFusion: its groups in order, each intermediate freed after its
last reader. Until kernels exist every group runs on the reference executor, so each
segmentation is checked end to end on any device."""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import torch

from fuser.ir import Fusion, Scalar, TensorView, Val
from fuser.segment import SegmentedFusion, SegmentedGroup

from fuser.lower.lower import NotLowerable

from . import philox
from .binding import Binding, BindingPlan
from .kernels import generates_kernel, kernels_available, prepare_kernel
from .reference import ReferenceExecutor


class _GroupRun:
    """One group's own Fusion and how its inputs and outputs map to the complete fusion's."""

    __slots__ = ("group", "fusion", "inputs", "outputs", "intermediate", "kernel")

    def __init__(self, group: SegmentedGroup) -> None:
        self.group = group
        self.fusion, memo = group.fusion_and_map()
        self.inputs: list[Val] = list(group.inputs)
        self.outputs: list[Val] = list(group.outputs)
        complete_inputs = set(group.exprs[0].fusion.inputs) if group.exprs else set()
        #: per input: whether it is another group's output (laid out by us, not the user)
        self.intermediate = [v not in complete_inputs for v in self.inputs]
        #: the generated kernel (None: not tried yet; False: this group runs on the reference)
        self.kernel = None

    def codegen_candidate(self) -> bool:
        return generates_kernel(self.group.scheduler)


class SegmentRun(NamedTuple):
    """How one segment ran in a runner's executions so far (SegmentedRunner.segment_runs)."""

    scheduler: str
    #: whether segments of this scheduler become generated kernels (the others, expr_eval
    #: and no_op, run on the reference executor by design)
    generates_kernel: bool
    #: True: it ran its generated kernel; False: it fell back to the reference executor (the
    #: kernel was not lowerable); None: no kernel was tried (a reference-only scheduler, or
    #: kernels unavailable: a CPU device, no pycuda, FUSER_DISABLE=codegen)
    kernel: bool | None


class SegmentedRunner:
    """Runs one SegmentedFusion (made for one input signature) on inputs of that signature.

    `binding` is the validated binding of the call that made it: what the signature fixes
    (extents, device) is taken from it once."""

    def __init__(self, seg: SegmentedFusion, binding: Binding) -> None:
        self.seg = seg
        self.runs = [_GroupRun(g) for g in seg.groups]
        fusion = seg.complete_fusion
        self.extents = dict(binding.extents)
        self.device = binding.device
        self.use_kernels = kernels_available(binding.device)
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
        # one kernel reading the fusion's inputs in order and writing its outputs in order:
        # the cached path launches it with nothing in between
        self._direct = (len(self.runs) == 1 and self.runs[0].inputs == list(fusion.inputs)
                        and self.runs[0].outputs == list(fusion.outputs))
        #: stream numbers the unseeded RNG ops span: with some, each execution draws one
        #: seed and base offset that every segment (kernel or reference) uses
        self.rng_streams = philox.streams(fusion)

    #: per-segment hooks (`start(k) -> token`, `stop(k, token, args, outs)`) around each
    #: segment's run, for profiling; None on the ordinary path
    observer: Any = None
    #: the PresegFusion whose fusion was segmented (its values -> the defined fusion's)
    preseg: Any = None

    def segment_runs(self) -> list[SegmentRun]:
        """How each segment ran (read-only: for tests and tools; the run path keeps no record)."""
        return [SegmentRun(str(r.group.scheduler), r.codegen_candidate(), None if r.kernel is None else bool(r.kernel))
                for r in self.runs]

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        if self._direct and self.observer is None:
            r = self.runs[0]
            k = r.kernel
            if k:
                outs = k.allocate_outputs()
                k.run(inputs, outs, philox.draw(self.device, self.rng_streams) if self.rng_streams else None)
                return outs
        fusion = self.seg.complete_fusion
        env: dict[Val, Any] = dict(self.extents)
        env.update(zip(fusion.inputs, inputs))
        device = self.device
        drawn = philox.draw(device, self.rng_streams) if self.rng_streams else None
        for k, r in enumerate(self.runs):
            args = [_as_declared(env[v], v) if inter else env[v] for v, inter in zip(r.inputs, r.intermediate)]
            if self.use_kernels and r.kernel is None and r.codegen_candidate():
                try:
                    r.kernel = prepare_kernel(r.group.scheduler, r.fusion, args, device)
                except NotLowerable:
                    r.kernel = False
            obs = self.observer
            token = obs.start(k) if obs is not None else None
            if r.kernel:
                outs = r.kernel.allocate_outputs()
                r.kernel.run(args, outs, drawn)
            else:
                outs = _run_group(r.fusion, args, device, drawn)
            if obs is not None:
                obs.stop(k, token, args, outs)
            env.update(zip(r.outputs, outs))
            for v in self.free_after[k]:
                env.pop(v, None)
        return [_output(env, v, fusion, self) for v in fusion.outputs]


def _run_group(fusion: Fusion, args: Sequence[Any], device: torch.device,
               philox_state: tuple[int, int] | None = None) -> list[Any]:
    binding = BindingPlan.of(fusion).bind(args, device)
    ex = ReferenceExecutor(fusion, binding.device, philox_state)
    ex.bind(binding)
    return ex.run()


def _output(env: dict[Val, Any], v: Val, fusion: Fusion, runner: "SegmentedRunner") -> Any:
    got = env.get(v)
    if got is not None:
        return got
    if isinstance(v, Scalar):  # host arithmetic on scalars: no group computes it
        ex = ReferenceExecutor(fusion, runner.device)
        ex.env.update(env)
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
    base = x
    for d in expanded:
        base = base.narrow(d, 0, min(1, x.shape[d]))
    if base.is_contiguous() and all(x.stride(d) == 0 or x.shape[d] <= 1 for d in expanded):
        return x
    return base.contiguous().expand(x.shape)


def example_args(seg: SegmentedFusion, group: SegmentedGroup, inputs: Sequence[Any]) -> list[Any]:
    """Arguments shaped like the ones `group` gets when `seg` runs on `inputs`, without
    running anything: fusion inputs as given, intermediates as dense meta tensors."""
    fusion = seg.complete_fusion
    given = dict(zip(fusion.inputs, inputs))
    info = seg.runtime_info
    args = []
    for v in group.inputs:
        if v in given:
            args.append(given[v])
        elif isinstance(v, TensorView):
            args.append(_as_declared(torch.empty(info.shape(v), dtype=v.dtype.torch, device="meta"), v))
        else:
            args.append(info.evaluate(v))
    return args
