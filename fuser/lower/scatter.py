"""Lowering a scatter segment (the greedy scheduler's) to kernel IR.

The kernel runs in two phases over one grid: every thread first copies its share of
`arg` (computed through its elementwise producers) into the output, grid-strided, then
the grid synchronises, then every thread takes its share of `index`'s elements and writes
`src` (at the same position) into the output at the position the index value gives along
`dim`. One kernel with a grid barrier rather than two launches: the segment stays one
launch plan (one generated kernel per segment, as every other scheduler's), the barrier
costs one arrival per block, and the grid is capped at the blocks the GPU holds at once
(the runtime does that for `grid_strided` kernels), which a memory-bound copy saturates
anyway. A later write must not be overtaken by the copy of the element it replaces: the
barrier orders every copy before every scattered write.

Index values are checked on the device as index_select's and gather's are: torch.scatter
takes no negative index, so anything outside [0, size) writes nothing and is recorded in
the kernel's error flag, which the runtime turns into an IndexError after the launch.
The index sizes torch requires (no larger than `src` along any axis, nor than `arg` along
any but `dim`) are the call's sizes: the host checks them before the launch. Where two
index elements name one position the result is one of the values (torch leaves it
undefined too).
"""
from __future__ import annotations

import functools
from typing import Callable

from fuser.ir import BroadcastOp, DataType, Fusion, Scalar, ScatterOp, SqueezeOp, TensorView, Val
from fuser.ir.domain import ParallelType
from fuser.ir.exprs import BinaryOpType
from fuser.scheduler.greedy import ScatterParams, copy_inputs, producer_reason

from .errors import NotLowerable
from .index import add, mul
from .kir import (
    AddressOf,
    Assign,
    CheckedIndex,
    Comment,
    Decl,
    Element,
    Expr,
    For,
    GridSync,
    If,
    IndexBinary,
    IndexCast,
    IndexCheck,
    IntLit,
    Kernel,
    ParallelDim,
    ParallelIndex,
    Stmt,
    Var,
    VecLoad,
    VecStore,
    lt,
)
from .lookup import HEADER as INDEXING_HEADER, index_value
from .params import ParamTable
from .values import scalar, tensor_value

#: the header with fuser::grid_sync
_GRID_HEADER = "fuser_reduction.cuh"
_LANE = Var("v")


class ScatterLowering:
    """Builds the kernel IR of one scatter segment."""

    def __init__(self, fusion: Fusion, params: ScatterParams, name: str = "fuser_scatter") -> None:
        scatters = [e for e in fusion.exprs() if isinstance(e, ScatterOp)]
        if len(scatters) != 1:
            raise NotLowerable(f"a scatter kernel computes one scatter, the segment has {len(scatters)}")
        self.e = scatters[0]
        self.fusion = fusion
        self.p = params
        self.name = name
        self.table = ParamTable(fusion.inputs, params.index_type)
        self.index_dtype = DataType.Int if params.index_type == "int64" else DataType.Int32
        self.checks: list[IndexCheck] = []
        self._names: dict[str, int] = {}
        for e in fusion.exprs():
            if e is not self.e:
                why = producer_reason(e)
                if why is not None:
                    raise NotLowerable(why)
        for v in fusion.inputs:
            if getattr(v, "is_cpu_scalar", False):
                raise NotLowerable(f"{v!r} is a CPU scalar tensor")
            if isinstance(v, Scalar) and v.dtype.is_complex:
                raise NotLowerable("complex scalar inputs")
        out = self.e.outputs[0]
        if out not in fusion.outputs or len([o for o in fusion.outputs if isinstance(o, TensorView)]) != 1:
            raise NotLowerable("a scatter kernel writes the scatter's result and nothing else")

    def _extent(self, s: Scalar) -> Expr:
        return IntLit(int(s.value)) if s.is_const else self.table.extent(s)

    def _fresh(self, prefix: str) -> str:
        k = self._names.get(prefix, 0)
        self._names[prefix] = k + 1
        return prefix if k == 0 else f"{prefix}_{k}"

    # --- the kernel ------------------------------------------------------------------------------
    def lower(self) -> Kernel:
        arg, _, src = self.e.inputs
        out = self.e.outputs[0]
        for what, v in (("arg", arg), ("src", src)):
            if v.dtype != out.dtype:
                raise NotLowerable(f"scatter: {what} dtype {v.dtype} differs from the result's {out.dtype}")
        self._size_checks()
        body: list[Stmt] = [Comment("phase 1: the output is a copy of arg")]
        body += self._copy()
        # every block's copy is done before any scattered write lands on an element it copies
        body.append(GridSync(self.table.semaphore()))
        body.append(Comment(f"phase 2: src written at index's positions along dim {self.e.dim}"))
        body += self._scatter()
        return Kernel(self.name, self.table.params, body, self.p.index_type, threads=self.p.threads,
                      includes=(_GRID_HEADER, INDEXING_HEADER), grid_sync=True, grid_strided=True,
                      index_checks=tuple(self.checks))

    def _grid_loop(self, total: Expr, tag: str, body: Callable[[Expr], list[Stmt]]) -> list[Stmt]:
        """`body(i)` for every i below `total`, the grid's threads striding over them."""
        threads = IntLit(self.p.threads)
        per_round = IndexCast(ParallelDim(ParallelType.BIDx)) * threads
        rounds = IndexBinary(BinaryOpType.CeilDiv, total, per_round)
        r, i = Var(f"round{tag}"), Var(f"lin{tag}")
        start = (r * IndexCast(ParallelDim(ParallelType.BIDx)) + IndexCast(ParallelIndex(ParallelType.BIDx))) * threads
        first = Decl(i.name, None, init=start + IndexCast(ParallelIndex(ParallelType.TIDx)))
        return [For(r, rounds, [first, If(lt(i, total), body(i))])]

    def _unravel(self, linear: Expr, extents: list[Scalar], prefix: str, stmts: list[Stmt]) -> tuple[Expr, ...]:
        """The row-major multi-index of `linear` over `extents` (declared into `stmts`)."""
        n = len(extents)
        pos: list[Expr] = [IntLit(0)] * n
        rest = linear
        for k in range(n - 1, -1, -1):
            s = extents[k]
            if s.is_const and int(s.value) == 1:
                continue
            name = f"{prefix}{k}"
            if k == 0 or all(extents[j].is_const and int(extents[j].value) == 1 for j in range(k)):
                stmts.append(Decl(name, None, init=rest))
                pos[k] = Var(name)
                break
            ext = self._extent(s)
            stmts.append(Decl(name, None, init=rest % ext))
            pos[k] = Var(name)
            q = f"{prefix}q{k}"
            stmts.append(Decl(q, None, init=rest // ext))
            rest = Var(q)
        return tuple(pos)

    def _numel(self, tv: TensorView) -> Expr:
        n: Expr = IntLit(1)
        for i in tv.logical_no_reductions():
            n = mul(n, self._extent(i.user_extent))
        return n

    def _offset(self, tv: TensorView, pos: tuple[Expr, ...], replace: dict[int, Expr] | None = None) -> Expr:
        """`tv`'s element at `pos` (broadcast axes, expanded or not, are stored once)."""
        terms = []
        for k, i in enumerate(tv.logical_no_reductions()):
            if i.is_broadcast:
                continue
            at = replace[k] if replace and k in replace else pos[k]
            if isinstance(at, IntLit) and at.value == 0:
                continue
            terms.append(mul(at, self.table.stride(tv, k)))
        return functools.reduce(add, terms, IntLit(0))

    # --- phase 1 -------------------------------------------------------------------------------
    def _copy(self) -> list[Stmt]:
        arg, out = self.e.inputs[0], self.e.outputs[0]
        ptr = self.table.tensor(out)
        w = self.p.vectorize
        if self.p.flat and w > 1:
            total = self._numel(out) // w

            def vec_body(i: Expr) -> list[Stmt]:
                stmts: list[Stmt] = []
                at = mul(i, IntLit(w))
                regs: dict[TensorView, Var] = {}
                for tv in copy_inputs(self.e) or ():
                    reg = regs[tv] = Var(self._fresh(f"r{tv.name}"))
                    stmts.append(Decl(reg.name, tv.dtype, w))
                    stmts.append(VecLoad(tv.dtype, w, reg, AddressOf(Element(self.table.tensor(tv), at))))
                if arg in regs:  # a plain copy: the loaded vector is the result
                    stmts.append(VecStore(out.dtype, w, AddressOf(Element(ptr, at)), regs[arg]))
                    return stmts
                res = Var(self._fresh("copy"))
                stmts.append(Decl(res.name, out.dtype, w))
                lane: list[Stmt] = []
                values = _Values(self, lane, lambda tv, pos: Element(regs[tv], _LANE))
                lane.append(Assign(Element(res, _LANE), values.value(arg, None)))
                stmts.append(For(_LANE, IntLit(w), lane, unroll=True, dtype=DataType.Int32))
                stmts.append(VecStore(out.dtype, w, AddressOf(Element(ptr, at)), res))
                return stmts

            return self._grid_loop(total, "1", vec_body)

        def body(i: Expr) -> list[Stmt]:
            stmts: list[Stmt] = []
            if self.p.flat:
                values = _Values(self, stmts, lambda tv, pos: Element(self.table.tensor(tv), i))
                stmts.append(Assign(Element(ptr, i), values.value(arg, None)))
                return stmts
            pos = self._unravel(i, [a.user_extent for a in out.logical_no_reductions()], "o", stmts)
            values = _Values(self, stmts, self._load)
            stmts.append(Assign(Element(ptr, self._offset(out, pos)), values.value(arg, pos)))
            return stmts

        return self._grid_loop(self._numel(out), "1", body)

    def _load(self, tv: TensorView, pos: tuple[Expr, ...]) -> Expr:
        return Element(self.table.tensor(tv), self._offset(tv, pos))

    # --- phase 2 -------------------------------------------------------------------------------
    def _scatter(self) -> list[Stmt]:
        arg, index, src = self.e.inputs
        out, dim = self.e.outputs[0], self.e.dim
        ptr = self.table.tensor(out)
        axis = out.logical_no_reductions()[dim]
        check = len(self.checks)
        self.checks.append(IndexCheck("scatter", dim, repr(arg), axis.user_extent))
        flag = self.table.index_error()

        def body(i: Expr) -> list[Stmt]:
            stmts: list[Stmt] = []
            pos = self._unravel(i, [a.user_extent for a in index.logical_no_reductions()], "x", stmts)
            values = _Values(self, stmts, self._load)
            at = Var(self._fresh("position"))
            value, dtype = index_value(values.value(index, pos), index.dtype, "scatter")
            stmts.append(Decl(at.name, DataType.Int, init=CheckedIndex(value, dtype, self._extent(axis.user_extent),
                                                                          check, flag)))
            write: list[Stmt] = []
            values = _Values(self, write, self._load)
            value = values.value(src, pos)
            target = self._offset(out, pos, {dim: IndexCast(at)})
            write.append(Assign(Element(ptr, target), value))
            # -1: out of range (recorded in the error flag), nothing written
            stmts.append(If(IndexBinary(BinaryOpType.Ge, at, IntLit(0)), write))
            return stmts

        return self._grid_loop(self._numel(index), "2", body)

    def _size_checks(self) -> None:
        """torch's size rule, checked on the host: index no larger than src along any axis,
        nor than arg along any but `dim`."""
        arg, index, src = self.e.inputs
        a_ids, i_ids, s_ids = (t.logical_no_reductions() for t in (arg, index, src))
        for k, ii in enumerate(i_ids):
            n = ii.user_extent
            self.checks.append(IndexCheck("scatter", k, repr(src), s_ids[k].user_extent, value=n, size=True))
            if k != self.e.dim:
                self.checks.append(IndexCheck("scatter", k, repr(arg), a_ids[k].user_extent, value=n, size=True))


class _Values:
    """The elements of a segment's tensors at positions, computed through their
    elementwise producers: each tensor once per position, into a register declared in
    `stmts` (operands before their uses). `load(tv, pos)` reads a segment input."""

    def __init__(self, low: ScatterLowering, stmts: list[Stmt], load: Callable[[TensorView, object], Expr]) -> None:
        self.low = low
        self.stmts = stmts
        self.load = load
        self.memo: dict[tuple, Expr] = {}

    def value(self, tv: TensorView, pos: tuple[Expr, ...] | None) -> Expr:
        key = (tv, pos)
        got = self.memo.get(key)
        if got is not None:
            return got
        low = self.low
        e = tv.definition
        if tv in low.fusion.inputs or e is None:
            rhs = self.load(tv, pos)
            prefix = "r"
        else:
            ids = tv.logical_no_reductions()

            def operand(v: Val) -> Expr:
                if isinstance(v, TensorView):
                    return self.value(v, _operand_position(e, tv, v, pos))
                return scalar(v, low.table)

            def axis_index(a) -> Expr:
                if pos is None:
                    raise NotLowerable("an axis index in the flat copy")
                return pos[ids.index(a)]

            rhs = tensor_value(e, tv, operand, low.table, axis_index, low.index_dtype)
            if rhs is None:  # a view: its operand's element
                got = self.memo[key] = operand(e.inputs[0])
                return got
            prefix = "t"
        reg = Var(low._fresh(f"{prefix}{tv.name}"))
        self.stmts.append(Decl(reg.name, tv.dtype, init=rhs))
        self.memo[key] = reg
        return reg


def _operand_position(e, out: TensorView, operand: TensorView, pos: tuple[Expr, ...] | None):
    """Where `operand` is read for `out`'s element at `pos`: each operand axis at the
    position of the output axis it is (a broadcast operand axis at 0)."""
    if pos is None:
        return None
    o_ids = out.logical_no_reductions()
    at = {a: p for a, p in zip(o_ids, pos)}
    p_ids = operand.logical_no_reductions()
    if isinstance(e, BroadcastOp):
        pairs = list(zip(p_ids, [c for c, f in zip(o_ids, e.flags) if not f]))
    elif isinstance(e, SqueezeOp):
        kept = iter(o_ids)
        pairs = [(p, None if f else next(kept)) for p, f in zip(p_ids, e.flags)]
    else:
        if len(p_ids) != len(o_ids):
            raise NotLowerable(f"{type(e).__name__}: operand rank {len(p_ids)}, result rank {len(o_ids)}")
        pairs = list(zip(p_ids, o_ids))
    return tuple(IntLit(0) if p.is_broadcast or c is None else at[c] for p, c in pairs)


def lower_scatter(fusion: Fusion, params: ScatterParams, name: str = "fuser_scatter") -> Kernel:
    """Kernel IR for a scatter segment (see the module's docstring)."""
    return ScatterLowering(fusion, params, name).lower()
