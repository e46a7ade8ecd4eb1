"""Lowering a scheduled pointwise segment to kernel IR.

Every tensor of a pointwise kernel is inlined into the reference's loop nest, so the nest
is the reference's loop domain: grid and block indices for parallel axes, loops for
unrolled and serial ones, register arrays for the vector lanes. `TensorIndexer` indexes
each tensor from it.
"""
from __future__ import annotations

from fuser.ir import DataType, Fusion, IterDomain, ParallelType, TensorView, Val
from fuser.scheduler.analysis import FusionAnalysis, SubFusion

from .errors import NotLowerable
from .index import Indices, TensorIndexer
from .kir import (
    AddressOf,
    Assign,
    Comment,
    Decl,
    Element,
    Expr,
    For,
    If,
    IndexCast,
    IntLit,
    Kernel,
    Not,
    ParallelIndex,
    Stmt,
    Var,
    VecLoad,
    VecStore,
    all_of,
    eq,
)
from .params import ParamTable
from .values import scalar, tensor_value

_LANE = Var("v")
_PARALLEL = (ParallelType.BIDx, ParallelType.BIDy, ParallelType.TIDx)


class PointwiseLowering:
    """Builds the kernel IR of one scheduled pointwise fusion."""

    def __init__(self, fusion: Fusion, ref: TensorView, vector_tensors: frozenset[int], index_type: str,
                 name: str = "fuser_pointwise", sub: SubFusion | None = None) -> None:
        self.fusion = fusion
        self.ref = ref
        self.vector_tensors = vector_tensors
        self.index_type = index_type
        self.name = name
        self.params = ParamTable(fusion.inputs, index_type)
        sub = sub if sub is not None else FusionAnalysis(fusion).whole()
        self.index = TensorIndexer(fusion, ref, sub, self.params)
        self.lanes = 1

    def lower(self) -> Kernel:
        """The kernel: the loop nest, unswitched where one unrolled loop has predicates."""
        loop_index: Indices = {}
        serial: list[tuple[IterDomain, Var]] = []  # loops, outermost first
        grid_extent = grid_extent_y = None
        threads = 1
        lanes = 1
        for ax in self.ref.domain.loop:
            pt = ax.parallel_type
            if pt in _PARALLEL:
                loop_index[ax] = IndexCast(ParallelIndex(pt))
                if pt is ParallelType.BIDx:
                    grid_extent = ax.extent
                elif pt is ParallelType.BIDy:
                    grid_extent_y = ax.extent
                else:
                    threads = int(ax.extent.value)
            elif pt is ParallelType.Vectorize:
                loop_index[ax] = _LANE
                lanes = int(ax.extent.value)
            elif pt in (ParallelType.Unroll, ParallelType.Serial):
                var = Var(f"u{len(loop_index)}")
                loop_index[ax] = var
                serial.append((ax, var))
            else:
                raise NotLowerable(f"loop axis parallelised as {pt}")
        if lanes == 1:
            loop_index = _at_lane0(loop_index)
        self.lanes = lanes
        at_lane0 = _at_lane0(loop_index)
        preds = self.index.in_bounds(at_lane0)
        ri_lane = _LANE if lanes > 1 else IntLit(0)
        body: list[Stmt] = []
        if not self.ref.domain.loop:
            body.append(Comment("no axes: one thread computes the single element"))
            guard = all_of([eq(ParallelIndex(pt), 0) for pt in _PARALLEL])
            body.append(If(guard, self._stages(loop_index, at_lane0, lanes, IntLit(0), None, per_stage=False)))
        elif len(serial) == 1 and preds:
            # unswitch: when the last unrolled iteration is in bounds, so are all (indices grow
            # with the unroll index); that path has no predicates and issues every load of the
            # unrolled iterations before any math, so more bytes are in flight per thread
            ax, var = serial[0]
            stop = self.index.extent(ax.extent)
            last = {a: (stop - 1 if s == var else s) for a, s in at_lane0.items()}
            all_in = all_of(self.index.in_bounds(last))
            if not ax.extent.is_const:
                raise NotLowerable("an unrolled axis of symbolic extent")
            size = int(ax.extent.value) * lanes
            ri_fast = var * lanes + _LANE if lanes > 1 else var
            fast = self._stages(loop_index, at_lane0, size, ri_fast, var * lanes, per_stage=True, unroll=(var, stop))
            slow = self._stages(loop_index, at_lane0, lanes, ri_lane, None, per_stage=False)
            body.append(If(all_in, fast))
            body.append(If(Not(all_in), [For(var, stop, [If(all_of(preds), slow)], unroll=True)]))
        else:
            nest = body
            for ax, var in serial:
                f = For(var, self.index.extent(ax.extent), unroll=ax.parallel_type is ParallelType.Unroll)
                nest.append(f)
                nest = f.body
            inner = self._stages(loop_index, at_lane0, lanes, ri_lane, None, per_stage=False)
            if preds:
                nest.append(If(all_of(preds), inner))
            else:
                nest.append(Comment("every index in bounds"))
                nest.extend(inner)
        return Kernel(self.name, self.params.params, body, self.index_type, threads=threads,
                      grid_extent=grid_extent, grid_extent_y=grid_extent_y)

    def _stages(self, loop_index: Indices, at_lane0: Indices, size: int, ri: Expr, base: Expr | None, *,
                per_stage: bool, unroll: tuple[Var, Expr] | None = None) -> list[Stmt]:
        """Declarations, loads, math and stores of one tile of `size` register elements:
        register element `ri` (over the lane variable), vector accesses at register offset
        `base` (None: the arrays' start). With `per_stage`, each stage is its own loop over
        the unrolled axis `unroll`."""
        fusion, lanes, index, params = self.fusion, self.lanes, self.index, self.params
        idx_v = index.ref_indices(loop_index)
        idx_0 = index.ref_indices(at_lane0)
        regs: dict[Val, Element] = {}
        decls: list[Stmt] = []
        loads: list[Stmt] = []
        lane_loads: list[Stmt] = []
        compute: list[Stmt] = []
        stores: list[Stmt] = []

        def at(array: Var) -> Expr:
            return array if base is None else array + base

        def operand(v: Val) -> Expr:
            if isinstance(v, TensorView):
                got = regs.get(v)
                if got is None:
                    raise NotLowerable(f"{v!r} is read before it is computed")
                return got
            return scalar(v, params)

        def axis_index(axis: IterDomain) -> Expr:
            r = index.ref_axis(axis)
            return idx_v[r] if r is not None else IntLit(0)

        exprs = fusion.exprs()
        for tv in fusion.inputs:
            if not isinstance(tv, TensorView) or not any(tv in e.inputs for e in exprs):
                continue
            array = Var(f"r{tv.name}")
            decls.append(Decl(array.name, tv.dtype, size))
            regs[tv] = Element(array, ri)
            ptr = params.tensor(tv)
            if lanes > 1 and tv.name in self.vector_tensors:
                loads.append(VecLoad(tv.dtype, lanes, at(array), AddressOf(Element(ptr, index.offset(tv, idx_0)))))
            else:
                lane_loads.append(Assign(regs[tv], Element(ptr, index.offset(tv, idx_v))))
        index_dtype = DataType.Int if self.index_type == "int64" else DataType.Int32
        for e in exprs:
            outs = [o for o in e.outputs if isinstance(o, TensorView)]
            if not outs:
                continue  # host arithmetic: inlined where used
            if len(outs) != 1:
                raise NotLowerable(f"{type(e).__name__} with several outputs")
            (out,) = outs
            rhs = tensor_value(e, out, operand, params, axis_index, index_dtype)
            if rhs is None:  # a view: the same element as its operand
                regs[out] = regs[e.inputs[0]]
                continue
            array = Var(f"t{out.name}")
            decls.append(Decl(array.name, out.dtype, size))
            regs[out] = Element(array, ri)
            compute.append(Assign(regs[out], rhs))
        for out in fusion.outputs:
            if not isinstance(out, TensorView):
                continue
            ptr = params.tensor(out)
            src = regs[out]
            guard = index.writer_guard(out, idx_0)
            if lanes > 1 and out.name in self.vector_tensors:
                st: list[Stmt] = [VecStore(out.dtype, lanes, AddressOf(Element(ptr, index.offset(out, idx_0))),
                                           at(src.base))]
            else:
                st = self._lanes([Assign(Element(ptr, index.offset(out, idx_v)), src)])
            stores.extend([If(guard, st)] if guard is not None else st)

        def over_unroll(stmts: list[Stmt]) -> list[Stmt]:
            if not stmts:
                return []
            if per_stage and unroll is not None:
                return [For(unroll[0], unroll[1], stmts, unroll=True)]
            return stmts

        out_stmts = list(decls)
        if per_stage:
            out_stmts += over_unroll(loads + self._lanes(lane_loads))
            out_stmts += over_unroll(self._lanes(compute))
            out_stmts += over_unroll(stores)
        else:
            out_stmts += loads + self._lanes(lane_loads + compute) + stores
        return out_stmts

    def _lanes(self, stmts: list[Stmt]) -> list[Stmt]:
        """`stmts` in a loop over the vector lanes (as they are with one lane)."""
        if not stmts:
            return []
        if self.lanes > 1:
            return [For(_LANE, IntLit(self.lanes), stmts, unroll=True, dtype=DataType.Int32)]
        return stmts


def _at_lane0(loop_index: Indices) -> Indices:
    return {ax: (IntLit(0) if s == _LANE else s) for ax, s in loop_index.items()}


def lower_pointwise(fusion: Fusion, ref: TensorView, vectorize: int, vector_tensors: frozenset[int],
                    index_type: str, sub: SubFusion | None = None, name: str = "fuser_pointwise") -> Kernel:
    """Kernel IR for a pointwise fusion scheduled from `ref`: `vector_tensors` names the
    tensors accessed `vectorize` elements at a time (the width the loop domain's Vectorize
    axis carries), `sub` is the fusion's analysis when the caller has one."""
    return PointwiseLowering(fusion, ref, vector_tensors, index_type, name, sub).lower()
