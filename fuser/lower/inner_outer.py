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


from fuser.ir import DataType, Fusion, ParallelType, ReductionOp, TensorView, WelfordOp
from fuser.scheduler.analysis import SubFusion
from fuser.scheduler.reduction import ReductionParams

from . import kir
from .errors import NotLowerable
from .kir import (Assign, BlockAllReduce, Cast, ColumnPartials, Decl, Element, For, GridSync, If, IndexCast, IntLit,
                  Kernel, TileReduceY, Var, eq, lt)
from .reduction import _INDEX_DTYPE, _tid
from .row_loop import RowLoopLowering
from .values import scalar as scalar_value
from .values import tensor_value

#: load each group of rows one iteration ahead (see RowLoopLowering._prefetched), in
#: blocks of up to 512 threads (1024 threads would need more than their 64 registers) and
#: for rows of 4-byte values: on an H100, RMSNorm / LayerNorm backward fp32 [16384, 4096]
#: ran at 94% of copy ahead against 88-91% without, but bf16 at 45-68% against 64-76%
PREFETCH_ROWS = True
#: rows copied one iteration ahead into shared memory (cp.async, see
#: RowLoopLowering._staged): "narrow" (rows of values narrower than 4 bytes), "all" or
#: "none". On an H100, bf16 [16384, 4096] with 128 x 4 threads:
#: LayerNorm backward 174 us staged against 186 us, RMSNorm backward 148.7 against
#: 150-152 us; [8192, 8192] LayerNorm 189 against 202 us, RMSNorm 155 either way; fp32
#: rows, which load ahead into registers instead (PREFETCH_ROWS), 292-299 us either way.
#: (Those were measured before REREAD_STAGED and _partials' combine through the stages.)
STAGE_ROWS = "narrow"
#: a block of one thread row whose partials go through the row stages still calls the
#: tile combine over threadIdx.y (which returns at once for one row): nvcc then holds the
#: row loop in fewer registers. ptxas sm_90, RMSNorm backward bf16, 512 threads: [2048,
#: 16384] under normalization.INNER_OUTER_STAGED_FIT 85 registers against 128 and 28 bytes
#: spilled (such plans always call it); the shipped [4096, 12288] 64 against 127. Off for
#: the other plans: fewer registers did not run faster (`bench --sweep
#: one_row_tile_combine_*`, H100, us off / on: RMSNorm bf16 [4096, 12288] 114.3 / 128.2,
#: [4096, 10240] 100.4 / 107.0, [2048, 9216] 53.0 / 52.0; LayerNorm bf16 [4096, 12288]
#: 157.8 / 165.9, [2048, 9216] 65.2 / 61.5).
ONE_ROW_TILE_COMBINE = False


class InnerOuterLowering(RowLoopLowering):
    """Builds the kernel IR of one scheduled inner-outer persistent fusion."""

    def __init__(self, fusion: Fusion, ref: TensorView, params: ReductionParams, vector_tensors: frozenset[TensorView],
                 sub: SubFusion, red_classes: frozenset[int], n_cols: int, name: str,
                 vector_class: int | None = None, segments: dict[frozenset[int], tuple[int, int]] | None = None) -> None:
        super().__init__(fusion, ref, params, vector_tensors, sub, red_classes, name, vector_class)
        if self._steps:  # (normalization.inner_outer_reason refuses these)
            raise NotLowerable("a reshape derives axes the reference lacks (the column phase indexes by its axes)")
        red_of = {r.expr: r for r in sub.reductions()}
        self.outer = [e for e in self.exprs if e in red_of and red_of[e].red_classes != red_classes]
        if not self.outer:
            raise NotLowerable("no outer reduction")
        #: the outer reductions by the row axes they reduce: all of them, or (row segments)
        #: the inner ones of them, per index of the others
        self._groups: dict[frozenset[int], list] = {}
        for e in self.outer:
            if isinstance(e, WelfordOp) or not isinstance(e, ReductionOp):
                raise NotLowerable("a Welford reduction across rows")
            self._groups.setdefault(red_of[e].red_classes, []).append(e)
        #: per group of segment reductions: (rows per segment, segments), concrete
        self._segments = segments or {}
        for key in self._groups:
            if key != self._row_classes and key not in self._segments:
                raise NotLowerable("an outer reduction over some of the rows' axes without its row segments")
        self._n_cols_value = n_cols
        #: per group: its results and what is computed from them
        self._final_of: dict[frozenset[int], set[TensorView]] = {}
        for key, group in self._groups.items():
            final: set[TensorView] = {e.outputs[0] for e in group}
            for e in self.exprs:
                if e not in self.outer and any(x in final for x in e.inputs):
                    final.update(o for o in e.outputs if isinstance(o, TensorView))
            self._final_of[key] = final
        self._final = set().union(*self._final_of.values())
        for e in self.exprs:
            if not any(o in self._final for o in e.outputs) and any(x in self._final for x in e.inputs):
                raise NotLowerable(f"{e!r} reads a reduction across rows and writes a row")
        owner: dict[TensorView, frozenset[int]] = {}
        for key, final in self._final_of.items():
            for tv in final:
                if owner.setdefault(tv, key) != key:
                    raise NotLowerable(f"{tv!r} combines results of outer reductions over different axes")
        #: per outer reduction: (its accumulator tile, accumulation type)
        self._oacc: dict = {}
        #: bytes of dynamic shared memory the row stages take
        self._dynamic_smem = 0

    def _loads_ahead(self, narrow: bool) -> tuple[bool, bool]:
        if self.p.stage_rows:  # (registers would not hold the rows: the plan says so)
            return True, False
        return STAGE_ROWS == "all" or (STAGE_ROWS == "narrow" and narrow), PREFETCH_ROWS and not narrow

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
        groups = kir.IndexBinary(kir.BinaryOpType.CeilDiv, self.n_rows, IntLit(self.p.bdy))
        rounds = kir.IndexBinary(kir.BinaryOpType.CeilDiv, groups, blocks)
        segmented = any(key != self._row_classes for key in self._groups)
        if segmented:
            # a block takes consecutive groups of rows, so that it meets each segment once
            self.body.append(Decl("rounds", None, None, rounds))
            rounds = Var("rounds")

        def group_of(k: kir.Expr) -> kir.Expr:
            return _tid(ParallelType.BIDx) * rounds + k if segmented else k * blocks + _tid(ParallelType.BIDx)

        flushes = []
        if segmented:
            # the segments the previous group of rows ended
            first = group_of(it) * self.p.bdy
            for key in self._groups:
                if key != self._row_classes:
                    seg = self._segment_rows(key)
                    ended = kir.all_of([lt(IntLit(0), it), lt(first, self.n_rows),
                                        kir.Not(eq(first // seg, (first - self.p.bdy) // seg))])
                    flushes.append(If(ended, [kir.Sync(), *self._flush(key, (first - self.p.bdy) // seg)]))
        self._row_loop(rows, rounds, group_of, tuple(flushes))
        self.body.append(kir.Sync())  # the rows' last block reduction has read its scratch
        if segmented:
            # the segment the block's last group of rows is in
            start = _tid(ParallelType.BIDx) * rounds
            last = kir.IndexBinary(kir.BinaryOpType.Min, start + rounds, groups) - 1
            for key in self._groups:
                if key != self._row_classes:
                    seg = (last * self.p.bdy) // self._segment_rows(key)
                    self.body.append(If(lt(start, groups), self._flush(key, seg)))
        self._partials()
        self.body.append(GridSync(self.params.semaphore()))
        if self._row_classes in self._groups:
            self._columns(blocks)
        for key in self._groups:
            if key != self._row_classes:
                self._segment_columns(key, blocks, rounds)
        return self._kernel(grid_sync=True, grid_strided=True, dynamic_smem=self._dynamic_smem)

    def _fixed_bdx(self) -> int:
        """The launch's blockDim.x: the row reductions' loops unroll (on an H100, with the
        other changes of 1eb915b, LayerNorm backward bf16 [16384, 4096] measured about 1 us
        faster in a hand-edited kernel)."""
        return self.p.bdx

    def _segment_rows(self, key: frozenset[int]) -> kir.Expr:
        """The rows of one segment of the group reducing row axes `key`: the product of
        those axes' extents."""
        find, id_of = self.sub.uf.find, self.sub.a.id_of
        n: kir.Expr = IntLit(1)
        for i in self.ref.logical_no_reductions():
            if not i.is_broadcast and find(id_of(i)) in key:
                n = n * self.ix.extent(i.extent)
        return n

    def _tile(self, name: str, u, v) -> kir.Expr:
        return Element(Var(name), u * self.V + v) if self.full_tile > 1 else Var(name)

    def _over_tile(self, body: list) -> list:
        """`body` (over the tile position u, v) for every position of a thread's tile."""
        v = Var("v")
        if self.V > 1:
            body = [For(v, IntLit(self.V), body, unroll=True, dtype=DataType.Int32)]
        else:
            body = [kir.substitute_stmt(s, {v: IntLit(0)}) for s in body]
        return self._over_vectors(body)

    def _over_vectors(self, body: list) -> list:
        """`body` (over the vector u of a thread's tile) for each of its vectors."""
        u = Var("u")
        if self.U > 1:
            return [For(u, IntLit(self.U), body, unroll=True, dtype=DataType.Int32)]
        return [kir.substitute_stmt(s, {u: IntLit(0)}) for s in body]

    def _combine_y(self, group: list) -> list:
        """The group's accumulator tiles combined over threadIdx.y (into threadIdx.y 0)."""
        out = []
        for e in group:
            name, acc_dt = self._oacc[e]
            if self.p.bdy == 1:
                continue
            smem = Var(self._shared(acc_dt, False))
            if self.full_tile > 1:
                out.append(TileReduceY(Var(name), e.op_type, acc_dt, smem))
            else:
                out.append(BlockAllReduce(Var(name), Var(name), e.op_type, acc_dt, smem, ParallelType.TIDy))
        return out

    def _flush(self, key: frozenset[int], seg: kir.Expr) -> list:
        """Segment `seg`'s partials of the group `key`: the block's tiles combined over
        threadIdx.y, written to row blockIdx.x + seg of the partials, and the tiles reset."""
        group = self._groups[key]
        u, v = Var("u"), Var("v")
        col = (u * self.p.bdx + _tid(ParallelType.TIDx)) * self.V + v
        base = (_tid(ParallelType.BIDx) + seg) * self.n_cols
        writes, resets = [], []
        for e in group:
            name, acc_dt = self._oacc[e]
            writes.append(Assign(Element(self._work(e), base + col), self._tile(name, u, v)))
            resets.append(Assign(self._tile(name, u, v), Cast(scalar_value(e.init, self.params), e.init.dtype, acc_dt)))
        return [*self._combine_y(group),
                *self._over_tile([If(kir.all_of([eq(_tid(ParallelType.TIDy), 0), lt(col, self.n_cols)]), writes)]),
                *self._over_tile(resets)]

    def _segment_columns(self, key: frozenset[int], blocks: kir.Expr, rounds: kir.Expr) -> None:
        """The final phase of a group of segment reductions: the grid's threads take the
        (segment, column) pairs in turn, combine the partials of the blocks that met the
        segment, compute what follows and store the outputs."""
        seg_rows = self._segment_rows(key)
        threads = self.p.bdx * self.p.bdy
        tid = _tid(ParallelType.TIDy) * self.p.bdx + _tid(ParallelType.TIDx)
        total = (self.n_rows // seg_rows) * self.n_cols
        j, q = Var("j"), Var(f"q{min(key)}")
        s, c = Var("sseg"), Var("col")
        per_block = IntLit(self.p.bdy) * rounds
        step: list = [Decl("sseg", None, None, q // self.n_cols), Decl("col", None, None, q % self.n_cols)]
        first = (s * seg_rows) // per_block
        last = ((s + 1) * seg_rows - 1) // per_block
        values: dict[TensorView, kir.Expr] = {}
        for e in self._groups[key]:
            _, acc_dt = self._oacc[e]
            out = e.outputs[0]
            step.append(Decl(f"f{out.name}", acc_dt))
            step.append(kir.SegmentPartials(Var(f"f{out.name}"), e.op_type, acc_dt,
                                            Cast(scalar_value(e.init, self.params), e.init.dtype, acc_dt),
                                            self._work(e), self.n_cols, s, c, first, last))
            values[out] = Cast(Var(f"f{out.name}"), acc_dt, out.dtype)
        step += self._epilogue(self._final_of[key], values, self._indices(s * seg_rows, c))
        body = [Decl(q.name, None, None, (j * blocks + _tid(ParallelType.BIDx)) * threads + tid),
                If(lt(q, total), step)]
        self.body.append(For(j, kir.IndexBinary(kir.BinaryOpType.CeilDiv, total, blocks * threads), body))

    def _work(self, e) -> kir.Param:
        """Outer reduction `e`'s partials: a row of columns per block, and one per segment
        for a segment reduction (a block meets as many segments as it crosses)."""
        _, acc_dt = self._oacc[e]
        key = next(k for k, g in self._groups.items() if e in g)
        fixed = self._segments[key][1] * self._n_cols_value if key in self._segments else 0
        return self.params.work(f"w{e.outputs[0].name}", acc_dt, False, self._n_cols_value, fixed)

    def _partials(self) -> None:
        """Each block's accumulator tiles of the reductions across all rows, combined over
        its threadIdx.y, to its row of the partials buffers.

        Where the row stages' shared memory (free once the rows are done) holds a whole
        tile of every thread, each tile is combined through it at once (three barriers
        rather than two per element) and every thread gets the totals, so the thread rows
        share out the writes, a vector of columns per store. On an H100, with the merged
        column phase (_columns), LayerNorm backward bf16 [16384, 4096] went from 174 to
        154 us: the per-element combine and one writing thread row took 24 us after the
        last row."""
        group = self._groups.get(self._row_classes)
        if not group:
            return
        threads = self.p.bdx * self.p.bdy
        u, v = Var("u"), Var("v")
        base = _tid(ParallelType.BIDx) * self.n_cols
        through_stages = self.full_tile > 1 and all(
            self.full_tile * threads * self._oacc[e][1].itemsize <= self._dynamic_smem for e in group)
        if not through_stages:
            self.body.extend(self._combine_y(group))
            col = (u * self.p.bdx + _tid(ParallelType.TIDx)) * self.V + v
            writes = [Assign(Element(self._work(e), base + col), self._tile(self._oacc[e][0], u, v)) for e in group]
            self.body.extend(self._over_tile([If(kir.all_of([eq(_tid(ParallelType.TIDy), 0),
                                                              lt(col, self.n_cols)]), writes)]))
            return
        writes = []
        for e in group:
            name, acc_dt = self._oacc[e]
            # (one thread row has nothing to combine, and the call returns at once; but a plan
            # that stages rows too long for registers emits it anyway, see ONE_ROW_TILE_COMBINE)
            if self.p.bdy > 1 or self.p.stage_rows or ONE_ROW_TILE_COMBINE:
                buf = f"tiles_{acc_dt.name}"
                self._decl(buf, acc_dt, self.full_tile * threads, space=kir.MemoryType.Shared, offset=0)
                self.body.append(BlockAllReduce(Var(name), Var(name), e.op_type, acc_dt, Var(buf),
                                                ParallelType.TIDy, tile=self.full_tile))
            # (the vector width divides the row length: whole vectors, aligned)
            writes.append(kir.VecStore(acc_dt, self.V, kir.AddressOf(Element(self._work(e), base + Var("col"))),
                                       kir.AddressOf(Element(Var(name), u * self.V))))
        col = (u * self.p.bdx + _tid(ParallelType.TIDx)) * self.V
        writer = kir.all_of([eq(_tid(ParallelType.TIDy), u % self.p.bdy), lt(Var("col"), self.n_cols)])
        self.body.extend(self._over_vectors([Decl("col", None, None, col), If(writer, writes)]))

    def _columns(self, blocks: kir.Expr) -> None:
        """The final phase of the reductions across all rows: blocks take COLUMNS_PER_STEP
        columns at a time, combine their partials, compute what follows the outer
        reductions and store the column outputs."""
        threads = self.p.bdx * self.p.bdy
        self.body.append(Decl("width", DataType.Int32, None, kir.ColumnWidth(self.n_cols, threads)))
        w = Var("width")
        j = Var("j")
        chunks = kir.IndexBinary(kir.BinaryOpType.CeilDiv, self.n_cols, w)
        c0 = Var("col0")
        step: list = [Decl("col0", None, None, (j * blocks + _tid(ParallelType.BIDx)) * w)]
        values: dict[TensorView, kir.Expr] = {}
        # the reductions combined alike go together (their loads in flight at once): on an
        # H100, LayerNorm backward's two measured 1 us faster together than one by one
        alike: dict[tuple, list] = {}
        for e in self._groups[self._row_classes]:
            _, acc_dt = self._oacc[e]
            init = Cast(scalar_value(e.init, self.params), e.init.dtype, acc_dt)
            alike.setdefault((e.op_type, acc_dt, init), []).append(e)
        for (op, acc_dt, init), group in alike.items():
            k = len(group)
            smem = Var(self._shared(acc_dt, False, tile=k))
            for e in group:
                out = e.outputs[0]
                step.append(Decl(f"f{out.name}", acc_dt))
                values[out] = Cast(Var(f"f{out.name}"), acc_dt, out.dtype)
            step.append(ColumnPartials([Var(f"f{e.outputs[0].name}") for e in group], op, acc_dt, init,
                                       [self._work(e) for e in group], blocks, self.n_cols, c0, smem, w))
        tid = _tid(ParallelType.TIDy) * self.p.bdx + _tid(ParallelType.TIDx)
        c = Var("col")
        step.append(Decl("col", None, None, c0 + tid))
        epilogue = self._epilogue(self._final_of[self._row_classes], values, self._indices(IntLit(0), c))
        step.append(If(kir.all_of([lt(tid, w), lt(c, self.n_cols)]), epilogue))
        self.body.append(For(j, kir.IndexBinary(kir.BinaryOpType.CeilDiv, chunks, blocks), step))

    def _epilogue(self, final: set[TensorView], values: dict[TensorView, kir.Expr], idx) -> list:
        """What follows a group of outer reductions (`values`: their results) at the
        reference indices `idx`, and the stores of its outputs."""
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
            if e in self.outer or not any(o in final for o in e.outputs):
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
            if isinstance(tv, TensorView) and tv in final:
                epilogue.append(Assign(Element(self.params.tensor(tv), self.ix.offset(tv, idx)), values[tv]))
        return epilogue

    def _column_axis(self, axis, idx) -> kir.Expr:
        r = self.ix.ref_axis(axis)
        return IntLit(0) if r is None else idx[r]


def lower_inner_outer(fusion: Fusion, ref: TensorView, params: ReductionParams, vector_tensors: frozenset[TensorView],
                      sub: SubFusion, red_classes: frozenset[int], n_cols: int,
                      name: str = "fuser_inner_outer", vector_class: int | None = None,
                      segments: dict[frozenset[int], tuple[int, int]] | None = None) -> Kernel:
    """Kernel IR for an inner-outer persistent fusion scheduled from `ref` (an inner
    reduction's input) with the inner reductions' axes `red_classes` as its columns;
    `segments` gives the (rows per segment, segments) of the outer reductions over some of
    the rows' axes (`normalization.row_segments`)."""
    return InnerOuterLowering(fusion, ref, params, vector_tensors, sub, red_classes, n_cols, name,
                              vector_class, segments).lower()
