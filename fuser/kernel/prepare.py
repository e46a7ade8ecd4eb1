"""Schedule, lower and print one segment as a generated kernel: the path from a
segment's Fusion to CUDA C and a launch plan, one function per kernel scheduler.

`prepare_kernel(scheduler, group_fusion, args, device)` schedules a segment for the call
`args` describes and returns its `GeneratedKernel`; no GPU is needed until the kernel's
first launch loads it.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from fuser.codegen.cuda import kernel_source
from fuser.ir import Fusion, TensorView, WelfordOp
from fuser.lower.kir import Kernel
from fuser.lower.kir_printer import kernel_ir_str
from fuser.lower.lower import NotLowerable, lower_pointwise
from fuser.options import disabled, dump, dump_enabled
from fuser.runtime.index_check import check_on_host
from fuser.runtime.info import runtime_info
from fuser.scheduler import FusionAnalysis, SchedulerRuntimeInfo, SchedulerType
from fuser.scheduler import pointwise as pw
from fuser.scheduler import resize as rs
from fuser.scheduler.runtime_info import target_line
from fuser.scheduler.vectorize import stride_alignment, vectorizable

from .generated import GeneratedKernel

def _check_covers(info: SchedulerRuntimeInfo, fusion: Fusion, args: Sequence[Any], grid: tuple[int, int]) -> None:
    """Refuse a launch that would skip work or read nothing: an empty grid while some output
    has elements, or an input with no elements (its data pointer is null) that a non-empty
    grid would still read: every axis it iterates has elements and an expanded axis has
    none (a sum over an expanded axis of extent 0 reads the value it copies)."""
    empty_grid = grid[0] <= 0 or grid[1] <= 0
    if empty_grid:
        for tv in fusion.outputs:
            if isinstance(tv, TensorView) and info.numel(tv) > 0:
                raise NotLowerable(f"the kernel's iteration space is empty, but output {tv!r} is not")
        return
    for tv, x in zip(fusion.inputs, args):
        if isinstance(x, torch.Tensor) and x.numel() == 0 and isinstance(tv, TensorView) and all(
                n > 0 for i, n in zip(tv.tensor_axes(), x.shape) if not i.is_broadcast):
            raise NotLowerable(f"input {tv!r} has no elements but the kernel would read it")


def prepare_pointwise(fusion: Fusion, args: Sequence[Any], device: torch.device | None = None) -> GeneratedKernel:
    """Schedule and lower a pointwise segment for the call whose inputs are `args`
    (torch tensors on any device, meta included; scalars) on `device` (the call's device:
    what a segment with no tensor inputs allocates and launches on; default: the
    arguments'). Raises NotLowerable when the segment needs code this generator does not
    write yet."""
    return _prepare_elementwise(fusion, args, device, resize=False)


def prepare_resize(fusion: Fusion, args: Sequence[Any], device: torch.device | None = None) -> GeneratedKernel:
    """Schedule and lower a resize segment (slices, pads and cats among elementwise work) as
    `prepare_pointwise` does a pointwise one: over the output the resize scheduler picks,
    with vectors no wider than the slices', pads' and cats' offsets allow."""
    return _prepare_elementwise(fusion, args, device, resize=True)


def _prepare_elementwise(fusion: Fusion, args: Sequence[Any], device: torch.device | None, *,
                         resize: bool) -> GeneratedKernel:
    fusion, _ = fusion.clone()  # scheduling transforms the copy; the segment stays as defined
    info = runtime_info(fusion, args, device=device)
    sub = FusionAnalysis(fusion, info).whole()
    try:
        ref = rs.reference_tensor(sub) if resize else pw.reference_tensor(sub)
    except ValueError as err:
        raise NotLowerable(str(err)) from None
    concrete = [i for i in ref.logical_no_reductions() if not i.is_broadcast]
    if resize:
        vec = rs.vector_candidates(sub, ref)
        limit = min(stride_alignment(sub, vec), rs.vector_limit(sub, ref))
    else:
        vec = vectorizable(sub, concrete[-1]) if concrete else []
        limit = stride_alignment(sub, vec)
    total = info.numel(ref)
    params = pw.heuristics(sub, vec, pw.inner_extent(info, ref), total, ref, max_vector=limit)
    pw.schedule(fusion, ref, params, sub)
    kernel = lower_pointwise(fusion, ref, params.vectorize, frozenset(tv.name for tv in vec), params.index_type, sub)
    bx = info.evaluate(kernel.grid_extent) if kernel.grid_extent is not None else 1
    by = info.evaluate(kernel.grid_extent_y) if kernel.grid_extent_y is not None else 1
    return _launch_plan(fusion, kernel, params, info, args, (int(bx), int(by)), (kernel.threads, 1))


def _launch_plan(fusion: Fusion, kernel: Kernel, params: Any, info: SchedulerRuntimeInfo, args: Sequence[Any],
                 grid: tuple[int, int], block: tuple[int, int]) -> GeneratedKernel:
    """The CUDA of a lowered kernel and its launch plan for the call `args` describes."""
    source = kernel_source(kernel)
    if dump_enabled("kernel_ir"):  # printing a large kernel costs: only when asked
        dump("kernel_ir", kernel_ir_str(kernel, grid, block))
    if dump_enabled("scheduler_params") or dump_enabled("cuda_kernel"):
        # what the plan assumed: the device's limits, or the planning target's without one
        target = target_line(info.device_limits)
        dump("scheduler_params", f"{target}\n{params!r}")
        dump("cuda_kernel", f"// {target}\n{source}")
    _check_covers(info, fusion, args, grid)
    k = GeneratedKernel(fusion, kernel, source, params, info, grid, block)
    k.check_devices(args)
    check_on_host(kernel, info.evaluate)
    k.bind_fixed({tv: x for tv, x in zip(fusion.inputs, args) if isinstance(tv, TensorView)})
    return k


def kernels_available(device: torch.device) -> bool:
    """Whether generated kernels can run on `device`: a CUDA device, pycuda importable,
    and FUSER_DISABLE not naming `codegen`."""
    if device.type != "cuda" or disabled("codegen"):
        return False
    import importlib.util

    return importlib.util.find_spec("pycuda") is not None


def prepare_reduction(fusion: Fusion, args: Sequence[Any], device: torch.device | None = None, *,
                      persistent: bool = False, outer: bool = False) -> GeneratedKernel:
    """Schedule and lower a reduction (or, with `persistent`, an inner-persistent; with
    `outer` too, an outer-persistent) segment for the call whose inputs are `args` on
    `device`; raises NotLowerable for what these kernels do not cover."""
    from fuser.lower.reduction import lower_reduction
    from fuser.scheduler import normalization
    from fuser.scheduler import reduction as red

    fusion, _ = fusion.clone()
    info = runtime_info(fusion, args, device=device)
    sub = FusionAnalysis(fusion, info).whole()
    reds = sub.reductions()
    if not reds:
        raise NotLowerable("no reduction")
    if outer or persistent:
        plan = normalization.outer_persistent_plan if outer else normalization.inner_persistent_plan
        try:
            geo, width, params = plan(sub)
        except ValueError as err:
            raise NotLowerable(str(err)) from None
    else:
        geo = red.geometry(sub)
    if geo.n_red == 0:
        if any(isinstance(r.expr, WelfordOp) for r in reds):
            raise NotLowerable("a mean over no elements (NaN, which an empty Welford accumulator does not hold)")
        for tv in fusion.outputs:  # written inside the column loop, which visits nothing
            if isinstance(tv, TensorView) and set(sub.classes_of(tv)) & reds[0].red_classes and info.numel(tv):
                raise NotLowerable(f"output {tv!r} spans reduced axes with no elements but has elements itself")
    vec = vectorizable(sub, geo.vector_axis) if geo.vector_axis is not None else []
    if not (outer or persistent):
        width = red.vector_width(sub, geo, vec, stride_alignment(sub, vec))
        try:
            params = red.heuristics(sub, geo, width)
        except ValueError as err:
            raise NotLowerable(str(err)) from None
    red.schedule(fusion, geo)
    kernel = lower_reduction(fusion, geo.ref, params, frozenset(vec) if width > 1 else frozenset(), sub,
                             reds[0].red_classes, vector_class=_axis_class(sub, geo.vector_axis))
    per_block = params.bdy if params.inner else params.bdx * params.vectorize
    grid = (-(-geo.n_iter // per_block), params.grid_y)
    return _launch_plan(fusion, kernel, params, info, args, grid, (params.bdx, params.bdy))


def _axis_class(sub, axis) -> int | None:
    return None if axis is None else sub.uf.find(sub.a.id_of(axis))


def prepare_inner_outer(fusion: Fusion, args: Sequence[Any], device: torch.device | None = None) -> GeneratedKernel:
    """Schedule and lower an inner-outer persistent segment (a norm's backward: reductions
    along rows and across them) for the call `args` describes; its grid is capped at the
    blocks the GPU holds at once when it is loaded."""
    from fuser.lower.inner_outer import lower_inner_outer
    from fuser.scheduler import normalization
    from fuser.scheduler import reduction as red

    fusion, _ = fusion.clone()
    info = runtime_info(fusion, args, device=device)
    sub = FusionAnalysis(fusion, info).whole()
    inner = [r for r in sub.reductions() if r.is_inner]
    if not inner:
        raise NotLowerable("no reduction along the rows")
    geo = red.geometry(sub, inner[0], rows=True)
    if geo.n_red == 0:
        raise NotLowerable("rows with no elements")
    vec = vectorizable(sub, geo.vector_axis) if geo.vector_axis is not None else []
    width = red.vector_width(sub, geo, vec, stride_alignment(sub, vec))
    try:
        params = normalization.inner_outer_heuristics(sub, geo, width)
    except ValueError as err:
        raise NotLowerable(str(err)) from None
    red.schedule(fusion, geo)
    try:
        segments = normalization.row_segments(sub, geo)
    except ValueError as err:
        raise NotLowerable(str(err)) from None
    kernel = lower_inner_outer(fusion, geo.ref, params, frozenset(vec) if width > 1 else frozenset(), sub,
                               inner[0].red_classes, geo.n_red, vector_class=_axis_class(sub, geo.vector_axis),
                               segments=segments)
    return _launch_plan(fusion, kernel, params, info, args, (-(-geo.n_iter // params.bdy), 1),
                        (params.bdx, params.bdy))


def prepare_transpose(fusion: Fusion, args: Sequence[Any], device: torch.device | None = None) -> GeneratedKernel:
    """Schedule and lower a transpose segment for the call whose inputs are `args` (torch
    tensors on any device, meta included; scalars) on `device` (default: the arguments').
    Raises NotLowerable only for segments the transpose scheduler rejects as such (they
    then run on the reference executor)."""
    from fuser.lower.transpose import lower_transpose
    from fuser.scheduler import transpose as tr

    fusion, _ = fusion.clone()  # scheduling transforms the copy; the segment stays as defined
    info = runtime_info(fusion, args, device=device)
    sub = FusionAnalysis(fusion, info).whole()
    # only what the kernel cannot compute (the segmenter's `reject_reason` ruled it out), not
    # where tiles would not pay off: the segmenter judged this segment within the complete
    # fusion, where it can weigh its layout groups differently (see `layout`)
    why = tr.lowering_reason(sub)
    lay = tr.layout(sub, fallback=True) if why is None else why
    if isinstance(lay, str):
        raise NotLowerable(f"a transpose kernel cannot compute this segment: {lay}")
    params = tr.heuristics(sub, lay)
    vec_a, vec_b = tr.vector_tensors(sub, lay, params)
    tr.schedule(fusion, lay, params)
    kernel = lower_transpose(fusion, lay, params, sub, vec_a, vec_b)
    ext_a, ext_b = info.extent(lay.axis_a), info.extent(lay.axis_b)
    tiles = -(-ext_a // params.tile_a) * -(-ext_b // params.tile_b)
    grid = (tiles, min(tr.batch_size(info, lay), tr.MAX_GRID_Y))
    return _launch_plan(fusion, kernel, params, info, args, grid, (params.threads, 1))


def prepare_greedy(fusion: Fusion, args: Sequence[Any], device: torch.device | None = None) -> GeneratedKernel:
    """Schedule and lower a greedy segment (a scatter and the elementwise producers of its
    operands) for the call `args` describes on `device`. Its blocks stride over the copy
    and the scattered writes, so one block per thread's share of the larger is launched
    and the runtime caps the grid at the blocks the GPU holds at once (the kernel
    synchronises its grid between the two)."""
    from fuser.lower.scatter import lower_scatter
    from fuser.scheduler import greedy

    fusion, _ = fusion.clone()
    info = runtime_info(fusion, args, device=device)
    sub = FusionAnalysis(fusion, info).whole()
    why = greedy.reject_reason(sub)
    if why is not None:
        raise NotLowerable(f"a scatter kernel cannot compute this segment: {why}")
    params = greedy.heuristics(sub)
    kernel = lower_scatter(fusion, params)
    e = greedy.the_scatter(sub)
    work = max(info.numel(e.outputs[0]) // params.vectorize, info.numel(e.inputs[1]))
    return _launch_plan(fusion, kernel, params, info, args, (-(-work // params.threads), 1), (params.threads, 1))


#: the schedulers whose segments become generated kernels, and how each is prepared
_PREPARE = {
    SchedulerType.pointwise: prepare_pointwise,
    SchedulerType.resize: prepare_resize,
    SchedulerType.transpose: prepare_transpose,
    SchedulerType.reduction: prepare_reduction,
    SchedulerType.inner_persistent: lambda f, a, d=None: prepare_reduction(f, a, d, persistent=True),
    SchedulerType.inner_outer_persistent: prepare_inner_outer,
    SchedulerType.outer_persistent: lambda f, a, d=None: prepare_reduction(f, a, d, persistent=True, outer=True),
    SchedulerType.greedy: prepare_greedy,
}


def generates_kernel(scheduler: SchedulerType) -> bool:
    """Whether segments of `scheduler` become generated kernels (others run on the reference
    executor)."""
    return scheduler in _PREPARE


def prepare_kernel(scheduler: SchedulerType, fusion: Fusion, args: Sequence[Any],
                   device: torch.device | None = None) -> GeneratedKernel:
    """The generated kernel of a segment of `scheduler` for the call `args` describes."""
    return _PREPARE[scheduler](fusion, args, device)
