"""A segment's generated kernel for one input signature: its CUDA source (made by
`fuser.kernel.prepare`), compiled and loaded through the driver at its first launch, and
the plan that turns a call's tensors into its arguments. At run time only the tensors'
data pointers change, so a launch packs pointers in front of a precomputed tail.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from fuser.codegen.cuda import kernel_source
from fuser.driver.counters import arena_counters
from fuser.ir import Fusion, TensorView
from fuser.lower.kir import Kernel
from fuser.lower.lower import NotLowerable
from fuser.options import disabled
from fuser.runtime import philox
from fuser.runtime.index_check import ErrorFlag
from fuser.scheduler import SchedulerRuntimeInfo

#: loaded kernels by (source, arch, device): new sizes whose heuristics come out equal
#: generate the same source, so they reuse the loaded module instead of compiling
_loaded: dict[tuple, Any] = {}


def clear_loaded() -> None:
    """Forget the loaded kernel modules (with kernel_cache.clear(): a cold process, for
    measuring first-run compile time)."""
    _loaded.clear()


def compile_options() -> tuple[str, ...]:
    """The compiler options the user's settings ask for: FUSER_DISABLE=fma (nvFuser's
    option) compiles with no multiply-add contraction at all (`--fmad=false`), so every
    product and sum is rounded as eager PyTorch rounds it."""
    return ("--fmad=false",) if disabled("fma") else ()


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
        #: the arrival counters' address per stream (the device's shared arena, or zeros of
        #: this kernel's own, kept in _own_counters)
        self._semaphores: dict[int, int] = {}
        self._own_counters: list[torch.Tensor] = []
        #: how many arrival counters a launch takes (one per column of blocks, two at least;
        #: set by `load`, which fixes the grid)
        self._counters = 2
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
        options = compile_options()

        def compile_and_load() -> CompiledKernel:
            key = (self.source, arch, self.info.device, waits, options)
            got = _loaded.get(key)
            if got is None:
                cubin = get_cubin(self.source, arch=arch, options=options, headers=runtime_headers())
                got = _loaded[key] = CompiledKernel(cubin, self.kernel.name, self.format, device=self.info.device,
                                                          dependent_launch=waits)
            return got

        compiled = compile_and_load()
        fits = self.kernel.grid_strided or not self.kernel.grid_sync  # (a grid planned from what fits)
        if self.kernel.min_blocks and fits and compiled.local_size_bytes > self.kernel.spill_max:
            # the register cap the occupancy target set made the compiler spill: a slower
            # kernel than the compiler's own choice, which is taken instead
            self.kernel = dataclasses.replace(self.kernel, min_blocks=0)
            self.source = kernel_source(self.kernel)
            compiled = compile_and_load()
        if (self.kernel.grid_sync or self.kernel.grid_strided) and self.grid[0] > 0:
            # every block must be resident at once for the grid barrier; a grid-strided
            # kernel's blocks stride over the work, as many as the GPU holds at once
            threads = self.block[0] * self.block[1]
            resident = compiled.max_active_blocks(threads, self.kernel.dynamic_smem) * self.info.device_limits.sm_count
            if self.kernel.grid_strided and resident >= 1:
                # as few blocks as give each the same number of row groups (a last round
                # with a few blocks busy would cost a whole round)
                rounds = -(-self.grid[0] // resident)
                self.grid = (-(-self.grid[0] // rounds), 1, 1)
            elif self.kernel.grid_sync and self.grid[0] * self.grid[1] > resident:
                raise NotLowerable(f"kernel {self.kernel.name} synchronises {self.grid[0] * self.grid[1]} blocks of "
                                   f"{threads} threads, but the GPU holds {resident} at once")
        if self.compiled is None:
            blocks = self.grid[0] * self.grid[1]
            self._work = [(k, max(1, blocks * n + fixed)) for k, n, fixed in self._work]
            self._counters = max(2, self.grid[0])
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
        per stream (the last block zeroes them again, and launches on one stream run in
        order): the device's shared arena where the stream owns it (no fill to launch),
        else zeros of the kernel's own."""
        dev = self.info.device
        work = [torch.empty(n, dtype=torch.uint8, device=dev) for _, n in self._work]
        for (k, _), buf in zip(self._work, work):
            values[k] = buf.data_ptr()
        if self._semaphore is not None:
            if torch.cuda.is_current_stream_capturing():
                # counters of its own, zeroed by the graph at each replay: replays may run
                # on any stream, beside eager launches
                sem = torch.zeros(self._counters, dtype=torch.int32, device=dev)
                values[self._semaphore] = sem.data_ptr()
                work.append(sem)
                return work
            stream = torch.cuda.current_stream(dev).cuda_stream
            address = self._semaphores.get(stream)
            if address is None:
                address = None if disabled("counter_arena") else arena_counters(dev, stream, self._counters)
                if address is None:
                    own = torch.zeros(self._counters, dtype=torch.int32, device=dev)
                    self._own_counters.append(own)
                    address = own.data_ptr()
                self._semaphores[stream] = address
            values[self._semaphore] = address
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

