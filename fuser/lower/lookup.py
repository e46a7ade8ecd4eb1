"""Index ops in generated kernels: select, index_select, gather and take_along_axis read
their lookup tensor at a position an index gives along `dim`, bounds-checked.

The lookup tensor is a kernel input the kernel does not load with the others: its `dim`
axis is no axis the kernel iterates (the analysis leaves it unmapped), so each element is
read where its op computes, at the offset whose other axes follow the op's output (as the
reference indexes it) and whose `dim` axis takes the index value. index_select's and
gather's index tensors are data, checked on the device: an out-of-range value reads
nothing and is recorded in the kernel's error flag, which the runtime reads after the
launch. select's index is a host scalar and gather's index sizes are the call's sizes:
the runtime checks those before the launch.
"""
from __future__ import annotations

from typing import Callable

from fuser.ir import DataType, Fusion, GatherOp, IndexSelectOp, IterDomain, SelectOp, TensorView, Val

from .errors import NotLowerable
from .index import TensorIndexer
from .kir import Cast, CheckedIndex, Expr, IndexCheck, IntLit, Kernel, Lookup
from .params import ParamTable
from .values import scalar

INDEX_OPS = (SelectOp, IndexSelectOp, GatherOp)
#: the header with the lookup and bounds-check helpers
HEADER = "fuser_indexing.cuh"
_INDEX_DTYPES = (DataType.Int, DataType.Int32)


def index_value(value: Expr, dtype: DataType, name: str) -> tuple[Expr, DataType]:
    """(an index tensor's element as an integer, its dtype) for op `name`'s bounds check: a
    floating-point index converted to int64 as nvFuser converts it where it is used
    (truncated toward zero, as the reference executor's `.long()`)."""
    if dtype in _INDEX_DTYPES:
        return value, dtype
    if dtype.is_floating:
        return Cast(value, dtype, DataType.Int), DataType.Int
    raise NotLowerable(f"{name}: {dtype} index")


def op_name(e) -> str:
    """The user's name of index op `e`."""
    if isinstance(e, GatherOp):
        return "take_along_axis" if e.exact_sizes else "gather"
    return "select" if isinstance(e, SelectOp) else "index_select"


class Lookups:
    """The index ops of one kernel: their lookup reads and bounds checks."""

    def __init__(self, fusion: Fusion, index: TensorIndexer, params: ParamTable, *, ref_axes_only: bool = False) -> None:
        """`ref_axes_only`: the lowering's axis_index is right only for axes of a reference
        axis's class (the reduction lowering's gives 0 for others): refuse the rest."""
        self.index = index
        self.params = params
        self.ref_axes_only = ref_axes_only
        self.checks: list[IndexCheck] = []
        self._check_of: dict[object, int] = {}
        exprs = fusion.exprs()
        ops = [e for e in exprs if isinstance(e, INDEX_OPS)]
        for e in ops:
            if e.inputs[0] not in fusion.inputs:
                raise NotLowerable(f"{op_name(e)}: lookup tensor {e.inputs[0]!r} is computed in the kernel")
        read = {v for e in exprs for k, v in enumerate(e.inputs) if k or not isinstance(e, INDEX_OPS)}
        #: inputs only read through index ops: the kernel does not load them
        self.lookup_only = {e.inputs[0] for e in ops} - read - set(fusion.outputs)
        for e in ops:
            if isinstance(e, GatherOp) and not e.exact_sizes:
                self._gather_sizes(e)

    def skip_load(self, tv: TensorView) -> bool:
        """Whether input `tv` is only read by index ops (at positions they compute)."""
        return tv in self.lookup_only

    def value(self, e, out: TensorView, operand: Callable[[Val], Expr],
              axis_index: Callable[[IterDomain], Expr]) -> Expr:
        """The element of `out` that index op `e` reads: `operand` gives an index tensor's
        element, `axis_index` an output axis's index."""
        lookup, dim = e.inputs[0], e.dim
        name = op_name(e)
        l_ids = lookup.logical_no_reductions()
        o_ids = out.logical_no_reductions()
        terms: list[Expr] = []
        for k, li in enumerate(l_ids):
            if k == dim or li.is_broadcast:
                continue  # a broadcast axis (expanded or not) is stored once: position 0
            oi = o_ids[k - 1 if isinstance(e, SelectOp) and k > dim else k]
            if oi.is_broadcast:
                if oi.has_expanded_extent:
                    # the op builders make the output concrete wherever the lookup is
                    # (fuser.ops.indexing): an expanded one here would store once values
                    # that vary along it
                    raise NotLowerable(f"{name}: output axis {oi!r} is expanded but the lookup's is not")
                continue  # extent 1 (gather's index is): position 0
            if self.ref_axes_only and self.index.ref_axis(oi) is None:
                raise NotLowerable(f"{name}: output axis {oi!r} has no counterpart in the reference")
            terms.append(axis_index(oi) * self.params.stride(lookup, k))
        offset = terms[0] if terms else IntLit(0)
        for t in terms[1:]:
            offset = offset + t
        axis = l_ids[dim]
        extent = self.index.extent(axis.user_extent)
        stride = IntLit(0) if axis.is_broadcast else self.params.stride(lookup, dim)
        idx = e.inputs[1]
        if isinstance(e, SelectOp):
            if idx.dtype not in _INDEX_DTYPES:
                raise NotLowerable(f"{name}: {idx.dtype} index")
            check = self._check(e, IndexCheck(name, dim, repr(lookup), axis.user_extent, value=idx, wrap=True))
            position = CheckedIndex(scalar(idx, self.params), idx.dtype, extent, check, None, wrap=True)
        else:
            value, dtype = index_value(operand(idx), idx.dtype, name)
            check = self._check(e, IndexCheck(name, dim, repr(lookup), axis.user_extent))
            position = CheckedIndex(value, dtype, extent, check, self.params.index_error())
        return Lookup(self.params.tensor(lookup), offset, position, stride, lookup.dtype)

    def finish(self, kernel: Kernel) -> Kernel:
        """`kernel` with the index ops' checks and header (unchanged without index ops)."""
        if self.checks:
            kernel.index_checks = tuple(self.checks)
            if HEADER not in kernel.includes:
                kernel.includes = (*kernel.includes, HEADER)
        return kernel

    def _check(self, e, check: IndexCheck) -> int:
        """The number of `e`'s bounds check (one per op however often it is lowered)."""
        got = self._check_of.get(e)
        if got is None:
            got = self._check_of[e] = len(self.checks)
            self.checks.append(check)
        return got

    def _gather_sizes(self, e: GatherOp) -> None:
        """gather's index may be no larger than the lookup tensor along the other axes: the
        host checks the call's sizes (the kernel reads those axes unchecked)."""
        lookup, idx = e.inputs[0], e.inputs[1]
        for k, (li, ii) in enumerate(zip(lookup.logical_no_reductions(), idx.logical_no_reductions())):
            if k != e.dim:
                self.checks.append(IndexCheck("gather", k, repr(lookup), li.user_extent, value=ii.user_extent,
                                              size=True))
