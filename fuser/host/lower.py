"""Lowering a SegmentedFusion to a host program, and the passes over host programs.

`lower_segmented` makes, once per input signature, the program the evaluator runs: a
`LaunchKernel` per segment a kernel scheduler took, a `PostOnStream` per group of a
custom segmentation (stream-parallel fusions) that fuser compiles on its own, and the
expressions of every other segment (expr_eval: matmul, linear, SDPA, scans; no_op: views)
as `Evaluate`s. Passes then follow: `fuser.host.streams.lower_streams` (stream loops),
`insert_deallocations` (after each intermediate's last reader).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import torch

from fuser.ir import TensorView, Val
from fuser.segment import SegmentedFusion, SegmentedGroup

from .ir import (
    Allocate,
    Communication,
    Deallocate,
    Evaluate,
    HostExpr,
    HostIrContainer,
    HostUnit,
    LaunchKernel,
    PostOnStream,
    Wait,
    join_end,
)


def lower_segmented(seg: SegmentedFusion, aliases: dict[Val, Val] | None = None) -> HostIrContainer:
    """The host program running `seg`'s groups in order (see the module docstring).
    `aliases` maps an output to the input whose buffer it is (add_output(alias_input=)):
    it is allocated there, before the expression that writes it, when nothing after that
    reads the input; else it is written elsewhere and the executor copies it in last."""
    from fuser.kernel import generates_kernel
    from fuser.scheduler import SchedulerType

    from .streams import host_native

    fusion = seg.complete_fusion
    units: list[HostUnit] = []
    exprs: list[HostExpr] = []
    for k, g in enumerate(seg.groups):
        sched = g.scheduler
        unit = HostUnit(k, g, g.fusion(), str(sched.value))
        units.append(unit)
        if generates_kernel(sched):
            exprs.append(LaunchKernel(unit, tuple(g.inputs), tuple(g.outputs)))
        elif sched is SchedulerType.none and not host_native(g.exprs):
            # a custom segmentation's group: fuser segments and compiles it on its own
            exprs.append(PostOnStream(unit, tuple(g.inputs), tuple(g.outputs)))
        else:
            exprs.extend(Evaluate(e, tuple(e.inputs), tuple(e.outputs), unit=k) for e in g.exprs)
    aliases = dict(aliases or {})
    exprs = _allocate_in_place(exprs, aliases)
    return HostIrContainer(fusion, tuple(fusion.inputs), tuple(fusion.outputs), tuple(exprs), tuple(units), aliases)


def lower_communications(program: HostIrContainer, sharded: Any, rank: int | None = None) -> HostIrContainer:
    """`program` as device `rank` runs it (default: this process's rank): each resharding
    `set` of `sharded` (a ShardedFusion) becomes a Communication and its Wait (or a local
    slice), numbered in program order; the work of meshes without `rank`, and the
    communications it takes no part in, are left out (their tensors are absent here)."""
    import torch.distributed as dist

    if rank is None:
        rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    out: list[HostExpr] = []
    absent: set[Val] = set()
    teams: list[tuple[int, ...]] = []
    number = 0
    for e in program.exprs:
        r = sharded.reshards.get(e.expr) if isinstance(e, Evaluate) else None
        if r is not None and r.kind in _COLLECTIVES:
            devices = r.src.mesh.devices
            if devices != sorted(devices):
                raise NotImplementedError(
                    f"{r.kind} of {e.expr.inputs[0]!r} over {r.src.mesh}: a collective's blocks follow the ranks' "
                    "order, so the mesh of a sharded tensor must list its devices in ascending order")
            if devices != list(range(world)) and tuple(devices) not in teams:
                teams.append(tuple(devices))
        if r is None:
            meshes = {s.mesh for s in map(sharded.of, e.outputs) if s is not None}
            if meshes and not any(rank in m for m in meshes):
                absent.update(e.outputs)  # another mesh's work
            else:
                out.append(e)
            continue
        inp, res = e.expr.inputs[0], e.expr.outputs[0]
        src, dst = r.src, r.dst
        root = src.mesh.devices[0] if r.kind in ("send_recv", "broadcast") else None
        team = tuple(dict.fromkeys([*src.mesh.devices, *dst.mesh.devices]))
        if rank not in team:
            absent.add(res)
        else:
            if rank not in dst.mesh:
                absent.add(res)  # a sender: the tensor lives on the other mesh
            elif root is not None and rank != root:
                out.append(Allocate(res))  # a receiver: the buffer it receives into
            readers = sum(v is inp for x in program.exprs for v in x.inputs)
            in_place = readers == 1 and inp not in program.inputs and inp not in program.outputs
            out.append(Communication(number, r.kind, inp, res, team, axis=src.axis, out_axis=dst.axis,
                                     op=src.partial, root=root, in_place=in_place))
            if r.is_communication:
                out.append(Wait(number, res))
        number += 1
    return replace(program.with_exprs(out), extent_scale=_extent_scales(program, sharded), absent=frozenset(absent),
                   teams=tuple(teams))


#: the communications that run as collectives of a process group (the others are
#: point-to-point or local)
_COLLECTIVES = ("allgather", "allreduce", "reduce_scatter", "all_to_all")


def _extent_scales(program: HostIrContainer, sharded: Any) -> dict:
    """Per tensor of `sharded` whose extents the binding gives at another scale than the
    tensor has: an extent bound from a sharded input axis is a block's, and a whole tensor
    with that extent (an allgather's output, what it feeds) is `devices` times it; an
    extent bound from a whole input, on a tensor sharded along it, is divided."""
    # per extent bound from an input axis: how many blocks that input's axis is in
    bound: dict[Val, int] = {}
    for v in program.inputs:
        s = sharded.of(v)
        if s is not None:
            for k, i in enumerate(v.logical_no_reductions()):  # type: ignore[union-attr]
                if not i.is_broadcast and not i.extent.is_const:
                    bound.setdefault(i.extent, s.mesh.size if s.axis == k else 1)
    scales = {}
    for tv, s in sharded.shardings.items():
        axes = []
        for k, i in enumerate(tv.logical_no_reductions()):
            a, b = bound.get(i.extent, 1), (s.mesh.size if s.axis == k else 1)
            axes.append((a, b) if i.extent in bound and a != b else (1, 1))
        if any(a != (1, 1) for a in axes):
            scales[tv] = tuple(axes)
    return scales


def _allocate_in_place(exprs: list[HostExpr], aliases: dict[Val, Val]) -> list[HostExpr]:
    """An Allocate (bound to the aliased input's buffer) before the writer of each aliased
    output whose input nothing reads after that writer."""
    if not aliases:
        return exprs
    at: dict[int, list[Val]] = {}
    for out, inp in aliases.items():
        writer = next((k for k, e in enumerate(exprs) if out in e.outputs), None)
        last_read = max((k for k, e in enumerate(exprs) if inp in e.inputs), default=-1)
        if writer is not None and last_read <= writer:
            at.setdefault(writer, []).append(out)
    result: list[HostExpr] = []
    for k, e in enumerate(exprs):
        result.extend(Allocate(v) for v in at.get(k, ()))  # type: ignore[arg-type]
        result.append(e)
    return result


def insert_deallocations(program: HostIrContainer) -> HostIrContainer:
    """`program` with a Deallocate after the last top-level reader of each intermediate
    tensor (not an input, an output, or a buffer an alias points at)."""
    keep = set(program.inputs) | set(program.outputs) | set(program.aliases.values()) | set(program.aliases)
    exprs = program.exprs
    last: dict[Val, int] = {}
    for k, e in enumerate(exprs):
        for v in e.inputs:
            if isinstance(v, TensorView) and v not in keep:
                last[v] = _released_after(exprs, k)
    after: dict[int, list[Val]] = {}
    for v, k in last.items():
        after.setdefault(k, []).append(v)
    out: list[HostExpr] = []
    for k, e in enumerate(exprs):
        out.append(e)
        out.extend(Deallocate(v) for v in after.get(k, ()))  # type: ignore[arg-type]
    return program.with_exprs(out)


def _released_after(exprs: Sequence[HostExpr], k: int) -> int:
    """Where a tensor last read by `exprs[k]` may be released: after it, or, when it is a
    stream loop, after the loop joining its worker streams. Released earlier, the buffer
    could be reused on the caller's stream while a worker still reads it."""
    e = exprs[k]
    if isinstance(e, Communication):  # the collective reads it until its Wait
        return next((j for j in range(k + 1, len(exprs)) if isinstance(exprs[j], Wait) and exprs[j].number == e.number), k)
    j = join_end(exprs, k)  # (a stream loop: the caller's stream waits for each worker or stage there)
    return k if j is None else j


def as_declared(x: Any, tv: Val) -> Any:
    """An intermediate laid out as a group input declares it: dense in logical order,
    stride 0 along expanded broadcast axes."""
    if not isinstance(x, torch.Tensor) or not isinstance(tv, TensorView):
        return x
    # cached on the tensor: a segment's intermediates are laid out at every launch
    expanded = tv.__dict__.get("_expanded_axes")
    if expanded is None:
        expanded = tv._expanded_axes = tuple(
            d for d, i in enumerate(tv.logical_no_reductions()) if i.has_expanded_extent)
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
            args.append(as_declared(torch.empty(info.shape(v), dtype=v.dtype.torch, device="meta"), v))
        else:
            args.append(info.evaluate(v))
    return args


__all__ = ["as_declared", "example_args", "insert_deallocations", "lower_communications", "lower_segmented"]
