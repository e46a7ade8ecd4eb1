"""Schedule, lower and print one segment as a generated kernel: the path from a
segment's Fusion to CUDA C and a launch plan, one function per kernel scheduler.

`prepare_kernel(scheduler, group_fusion, args, device)` schedules a segment for the call
`args` describes and returns its `GeneratedKernel`; no GPU is needed until the kernel's
first launch loads it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from fuser.codegen.cuda import kernel_source
from fuser.errors import DefinitionError
from fuser.ir import Fusion, IterDomain, Merge, ParallelType, Split, TensorView, WelfordOp
from fuser.ir.printer import tv_str
from fuser.lower.kir import Kernel
from fuser.lower.kir_printer import kernel_ir_str
from fuser.lower.lower import NotLowerable, lower_pointwise
from fuser.options import disabled, dump, dump_enabled
from fuser.runtime.index_check import check_on_host
from fuser.runtime.info import runtime_info
from fuser.scheduler import FusionAnalysis, SchedulerRuntimeInfo, SchedulerType
from fuser.scheduler import pointwise as pw
from fuser.scheduler import resize as rs
from fuser.scheduler.analysis import RESIZE
from fuser.scheduler.runtime_info import target_line
from fuser.scheduler.vectorize import VECTOR_BYTES, stride_alignment, vectorizable

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
    from fuser.lower.row_loop import lower_row_loop
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
    vec, plain_width = red.vectors(sub, geo)
    if not (outer or persistent):
        width = plain_width
        try:
            params = red.heuristics(sub, geo, width)
        except ValueError as err:
            raise NotLowerable(str(err)) from None
    red.schedule(fusion, geo)
    lower = lower_row_loop if params.row_loop else lower_reduction
    kernel = lower(fusion, geo.ref, params, frozenset(vec) if width > 1 else frozenset(), sub,
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
    vec, width = red.vectors(sub, geo)
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


# --- user schedules ------------------------------------------------------------------------------


class UserScheduleError(DefinitionError):
    """A user schedule (a FusionDefinition subclass's schedule()) that fuser cannot honour."""


@dataclass(frozen=True)
class UserScheduleParams:
    """A user-scheduled kernel: the reference's loop nest as printed and its vector width.
    Hashable, as the schedulers' params are."""

    loop: str
    vectorize: int
    index_type: str

    def __str__(self) -> str:
        return f"UserScheduleParams(loop={self.loop}, vectorize={self.vectorize}, index_type={self.index_type})"


#: what a user-scheduled loop nest may bind: the loop kinds the pointwise lowering generates
#: (Unswitch becomes a serial loop: it only hoists predicates out of it, results are the same)
USER_PARALLEL_TYPES = frozenset({ParallelType.BIDx, ParallelType.BIDy, ParallelType.TIDx, ParallelType.Vectorize,
                                 ParallelType.Unroll, ParallelType.Unswitch, ParallelType.Serial})
#: parallel types one loop nest binds at most once
USER_ONCE = (ParallelType.BIDx, ParallelType.BIDy, ParallelType.TIDx, ParallelType.Vectorize)
#: vector widths (elements) a Vectorize axis may have
VECTOR_WIDTHS = (1, 2, 4, 8, 16)
MAX_BLOCK_THREADS = 1024
MAX_GRID_X = 2**31 - 1
#: register elements per tensor the lowering's unswitched loop may hold (it keeps a whole serial
#: loop's values in registers; longer or symbolic loops are lowered as plain loops)
_MAX_UNSWITCHED = 64


def is_scheduled(tv: TensorView) -> bool:
    """Whether `tv`'s loop domain was transformed or parallelised (it starts as its logical domain)."""
    loop, logical = tv.domain.loop, tv.domain.logical
    return (len(loop) != len(logical) or any(a is not b for a, b in zip(loop, logical))
            or any(i.parallel_type is not ParallelType.Serial for i in loop))


def loop_structure(tv: TensorView, cls: Callable[[IterDomain], Any]) -> list[tuple]:
    """`tv`'s loop axes as trees of the splits and merges that made them; a leaf is a logical
    axis's class (`cls`), or (None,) for a broadcast or a replay's stand-in for an axis `tv` lacks."""
    logical = set(tv.domain.logical)

    def tree(i: IterDomain) -> tuple:
        d = i.definition
        if i in logical or d is None:
            return ("axis", cls(i)) if i in logical and not i.is_broadcast else (None,)
        if isinstance(d, Split):
            f = int(d.factor.value) if d.factor.is_const else id(d.factor)
            return ("split", tree(d.inputs[0]), f, d.inner_split, d.outputs.index(i))
        if isinstance(d, Merge):
            return ("merge", tree(d.inputs[0]), tree(d.inputs[1]))
        return (type(d).__name__, id(d))

    return [tree(i) for i in tv.domain.loop]


def _same_tree(a: tuple, b: tuple) -> bool:
    """Equal loop-axis trees, a broadcast leaf matching anything (an axis the tensor lacks)."""
    if a == (None,) or b == (None,):
        return True
    if a[0] != b[0] or len(a) != len(b):
        return False
    if a[0] == "split":
        return a[2:] == b[2:] and _same_tree(a[1], b[1])
    if a[0] == "merge":
        return _same_tree(a[1], b[1]) and _same_tree(a[2], b[2])
    return a == b


def same_loop_nest(tv: TensorView, ref: TensorView, cls: Callable[[IterDomain], Any], *,
                   parallel: bool = True) -> bool:
    """Whether `tv`'s loop axes are `ref`'s, position by position (after the broadcast axes a
    replay puts first), made by the same splits and merges of the same axes; with `parallel`,
    each bound as `ref`'s or not at all (inlined, it runs in `ref`'s loop nest either way)."""
    a, b = loop_structure(tv, cls), loop_structure(ref, cls)
    pa = [i.parallel_type for i in tv.domain.loop]
    pb = [i.parallel_type for i in ref.domain.loop]
    while len(a) > len(b) and a[0] == (None,):
        a, pa = a[1:], pa[1:]
    while len(b) > len(a) and b[0] == (None,):
        b, pb = b[1:], pb[1:]
    if len(a) != len(b) or not all(_same_tree(x, y) for x, y in zip(a, b)):
        return False
    return not parallel or all(p is ParallelType.Serial or p is q for p, q in zip(pa, pb))


def _name(tv: TensorView) -> str:
    return f"T{tv.name}"


def _adopt_user_schedule(fusion: Fusion, ref: TensorView, cls: Callable[[IterDomain], Any]) -> None:
    """Make `ref`'s loop domain the user's schedule: the kernel runs one loop nest, the
    reference output's, and computes every tensor inside it. An output (else any tensor) the
    user scheduled is replayed onto `ref` when `ref` itself was not; every scheduled tensor
    must then have `ref`'s loop nest."""
    from fuser.transform import ReplayError, replay_loop

    scheduled = [tv for tv in fusion.tensors() if is_scheduled(tv)]
    if not scheduled:
        return
    if not any(tv is ref for tv in scheduled):
        source = next((tv for tv in fusion.outputs if any(tv is s for s in scheduled)), scheduled[0])
        by_class = {cls(r): r for r in ref.domain.logical if not r.is_broadcast}
        mapping = {}
        for i in source.domain.logical:
            r = None if i.is_broadcast else by_class.get(cls(i))
            if r is not None and r not in mapping.values():
                mapping[i] = r
        try:
            if len(mapping) != len([i for i in source.domain.logical if not i.is_broadcast]):
                raise ReplayError("an axis has no counterpart")
            replay_loop(source, ref, mapping)
        except ReplayError:
            raise UserScheduleError(
                f"{_name(source)} is scheduled ({tv_str(source)}), but the kernel runs the loop nest of "
                f"{_name(ref)}, the output spanning every axis of the fusion, and {_name(source)}'s schedule "
                f"does not carry over to it: schedule {_name(ref)}") from None
    for tv in scheduled:
        if tv is not ref and not same_loop_nest(tv, ref, cls):
            raise UserScheduleError(
                f"{_name(tv)} is scheduled as {tv_str(tv)}, unlike {_name(ref)} ({tv_str(ref)}), whose loop nest the "
                f"kernel runs: fuser computes every tensor inside that one loop nest (in registers), so schedule "
                f"{_name(ref)} alone or give {_name(tv)} the same schedule "
                f"(fd.sched.transform_like / parallelize_like)")


def _user_vector_width(ref: TensorView, info: SchedulerRuntimeInfo) -> int:
    """The width of `ref`'s Vectorize axis (1: none), checked to be what the lowering assumes:
    the innermost loop axis, whose lanes are consecutive elements of the innermost axis and
    never cross its end (the lowering predicates a vector by its first lane)."""
    loop = ref.domain.loop
    k = next((k for k, i in enumerate(loop) if i.parallel_type is ParallelType.Vectorize), None)
    if k is None:
        return 1
    ax = loop[k]
    what = f"the vectorize axis of {_name(ref)} ({tv_str(ref)})"
    if k != len(loop) - 1:
        raise UserScheduleError(f"{what} is loop axis {k}: it must be the innermost one")
    if not ax.extent.is_const or int(ax.extent.value) not in VECTOR_WIDTHS:
        raise UserScheduleError(f"{what} must have a constant extent of {', '.join(map(str, VECTOR_WIDTHS))}")
    width = int(ax.extent.value)
    d = ax.definition
    if not (isinstance(d, Split) and d.inner_split and d.outputs[1] is ax):
        raise UserScheduleError(f"{what} must be the inner side of a split by the vector width")
    # walk up: the lanes stay the lowest part of the index as long as each step keeps them the
    # inner part of something whose extent the width divides
    x = d.inputs[0]
    concrete = [i for i in ref.domain.logical if not i.is_broadcast]
    while x not in ref.domain.logical:
        e = x.definition
        if isinstance(e, Split) and e.outputs[1] is x and x.extent.is_const and int(x.extent.value) % width == 0:
            x = e.inputs[0]
        elif isinstance(e, Merge) and info.extent(e.inputs[1]) % width == 0:
            x = e.inputs[1]
        else:
            raise UserScheduleError(
                f"{what}: its lanes must be consecutive elements of the innermost axis, reached through inner "
                f"splits and merges whose inner extents are multiples of {width}")
    if not concrete or x is not concrete[-1]:
        raise UserScheduleError(f"{what} must come from the innermost axis, {concrete[-1] if concrete else 'none'}")
    n = info.extent(x)
    if n % width:
        raise UserScheduleError(f"{what}: the innermost extent, {n} in this call, is not a multiple of the width "
                                f"{width} (the lanes of the last vector would run past it)")
    return width


def _user_vector_tensors(sub: Any, ref: TensorView, width: int, resize: bool) -> list[TensorView]:
    """The inputs and outputs a user's vectorize axis reads and writes with vector accesses,
    each checked: at most 16 bytes, data and outer strides aligned to the vector."""
    if width == 1:
        return []
    info = sub.a.info
    concrete = [i for i in ref.logical_no_reductions() if not i.is_broadcast]
    vec = rs.vector_candidates(sub, ref) if resize else vectorizable(sub, concrete[-1])
    for tv in vec:
        size = tv.dtype.itemsize
        align = info.alignment.get(tv)
        if width * size > VECTOR_BYTES:
            raise UserScheduleError(f"vectorize by {width}: {_name(tv)} would move {width * size} bytes per vector "
                                    f"access ({tv.dtype.name}); a vector access moves at most {VECTOR_BYTES}")
        if align is not None and align < width * size:
            raise UserScheduleError(f"vectorize by {width}: the data of {_name(tv)} is aligned to {align} bytes in "
                                    f"this call; a vector of {width * size} bytes needs it aligned to that")
        if stride_alignment(sub, [tv]) < width:
            raise UserScheduleError(f"vectorize by {width}: an outer stride of {_name(tv)} is not a multiple of "
                                    f"{width} elements in this call (a vector would straddle a row start)")
    if resize and width > rs.vector_limit(sub, ref):
        raise UserScheduleError(f"vectorize by {width}: the slices, pads or cats along the innermost axis allow "
                                f"vectors of {rs.vector_limit(sub, ref)} elements at most")
    return vec


def _check_user_loop(ref: TensorView, info: SchedulerRuntimeInfo) -> None:
    """Refuse loop nests the lowering cannot run: parallel types it does not bind, one bound
    twice, a thread axis of symbolic or too large extent."""
    seen: dict[ParallelType, int] = {}
    for k, ax in enumerate(ref.domain.loop):
        pt = ax.parallel_type
        if pt not in USER_PARALLEL_TYPES:
            raise UserScheduleError(f"loop axis {k} of {_name(ref)} ({tv_str(ref)}) is bound to {pt.name}: user "
                                    "schedules bind grid_x, grid_y, block_x, vectorize, unroll, unswitch and serial "
                                    "axes so far")
        if pt in USER_ONCE:
            if pt in seen:
                raise UserScheduleError(f"loop axes {seen[pt]} and {k} of {_name(ref)} ({tv_str(ref)}) are both "
                                        f"bound to {pt.name}")
            seen[pt] = k
        if pt is ParallelType.TIDx and (not ax.extent.is_const or not 1 <= int(ax.extent.value) <= MAX_BLOCK_THREADS):
            raise UserScheduleError(f"loop axis {k} of {_name(ref)} ({tv_str(ref)}) is bound to block_x: it needs a "
                                    f"constant extent of 1 to {MAX_BLOCK_THREADS} (split by the block size first)")
        if pt is ParallelType.Unswitch:
            ax.parallel_type = ParallelType.Serial  # the lowering's copy: a serial loop gives the same results


def _plain_serial_loop(ref: TensorView, width: int) -> None:
    """The lowering unswitches a nest with one serial loop, holding all of it in registers:
    a loop of symbolic or large extent gets an inner loop of one iteration beside it (a split
    by 1, which changes no index) so that it is lowered as a plain loop."""
    from fuser.transform import split

    loops = [k for k, ax in enumerate(ref.domain.loop)
             if ax.parallel_type in (ParallelType.Serial, ParallelType.Unroll)]
    if len(loops) != 1:
        return
    k = loops[0]
    ax = ref.domain.loop[k]
    if ax.extent.is_const and int(ax.extent.value) * width <= _MAX_UNSWITCHED:
        return
    split(ref, k, 1)
    ref.domain.loop[k].parallel_type = ax.parallel_type


def prepare_user(fusion: Fusion, args: Sequence[Any], device: torch.device | None = None) -> GeneratedKernel:
    """Lower a user-scheduled segment (the whole fusion, SchedulerType.user) with the loop nest
    its loop domains hold, as written: no heuristics. Elementwise fusions only (what the
    pointwise and resize schedulers accept); raises UserScheduleError for a schedule or a
    fusion the kernel cannot honour, never NotLowerable (that would fall back silently)."""
    fusion, _ = fusion.clone()  # the lowering's adjustments go to a copy
    info = runtime_info(fusion, args, device=device)
    sub = FusionAnalysis(fusion, info).whole()
    resize = RESIZE in sub.kinds
    why = (rs if resize else pw).reject_reason(sub)
    if why is not None:
        raise UserScheduleError(f"fuser generates user-scheduled kernels for elementwise fusions only; this one {why}")
    ref = (rs if resize else pw).reference_tensor(sub)
    find, id_of = sub.uf.find, sub.a.id_of
    _adopt_user_schedule(fusion, ref, lambda i: find(id_of(i)))
    loop = tv_str(ref)  # as scheduled, before the lowering's adjustments below
    _check_user_loop(ref, info)
    width = _user_vector_width(ref, info)
    vec = _user_vector_tensors(sub, ref, width, resize)
    params = UserScheduleParams(loop, width, info.index_type)
    _plain_serial_loop(ref, width)
    try:
        kernel = lower_pointwise(fusion, ref, width, frozenset(tv.name for tv in vec), info.index_type, sub,
                                 name="fuser_user", blocks_from_end=False)
        bx = int(info.evaluate(kernel.grid_extent)) if kernel.grid_extent is not None else 1
        by = int(info.evaluate(kernel.grid_extent_y)) if kernel.grid_extent_y is not None else 1
        if bx > MAX_GRID_X or by > pw.MAX_GRID_Y:
            raise UserScheduleError(f"the grid_x and grid_y axes of {_name(ref)} ({tv_str(ref)}) launch {bx} x {by} "
                                    f"blocks in this call; a launch takes at most {MAX_GRID_X} x {pw.MAX_GRID_Y}")
        return _launch_plan(fusion, kernel, params, info, args, (bx, by), (kernel.threads, 1))
    except NotLowerable as err:
        raise UserScheduleError(f"the kernel for this schedule cannot be generated yet: {err}") from None


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
    SchedulerType.user: prepare_user,
}


def generates_kernel(scheduler: SchedulerType) -> bool:
    """Whether segments of `scheduler` become generated kernels (others run on the reference
    executor)."""
    return scheduler in _PREPARE


def prepare_kernel(scheduler: SchedulerType, fusion: Fusion, args: Sequence[Any],
                   device: torch.device | None = None) -> GeneratedKernel:
    """The generated kernel of a segment of `scheduler` for the call `args` describes."""
    return _PREPARE[scheduler](fusion, args, device)
