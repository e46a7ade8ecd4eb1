"""Lowering a scheduled reduction or inner-persistent segment to kernel IR.

The schedule gave the reference (a reduction's input, spanning every axis) the loop domain
[rows, columns]: its kept axes merged into one and its reduced axes into another. The
kernel splits both by its `ReductionParams`:

- inner (reduced axes innermost in memory): a row per (blockIdx.x, threadIdx.y); its
  columns in vectors over threadIdx.x, `unroll` vectors per thread per step of a serial
  loop, split over `grid_y` blocks (blockIdx.y) when rows are too few to fill the GPU;
- outer (kept axes innermost): a vector of adjacent columns per (blockIdx.x, threadIdx.x);
  rows over threadIdx.y, `unroll` rows per step, and `grid_y` blocks.

Each thread holds a register tile of (unroll x vector) elements of every tensor that spans
both rows and columns ("full" tensors), and the values of "reduced" tensors (those without
reduced axes) for its row (inner) or its vector of columns (outer). Expressions are grouped
into stages by how many reductions lie upstream: stage k's full expressions run in a loop
over the columns, its reductions accumulate there, then combine across the block (and the
grid); stage k+1's reduced expressions then run once per thread. A persistent kernel loads
its row once (the serial loop has one step and its tile covers the row) and reuses the
registers in every stage; a reduction kernel has one stage of full expressions.
"""
from __future__ import annotations

from fuser.ir import (
    BinaryOp,
    BinaryOpType,
    DataType,
    Fusion,
    IterDomain,
    ParallelType,
    ReductionOp,
    TensorView,
    Val,
    WelfordOp,
)
from fuser.ir.dtype import compute_dtype
from fuser.scheduler.analysis import RESHAPE, SubFusion, expr_kind, REDUCTION, reduction_stages
from fuser.scheduler.issue import kept_in_registers
from fuser.scheduler.normalization import OUTER_PERSISTENT_MIN_BLOCKS
from fuser.scheduler.reduction import ReductionParams

from . import kir
from .errors import NotLowerable
from .index import TensorIndexer
from .lookup import INDEX_OPS, Lookups
from .kir import (
    Assign,
    BlockAllReduce,
    Cast,
    Decl,
    Element,
    AddressOf,
    For,
    GridItem,
    GridReduce,
    If,
    IndexCast,
    IntLit,
    Kernel,
    Member,
    ParallelIndex,
    Var,
    VecLoad,
    VecStore,
    all_of,
    eq,
    lt,
)
from .params import ParamTable
from .values import scalar as scalar_value
from .values import tensor_value

_INDEX_DTYPE = {"int32": DataType.Int32, "int64": DataType.Int}

#: cache hints of an inner-persistent kernel's row tensors (spanning rows and columns, so
#: read or written once): "plain"; "streaming", loaded with ld.global.cs and stored with
#: st.global.cs (evict first), as nvFuser 0.2.35; "stores" or "loads", only those. Weights
#: (columns only) load plainly. Which wins depends on what the input's producer left in L2;
#: `persistent_cache_hints_*` sweeps, H100, bf16, µs plain / streaming, each producer timed
#: with its call (`_step_*`, so the dirty lines a call leaves for the next kernel count):
#: - after a producer that only writes the input (normal_, as torch.randn makes the anchors'
#:   inputs), streaming is 1.6-5.1 µs faster at every shape (RMSNorm [16384, 4096] 246.7 /
#:   241.9, [2048, 16384] 127.1 / 122.0); neither hint alone has the gain where the input
#:   outgrows L2. It is why nvFuser leads the anchors' first run (LayerNorm 91.5 / 87.0,
#:   nvFuser 88.0);
#: - after a copy into the input, streaming is 0.5-1.9 µs slower at every shape but [16384,
#:   1024], where it is within 0.3 (RMSNorm 180.3 / 181.5, softmax [2048, 16384] 95.7 / 97.1);
#: - cold (rotating inputs, `_sizes_*`), slower at every shape: 0.8-3.8 µs with rows of 16384
#:   (softmax [4096, 16384] 93.2 / 97.0), 0.4-0.8 with rows of 8192 and 4096 (an H200 was up
#:   to 7% slower at [2048, 16384]); in softmax backward 5.7% slower at [8192, 8192].
#: A norm's input in a model comes from a kernel that reads as it writes (a residual add, a
#: matmul's epilogue), the copy case, so the rows stay plain (after a matmul itself, not yet
#: timed: `persistent_cache_hints_after_matmul_*`).
PERSISTENT_CACHE_HINTS = "plain"
#: an outer Welford reduction with vectors updates each lane's mean and M2 value by value
#: (True: Welford's update, the reciprocal of the count shared by the lanes) or merges each
#: step's tile (False, see _chunk_lanes: the lanes' sums while loading, then per lane the
#: tile's mean by one shared reciprocal, its squared deviations recomputed from the loaded
#: values, Chan's merge: one division a step, no dependent chain through every value).
#: `bench --sweep outer_welford_online_*`, batch norm µs tiles / value by value: H200 bf16
#: [16384, 4096] 114.7 / 123.1, [8192, 8192] 110.7 / 118.5, [2048, 16384] 58.3 / 60.5,
#: [1024, 1000] 22.8 / 22.8; fp32 199.6 / 200.6, 199.3 / 201.0, 101.9 / 102.6, 25.6 / 25.4.
#: (An earlier tile merge, a division and a merge call per lane holding the tile's floats,
#: was slower than value by value: H200 bf16 [16384, 4096] 164.7 against 135.4.)
OUTER_WELFORD_ONLINE = False
#: an inner var_mean's two passes (the sum, then the squared deviations from sum / n; over
#: a row held in registers, or over each thread's tile before Welford's merge) also sum the
#: deviations themselves and correct by them: mean + sum(d) / n and m2 - sum(d)^2 / n (the
#: corrected two-pass algorithm). sum / n of equal floats can land an ulp off them; a layer
#: norm of such a row (variance 0) then scales that ulp by rsqrt(eps), 3.8e-5 where
#: PyTorch's Welford gives 0 (gpu_fuzz seed 1723 case 236, a row of 33 expanded from one
#: value). Off: it costs a held row about 14% where few rows share the GPU (H100, `bench
#: --sweep welford_corrected_mean_*`: LayerNorm fwd bf16 [2048, 16384] 47.9 -> 54.1 us, fp32
#: 100.2 -> 113.4; level at [16384, 4096]). The third block reduction is not the cost: with
#: the deviations' sum folded into M2's (one pair reduction) it took 54.6 and 116.6.
WELFORD_CORRECTED_MEAN = False
#: an inner-persistent Welford reduction (LayerNorm's) whose kernel fits at most
#: this many blocks an SM (its plan's register cap; 0: never) reduces each thread's own mean
#: and M2 over the block in one reduction (the runtime's `block_welford_x`) instead of
#: the row's sum and then its squared deviations in two: with one block an SM each row's
#: reductions are on its critical path, nothing else hiding them. SASS (sm_90, H100 plans;
#: static instructions, two barriers -> one): LayerNorm fp32 [4096, 12288] 592 -> 392 (64 ->
#: 56 registers), [2048, 16384] 640 -> 416; bf16 [2048, 16384] 912 -> 656; at [16384, 4096],
#: 256 threads, 456 -> 504. `bench --sweep welford_one_reduction_*`, H100 (`9848a1e`), µs at
#: 0 / 2 / 64; the plan's blocks an SM in brackets:
#: - fp32 [2048, 16384] (1) 99.1 / 94.8 / 94.9, [4096, 12288] (1) 162.4 / 149.3 / 149.1,
#:   [8192, 8192] (2) 178.0 / 178.6 / 178.4, [16384, 4096] (4) 178.2 / 178.6 / 178.4;
#: - bf16 [2048, 16384] (2) 47.2 / 48.4 / 48.2, [4096, 12288] (2) 71.5 / 70.8 / 71.0,
#:   [8192, 8192] (4) 91.6 / 91.3 / 91.6, [16384, 4096] (6) 90.4 / 90.4 / 90.5.
#: So one block an SM gains 4-8% and two are a toss (-2.5% to +1%): 1. Again at `95fb2b6`
#: (H100, 0 / 1 / 2 / 64): the one-block plans fp32 [1024, 32768] 413.3 / 185.5 / 185.6 /
#: 185.5 (its early-loaded weights spill either way: LATE_LOADS_OVER_REGISTERS), bf16
#: [1024, 32768] 57.4 / 53.9 / 54.0 / 53.8, fp32 [2048, 16384] 99.2 / 94.9 / 95.0 / 94.7,
#: [4096, 12288] 162.4 / 149.3 / 149.3 / 149.2; bf16 [2048, 16384] (2) 47.4 / 47.1 / 48.4 /
#: 48.5; the others within 1.1% of the best at 1. (An earlier form,
#: folding triples with IEEE divisions through the generic allreduce, took LayerNorm bf16
#: [16384, 4096] on an H200 from 68.7 to 125.9 us.)
WELFORD_ONE_REDUCTION_BLOCKS = 1
#: whether a kernel that keeps its first pass's values (ReductionParams.keep_first_pass)
#: still launders its loaded inputs before later passes. Laundering the inputs loaded once
#: (weights) makes every iteration of a row loop convert them again; without it the
#: compiler may hold their converted values across the loop (seed 001: 112 -> 128
#: registers, no spills). Not laundering measured level: seed 001 H100 158.1 -> 157.5 us,
#: H200 139.7 -> 136.0; `bench --sweep kept_pass_launder_*`, H200, LayerNorm backward bf16
#: [2048, 1000] 12.4 -> 12.6, [1024, 2048] 16.6 -> 16.4, RMSNorm backward fp32 [16384,
#: 4096] 198.7 -> 200.4, [2048, 4096] 30.6 -> 30.9
KEPT_PASS_LAUNDER = True

#: the most shared memory a column reduction's tile of lanes may take to be combined over
#: the block at once (see ReductionLowering._tiled); a persistent kernel takes two
TILE_SMEM_BYTES = 16 * 1024

#: widest block row (threads) whose block reductions take blockDim.x as a constant (H100:
#: softmax fp32 [128, 1000] 2.97 -> 2.66 us, sum inner fp32 2.52 -> 2.27; no row of 256 or
#: fewer measured slower); wider ones read it at run time: the constant made LayerNorm
#: forward with 512 threads a row spill and run slower (bf16 [2048, 16384] 50.0 -> 65.9 us)
FIXED_BDX_MAX = 256


def _tid(p: ParallelType) -> kir.Expr:
    return IndexCast(ParallelIndex(p))


def _float_ops(acc_dt: DataType):
    """`fl(a, b, op, a_dt=acc_dt)`: the Fusion IR binary op `op` giving an `acc_dt` value, of
    an `a_dt` left operand and an `acc_dt` right one (the Welford arithmetic's form)."""
    def fl(a, b, op, a_dt=acc_dt):
        return kir.Binary(op, a, b, a_dt, acc_dt, acc_dt)
    return fl


class ReductionLowering:
    """Builds the kernel IR of one scheduled reduction or inner-persistent fusion."""

    def __init__(self, fusion: Fusion, ref: TensorView, params: ReductionParams, vector_tensors: frozenset[TensorView],
                 sub: SubFusion, red_classes: frozenset[int], name: str, vector_class: int | None = None) -> None:
        self.fusion = fusion
        self.ref = ref
        self.p = params
        self.sub = sub
        self.name = name
        self.params = ParamTable(list(fusion.inputs), params.index_type)
        self.ix = TensorIndexer(fusion, ref, sub, self.params)
        self.lookups = Lookups(fusion, self.ix, self.params, ref_axes_only=True)
        self.vector_tensors = vector_tensors
        find, id_of = sub.uf.find, sub.a.id_of
        self._red_classes = red_classes
        #: how the axes a reshape derives are indexed from the reference's (none without one)
        self._steps: tuple = ()
        #: the classes whose index depends on the columns: a tensor with one is full
        columns = red_classes
        if RESHAPE in sub.kinds:
            plan = sub.index_plan(sub.classes_of(ref))
            if plan.reason is not None:
                raise NotLowerable(plan.reason)
            self._steps = plan.steps
            # an axis a reshape relates to kept axes alone is a kept one; the rest span
            # columns (an input reshaped into the reduction's, its row split or merged)
            red = next((r for r in sub.reductions() if r.red_classes == red_classes), None)
            kept = red.iter_classes if red is not None else set(sub.classes_of(ref)) - red_classes
            columns = plan.known - sub.reshape_closure(kept)
        self._is_full: dict[TensorView, bool] = {}
        #: the tensors with an axis besides the columns (a row tensor, not a weight)
        self._spans_rows: set[TensorView] = set()
        for tv in fusion.tensors():
            axes = [find(id_of(i)) for i in tv.logical_no_reductions() if not i.is_broadcast]
            self._is_full[tv] = any(c in columns for c in axes)
            if any(c not in columns for c in axes):
                self._spans_rows.add(tv)
        # the reference's own reduction axes (it may be a reduction's output) iterate nothing here
        loop = [i for i in ref.domain.loop if not i.is_broadcast and not i.is_reduction]
        merged_red = [i for i in loop if self._class_set(i) <= columns]
        merged_it = [i for i in loop if i not in merged_red]
        if len(merged_red) != 1 or len(merged_it) > 1:
            raise NotLowerable(f"reduction reference {ref!r} is not scheduled as [rows, columns]")
        self.row_axis: IterDomain | None = merged_it[0] if merged_it else None
        self.col_axis: IterDomain = merged_red[0]
        self.lead = [i for i in ref.domain.loop if i.is_broadcast or i.is_reduction]
        self.exprs = [e for e in fusion.exprs() if any(isinstance(o, TensorView) for o in e.outputs)]
        self.stage = self._stages()
        V = params.vectorize
        U = params.unroll
        self.V, self.U = V, U
        # register tile sizes: full tensors (unroll x vector); reduced ones (outer: vector)
        self.full_tile = U * V
        #: full inputs without the vector axis (`vector_class`): one value serves a vector's
        #: lanes, so the tile holds `unroll` values, loaded once each (an outer reduction's
        #: per-row scale, say: 8x fewer loads and registers for bf16)
        self._lane_invariant: set[TensorView] = set()
        if V > 1 and vector_class is not None:
            # (an axis a reshape derives may vary along the lanes: such inputs are not)
            self._lane_invariant = {
                tv for tv in fusion.inputs if isinstance(tv, TensorView) and self.full(tv)
                and tv not in vector_tensors
                and all(find(id_of(i)) != vector_class and self.ix.ref_axis(i) is not None
                        for i in tv.logical_no_reductions() if not i.is_broadcast)}
        #: the reference axis the vector lanes advance
        self._vector_axis = next((r for r in ref.logical_no_reductions()
                                  if not r.is_broadcast and find(id_of(r)) == vector_class), None)
        self.reduced_tile = 1 if params.inner else V
        self.body: list = []
        #: shared memory declarations: at the top of the kernel, seen by every scope
        self._shared_decls: list = []
        self.regs: dict[TensorView, str] = {}
        self._decl_done: set[str] = set()
        self._smem: dict[str, str] = {}
        #: accumulators already combined across the block where they were computed
        self._combined: set[str] = set()
        #: full tensors a later stage reads from registers instead of recomputing
        self._kept: set[TensorView] = set()
        #: which of its two scratch buffers a type's next block reduction uses (persistent)
        self._smem_turn: dict[str, int] = {}
        #: tensors computed once per column after the rows (inner-outer: the outer
        #: reductions' results and what follows them); none here
        self._final: set[TensorView] = set()
        #: the statements loading a persistent kernel's inputs for its row(s)
        self._row_loads: list = []
        #: the full inputs loaded so far (a persistent kernel's stay in registers)
        self._loaded: set[TensorView] = set()
        self._last_stage = 0
        #: the stage being lowered
        self._at_stage = 0
        #: with late loads, per full input the last stage that reads it: a later stage does
        #: not launder it, so its registers are free once read (a launder keeps them live)
        self._last_read: dict[TensorView, int] = {}
        #: the stage loop being built: the reciprocal of each divisor its full divisions
        #: share, by the divisor's register or scalar (see _by_reciprocal), and the
        #: statements computing them once, ahead of the loop
        self._reciprocals: dict[kir.Expr, tuple[Var, Var]] = {}
        self._hoisted: list = []

    # --- classification ---------------------------------------------------------------------
    def _class_set(self, loop_axis: IterDomain) -> set[int]:
        """The axis classes of the ref's logical axes under a loop axis."""
        from fuser.ir.transforms import id_exprs_between

        find, id_of = self.sub.uf.find, self.sub.a.id_of
        leaves = {loop_axis}
        history = id_exprs_between(self.ref.domain.logical, self.ref.domain.loop)
        for e in reversed(history):
            if any(o in leaves for o in e.outputs):
                leaves -= set(e.outputs)
                leaves |= set(e.inputs)
        return {find(id_of(i)) for i in leaves if isinstance(i, IterDomain) and not i.is_broadcast}

    def _stages(self) -> dict[TensorView, int]:
        """Per tensor: how many reductions lie upstream of it, in series."""
        st = reduction_stages(self.exprs)
        for tv in self.fusion.inputs:
            if isinstance(tv, TensorView):
                st.setdefault(tv, 0)
        return st

    def full(self, tv: TensorView) -> bool:
        return self._is_full.get(tv, False)

    # --- indices ---------------------------------------------------------------------------
    def _row_col(self, s: kir.Expr, u: kir.Expr, v: kir.Expr) -> tuple[kir.Expr, kir.Expr]:
        """(row index, column index) of tile element (u, v) at serial step s."""
        p = self.p
        by = _tid(ParallelType.BIDy) if p.grid_y > 1 else IntLit(0)
        steps = self.steps
        if p.inner:
            row = self._row_base()
            chunk = by * steps + s if p.grid_y > 1 else s
            col = ((chunk * p.unroll + u) * p.bdx + _tid(ParallelType.TIDx)) * p.vectorize + v
        else:
            row = (_tid(ParallelType.BIDx) * p.bdx + _tid(ParallelType.TIDx)) * p.vectorize + v
            chunk = by * steps + s if p.grid_y > 1 else s
            if not p.persistent:
                # the first steps of the first blocks read the input's last rows
                chunk = kir.counted_from_end(chunk, steps * p.grid_y if p.grid_y > 1 else steps)
            col = (chunk * p.unroll + u) * p.bdy + _tid(ParallelType.TIDy)
        return row, col

    def _row_base(self) -> kir.Expr:
        """The row an inner kernel's thread works on (its block's rows counted from the end:
        kir.BLOCKS_FROM_END)."""
        return kir.data_block() * self.p.bdy + _tid(ParallelType.TIDy)

    def _indices(self, row: kir.Expr, col: kir.Expr) -> dict[IterDomain, kir.Expr]:
        loop = {i: IntLit(0) for i in self.lead}
        if self.row_axis is not None:
            loop[self.row_axis] = row
        loop[self.col_axis] = col
        return self.ix.ref_indices(loop)

    def _map(self, tv: TensorView, idx: dict[IterDomain, kir.Expr]) -> dict[IterDomain, kir.Expr] | None:
        """tv's indices at the reference's `idx` (None: its axes' reference classes, which
        `TensorIndexer.offset` takes by default)."""
        return self.ix.index_map(tv, idx, self._steps) if self._steps else None

    def _offset(self, tv: TensorView, idx: dict[IterDomain, kir.Expr]) -> kir.Expr:
        """tv's element offset at the reference's indices `idx`."""
        return self.ix.offset(tv, idx, self._map(tv, idx))

    def _lanes_walk(self, tv: TensorView, row: kir.Expr, col: kir.Expr) -> bool:
        """Whether the vector lanes of the access at (row, col) are consecutive elements of
        vector-accessed `tv`. Without reshapes they are (`vectorizable` picked tensors by
        the vector axis's class); through a reshape only where tv's index along its
        innermost axis is the vector axis's plus a shift the lanes share."""
        if not self._steps or self._vector_axis is None:
            return True
        idx = dict(self._indices(_subst_v_expr(row, IntLit(0)), _subst_v_expr(col, IntLit(0))))
        lane = Var("vector_lane_index")  # stands for the vector axis's index, which the lanes advance
        idx[self._vector_axis] = lane
        return self.ix.lanes_walk(tv, self.ix.index_map(tv, idx, self._steps), lane)

    def _row_ok(self, row: kir.Expr) -> kir.Expr | None:
        """Whether `row` exists (None: every row the kernel reaches does)."""
        return lt(row, self.n_rows) if self.row_axis is not None and not self.p.exact else None

    def _col_ok(self, col: kir.Expr) -> kir.Expr | None:
        """Whether column `col` of a row exists (None: every column the kernel reaches does)."""
        return None if self.p.exact else lt(col, self.n_cols)

    # --- registers --------------------------------------------------------------------------
    def _decl(self, name: str, dtype: DataType, size: int | None, init=None, space=None, welford=False,
              offset: int | None = None) -> None:
        """Declare `name` once (shared arrays at the top of the kernel; `offset`: placed in
        the dynamic shared memory at that byte offset)."""
        if name in self._decl_done:
            return
        self._decl_done.add(name)
        if space is kir.MemoryType.Shared:
            self._shared_decls.append(Decl(name, dtype, size, space=space, welford=welford, offset=offset))
            return
        kw = {} if space is None else {"space": space}
        if size is not None and init is not None:  # an array: initialised element by element
            self.body.append(Decl(name, dtype, size, welford=welford, **kw))
            k = Var("k")
            self.body.append(For(k, IntLit(size), [Assign(Element(Var(name), k), init)], unroll=True,
                                 dtype=DataType.Int32))
            return
        self.body.append(Decl(name, dtype, size, init, welford=welford, **kw))

    def _reg(self, tv: TensorView, u: kir.Expr, v: kir.Expr) -> kir.Expr:
        """tv's register element at tile position (u, v)."""
        name = self.regs[tv]
        if tv in self._lane_invariant:
            return Element(Var(name), u) if self.U > 1 else Var(name)
        if self.full(tv):
            return Element(Var(name), u * self.V + v) if self.full_tile > 1 else Var(name)
        return Element(Var(name), v) if self.reduced_tile > 1 else Var(name)

    def _array(self, tv: TensorView, prefix: str) -> None:
        if tv in self.regs:
            return
        name = f"{prefix}{tv.name}"
        self.regs[tv] = name
        size = self.full_tile if self.full(tv) else self.reduced_tile
        if tv in self._lane_invariant:
            size = self.U
        self._decl(name, tv.dtype, size if size > 1 else None)

    # --- lowering ---------------------------------------------------------------------------
    def lower(self) -> Kernel:
        self._setup()
        self._rows()
        return self._kernel()

    def _kernel(self, **kw) -> Kernel:
        p = self.p
        if p.persistent and not p.inner and p.grid_y > 1:  # an outer-persistent grid allreduce
            kw = {"grid_sync": True, "min_blocks": OUTER_PERSISTENT_MIN_BLOCKS, **kw}
        elif p.min_blocks:
            kw = {"min_blocks": p.min_blocks, "spill_max": p.spill_max, **kw}
        return self.lookups.finish(Kernel(self.name, self.params.params, self._shared_decls + self.body, p.index_type,
                                          threads=p.bdx, threads_y=p.bdy, includes=("fuser_reduction.cuh",), **kw))

    def _setup(self) -> None:
        """Extents and the serial loop's step count."""
        p = self.p
        ix = self.ix
        self.n_rows = ix.extent(self.row_axis.extent) if self.row_axis is not None else IntLit(1)
        self.n_cols = ix.extent(self.col_axis.extent)
        per_step = p.unroll * (p.bdx * p.vectorize if p.inner else p.bdy)
        if p.persistent:
            self.steps = IntLit(1)
        else:
            total = kir.IndexBinary(kir.BinaryOpType.CeilDiv, self.n_cols, IntLit(per_step))
            self.steps = kir.IndexBinary(kir.BinaryOpType.CeilDiv, total, IntLit(p.grid_y)) if p.grid_y > 1 else total
            self.body.append(Decl("steps", None, None, self.steps))
            self.steps = Var("steps")

    def _reductions(self) -> list:
        """The reductions the rows' stages compute (not those of the final phase)."""
        return [e for e in self.exprs if isinstance(e, (ReductionOp, WelfordOp)) and expr_kind(e) == REDUCTION
                and e.outputs[0] not in self._final]

    def _rows(self) -> None:
        """The work of a thread's rows: load, the stages and their reductions, store."""
        p = self.p
        reductions = self._reductions()
        n_stages = max((self.stage[e.outputs[0]] for e in reductions), default=0)
        self._last_stage = n_stages
        if p.persistent and p.late_loads:
            # (found before any stage keeps a value instead of recomputing it: at least as
            # late as the stages will read it)
            for k in range(n_stages + 1):
                reds = [e for e in reductions if self.stage[e.inputs[0]] == k]
                for tv in self._reads(k, self._needed(k, reds), reds):
                    self._last_read[tv] = k
        if not p.persistent and any(self.full(tv) and self.stage.get(tv, 0) > 0 for tv in self.stage):
            raise NotLowerable("a reduction kernel reuses the reduced axes after a reduction (persistent)")
        for tv in self.fusion.inputs:
            if isinstance(tv, TensorView) and self.full(tv) and self._used(tv):
                self._array(tv, "r")
        # reduced-shape inputs: read once per thread, before the column loops
        self._load_reduced_inputs()
        self._reduced_exprs(0)
        for k in range(n_stages + 1):
            self._stage_loop(k, [e for e in reductions if self.stage[e.inputs[0]] == k])
            if k < n_stages:
                self._reduced_exprs(k + 1)
        self._store_reduced_outputs()

    def _launder_rows(self) -> list:
        """Launder the registers of the loaded inputs (rows and weights): a persistent
        kernel's later passes recompute what they need from the compact loaded values,
        rather than the compiler keeping an earlier pass's values (the floats of a bf16 row,
        weights converted early) live across a block reduction. On an H100 this took
        RMSNorm bf16 [16384, 4096] from 48 to 32 registers and 89% to 96% of copy
        bandwidth, LayerNorm bf16 from 64 to 47 registers and 73% to 91%."""
        if self.full_tile == 1 or (self.p.keep_first_pass and not KEPT_PASS_LAUNDER):
            return []
        return [kir.Launder(Var(self.regs[tv])) for tv in self.fusion.inputs
                if isinstance(tv, TensorView) and tv in self.regs and self.full(tv) and tv in self._loaded
                and self._last_read.get(tv, self._at_stage) >= self._at_stage
                and not (tv in self._lane_invariant and self.U == 1)]  # (a scalar, not an array)

    def _load_reduced_inputs(self) -> None:
        v = Var("v")
        row, _ = self._row_col(IntLit(0), IntLit(0), v if not self.p.inner else IntLit(0))
        idx = self._indices(row, IntLit(0))
        for tv in self.fusion.inputs:
            if not isinstance(tv, TensorView) or self.full(tv) or not self._used(tv):
                continue
            self._array(tv, "r")
            ptr = self.params.tensor(tv)
            body = self._lanes_reduced([Assign(self._reg(tv, IntLit(0), v), Element(ptr, self._offset(tv, idx)))],
                                       tv, ptr, idx, load=True, row=row)
            ok = self._row_ok(_subst_v_expr(row, IntLit(0)))  # lane 0 decides for the vector
            stmts = [If(ok, body)] if ok is not None else body
            self.body.extend(stmts)
            self._row_loads.extend(stmts)

    def _used(self, tv: TensorView) -> bool:
        """Whether the kernel loads input `tv` (index ops read their lookup tensors themselves)."""
        return any(tv in e.inputs for e in self.exprs) and not self.lookups.skip_load(tv)

    def _lanes_reduced(self, stmts: list, tv: TensorView, ptr, idx, *, load: bool, row: kir.Expr) -> list:
        """Statements over the lanes of a reduced value (outer kernels hold a vector of
        columns): one vector access when `tv` allows it."""
        if self.reduced_tile == 1:
            return [_subst_v(s, IntLit(0)) for s in stmts]
        if tv in self.vector_tensors and self._lanes_walk(tv, row, IntLit(0)):
            off0 = _subst_v_expr(self._offset(tv, idx), IntLit(0))
            name = self.regs[tv]
            if load:
                return [VecLoad(tv.dtype, self.V, Var(name), AddressOf(Element(ptr, off0)))]
            return [VecStore(tv.dtype, self.V, AddressOf(Element(ptr, off0)), Var(name))]
        return [For(Var("v"), IntLit(self.V), stmts, unroll=True, dtype=DataType.Int32)]

    def _reduced_exprs(self, k: int) -> None:
        """Reduced expressions of stage k: once per thread (per lane in outer kernels)."""
        stmts = []
        looks_up = False
        for e in self.exprs:
            outs = [o for o in e.outputs if isinstance(o, TensorView)]
            if isinstance(e, (ReductionOp, WelfordOp)) and expr_kind(e) == REDUCTION:
                continue
            if any(self.full(o) for o in outs) or self.stage.get(outs[0], 0) != k or outs[0] in self._final:
                continue
            looks_up = looks_up or isinstance(e, INDEX_OPS)
            stmts.extend(self._compute(e, IntLit(0), Var("v")))
        if stmts:
            if self.reduced_tile > 1:
                stmts = [For(Var("v"), IntLit(self.V), stmts, unroll=True, dtype=DataType.Int32)]
            else:
                stmts = [_subst_v(s, IntLit(0)) for s in stmts]
            row, _ = self._row_col(IntLit(0), IntLit(0), IntLit(0))
            ok = self._row_ok(row) if looks_up else None
            # an index op checks its index (and may record an error) and reads through it:
            # only rows that exist, whose index registers the row predicate loaded
            self.body.extend([If(ok, stmts)] if ok is not None else stmts)

    def _compute(self, e, u: kir.Expr, v: kir.Expr) -> list:
        """Assignments computing e's output at tile position (u, v)."""
        outs = [o for o in e.outputs if isinstance(o, TensorView)]
        if len(outs) != 1:
            raise NotLowerable(f"{type(e).__name__} with several outputs outside a reduction")
        (out,) = outs

        def operand(x: Val) -> kir.Expr:
            if isinstance(x, TensorView):
                if x not in self.regs:
                    raise NotLowerable(f"{x!r} is read before it is computed")
                return self._reg(x, u, v)
            return scalar_value(x, self.params)

        rhs = self._by_reciprocal(e, out, operand)
        if rhs is None:
            rhs = tensor_value(e, out, operand, self.params, lambda axis: self._axis_index(axis, u, v, out),
                               _INDEX_DTYPE[self.p.index_type], self.lookups.value)
        if rhs is None:  # a view: the same element as its operand
            self.regs[out] = self.regs[e.inputs[0]]
            if e.inputs[0] in self._lane_invariant:
                self._lane_invariant.add(out)
            if self.full(out) != self.full(e.inputs[0]):
                raise NotLowerable(f"{type(e).__name__} between a full and a reduced tensor")
            return []
        self._array(out, "t")
        return [Assign(self._reg(out, u, v), rhs)]

    def _by_reciprocal(self, e, out: TensorView, operand) -> kir.Expr | None:
        """A full division marked `by_reciprocal` whose divisor is the same for the whole
        tile (a reduced scalar register or a scalar): (a r) s, with the divisor's scale s
        and r = 1 / (b s) computed once ahead of the stage loop (`_hoisted`); None for any
        other expression. Inline, nvcc recomputed the reciprocal for each vector of the
        row, each behind its own bounds check."""
        if not (isinstance(e, BinaryOp) and e.op_type is BinaryOpType.Div and e.by_reciprocal and self.full(out)):
            return None
        a, b = e.inputs
        c = compute_dtype(out.dtype)
        if c not in (DataType.Float, DataType.Double):
            return None
        divisor = operand(b)
        if isinstance(b, TensorView) and (self.full(b) or not isinstance(divisor, Var)):
            return None  # a value per element or per lane: nothing to share
        got = self._reciprocals.get(divisor)
        if got is None:
            n = len(self._reciprocals)
            got = self._reciprocals[divisor] = (Var(f"rcp{n}_s{self._at_stage}"), Var(f"scl{n}_s{self._at_stage}"))
            rcp, scl = got
            self._decl(rcp.name, c, None)
            self._decl(scl.name, c, None)
            wide = divisor if b.dtype == c else Cast(divisor, b.dtype, c)
            self._hoisted += [Assign(scl, kir.ReciprocalScale(wide, c, c)),
                              Assign(rcp, kir.Binary(BinaryOpType.Div, kir.Const(1.0, c),
                                                     kir.Binary(BinaryOpType.Mul, wide, scl, c, c, c), c, c, c))]
        rcp, scl = got
        return kir.Binary(BinaryOpType.Mul, kir.Binary(BinaryOpType.Mul, operand(a), rcp, a.dtype, c, c), scl,
                          c, c, out.dtype)

    def _axis_index(self, axis: IterDomain, u, v, out: TensorView) -> kir.Expr:
        """The index of `out`'s axis `axis` at tile position (u, v) (iota and RNG read it)."""
        r = self.ix.ref_axis(axis)
        if r is None and not self._steps:
            return IntLit(0)
        row, col = self._row_col(Var("s") if not self.p.persistent else IntLit(0), u, v)
        idx = self._indices(row, col)
        return idx[r] if r is not None else self.ix.index_map(out, idx, self._steps)[axis]

    def _needed(self, k: int, reds: list) -> list:
        """Full expressions stage k computes: those its reductions and full outputs need."""
        want: set[TensorView] = {e.inputs[0] for e in reds}
        want |= set(self._full_outputs(k))
        return self._producers(want)

    def _full_outputs(self, k: int) -> list[TensorView]:
        """The outputs spanning the reduced axes that stage k writes."""
        return [o for o in self.fusion.outputs if isinstance(o, TensorView) and self.full(o) and self.stage[o] == k
                and o not in self._final]

    def _producers(self, want: set[TensorView]) -> list:
        """The full expressions computing `want` from the loaded (or kept) registers."""
        producer = {o: e for e in self.exprs for o in e.outputs if isinstance(o, TensorView)}
        seen: set = set()
        stack = list(want)
        while stack:
            tv = stack.pop()
            e = producer.get(tv)
            if e is None or e in seen or not self.full(tv) or tv in self._kept:
                continue
            seen.add(e)
            stack.extend(x for x in e.inputs if isinstance(x, TensorView))
        return [e for e in self.exprs if e in seen]

    def _stage_loop(self, k: int, reds: list) -> None:
        p = self.p
        exprs = self._needed(k, reds)
        outs = self._full_outputs(k)
        self._at_stage = k
        if not exprs and not reds and not outs and k > 0 and not self._accumulate_columns(k, Var("u"), Var("v")):
            return
        s, u, v = Var("s"), Var("u"), Var("v")
        self._reciprocals, self._hoisted = {}, []
        # accumulators
        accs = []
        for e in reds:
            acc_dt = compute_dtype(e.outputs[0].dtype)
            name = f"acc{e.outputs[0].name}"
            if isinstance(e, WelfordOp):
                self._decl(name, acc_dt, self.reduced_tile if self.reduced_tile > 1 else None, welford=True)
            else:
                init = scalar_value(e.init, self.params)
                self._decl(name, acc_dt, self.reduced_tile if self.reduced_tile > 1 else None,
                           Cast(init, e.init.dtype, acc_dt))
            accs.append((e, name, acc_dt))
        # (the registers of what earlier stages loaded: those this one loads are fresh)
        step: list = self._launder_rows() if p.persistent and k > 0 else []
        loads: list = []
        compute: list = []
        for tv in self.fusion.inputs:
            if isinstance(tv, TensorView) and self.full(tv) and self._used(tv) and self._loads_at(tv, k, exprs, reds):
                loads.append(self._load_full(tv, s, u))
                self._loaded.add(tv)
        for e in exprs:
            if not (isinstance(e, (ReductionOp, WelfordOp)) and expr_kind(e) == REDUCTION):
                compute.extend(self._compute(e, u, v))
                if p.persistent and (kept_in_registers(e) or (k == 0 and p.keep_first_pass)):
                    self._kept.update(o for o in e.outputs if isinstance(o, TensorView) and self.full(o))
        row0, col0 = self._row_col(s, u, IntLit(0))
        pred = all_of([c for c in (self._row_ok(row0), self._col_ok(col0)) if c is not None])
        merges: list = []
        for e, name, acc_dt in accs:
            x = e.inputs[0]
            acc = Element(Var(name), v) if self.reduced_tile > 1 else Var(name)
            if isinstance(e, WelfordOp):
                decls, per_value, merge = self._welford_tile(e, name, acc_dt, pred)
                step.extend(decls)
                compute.extend(per_value)
                merges.extend(merge)
            else:
                compute.append(Assign(acc, kir.Binary(e.op_type, acc, self._reg(x, u, v), acc_dt, x.dtype, acc_dt)))
        compute.extend(self._accumulate_columns(k, u, v))
        stores = [self._store_full(tv, s, u) for tv in outs]
        inner = self._over_lanes(compute) + [x for st in stores for x in st]
        loaded = [x for ld in loads for x in ld]
        if loads and inner and k > 0 and p.late_loads and not p.row_loop:
            # each vector's late inputs loaded just before its use: the compiler need not
            # hold a whole tile of them at once (a row loop moves loads, so keeps them apart)
            load_at = len(step)
            step.append(For(u, IntLit(self.U), _guarded(pred, loaded + inner), unroll=True, dtype=DataType.Int32))
        else:
            if loads:
                load_at = len(step)
                step.append(For(u, IntLit(self.U), _guarded(pred, loaded), unroll=True, dtype=DataType.Int32))
            if inner:
                step.append(For(u, IntLit(self.U), _guarded(pred, inner), unroll=True, dtype=DataType.Int32))
        step.extend(merges)
        step[:0] = self._hoisted  # (the divisors' reciprocals: before the loops that read them)
        if p.persistent:
            done = [_subst_s(x, IntLit(0)) for x in step]
            self.body.extend(done)
            if loads:
                self._row_loads.append(done[load_at])
        else:
            self.body.append(For(s, self.steps, step))
        self._combine(accs)

    def _loads_at(self, tv: TensorView, k: int, exprs: list, reds: list) -> bool:
        """Whether stage k's loop loads full input `tv`: every step of a reduction kernel's
        loop; a persistent kernel's first stage, or with `late_loads` the first stage that
        reads it (the last takes any left)."""
        if not self.p.persistent:
            return True
        if not self.p.late_loads:
            return k == 0
        if tv in self._loaded:
            return False
        return k == self._last_stage or tv in self._reads(k, exprs, reds)

    def _reads(self, k: int, exprs: list, reds: list) -> set:
        """The tensors stage k reads: its expressions' and reductions' inputs and its full
        outputs."""
        got = {x for e in exprs for x in e.inputs if isinstance(x, TensorView)}
        return got | {e.inputs[0] for e in reds} | set(self._full_outputs(k))

    def _accumulate_columns(self, k: int, u, v) -> list:
        """Statements folding stage k's values into per-column accumulators (inner-outer)."""
        return []

    def _over_lanes(self, stmts: list) -> list:
        """`stmts` (written for lane `v`) for every vector lane."""
        if self.V > 1:
            return [For(Var("v"), IntLit(self.V), stmts, unroll=True, dtype=DataType.Int32)]
        return [_subst_v(x, IntLit(0)) for x in stmts]

    def _welford_tile(self, e: WelfordOp, name: str, acc_dt: DataType, pred) -> tuple[list, list, list]:
        """A Welford reduction's work for one tile of a step: (declarations, statements per
        value: a sum and a count, statements after the tile: the tile's mean, its sum of
        squared deviations from it (a second pass over the registers), merged into the
        accumulator). One division per tile instead of one per value."""
        x = e.inputs[0]
        u, v = Var("u"), Var("v")
        n = e.outputs[0].name
        lanes = self.reduced_tile
        lane = v if lanes > 1 else None
        tsum, tcnt, tmean, tm2 = (f"{w}{n}" for w in ("wsum", "wcnt", "wmean", "wm2"))

        def at(arr: str, index=lane):
            return Element(Var(arr), index) if index is not None else Var(arr)

        decls = [Decl(tsum, acc_dt, lanes if lanes > 1 else None, None if lanes > 1 else kir.Const(0, acc_dt)),
                 Decl(tcnt, DataType.Int32, lanes if lanes > 1 else None, None if lanes > 1 else IntLit(0))]
        if lanes > 1:
            decls.append(For(Var("k"), IntLit(lanes), [Assign(Element(Var(tsum), Var("k")), kir.Const(0, acc_dt)),
                                                       Assign(Element(Var(tcnt), Var("k")), IntLit(0))],
                             unroll=True, dtype=DataType.Int32))
        value = self._reg(x, u, v)
        per_value = [Assign(at(tsum), kir.Binary(kir.BinaryOpType.Add, at(tsum), value, acc_dt, x.dtype, acc_dt)),
                     Assign(at(tcnt), at(tcnt) + 1)]
        count = Cast(kir.IndexBinary(kir.BinaryOpType.Max, at(tcnt), IntLit(1)), DataType.Int32, acc_dt)
        mean = kir.Binary(kir.BinaryOpType.Div, at(tsum), count, acc_dt, acc_dt, acc_dt)
        dev = kir.Binary(kir.BinaryOpType.Sub, value, Var(tmean), x.dtype, acc_dt, acc_dt)
        square = kir.Binary(kir.BinaryOpType.Mul, dev, dev, acc_dt, acc_dt, acc_dt)
        second = [Assign(Var(tm2), kir.Binary(kir.BinaryOpType.Add, Var(tm2), square, acc_dt, acc_dt, acc_dt))]
        acc = Element(Var(name), lane) if lane is not None else Var(name)
        if self.p.persistent and self.p.inner:
            # the whole row is in registers: two passes over it, the sum, then the squared
            # deviations from a mean
            again = self._launder_rows()
            if again:  # the second pass recomputes the values from the loaded row
                second = [st for ex in self._producers({x}) for st in self._compute(ex, u, v)] + second

            def deviations(body: list) -> list:
                return [*again, For(u, IntLit(self.U), _guarded(pred, self._over_lanes(body)), unroll=True,
                                    dtype=DataType.Int32)]
            if self._one_welford_reduction():
                # each thread's own mean and M2 (no barrier between the passes), then the
                # block's in one reduction of the triples
                merge = [Decl(tmean, acc_dt, None, mean), Decl(tm2, acc_dt, None, kir.Const(0, acc_dt)),
                         *deviations(second),
                         Assign(Member(acc, "avg"), Var(tmean)), Assign(Member(acc, "m2"), Var(tm2)),
                         Assign(Member(acc, "n"), Var(tcnt)),
                         # (a row held in registers counts far below 2^24)
                         self._block_allreduce(acc, None, acc_dt, True, float_counts=True)]
            else:
                # the row's mean first: two float block reductions (less, at several blocks
                # an SM, than combining Welford triples across the block in one: each
                # thread's own mean and deviations, then Chan's combination with IEEE
                # divisions; H200, LayerNorm bf16 [16384, 4096] 68.7 -> 125.9 us, fp32
                # 130.1 -> 159.1)
                add = kir.BinaryOpType.Add
                # (the block reductions in the order they run: each alternates scratch buffers)
                sums = self._block_allreduce(Var(tsum), add, acc_dt, False)
                squares = self._block_allreduce(Var(tm2), add, acc_dt, False)
                start, each, correct = self._corrected_mean(n, dev, tmean, tm2, count, acc_dt)
                merge = [sums,
                         # every row has all its columns: the count is the row length
                         Assign(Var(tcnt), self.n_cols),
                         Decl(tmean, acc_dt, None, mean), Decl(tm2, acc_dt, None, kir.Const(0, acc_dt)), *start,
                         *deviations(second + each),
                         squares,
                         *correct,
                         Assign(Member(acc, "avg"), Var(tmean)), Assign(Member(acc, "m2"), Var(tm2)),
                         Assign(Member(acc, "n"), Var(tcnt))]
            self._combined.add(name)
        elif lanes > 1 and OUTER_WELFORD_ONLINE:
            per_value, merge = self._online_lanes(name, n, acc_dt, value, x.dtype, tcnt)
            # no tile sums: the lanes' counts, and the count before this step as a float
            decls = [Decl(tcnt, DataType.Int32, lanes),
                     For(Var("k"), IntLit(lanes), [Assign(Element(Var(tcnt), Var("k")), IntLit(0))],
                         unroll=True, dtype=DataType.Int32),
                     Decl(f"wb{n}", acc_dt, None, Cast(Member(Element(Var(name), IntLit(0)), "n"), DataType.Int, acc_dt))]
        elif lanes > 1:  # outer: each lane's tile is its column of `unroll` values
            merge = self._chunk_lanes(e, name, acc_dt, value, pred)
        else:
            # (corrected per thread's tile: Welford's merges keep equal means exact)
            start, each, correct = self._corrected_mean(n, dev, tmean, tm2, count, acc_dt, over_block=False)
            second = second + each
            merge = [Decl(tmean, acc_dt, None, mean), Decl(tm2, acc_dt, None, kir.Const(0, acc_dt)), *start,
                     For(u, IntLit(self.U), _guarded(pred, self._over_lanes(second)), unroll=True,
                         dtype=DataType.Int32),
                     *correct,
                     kir.WelfordMerge(acc, Var(tmean), Var(tm2), at(tcnt))]
        return decls, per_value, merge

    def _one_welford_reduction(self) -> bool:
        """Whether an inner-persistent kernel's Welford reductions take one block reduction
        of each thread's triple instead of two of floats (WELFORD_ONE_REDUCTION_BLOCKS)."""
        return 0 < self.p.min_blocks <= WELFORD_ONE_REDUCTION_BLOCKS and not WELFORD_CORRECTED_MEAN

    def _corrected_mean(self, n: str, dev, tmean: str, tm2: str, count, acc_dt: DataType,
                        over_block: bool = True) -> tuple[list, list, list]:
        """WELFORD_CORRECTED_MEAN's statements for a two-pass row (or a thread's tile, without
        `over_block`): (before the second pass, in it for each value `dev` = x - mean, after
        it); all empty with the switch off. After: the deviations' sum combined over the
        block, the mean moved by its share of it, and the squared deviations' sum reduced by
        what that move explains (never below 0: for equal values both terms are n * d^2)."""
        if not WELFORD_CORRECTED_MEAN:
            return [], [], []
        B = kir.BinaryOpType
        fl = _float_ops(acc_dt)

        tdev, shift = Var(f"wdev{n}"), f"wdev{n}s"
        combine = [self._block_allreduce(tdev, B.Add, acc_dt, False)] if over_block else []
        after = [*combine,
                 Decl(shift, acc_dt, None, fl(tdev, count, B.Div)),
                 Assign(Var(tm2), fl(fl(Var(tm2), fl(tdev, Var(shift), B.Mul), B.Sub), kir.Const(0, acc_dt), B.Max)),
                 Assign(Var(tmean), fl(Var(tmean), Var(shift), B.Add))]
        return [Decl(tdev.name, acc_dt, None, kir.Const(0, acc_dt))], [Assign(tdev, fl(tdev, dev, B.Add))], after

    def _chunk_lanes(self, e: WelfordOp, name: str, acc_dt: DataType, value, pred) -> list:
        """Statements after the tile of an outer Welford reduction that merges each step's
        tile lane by lane (OUTER_WELFORD_ONLINE off), the lanes' sums and counts taken while
        loading: the tile's mean by one reciprocal of the count (a vector's lanes share
        their rows, so lane 0's count serves all), its squared deviations from that mean in
        a second pass (the values recomputed from the loaded registers where no costly op
        makes them, so the tile's floats need no registers), then Chan's merge, one division
        per step. Steps without rows leave the accumulators alone."""
        B = kir.BinaryOpType
        u, v = Var("u"), Var("v")
        n = e.outputs[0].name
        x = e.inputs[0]
        acc = Element(Var(name), v)
        tsum, tcnt, tmean, tm2 = (f"{w}{n}" for w in ("wsum", "wcnt", "wmean", "wm2"))
        before, rcp, weight, spread, dev = (Var(f"{w}{n}") for w in ("wn", "wr", "ww", "wnw", "wdl"))
        fl = _float_ops(acc_dt)

        count = Element(Var(tcnt), IntLit(0))
        total = kir.IndexBinary(B.Add, before, count)
        producers = self._producers({x})
        again = ([st for ex in producers for st in self._compute(ex, u, v)]
                 if not any(kept_in_registers(ex) for ex in producers) else [])
        d = kir.Binary(B.Sub, value, Var(tmean), x.dtype, acc_dt, acc_dt)
        second = again + [Assign(Var(tm2), fl(Var(tm2), fl(d, d, B.Mul), B.Add))]
        lane = [Decl(tmean, acc_dt, None, fl(Element(Var(tsum), v), rcp, B.Mul)),
                Decl(tm2, acc_dt, None, kir.Const(0, acc_dt)),
                For(u, IntLit(self.U), _guarded(pred, second), unroll=True, dtype=DataType.Int32),
                Decl(dev.name, acc_dt, None, fl(Var(tmean), Member(acc, "avg"), B.Sub)),
                Assign(Member(acc, "avg"), fl(Member(acc, "avg"), fl(dev, weight, B.Mul), B.Add)),
                Assign(Member(acc, "m2"), fl(Member(acc, "m2"), fl(Var(tm2), fl(fl(dev, dev, B.Mul), spread, B.Mul),
                                                                    B.Add), B.Add)),
                Assign(Member(acc, "n"), total)]
        step = [Decl(before.name, DataType.Int, None, Member(Element(Var(name), IntLit(0)), "n")),
                Decl(rcp.name, acc_dt, None, fl(kir.Const(1, acc_dt), Cast(count, DataType.Int32, acc_dt), B.Div)),
                Decl(weight.name, acc_dt, None, fl(Cast(count, DataType.Int32, acc_dt), Cast(total, DataType.Int, acc_dt),
                                                   B.Div)),
                Decl(spread.name, acc_dt, None, fl(Cast(before, DataType.Int, acc_dt), weight, B.Mul)),
                For(v, IntLit(self.reduced_tile), lane, unroll=True, dtype=DataType.Int32)]
        return [If(kir.IndexBinary(B.Gt, count, IntLit(0)), step)]

    def _online_lanes(self, name: str, n: str, acc_dt: DataType, value, x_dt: DataType,
                      tcnt: str) -> tuple[list, list]:
        """(statements per value, statements after the tile) of an outer Welford reduction
        that updates each lane value by value (OUTER_WELFORD_ONLINE). A vector's lanes share
        their rows, hence their counts: the u-th value of a step is the (wb + u + 1)-th of
        every lane (rows are valid in a prefix of u), so one reciprocal per row serves all
        lanes (nvcc computes it once for the unrolled lanes)."""
        B = kir.BinaryOpType
        u, v = Var("u"), Var("v")
        acc = Element(Var(name), v)
        dev = Var(f"wd{n}")
        fl = _float_ops(acc_dt)

        count = fl(Var(f"wb{n}"), Cast(kir.IndexBinary(B.Add, u, IntLit(1)), DataType.Int32, acc_dt), B.Add)
        weight = fl(kir.Const(1, acc_dt), count, B.Div)
        per_value = [Decl(dev.name, acc_dt, None, fl(value, Member(acc, "avg"), B.Sub, x_dt)),
                     Assign(Member(acc, "avg"), fl(Member(acc, "avg"), fl(dev, weight, B.Mul), B.Add)),
                     Assign(Member(acc, "m2"),
                            fl(Member(acc, "m2"), fl(dev, fl(value, Member(acc, "avg"), B.Sub, x_dt), B.Mul), B.Add)),
                     Assign(Element(Var(tcnt), v), Element(Var(tcnt), v) + 1)]
        merge = [For(v, IntLit(self.reduced_tile),
                     [Assign(Member(acc, "n"), kir.IndexBinary(B.Add, Member(acc, "n"), Element(Var(tcnt), v)))],
                     unroll=True, dtype=DataType.Int32)]
        return per_value, merge

    def _stream_loads(self) -> bool:
        """Whether the full inputs load evict-first: where the kernel writes no full-size
        output (H100: sum inner fp32 [16384, 1024] 24.77 -> 23.87 us, var_mean fp32
        [16384, 1024] 25.55 -> 24.29, sum outer fp32 [16384, 1024] 28.60 -> 27.73; but
        softmax, RMSNorm and LayerNorm forward fp32 [16384, 4096] 180.5-181.0 -> 182.7-186.1)."""
        return not any(isinstance(o, TensorView) and self.full(o) for o in self.fusion.outputs)

    def _streams(self, tv: TensorView, load: bool) -> bool:
        """Whether `tv` is loaded (`load`) or stored evict-first as a row tensor of an
        inner-persistent kernel (PERSISTENT_CACHE_HINTS)."""
        mode = PERSISTENT_CACHE_HINTS
        if mode not in ("plain", "streaming", "stores", "loads"):
            raise ValueError(f"PERSISTENT_CACHE_HINTS is {mode!r}: one of 'plain', 'streaming', 'stores', 'loads'")
        return ((mode == "streaming" or mode == ("loads" if load else "stores")) and self.p.persistent
                and self.p.inner and self.full(tv) and tv in self._spans_rows)

    def _load_full(self, tv: TensorView, s, u) -> list:
        return self._access_full(tv, s, u, load=True)

    def _store_full(self, tv: TensorView, s, u) -> list:
        return self._access_full(tv, s, u, load=False)

    def _access_full(self, tv: TensorView, s, u, *, load: bool) -> list:
        """Load (or store) tile row `u` of a full tensor at step `s`: one vector access
        where `tv` allows it, else one access per lane."""
        ptr = self.params.tensor(tv)
        v = Var("v")
        row, col = self._row_col(s, u, v)
        off = self._offset(tv, self._indices(row, col))
        # a lane-invariant tensor's registers hold one value per tile row, not a vector
        if (self.V > 1 and tv in self.vector_tensors and self._lanes_walk(tv, row, col)
                and tv not in self._lane_invariant):
            mem = AddressOf(Element(ptr, _subst_v_expr(off, IntLit(0))))
            reg = AddressOf(Element(Var(self.regs[tv]), u * self.V))
            if load:
                return [VecLoad(tv.dtype, self.V, reg, mem, stream=self._stream_loads() or self._streams(tv, True))]
            return [VecStore(tv.dtype, self.V, mem, reg, stream=self._streams(tv, False))]
        if load and tv in self._lane_invariant:
            return [Assign(self._reg(tv, u, IntLit(0)), Element(ptr, _subst_v_expr(off, IntLit(0))))]
        pair = (self._reg(tv, u, v), Element(ptr, off))
        return self._over_lanes([Assign(*pair) if load else Assign(*reversed(pair))])

    def _combine(self, accs: list) -> None:
        """Combine each accumulator across the block (and the grid), then give each
        reduction's outputs their values."""
        p = self.p
        over = ParallelType.TIDx if p.inner else ParallelType.TIDy
        lanes = range(self.reduced_tile)
        for e, name, acc_dt in accs:
            welford = isinstance(e, WelfordOp)
            if name in self._combined:
                continue
            op = None if welford else e.op_type
            if self._tiled(acc_dt, welford):
                self.body.append(self._block_allreduce(Var(name), op, acc_dt, welford, over, tile=self.reduced_tile))
                continue
            for lane in lanes:
                acc = Element(Var(name), IntLit(lane)) if self.reduced_tile > 1 else Var(name)
                self.body.append(self._block_allreduce(acc, op, acc_dt, welford, over))
        if p.grid_y > 1 and accs:
            if not p.persistent:  # the last block to arrive learns it through `flag`
                self._decl("flag", DataType.Int32, None, space=kir.MemoryType.Shared)
            items = []
            for e, name, acc_dt in accs:
                welford = isinstance(e, WelfordOp)
                work = self.params.work(f"w{e.outputs[0].name}", acc_dt, welford, self._slots())
                init = None if welford else Cast(scalar_value(e.init, self.params), e.init.dtype, acc_dt)
                if self._tiled(acc_dt, welford):
                    smem = Var(self._shared(acc_dt, welford, tile=self.reduced_tile))
                    items.append(GridItem(Var(name), None if welford else e.op_type, acc_dt, init, work, smem,
                                          _tid(ParallelType.TIDx) * self.V, lanes=self.reduced_tile))
                    continue
                for lane in lanes:
                    acc = Element(Var(name), IntLit(lane)) if self.reduced_tile > 1 else Var(name)
                    slot = _tid(ParallelType.TIDy) if p.inner else _tid(ParallelType.TIDx) * self.V + lane
                    items.append(GridItem(acc, None if welford else e.op_type, acc_dt, init, work,
                                          Var(self._shared(acc_dt, welford)), slot))
            writer = eq(_tid(ParallelType.TIDx if p.inner else ParallelType.TIDy), 0)
            # a persistent kernel's blocks all need the totals (their rows are in registers)
            self.body.append(GridReduce(items, self.params.semaphore(), Var("flag"), self._slots(), writer, p.inner,
                                        all_blocks=p.persistent))
        for e, name, acc_dt in accs:
            if isinstance(e, WelfordOp):
                for out, field in zip(e.outputs, ("avg", "m2", "n")):
                    self._array(out, "t")
                    src = DataType.Int if field == "n" else acc_dt
                    for lane in lanes:
                        acc = Element(Var(name), IntLit(lane)) if self.reduced_tile > 1 else Var(name)
                        self.body.append(Assign(self._reg(out, IntLit(0), IntLit(lane)),
                                                Cast(Member(acc, field), src, out.dtype)))
            else:
                out = e.outputs[0]
                self._array(out, "t")
                for lane in lanes:
                    acc = Element(Var(name), IntLit(lane)) if self.reduced_tile > 1 else Var(name)
                    self.body.append(Assign(self._reg(out, IntLit(0), IntLit(lane)), Cast(acc, acc_dt, out.dtype)))

    def _block_allreduce(self, acc, op, dtype: DataType, welford: bool, over=ParallelType.TIDx,
                         tile: int = 0, float_counts: bool = False) -> BlockAllReduce:
        """`acc` combined over the block in place (with `tile`: the register array `acc`,
        element by element). Persistent kernels alternate between two scratch buffers per
        type and skip the barrier that frees one after use (one barrier per reduction
        instead of two)."""
        smem = self._shared(dtype, welford, tile=tile)
        # (the launch's blockDim.y; a reduction over x has no use for it)
        bdy = self.p.bdy if over == ParallelType.TIDy else 0
        if not self.p.persistent:
            return BlockAllReduce(acc, acc, op, dtype, Var(smem), over, tile=tile, bdx=self._fixed_bdx(), bdy=bdy)
        turn = self._smem_turn.get(smem, 0)
        self._smem_turn[smem] = 1 - turn
        if turn:
            smem = self._shared(dtype, welford, "_b", tile=tile)
        return BlockAllReduce(acc, acc, op, dtype, Var(smem), over, free_after=False, tile=tile,
                              bdx=self._fixed_bdx(), bdy=bdy, float_counts=float_counts)

    def _fixed_bdx(self) -> int:
        """blockDim.x for the block reductions to take as a constant (their loop over warps
        unrolls), or 0 to read it at run time: see FIXED_BDX_MAX."""
        return self.p.bdx if self.p.bdx <= FIXED_BDX_MAX else 0

    def _tiled(self, dtype: DataType, welford: bool) -> bool:
        """A column reduction's vector lanes are combined over the block together (one
        pass through shared memory for the whole tile) where their scratch fits
        TILE_SMEM_BYTES, else one lane at a time."""
        if self.p.inner or self.reduced_tile == 1 or self.p.bdy == 1:
            return False
        return self.reduced_tile * self.p.bdx * self.p.bdy * kir.value_bytes(dtype, welford) <= TILE_SMEM_BYTES

    def _slots(self) -> int:
        return self.p.bdy if self.p.inner else self.p.bdx * self.V

    def _shared(self, dtype: DataType, welford: bool, suffix: str = "", tile: int = 0) -> str:
        """A shared scratch array of `dtype` values (Welford accumulators with `welford`)
        for the block reductions, `tile` times the block's own size where tile > 1; one
        per (dtype, suffix, tile)."""
        key = f"{'w' if welford else ''}{dtype.name}{suffix}{f'_t{tile}' if tile > 1 else ''}"
        got = self._smem.get(key)
        if got is None:
            got = self._smem[key] = f"smem_{key}"
            n = self.p.bdy * (self.p.bdx if not self.p.inner else max(1, self.p.bdx // 32))
            n = max(n, self.p.bdx * self.p.bdy) * max(1, tile)
            self._decl(got, dtype, n, space=kir.MemoryType.Shared, welford=welford)
        return got

    def _store_reduced_outputs(self) -> None:
        p = self.p
        v = Var("v")
        row, _ = self._row_col(IntLit(0), IntLit(0), v if not p.inner else IntLit(0))
        idx = self._indices(row, IntLit(0))
        writer = eq(_tid(ParallelType.TIDx if p.inner else ParallelType.TIDy), 0)
        if p.persistent and p.grid_y > 1:  # every block of a column group has the totals
            writer = all_of([writer, eq(_tid(ParallelType.BIDy), 0)])
        for tv in self.fusion.outputs:
            if not isinstance(tv, TensorView) or self.full(tv) or tv in self._final:
                continue
            if tv not in self.regs:
                raise NotLowerable(f"output {tv!r} is not computed")
            ptr = self.params.tensor(tv)
            body = self._lanes_reduced([Assign(Element(ptr, self._offset(tv, idx)), self._reg(tv, IntLit(0), v))],
                                       tv, ptr, idx, load=False, row=row)
            row0 = _subst_v_expr(row, IntLit(0))
            cond = all_of([c for c in (writer, self._row_ok(row0)) if c is not None])
            self.body.append(If(cond, body))


def _guarded(cond: kir.Expr | None, stmts: list) -> list:
    """`stmts` under `cond` (None: always)."""
    return stmts if cond is None else [If(cond, stmts)]


def _subst_v_expr(e, value):
    return kir.substitute(e, {Var("v"): value})


def _subst_v(stmt, value):
    return kir.substitute_stmt(stmt, {Var("v"): value})


def _subst_s(stmt, value):
    return kir.substitute_stmt(stmt, {Var("s"): value})


def lower_reduction(fusion: Fusion, ref: TensorView, params: ReductionParams, vector_tensors: frozenset[TensorView],
                    sub: SubFusion, red_classes: frozenset[int], name: str = "fuser_reduction",
                    vector_class: int | None = None) -> Kernel:
    """Kernel IR for a reduction or inner-persistent fusion scheduled from `ref`, with
    vector accesses along the axis class `vector_class`."""
    return ReductionLowering(fusion, ref, params, vector_tensors, sub, red_classes, name, vector_class).lower()
