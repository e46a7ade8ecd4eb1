"""Lowering an inner-outer persistent segment (a LayerNorm or RMSNorm backward) to kernel IR.

Its inner reductions reduce each row, as in an inner-persistent kernel; its outer
reductions reduce the rows into one value per column. A block takes rows in turn (row
`blockIdx.x + k * gridDim.x`, its columns over threadIdx.x), holds each row in registers
for the inner reductions and the row's outputs, and folds the values the outer reductions
need into a per-thread tile of column accumulators. After its last row, each block writes
its tile to a global buffer of partials (a row per block), the grid synchronises (the
launch caps the grid at the blocks the GPU holds at once), and the blocks share out the
columns: each combines its columns' partials in a fixed order, computes what follows the
outer reductions (casts, scaling) and writes the column outputs. One kernel, one read of
every input, deterministic results.
"""
from __future__ import annotations

import dataclasses

from fuser.ir import DataType, Fusion, ParallelType, ReductionOp, TensorView, WelfordOp
from fuser.scheduler.analysis import SubFusion
from fuser.scheduler.reduction import ReductionParams

from . import kir
from .errors import NotLowerable
from .kir import (Assign, BlockAllReduce, Cast, ColumnPartials, Decl, Element, For, GridSync, If, IndexCast, IntLit,
                  Kernel, TileReduceY, Var, eq, lt)
from .reduction import _INDEX_DTYPE, ReductionLowering, _tid
from .values import scalar as scalar_value
from .values import tensor_value

#: load each group of rows one iteration ahead (see InnerOuterLowering._prefetched), in
#: blocks of up to 512 threads (1024 threads would need more than their 64 registers) and
#: for rows of 4-byte values: on an H100, RMSNorm / LayerNorm backward fp32 [16384, 4096]
#: ran at 94% of copy ahead against 88-91% without, but bf16 at 45-68% against 64-76%
PREFETCH_ROWS = True

class InnerOuterLowering(ReductionLowering):
    """Builds the kernel IR of one scheduled inner-outer persistent fusion."""

    def __init__(self, fusion: Fusion, ref: TensorView, params: ReductionParams, vector_tensors: frozenset[TensorView],
                 sub: SubFusion, red_classes: frozenset[int], n_cols: int, name: str,
                 vector_class: int | None = None) -> None:
        super().__init__(fusion, ref, params, vector_tensors, sub, red_classes, name, vector_class)
        if not params.persistent or not params.inner or params.grid_y != 1:
            raise NotLowerable(f"an inner-outer kernel is persistent over rows, one block row per row, not {params}")
        red_of = {r.expr: r for r in sub.reductions()}
        self.outer = [e for e in self.exprs if e in red_of and red_of[e].red_classes != red_classes]
        if not self.outer:
            raise NotLowerable("no outer reduction")
        #: the axes the outer reductions reduce (the scheduler checked they share them)
        self._row_classes = red_of[self.outer[0]].red_classes
        for e in self.outer:
            if isinstance(e, WelfordOp) or not isinstance(e, ReductionOp):
                raise NotLowerable("a Welford reduction across rows")
        self._n_cols_value = n_cols
        final: set[TensorView] = {e.outputs[0] for e in self.outer}
        for e in self.exprs:
            if e not in self.outer and any(x in final for x in e.inputs):
                final.update(o for o in e.outputs if isinstance(o, TensorView))
        for e in self.exprs:
            if not any(o in final for o in e.outputs) and any(x in final for x in e.inputs):
                raise NotLowerable(f"{e!r} reads a reduction across rows and writes a row")
        self._final = final
        #: per outer reduction: (its accumulator tile, accumulation type)
        self._oacc: dict = {}

    def _row_base(self) -> kir.Expr:
        return Var("row")

    def _needed(self, k: int, reds: list) -> list:
        return super()._needed(k, reds + self._outer_at(k))

    def _outer_at(self, k: int) -> list:
        return [e for e in self.outer if self.stage[e.inputs[0]] == k]

    def _accumulate_columns(self, k: int, u, v) -> list:
        out = []
        for e in self._outer_at(k):
            name, acc_dt = self._oacc[e]
            x = e.inputs[0]
            acc = Element(Var(name), u * self.V + v) if self.full_tile > 1 else Var(name)
            out.append(Assign(acc, kir.Binary(e.op_type, acc, self._reg(x, u, v), acc_dt, x.dtype, acc_dt)))
        return out

    def lower(self) -> Kernel:
        from fuser.ir.dtype import compute_dtype

        self._setup()
        for e in self.outer:
            acc_dt = compute_dtype(e.outputs[0].dtype)
            name = f"oacc{e.outputs[0].name}"
            init = Cast(scalar_value(e.init, self.params), e.init.dtype, acc_dt)
            self._decl(name, acc_dt, self.full_tile if self.full_tile > 1 else None, init)
            self._oacc[e] = (name, acc_dt)
        before = self.body
        self.body = []
        self._rows()
        rows = self.body
        self.body = before
        blocks = IndexCast(kir.ParallelDim(ParallelType.BIDx))
        it = Var("it")

        def row_of(k: kir.Expr) -> kir.Expr:
            return (k * blocks + _tid(ParallelType.BIDx)) * self.p.bdy + _tid(ParallelType.TIDy)

        before_loop, rows = self._prefetched(rows, row_of)
        self.body.extend(before_loop)
        rows = [Decl("row", None, None, row_of(it)), *self._alternate_scratch(rows, it)]
        groups = kir.IndexBinary(kir.BinaryOpType.CeilDiv, self.n_rows, IntLit(self.p.bdy))
        self.body.append(For(it, kir.IndexBinary(kir.BinaryOpType.CeilDiv, groups, blocks), rows))
        self.body.append(kir.Sync())  # the rows' last block reduction has read its scratch
        self._partials()
        self.body.append(GridSync(self.params.semaphore()))
        self._columns(blocks)
        return self._kernel(grid_sync=True, grid_strided=True)

    def _alternate_scratch(self, rows: list, it: Var) -> list:
        """The rows' block reductions leave their scratch to the next one's barrier (see
        `_block_allreduce`): with two or more per row, alternating between two buffers, the
        next row's first one writes only after this row's last barrier, so rows need no
        barrier of their own. A lone one alternates between the halves of a doubled buffer
        by the row group's parity instead."""
        reds = [x for x in _walk(rows) if isinstance(x, BlockAllReduce) and not x.free_after]
        if len(reds) != 1:
            return rows
        (red,) = reds
        decl = next(d for d in self._shared_decls if Var(d.name) == red.smem)
        half = decl.size
        decl.size = 2 * half
        red.smem = kir.AddressOf(Element(red.smem, (it % 2) * half))
        return rows

    def _prefetched(self, rows: list, row_of) -> tuple[list, list]:
        """(statements before the row loop, the loop's body) where each group of rows'
        inputs are loaded one iteration ahead into registers of their own: the loads are in
        flight while the block reduces and writes the current rows (with a block or two per
        SM, nothing else would hide their latency)."""
        inputs = [tv for tv in self.fusion.inputs if isinstance(tv, TensorView) and tv in self.regs]
        spanning = self._row_spanning()
        # inputs without the rows' axes (weights) are loaded once, before the loop
        fixed = {self.regs[tv] for tv in inputs if tv not in spanning}
        fixed_decls = [d for d in rows if isinstance(d, Decl) and d.name in fixed]
        load_ids = {id(x) for x in self._row_loads}
        first = {Var("row"): row_of(IntLit(0))}
        before: list = list(fixed_decls)
        before += [y for x in self._row_loads for y in _only(kir.substitute_stmt(x, first), fixed)]
        rows = [x for x in rows if not any(x is d for d in fixed_decls)]
        varying = {self.regs[tv] for tv in inputs if tv in spanning}
        decls = {d.name: d for d in rows if isinstance(d, Decl) and d.name in varying}
        narrow = any(tv.dtype.itemsize < 4 for tv in inputs if tv in spanning and self.full(tv))
        if not PREFETCH_ROWS or narrow or self.p.bdx * self.p.bdy > 512 or not decls or not load_ids:
            return before, [y for x in rows for y in ([x] if id(x) not in load_ids else _only(x, varying))]
        ahead = {Var(n): Var(f"n{n}") for n in decls}
        loads = [y for x in self._row_loads for y in _only(x, set(decls))]
        before += [Decl(f"n{n}", d.dtype, d.size) for n, d in decls.items()]
        before += [kir.substitute_stmt(x, {**ahead, **first}) for x in loads]
        last = max(i for i, x in enumerate(rows) if id(x) in load_ids)
        body: list = []
        for i, x in enumerate(rows):
            if id(x) not in load_ids:
                body.append(x)
                continue
            for n in sorted(_names(x) & decls.keys()):  # this iteration's rows: loaded last time
                if decls[n].size is None:
                    body.append(Assign(Var(n), Var(f"n{n}")))
                else:
                    k = Var("k")
                    body.append(For(k, IntLit(decls[n].size), [Assign(Element(Var(n), k), Element(Var(f"n{n}"), k))],
                                    unroll=True, dtype=DataType.Int32))
            if i == last:  # the next iteration's rows, loaded now
                nxt = {**ahead, Var("row"): row_of(Var("it") + 1)}
                body.extend(kir.substitute_stmt(y, nxt) for y in loads)
        return before, body

    def _work(self, e) -> kir.Param:
        _, acc_dt = self._oacc[e]
        return self.params.work(f"w{e.outputs[0].name}", acc_dt, False, self._n_cols_value)

    def _partials(self) -> None:
        """Each block's accumulator tiles, combined over its threadIdx.y, to its row of the
        partials buffers."""
        for e in self.outer:
            name, acc_dt = self._oacc[e]
            smem = Var(self._shared(acc_dt, False))
            if self.p.bdy == 1:
                continue
            if self.full_tile > 1:
                self.body.append(TileReduceY(Var(name), e.op_type, acc_dt, smem))
            else:
                self.body.append(BlockAllReduce(Var(name), Var(name), e.op_type, acc_dt, smem, ParallelType.TIDy))
        u, v = Var("u"), Var("v")
        col = (u * self.p.bdx + _tid(ParallelType.TIDx)) * self.V + v
        base = _tid(ParallelType.BIDx) * self.n_cols
        writes = []
        for e in self.outer:
            name, _ = self._oacc[e]
            acc = Element(Var(name), u * self.V + v) if self.full_tile > 1 else Var(name)
            writes.append(Assign(Element(self._work(e), base + col), acc))
        body = [If(kir.all_of([eq(_tid(ParallelType.TIDy), 0), lt(col, self.n_cols)]), writes)]
        if self.V > 1:
            body = [For(v, IntLit(self.V), body, unroll=True, dtype=DataType.Int32)]
        else:
            body = [kir.substitute_stmt(s, {v: IntLit(0)}) for s in body]
        if self.U > 1:
            self.body.append(For(u, IntLit(self.U), body, unroll=True, dtype=DataType.Int32))
        else:
            self.body.extend(kir.substitute_stmt(s, {u: IntLit(0)}) for s in body)

    def _columns(self, blocks: kir.Expr) -> None:
        """The final phase: blocks take COLUMNS_PER_STEP columns at a time, combine their
        partials, compute what follows the outer reductions and store the column outputs."""
        threads = self.p.bdx * self.p.bdy
        self.body.append(Decl("width", DataType.Int32, None, kir.ColumnWidth(self.n_cols, threads)))
        w = Var("width")
        j = Var("j")
        chunks = kir.IndexBinary(kir.BinaryOpType.CeilDiv, self.n_cols, w)
        c0 = Var("col0")
        step: list = [Decl("col0", None, None, (j * blocks + _tid(ParallelType.BIDx)) * w)]
        values: dict[TensorView, kir.Expr] = {}
        for e in self.outer:
            _, acc_dt = self._oacc[e]
            out = e.outputs[0]
            total = f"f{out.name}"
            smem = Var(self._shared(acc_dt, False))
            init = Cast(scalar_value(e.init, self.params), e.init.dtype, acc_dt)
            step.append(Decl(total, acc_dt))
            step.append(ColumnPartials(Var(total), e.op_type, acc_dt, init, self._work(e), blocks, self.n_cols, c0,
                                       smem, w))
            values[out] = Cast(Var(total), acc_dt, out.dtype)
        tid = _tid(ParallelType.TIDy) * self.p.bdx + _tid(ParallelType.TIDx)
        c = Var("col")
        idx = self._indices(IntLit(0), c)
        step.append(Decl("col", None, None, c0 + tid))
        epilogue: list = []

        def operand(x) -> kir.Expr:
            if not isinstance(x, TensorView):
                return scalar_value(x, self.params)
            got = values.get(x)
            if got is None:
                if x not in self.fusion.inputs or x in self._row_spanning():
                    raise NotLowerable(f"{x!r} is read after the reductions across rows")
                name = f"e{x.name}"
                epilogue.append(Decl(name, x.dtype, None, Element(self.params.tensor(x), self.ix.offset(x, idx))))
                got = values[x] = Var(name)
            return got

        for e in self.exprs:
            if e in self.outer or not any(o in self._final for o in e.outputs):
                continue
            outs = [o for o in e.outputs if isinstance(o, TensorView)]
            if len(outs) != 1:
                raise NotLowerable(f"{type(e).__name__} with several outputs after a reduction across rows")
            (out,) = outs
            rhs = tensor_value(e, out, operand, self.params, lambda axis: self._column_axis(axis, idx),
                               _INDEX_DTYPE[self.p.index_type])
            if rhs is None:  # a view: the same value
                values[out] = operand(e.inputs[0])
                continue
            name = f"e{out.name}"
            epilogue.append(Decl(name, out.dtype, None, rhs))
            values[out] = Var(name)
        for tv in self.fusion.outputs:
            if isinstance(tv, TensorView) and tv in self._final:
                epilogue.append(Assign(Element(self.params.tensor(tv), self.ix.offset(tv, idx)), values[tv]))
        step.append(If(kir.all_of([lt(tid, w), lt(c, self.n_cols)]), epilogue))
        self.body.append(For(j, kir.IndexBinary(kir.BinaryOpType.CeilDiv, chunks, blocks), step))

    def _row_spanning(self) -> set[TensorView]:
        """Tensors with an axis the outer reductions reduce (the rows)."""
        find, id_of = self.sub.uf.find, self.sub.a.id_of
        return {tv for tv in self.fusion.tensors()
                if any(find(id_of(i)) in self._row_classes for i in tv.logical_no_reductions() if not i.is_broadcast)}

    def _column_axis(self, axis, idx) -> kir.Expr:
        r = self.ix.ref_axis(axis)
        return IntLit(0) if r is None else idx[r]


def _walk(stmts: list):
    """Every statement in `stmts`, nested ones included."""
    for x in stmts:
        yield x
        if isinstance(x, For):
            yield from _walk(x.body)
        elif isinstance(x, If):
            yield from _walk(x.then)
            yield from _walk(x.orelse or [])


def _only(stmt, names: set[str]) -> list:
    """`stmt` keeping only the innermost statements that mention one of `names` (loads of
    those registers), and the loops and conditions around them; [] when none does."""
    field = "then" if isinstance(stmt, If) else "body" if isinstance(stmt, For) else None
    if field is None:
        return [stmt] if _names(stmt) & names else []
    inner = [y for x in getattr(stmt, field) for y in _only(x, names)]
    return [dataclasses.replace(stmt, **{field: inner})] if inner else []


def _names(x, out: set[str] | None = None) -> set[str]:
    """The names of the variables statement or expression `x` mentions."""
    out = set() if out is None else out
    if isinstance(x, Var):
        out.add(x.name)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _names(y, out)
    elif dataclasses.is_dataclass(x) and not isinstance(x, (type, kir.Param)):
        for f in dataclasses.fields(x):
            _names(getattr(x, f.name), out)
    return out


def lower_inner_outer(fusion: Fusion, ref: TensorView, params: ReductionParams, vector_tensors: frozenset[TensorView],
                      sub: SubFusion, red_classes: frozenset[int], n_cols: int,
                      name: str = "fuser_inner_outer", vector_class: int | None = None) -> Kernel:
    """Kernel IR for an inner-outer persistent fusion scheduled from `ref` (an inner
    reduction's input) with the inner reductions' axes `red_classes` as its columns."""
    return InnerOuterLowering(fusion, ref, params, vector_tensors, sub, red_classes, n_cols, name,
                              vector_class).lower()
