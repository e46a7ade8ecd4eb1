"""Generated kernels for segments: schedule, lower, print, compile, and launch them.

`prepare_pointwise(group_fusion, args)` schedules a pointwise segment for the call
`args` describes and returns its CUDA source and launch plan; no GPU is needed until
`PointwiseKernel.load()`. A plan is made once per input signature: at run time only the
tensors' data pointers change, so a launch packs pointers in front of a precomputed tail.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from fuser.codegen.cuda import kernel_source
from fuser.ir import Fusion, TensorView
from fuser.options import dump
from fuser.lower.kir import Kernel
from fuser.lower.lower import NotLowerable, lower_pointwise
from fuser.scheduler import FusionAnalysis, SchedulerRuntimeInfo
from fuser.scheduler import pointwise as pw

def _inner_extent(info: SchedulerRuntimeInfo, ref: TensorView) -> int:
    """Elements of the reference's innermost axes up to and including its first
    non-broadcast one: vector lanes never cross that boundary."""
    n = 1
    for i in reversed(ref.logical_no_reductions()):
        n *= info.extent(i)
        if not i.is_broadcast:
            break
    return n


def _vectorizable(sub, info: SchedulerRuntimeInfo, ref: TensorView, args: dict[TensorView, Any]) -> list[TensorView]:
    """Inputs and outputs whose innermost stored axis is the reference's innermost axis
    with stride 1, and whose other strides keep every vector aligned."""
    find, id_of = sub.uf.find, sub.a.id_of
    concrete = [i for i in ref.logical_no_reductions() if not i.is_broadcast]
    if not concrete:
        return []
    inner_class = find(id_of(concrete[-1]))
    out = []
    fusion = sub.a.fusion
    for tv in [*fusion.inputs, *fusion.outputs]:
        if not isinstance(tv, TensorView):
            continue
        alloc = [i for i in tv.domain.maybe_allocation if not i.is_reduction and not i.is_broadcast]
        if not alloc or find(id_of(alloc[-1])) != inner_class:
            continue
        x = args.get(tv)
        if x is not None:
            logical = tv.logical_no_reductions()
            d = logical.index(alloc[-1])
            if x.stride(d) != 1 and x.shape[d] > 1:
                continue
        out.append(tv)
    return out


def _stride_alignment(vec: list[TensorView], args: dict[TensorView, Any]) -> int:
    """The largest power of two (up to 16) dividing every outer stride, in elements, of the
    vector-accessed inputs: a vector must never straddle a row start."""
    align = 16
    for tv in vec:
        x = args.get(tv)
        if x is None:
            continue
        for k in range(x.dim()):
            st = x.stride(k)
            if st > 1 and x.shape[k] > 1:
                while align > 1 and st % align:
                    align //= 2
    return align


#: loaded kernels by (source, arch, device): new sizes whose heuristics come out equal
#: generate the same source, so they reuse the loaded module instead of compiling
_loaded: dict[tuple, Any] = {}


def clear_loaded() -> None:
    """Forget the loaded kernel modules (with kernel_cache.clear(): a cold process, for
    measuring first-run compile time)."""
    _loaded.clear()


class PointwiseKernel:
    """One pointwise segment's kernel for one input signature."""

    def __init__(self, fusion: Fusion, kernel: Kernel, source: str, params: pw.PointwiseParams,
                 info: SchedulerRuntimeInfo) -> None:
        self.fusion = fusion
        self.kernel = kernel
        self.source = source
        self.params = params
        self.info = info
        self.compiled = None
        bx = info.evaluate(kernel.grid_extent) if kernel.grid_extent is not None else 1
        by = info.evaluate(kernel.grid_extent_y) if kernel.grid_extent_y is not None else 1
        # an empty grid (zero elements) launches nothing
        self.grid = (max(int(bx), 0), max(int(by), 0), 1) if bx and by else (0, 1, 1)
        self.block = (kernel.threads, 1, 1)
        self.format = "".join(p.fmt for p in kernel.params)
        # which params are data pointers (per call) and the values of the rest (per signature)
        self.tensor_params = [p.source for p in kernel.params if p.kind == "tensor"]
        self._fixed: list[tuple[int, Any]] = []
        self.out_layouts = [_dense_layout(info, tv) for tv in fusion.outputs]

    def bind_fixed(self, args: dict[TensorView, torch.Tensor], scalars: dict[Any, Any]) -> None:
        """Values of the per-signature parameters (strides, extents) and where the per-call
        ones (data pointers, scalar inputs) come from."""
        template: list[Any] = [None] * len(self.kernel.params)
        strides = dict(zip(self.fusion.outputs, (lay[1] for lay in self.out_layouts)))
        in_pos = {v: j for j, v in enumerate(self.fusion.inputs)}
        out_pos = {v: j for j, v in enumerate(self.fusion.outputs)}
        self._in_ptrs, self._out_ptrs, self._scalars = [], [], []
        for k, p in enumerate(self.kernel.params):
            if p.kind == "stride":
                tv, d = p.source
                template[k] = int(args[tv].stride(d)) if tv in args else int(strides[tv][d])
            elif p.kind == "extent":
                template[k] = int(self.info.evaluate(p.source))
            elif p.kind == "scalar":
                self._scalars.append((k, in_pos[p.source]))
            elif p.source in in_pos:
                self._in_ptrs.append((k, in_pos[p.source]))
            else:
                self._out_ptrs.append((k, out_pos[p.source]))
        self._template = template
        dev = self.info.device
        self._alloc = [(stored, strides_, tv.dtype.torch, dev, user if user != stored else None)
                       for tv, (stored, strides_, user) in zip(self.fusion.outputs, self.out_layouts)]

    def load(self) -> None:
        """Compile (or fetch from the kernel cache) and load the kernel on the current device."""
        from fuser.codegen.ops import runtime_headers

        from .kernel_cache import get_cubin
        from .launch import CompiledKernel
        from .nvrtc import device_arch

        arch = device_arch(self.info.device)
        key = (self.source, arch, self.info.device)
        compiled = _loaded.get(key)
        if compiled is None:
            cubin = get_cubin(self.source, arch=arch, headers=runtime_headers())
            compiled = _loaded[key] = CompiledKernel(cubin, self.kernel.name, self.format)
        self.compiled = compiled

    def allocate_outputs(self) -> list[torch.Tensor]:
        """Fresh outputs from PyTorch's allocator, laid out as the kernel writes them."""
        outs = []
        for stored, strides, dtype, device, user in self._alloc:
            t = torch.empty_strided(stored, strides, dtype=dtype, device=device)
            outs.append(t if user is None else t.expand(user))
        return outs

    def run(self, inputs: Sequence[Any], outputs: Sequence[torch.Tensor]) -> None:
        """Launch on PyTorch's current stream: `inputs` in the segment's input order."""
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
        for k, j in self._scalars:
            values[k] = inputs[j]
        compiled.launch(self.grid, self.block, values)


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


def prepare_pointwise(fusion: Fusion, args: Sequence[Any]) -> PointwiseKernel:
    """Schedule and lower a pointwise segment for the call whose inputs are `args`
    (torch tensors on any device, meta included; scalars). Raises NotLowerable when the
    segment needs code this generator does not write yet."""
    fusion, _ = fusion.clone()  # scheduling transforms the copy; the segment stays as defined
    info = SchedulerRuntimeInfo(fusion, args)
    sub = FusionAnalysis(fusion, info).whole()
    try:
        ref = pw.reference_tensor(sub)
    except ValueError as err:
        raise NotLowerable(str(err)) from None
    by_tv = {tv: x for tv, x in zip(fusion.inputs, args) if isinstance(tv, TensorView)}
    vec = _vectorizable(sub, info, ref, by_tv)
    total = info.numel(ref)
    params = pw.heuristics(sub, vec, _inner_extent(info, ref), total, ref, max_vector=_stride_alignment(vec, by_tv))
    pw.schedule(fusion, ref, params, sub)
    kernel = lower_pointwise(fusion, ref, params.vectorize, frozenset(tv.name for tv in vec), params.index_type, sub)
    source = kernel_source(kernel)
    dump("cuda_kernel", source)
    k = PointwiseKernel(fusion, kernel, source, params, info)
    scalars = dict(info.binding.scalars)
    k.bind_fixed(by_tv, scalars)
    return k


def kernels_available(device: torch.device) -> bool:
    """Whether generated kernels can run on `device`: a CUDA device, pycuda importable,
    and FUSER_DISABLE not naming `codegen`."""
    from fuser.options import disabled

    if device.type != "cuda" or disabled("codegen"):
        return False
    import importlib.util

    return importlib.util.find_spec("pycuda") is not None
