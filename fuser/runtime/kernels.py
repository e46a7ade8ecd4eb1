"""Generated kernels for segments: schedule, lower, print, compile, and launch them.

`prepare_kernel(scheduler, group_fusion, args, device)` schedules a segment for the call
`args` describes and returns its CUDA source and launch plan; no GPU is needed until
`GeneratedKernel.load()`. A plan is made once per input signature: at run time only the
tensors' data pointers change, so a launch packs pointers in front of a precomputed tail.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from fuser.codegen.cuda import kernel_source
from fuser.ir import Fusion, TensorView, WelfordOp
from fuser.options import disabled, dump, dump_enabled
from fuser.lower.kir import Kernel
from fuser.lower.lower import NotLowerable, lower_pointwise
from fuser.scheduler import FusionAnalysis, SchedulerRuntimeInfo, SchedulerType
from fuser.scheduler import pointwise as pw
from fuser.scheduler import resize as rs
from fuser.scheduler.runtime_info import target_line
from fuser.scheduler.vectorize import stride_alignment, vectorizable

from .index_check import ErrorFlag, check_on_host
from . import philox
from .info import runtime_info

#: loaded kernels by (source, arch, device): new sizes whose heuristics come out equal
#: generate the same source, so they reuse the loaded module instead of compiling
_loaded: dict[tuple, Any] = {}


def clear_loaded() -> None:
    """Forget the loaded kernel modules (with kernel_cache.clear(): a cold process, for
    measuring first-run compile time)."""
    _loaded.clear()


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


class GeneratedKernel:
    """One segment's generated kernel for one input signature: its source, launch shape
    and the plan that turns a call's tensors into the kernel's arguments."""

    def __init__(self, fusion: Fusion, kernel: Kernel, source: str, params: Any, info: SchedulerRuntimeInfo,
                 grid: tuple[int, int], block: tuple[int, int]) -> None:
        self.fusion = fusion
        self.kernel = kernel
        self.source = source
        self.params = params
        self.info = info
        self.compiled = None
        # an empty grid (zero elements) launches nothing
        self.grid = (grid[0], grid[1], 1) if grid[0] > 0 and grid[1] > 0 else (0, 1, 1)
        self.block = (block[0], block[1], 1)
        self.format = "".join(p.fmt for p in kernel.params)
        self.out_layouts = [_dense_layout(info, tv) for tv in fusion.outputs]

    def bind_fixed(self, args: dict[TensorView, torch.Tensor]) -> None:
        """Values of the per-signature parameters (strides, extents) and where the per-call
        ones (data pointers, scalar inputs, grid-reduction buffers) come from."""
        template: list[Any] = [None] * len(self.kernel.params)
        strides = dict(zip(self.fusion.outputs, (lay[1] for lay in self.out_layouts)))
        in_pos = {v: j for j, v in enumerate(self.fusion.inputs)}
        out_pos = {v: j for j, v in enumerate(self.fusion.outputs)}
        self._in_ptrs, self._out_ptrs, self._scalars = [], [], []
        self._out_storage_ptrs: list[tuple[int, int]] = []
        #: (param position, bytes) of the work buffers a grid reduction needs per launch:
        #: (position, per block, beside those) here, for the whole grid once `load` has
        #: fixed the grid
        self._work: list[tuple[int, ...]] = []
        self._semaphore: int | None = None
        self._semaphores: dict[int, torch.Tensor] = {}
        #: (param position, flag) of the index ops' device bounds checks
        self._index_error: tuple[int, ErrorFlag] | None = None
        #: positions of the unseeded RNG ops' seed and base offset, filled per execution
        self._philox: list[tuple[int, int]] = []
        #: position of the device array holding both instead (a launch captured in a graph)
        self._philox_state: int | None = None
        for k, p in enumerate(self.kernel.params):
            if p.kind == "stride":
                tv, d = p.source
                template[k] = int(args[tv].stride(d)) if tv in args else int(strides[tv][d])
            elif p.kind == "extent":
                template[k] = int(self.info.evaluate(p.source))
            elif p.kind == "scalar":
                self._scalars.append((k, in_pos[p.source]))
            elif p.kind == "work":
                elem_bytes, slots, fixed = p.source
                self._work.append((k, slots * elem_bytes, fixed * elem_bytes))
            elif p.kind == "semaphore":
                self._semaphore = k
            elif p.kind == "index_error":
                self._index_error = (k, ErrorFlag(self.kernel, self.info.device))
            elif p.kind in ("philox_seed", "philox_offset"):
                self._philox.append((k, 0 if p.kind == "philox_seed" else 1))
            elif p.kind == "philox_state":
                template[k] = 0  # null: the seed and offset parameters hold the draw
                self._philox_state = k
            elif p.source in in_pos:
                self._in_ptrs.append((k, in_pos[p.source]))
            else:
                j = out_pos[p.source]
                stored, _, user = self.out_layouts[j]
                # expanded to no elements: the view's data pointer is null, but the kernel
                # still writes the values it would copy (into the storage we allocated)
                empty_view = 0 in user and 0 not in stored
                (self._out_storage_ptrs if empty_view else self._out_ptrs).append((k, j))
        self._template = template
        dev = self.info.device
        self._alloc = [(stored, strides_, tv.dtype.torch, dev, user if user != stored else None)
                       for tv, (stored, strides_, user) in zip(self.fusion.outputs, self.out_layouts)]

    def check_devices(self, args: Sequence[Any]) -> None:
        """Refuse tensor arguments that are not on the kernel's device (a pointer there
        would fault or write wild memory). Once per launch plan: the input signature the
        plan was built for fixes every argument's device."""
        dev = self.info.device
        for j, x in enumerate(args):
            if isinstance(x, torch.Tensor) and x.device != dev and x.device.type != "meta":
                tv = self.fusion.inputs[j]
                raise RuntimeError(f"kernel {self.kernel.name}: argument {j} ({tv!r}) is on {x.device}, "
                                   f"but the kernel runs on {dev}")

    def load(self) -> None:
        """Compile (or fetch from the kernel cache) and load the kernel on its device."""
        from fuser.codegen.ops import runtime_headers
        from fuser.driver.kernel_cache import get_cubin
        from fuser.driver.launch import CompiledKernel
        from fuser.driver.nvrtc import device_arch

        arch = device_arch(self.info.device)

        waits = self.kernel.waits_for_prior_grids and not disabled("pdl")

        def compile_and_load() -> CompiledKernel:
            key = (self.source, arch, self.info.device, waits)
            got = _loaded.get(key)
            if got is None:
                cubin = get_cubin(self.source, arch=arch, headers=runtime_headers())
                got = _loaded[key] = CompiledKernel(cubin, self.kernel.name, self.format, device=self.info.device,
                                                          dependent_launch=waits)
            return got

        compiled = compile_and_load()
        if self.kernel.min_blocks and not self.kernel.grid_sync and compiled.local_size_bytes > 0:
            # the register cap the occupancy target set made the compiler spill: a slower
            # kernel than the compiler's own choice, which is taken instead
            self.kernel = dataclasses.replace(self.kernel, min_blocks=0)
            self.source = kernel_source(self.kernel)
            compiled = compile_and_load()
        if self.kernel.grid_sync and self.grid[0] > 0:
            # every block must be resident at once for the grid barrier
            threads = self.block[0] * self.block[1]
            resident = compiled.max_active_blocks(threads, self.kernel.dynamic_smem) * self.info.device_limits.sm_count
            if self.kernel.grid_strided and resident >= 1:
                # as few blocks as give each the same number of row groups (a last round
                # with a few blocks busy would cost a whole round)
                rounds = -(-self.grid[0] // resident)
                self.grid = (-(-self.grid[0] // rounds), 1, 1)
            elif self.grid[0] * self.grid[1] > resident:
                raise NotLowerable(f"kernel {self.kernel.name} synchronises {self.grid[0] * self.grid[1]} blocks of "
                                   f"{threads} threads, but the GPU holds {resident} at once")
        if self.compiled is None:
            blocks = self.grid[0] * self.grid[1]
            self._work = [(k, max(1, blocks * n + fixed)) for k, n, fixed in self._work]
        self.compiled = compiled

    def allocate_outputs(self) -> list[torch.Tensor]:
        """Fresh outputs from PyTorch's allocator, laid out as the kernel writes them."""
        outs = []
        for stored, strides, dtype, device, user in self._alloc:
            t = torch.empty_strided(stored, strides, dtype=dtype, device=device)
            outs.append(t if user is None else t.expand(user))
        return outs

    def can_write_into(self, outs: Sequence[Any]) -> bool:
        """Whether `outs` are laid out as `allocate_outputs` lays them out (the kernel
        writes such buffers as it writes its own)."""
        if len(outs) != len(self._alloc):
            return False
        for o, (stored, strides, dtype, device, user) in zip(outs, self._alloc):
            if (not isinstance(o, torch.Tensor) or user is not None or o.dtype != dtype or o.device != device
                    or tuple(o.shape) != tuple(stored) or tuple(o.stride()) != tuple(strides)):
                return False
        return True

    @property
    def draws_random(self) -> bool:
        """Whether the kernel has unseeded RNG ops (it needs the execution's seed and offset)."""
        return bool(self._philox)

    def run(self, inputs: Sequence[Any], outputs: Sequence[torch.Tensor],
            philox_state: tuple[int, int] | torch.Tensor | None = None) -> None:
        """Launch on PyTorch's current stream: `inputs` in the segment's input order;
        `philox_state` the execution's (seed, base offset) of unseeded RNG ops, or a device
        tensor holding both (`philox.draw` under CUDA graph capture); drawn here when the
        kernel has some and none is given."""
        compiled = self.compiled
        if compiled is None:
            self.load()
            compiled = self.compiled
        if self.grid[0] == 0:
            return
        values = self._template.copy()
        for k, j in self._in_ptrs:
            values[k] = inputs[j].data_ptr()
        for k, j in self._out_ptrs:
            values[k] = outputs[j].data_ptr()
        for k, j in self._out_storage_ptrs:
            values[k] = outputs[j].untyped_storage().data_ptr()
        for k, j in self._scalars:
            values[k] = inputs[j]
        if self._philox:
            if philox_state is None:
                philox_state = philox.draw(self.info.device, philox.streams(self.fusion))
            if isinstance(philox_state, torch.Tensor):  # drawn on the device (graph capture)
                values[self._philox_state] = philox_state.data_ptr()
                for k, _ in self._philox:
                    values[k] = 0
            else:
                for k, which in self._philox:
                    values[k] = philox.as_int64(philox_state[which])
        # the partials live until the launch is issued: freed before, their memory could go
        # to an allocation made in between (the index ops' error flag, made on a stream's
        # first launch), which the kernel would then overwrite
        buffers = self._grid_buffers(values) if self._work or self._semaphore is not None else None
        flag = None
        if self._index_error is not None:
            # index tensors' values are checked on the device: reading the flag after the
            # launch waits for it (a synchronisation only kernels with such checks pay; a
            # launch captured in a CUDA graph cannot wait, so replays go unchecked, as nvFuser's)
            k, flag = self._index_error
            if torch.cuda.is_current_stream_capturing():
                values[k], flag = 0, None
            else:
                values[k] = flag.pointer()
        compiled.launch(self.grid, self.block, values, shared_mem=self.kernel.dynamic_smem)
        del buffers  # launched: PyTorch's allocator orders their reuse after it
        if flag is not None:
            flag.raise_if_set()

    def _grid_buffers(self, values: list[Any]) -> list[torch.Tensor]:
        """A grid reduction's buffers: partials from PyTorch's allocator for this launch
        (returned: the caller holds them until the launch is issued), and arrival counters
        kept per stream (the last block zeroes them again, and launches on one stream run
        in order)."""
        dev = self.info.device
        work = [torch.empty(n, dtype=torch.uint8, device=dev) for _, n in self._work]
        for (k, _), buf in zip(self._work, work):
            values[k] = buf.data_ptr()
        if self._semaphore is not None:
            # a launch captured in a CUDA graph gets counters of its own, zeroed by the graph
            # at each replay: replays may run on any stream, beside eager launches
            capturing = torch.cuda.is_current_stream_capturing()
            stream = torch.cuda.current_stream(dev).cuda_stream
            sem = None if capturing else self._semaphores.get(stream)
            if sem is None:
                sem = torch.zeros(max(2, self.grid[0]), dtype=torch.int32, device=dev)
                if not capturing:
                    self._semaphores[stream] = sem
            values[self._semaphore] = sem.data_ptr()
            work.append(sem)
        return work


def _dense_layout(info: SchedulerRuntimeInfo, tv: TensorView) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(stored shape, strides, user shape) of an output we allocate: dense in its
    allocation order, broadcast axes stored once (expanded ones then expanded)."""
    logical = tv.logical_no_reductions()
    user = tuple(info.extent(i) for i in logical)
    stored = tuple(1 if i.is_broadcast else n for i, n in zip(logical, user))
    alloc = [i for i in tv.domain.maybe_allocation if not i.is_reduction]
    strides = [0] * len(logical)
    acc = 1
    for i in reversed(alloc):
        d = logical.index(i)
        strides[d] = acc
        acc *= stored[d]
    return stored, tuple(strides), user


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
