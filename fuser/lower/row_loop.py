"""Kernels whose blocks take groups of rows in turn: row `blockIdx.x + k * gridDim.x`
(bdy rows of it over threadIdx.y), its columns over threadIdx.x, held in registers. The
launch caps the grid at the blocks the GPU holds at once (`Kernel.grid_strided`), so a
block loads the inputs that do not span the rows (weights) once, before its first row,
and may load each group of rows one iteration ahead (into registers, or into shared
memory through cp.async) while it reduces and writes the current one.

`RowLoopLowering` is the inner-persistent kernel in that form; the inner-outer kernel
(`inner_outer.py`) adds its reductions across rows to it.
"""
from __future__ import annotations

import dataclasses

from fuser.ir import DataType, Fusion, ParallelType, TensorView
from fuser.scheduler import normalization as plan
from fuser.scheduler.analysis import SubFusion
from fuser.scheduler.reduction import ReductionParams
from fuser.scheduler.runtime_info import DeviceLimits

from . import kir
from .errors import NotLowerable
from .kir import Assign, BlockAllReduce, Decl, Element, For, If, IndexCast, IntLit, Kernel, Var
from .reduction import ReductionLowering, _tid

#: how the inner-persistent row loop (off: normalization.PERSISTENT_ROW_LOOP) loads each
#: group of rows (see _prefetched): "direct" (when the row's pass reaches them),
#: "registers" (one iteration ahead, into registers of their own) or "staged" (one
#: iteration ahead, into shared memory through cp.async). `bench --sweep row_loop_loads_*`,
#: H200, µs direct / registers / staged: LayerNorm bf16 [16384, 4096] 83.6 / 108.3 / 75.7,
#: [8192, 8192] 75.7 / 126.9 / 78.6, [2048, 16384] 62.7 / 78.2 / 41.0; RMSNorm bf16 73.9 /
#: 82.1 / 75.8, 74.4 / 88.8 / 74.7, 37.8 / 64.2 / 38.6 (registers spill at 8 blocks per SM)
ROW_LOOP_LOADS = "direct"
#: read the staged rows from shared memory in every pass over them, a vector just before
#: its use, instead of holding whole rows in registers across the block reductions. On an
#: H100, bf16 [16384, 4096] (with the partials combined through the stages, see
#: _partials): LayerNorm backward 162.5 -> 150.6 us (no more spills), RMSNorm backward
#: 149.1 -> 145.1 us (123 -> 85 registers). Reading back whole rows after the reductions
#: instead measured slower (286-1466 us: the compiler spills).
REREAD_STAGED = True
#: (how many groups of rows the stages hold, and the shared memory they may take, are the
#: plan's: scheduler.normalization.STAGES, stage_budget)

#: compute once, before the row loop, the register arrays whose every value comes from the
#: inputs loaded once (a norm's bf16 weight widened to float), and hold them across the
#: loop, instead of recomputing them in each pass over each group of rows: fewer
#: instructions a row, more registers (the widened values replace the narrow ones), so only
#: in kernels without a register cap (`min_blocks` 0). ptxas sm_90, row loop instructions
#: and registers, bf16: RMSNorm backward [16384, 4096] 698 -> 630, 84 -> 101 (one 512-thread
#: block an SM either way), [8192, 8192] 703 -> 635; LayerNorm backward [16384, 4096] 926 ->
#: 855, 128 -> 128 (no spill), [8192, 8192] 935 -> 865. Under a cap it spills: seed 001 (3
#: blocks of 256 threads, 80 registers) 32 -> 68 bytes. Off: slower where timed. `bench
#: --sweep hoist_fixed_*`, H100, µs off / on at [16384, 4096], [8192, 8192], [16384, 3072],
#: [4096, 16384]: RMSNorm backward bf16 141.0 / 147.0, 144.0 / 149.2, 117.4 / 109.8, 144.9 /
#: 144.5; LayerNorm backward 146.9 / 147.2, 152.6 / 154.3, 116.1 / 115.1, 153.9 / 154.1
HOIST_FIXED = False


class RowLoopLowering(ReductionLowering):
    """Builds the kernel IR of an inner-persistent fusion whose blocks take groups of rows
    in turn."""

    def __init__(self, fusion: Fusion, ref: TensorView, params: ReductionParams, vector_tensors: frozenset[TensorView],
                 sub: SubFusion, red_classes: frozenset[int], name: str, vector_class: int | None = None) -> None:
        super().__init__(fusion, ref, params, vector_tensors, sub, red_classes, name, vector_class)
        if not params.persistent or not params.inner or params.grid_y != 1:
            raise NotLowerable(f"a row loop is persistent over rows, one block row per row, not {params}")
        if self._steps:  # (normalization._loops_rows refuses these)
            raise NotLowerable("a reshape derives axes the reference lacks (the row loop tells the inputs that "
                               "span the rows by the reference's axes)")
        #: the rows' axes: those the row reductions keep
        self._row_classes = next(r for r in sub.reductions() if r.red_classes == red_classes).iter_classes
        #: bytes of dynamic shared memory the row stages take
        self._dynamic_smem = 0

    def _row_base(self) -> kir.Expr:
        return Var("row")

    def _loads_ahead(self, narrow: bool) -> tuple[bool, bool]:
        """(stage each group of rows in shared memory, else load it ahead into registers)
        one iteration ahead; `narrow`: some row input holds values narrower than 4 bytes."""
        if self.p.stage_rows:  # (the plan stages them: normalization.ROW_LOOP_STAGED_FEW_BLOCKS)
            return True, False
        return ROW_LOOP_LOADS == "staged", ROW_LOOP_LOADS == "registers"

    def lower(self) -> Kernel:
        self._setup()
        self._rows()
        rows, self.body = self.body, []
        blocks = IndexCast(kir.ParallelDim(ParallelType.BIDx))
        groups = kir.IndexBinary(kir.BinaryOpType.CeilDiv, self.n_rows, IntLit(self.p.bdy))
        rounds = kir.IndexBinary(kir.BinaryOpType.CeilDiv, groups, blocks)
        self._row_loop(rows, rounds, lambda k: k * blocks + _tid(ParallelType.BIDx))
        return self._kernel(grid_strided=True, dynamic_smem=self._dynamic_smem)

    def _row_loop(self, rows: list, rounds: kir.Expr, group_of, first: tuple = ()) -> None:
        """Append the loop over the block's groups of rows: `rows` (the statements of one
        group, its row `Var("row")`) for group `group_of(it)` at each of `rounds`
        iterations, its loads issued as `_prefetched` plans; `first`: statements at the top
        of each iteration, after the row's declaration."""
        it = Var("it")

        def row_of(k: kir.Expr) -> kir.Expr:
            return group_of(k) * self.p.bdy + _tid(ParallelType.TIDy)

        before_loop, rows = self._prefetched(rows, row_of)
        self.body.extend(before_loop)
        rows = [Decl("row", None, None, row_of(it)), *first, *self._alternate_scratch(rows, it)]
        self.body.append(For(it, rounds, rows))
        if any(isinstance(x, kir.CpAsync) for x in kir.walk(rows)):
            # the copies of the rows after the last (none, or another block's) have landed:
            # none may write the shared memory of a block that has exited
            self.body.append(kir.CpAsyncWait(0))

    def _alternate_scratch(self, rows: list, it: Var) -> list:
        """The rows' block reductions leave their scratch to the next one's barrier (see
        `_block_allreduce`), alternating between two buffers per type. Where the row's last
        one and the next row's first would use the same buffer (a lone reduction, or an odd
        number of one type), that buffer is doubled and each group of rows takes the half
        its parity picks: then the next row's first one writes only after this row's last
        barrier, and rows need no barrier of their own."""
        reds = [x for x in kir.walk(rows) if isinstance(x, BlockAllReduce) and not x.free_after]
        if not reds or reds[0].smem != reds[-1].smem:
            return rows
        smem = reds[0].smem
        decl = next(d for d in self._shared_decls if Var(d.name) == smem)
        half = decl.size
        decl.size = 2 * half
        for red in reds:
            if red.smem == smem:
                red.smem = kir.AddressOf(Element(smem, (it % 2) * half))
        return rows

    def _prefetched(self, rows: list, row_of) -> tuple[list, list]:
        """(statements before the row loop, the loop's body): the inputs without the rows'
        axes (weights) loaded once before it; each group of rows' inputs staged in shared
        memory (`_staged`) or loaded one iteration ahead into registers of their own, as
        `_loads_ahead` says, so that the loads are in flight while the block reduces and
        writes the current rows (with a block or two per SM, nothing else would hide their
        latency); else loaded where the row's pass reaches them."""
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
        in_loop = [y for x in rows for y in ([x] if id(x) not in load_ids else _only(x, varying))]
        if HOIST_FIXED and not self.p.min_blocks:
            hoisted, in_loop = _hoist_fixed(in_loop, fixed, first)
            before += hoisted
        stage, in_registers = self._loads_ahead(narrow)
        if stage:
            staged = self._staged(before, in_loop, varying, row_of)
            if staged is not None:
                return staged
        if not in_registers or self.p.bdx * self.p.bdy > 512 or not decls or not load_ids:
            return before, in_loop
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

    def _staged(self, before: list, rows: list, varying: set[str], row_of) -> tuple[list, list] | None:
        """(statements before the row loop, the loop's body) where the rows' vector loads go
        through shared memory: each group of rows is copied asynchronously (cp.async) one
        iteration ahead into one of `plan.STAGES` stages, while the block reduces and writes the
        current rows; a thread reads back only what it copied, so no barrier is needed.
        Unlike loading ahead into registers this costs no registers. None where the stages
        would not fit in the dynamic shared memory budget, or nothing is vector-loaded."""
        threads = self.p.bdx * self.p.bdy
        tid = _tid(ParallelType.TIDy) * self.p.bdx + _tid(ParallelType.TIDx)
        tv_of = {name: tv for tv, name in self.regs.items()}
        #: register array -> (stage buffer, dtype, elements per thread, elements per copy)
        stages: dict[str, tuple[str, DataType, int, int]] = {}

        # (a row's scalars, a rstd or a mean, stay direct loads: copied per thread they
        # measured slower, LayerNorm backward bf16 [16384, 4096] 236 us against 196 us)
        for x in kir.walk(rows):
            if isinstance(x, kir.VecLoad) and x.n * x.dtype.itemsize in (4, 8, 16):
                name = _array_of(x.dst)
                if name in varying:
                    stages.setdefault(name, (f"stage_{name}", x.dtype, self.full_tile, x.n))
        # the inputs that change with every row first (one batch's row of a [B, 1, N] input
        # serves its rows from the caches), as many as fit
        find, id_of = self.sub.uf.find, self.sub.a.id_of

        def row_axes(name: str) -> int:
            return sum(1 for i in tv_of[name].logical_no_reductions()
                       if not i.is_broadcast and find(id_of(i)) in self._row_classes)

        limits = self.sub.a.info.device_limits if self.sub.a.info is not None else DeviceLimits.target()
        budget = plan.stage_budget(limits)
        for name in sorted(stages, key=row_axes, reverse=True):
            _, dt, per, _ = stages[name]
            nbytes = plan.stage_bytes(threads, per, dt.itemsize)
            if nbytes > budget:
                if self.p.stage_rows:  # (the plan's gate counted them out of the registers)
                    raise NotLowerable(f"the plan stages rows whose {name} takes {nbytes} bytes of stages, past "
                                       f"the {budget} left")
                del stages[name]
            else:
                budget -= nbytes
        if not stages:
            return None

        def is_load(x) -> bool:
            return any(isinstance(y, kir.VecLoad) and _array_of(y.dst) in stages for y in kir.walk([x]))

        loads = [x for x in rows if is_load(x)]
        offset = self._dynamic_smem
        for buf, dt, per, _ in stages.values():
            self._decl(buf, dt, plan.STAGES * threads * per, space=kir.MemoryType.Shared, offset=offset)
            offset += -(-plan.stage_bytes(threads, per, dt.itemsize) // 16) * 16
        self._dynamic_smem = offset

        def slot(name: str, at: kir.Expr, stage: kir.Expr) -> kir.Expr:
            # a warp's copies of one vector of its threads' tiles lie side by side (no bank
            # conflicts): [stage][vector][thread][lane]
            buf, _, per, n = stages[name]
            vec = at // n
            return Element(Var(buf), ((stage * (per // n) + vec) * threads + tid) * n + at % n)

        def rewrite(x, issue: bool, stage: kir.Expr):
            """The load statement `x` issuing its copies into `stage` (`issue`), or reading
            them back from it."""
            if isinstance(x, kir.VecLoad) and _array_of(x.dst) in stages:
                at = kir.AddressOf(slot(_array_of(x.dst), _offset_of(x.dst), stage))
                return kir.CpAsync(at, x.src, x.n * x.dtype.itemsize) if issue else kir.VecLoad(x.dtype, x.n, x.dst, at)
            if isinstance(x, (For, If)):
                field = "then" if isinstance(x, If) else "body"
                inner = [y for y in (rewrite(z, issue, stage) for z in getattr(x, field)) if y is not None]
                return dataclasses.replace(x, **{field: inner}) if inner else None
            return None if issue else x

        it = Var("it")
        k = plan.STAGES
        pre = list(before)
        reread = REREAD_STAGED and self._reread(rows, loads, set(stages), lambda x: rewrite(x, False, it % k))
        if reread:
            # the rows stay in shared memory: each pass reads a vector just before use
            rows = reread
        for j in range(k - 1):  # the first k - 1 iterations' rows
            issue = [y for y in (rewrite(x, True, IntLit(j)) for x in loads) if y is not None]
            pre += [kir.substitute_stmt(x, {Var("row"): row_of(IntLit(j))}) for x in issue] + [kir.CpAsyncCommit()]
        body: list = []
        last = max(i for i, x in enumerate(rows) if any(x is y for y in loads))
        waited = False
        for i, x in enumerate(rows):
            if not any(x is y for y in loads):
                body.append(x)
                continue
            if not waited:  # this iteration's copies (the oldest group) have landed
                body.append(kir.CpAsyncWait(k - 2))
                waited = True
            if reread:  # only the loads of rows that are not staged stay here
                body.extend(_only(x, set(stages), keep=False))
            else:
                body.append(rewrite(x, False, it % k))
            if i == last:  # the rows k - 1 iterations ahead, copied now
                nxt = [y for y in (rewrite(z, True, (it + (k - 1)) % k) for z in loads) if y is not None]
                body.extend(kir.substitute_stmt(y, {Var("row"): row_of(it + (k - 1))}) for y in nxt)
                body.append(kir.CpAsyncCommit())
        return pre, body


    def _reread(self, rows: list, loads: list, staged: set[str], read) -> list | None:
        """`rows` where every unrolled loop over a thread's vectors that uses a staged row
        reads each vector from its stage (`read`: a load statement turned into reads) at the
        top of its iteration, and no staged row is laundered (the load statements stay, to
        mark where the copies are waited for and issued); None where a load is not such a
        loop."""
        u = Var("u")
        chunks: list = []
        for x in loads:
            if not (isinstance(x, For) and x.var == u):
                return None
            chunks.extend(y for z in read(x).body for y in _only(z, staged))
        load_ids = {id(x) for x in loads}

        def visit(x):
            if id(x) in load_ids:
                return x
            if isinstance(x, kir.Launder) and x.var.name in staged:
                return None
            if isinstance(x, For) and x.var == u and not _names(x.body).isdisjoint(staged):
                return dataclasses.replace(x, body=[*chunks, *x.body])
            if isinstance(x, For):
                return dataclasses.replace(x, body=[y for y in map(visit, x.body) if y is not None])
            if isinstance(x, If):
                return dataclasses.replace(x, then=[y for y in map(visit, x.then) if y is not None],
                                           orelse=None if x.orelse is None else
                                           [y for y in map(visit, x.orelse) if y is not None])
            return x

        return [y for y in map(visit, rows) if y is not None]


    def _row_spanning(self) -> set[TensorView]:
        """Tensors with an axis the outer reductions reduce (the rows)."""
        find, id_of = self.sub.uf.find, self.sub.a.id_of
        return {tv for tv in self.fusion.tensors()
                if any(find(id_of(i)) in self._row_classes for i in tv.logical_no_reductions() if not i.is_broadcast)}


def _hoist_fixed(rows: list, fixed: set[str], first: dict) -> tuple[list, list]:
    """(statements for before the row loop, the loop's body without them): the register
    arrays declared in `rows` whose every write is an assignment from the `fixed` arrays
    (loaded once, before the loop) indexed by unrolled loops, declared and computed once
    for the first group of rows (`first`: the row's substitution; a thread's rows are all
    past the end if its first is), and no longer laundered or recomputed in the loop. A
    fixed array the loop then no longer reads is no longer laundered either."""
    decls = {d.name: d for d in rows if isinstance(d, Decl) and d.size is not None and d.init is None
             and d.space == kir.MemoryType.Local}
    unrolled = {x.var.name for x in kir.walk(rows) if isinstance(x, For) and x.unroll}
    local = {d.name for d in kir.walk(rows) if isinstance(d, Decl)} | {"it", "row"}
    good: dict[str, bool] = {}  # (written only by assignments from the fixed arrays)
    for x in kir.walk(rows):
        if isinstance(x, (For, If, Decl)):
            continue
        if isinstance(x, Assign) and isinstance(x.lhs, Element) and isinstance(x.lhs.base, Var) \
                and x.lhs.base.name in decls:
            name = x.lhs.base.name
            good[name] = good.get(name, True) and _names([x.rhs, x.lhs.index]) <= fixed | unrolled
        elif not isinstance(x, (Assign, kir.VecStore)):  # (reductions, launders, loads: not hoisted)
            for name in _names(x) & decls.keys():
                good[name] = False
    hoist = {name for name, ok in good.items() if ok}

    def is_hoisted(x) -> bool:
        return (isinstance(x, Assign) and isinstance(x.lhs, Element) and isinstance(x.lhs.base, Var)
                and x.lhs.base.name in hoist)

    computed: list = []
    for x in rows:
        for y in _keep(x, is_hoisted):
            # a condition may test the row only as `row < bound`: true for the first row
            # wherever it holds for a later one (a thread's rows grow with the loop)
            if not all(_below(z.cond, local) for z in kir.walk([y]) if isinstance(z, If)):
                return [], rows
            y = kir.substitute_stmt(y, first)
            if (_names(y) & local) - hoist:  # (a loop or condition that varies with the rows)
                return [], rows
            if y not in computed:
                computed.append(y)
    if not computed:
        return [], rows
    body = [y for x in rows if not (isinstance(x, Decl) and x.name in hoist) for y in _keep(x, lambda z: not is_hoisted(z))]
    still = _names([x for x in body if not isinstance(x, kir.Launder)])
    body = [x for x in body if not (isinstance(x, kir.Launder) and x.var.name not in still)]
    return [decls[name] for name in decls if name in hoist] + computed, body


def _keep(stmt, keep) -> list:
    """`stmt` keeping only the innermost statements `keep` accepts, and the loops and
    conditions around them; [] when none is left."""
    field = "then" if isinstance(stmt, If) else "body" if isinstance(stmt, For) else None
    if field is None:
        return [stmt] if keep(stmt) else []
    inner = [y for x in getattr(stmt, field) for y in _keep(x, keep)]
    if isinstance(stmt, If) and stmt.orelse is not None:
        orelse = [y for x in stmt.orelse for y in _keep(x, keep)]
        return [dataclasses.replace(stmt, then=inner, orelse=orelse or None)] if inner or orelse else []
    return [dataclasses.replace(stmt, **{field: inner})] if inner else []


def _below(cond: kir.Expr, local: set[str]) -> bool:
    """Whether `cond` is a conjunction whose terms that read the rows' variables (`local`)
    are all `row < bound`, the bound reading none of them."""
    if isinstance(cond, kir.IndexBinary) and cond.op == kir.BinaryOpType.LogicalAnd:
        return _below(cond.lhs, local) and _below(cond.rhs, local)
    if not _names(cond) & local:
        return True
    return (isinstance(cond, kir.IndexBinary) and cond.op == kir.BinaryOpType.Lt and cond.lhs == Var("row")
            and not _names(cond.rhs) & local)


def _array_of(dst: kir.Expr) -> str | None:
    """The register array a VecLoad's destination `&array[offset]` points into."""
    if isinstance(dst, kir.AddressOf) and isinstance(dst.value, Element) and isinstance(dst.value.base, Var):
        return dst.value.base.name
    return dst.name if isinstance(dst, Var) else None


def _offset_of(dst: kir.Expr) -> kir.Expr:
    """The element offset of a VecLoad's destination in its register array."""
    if isinstance(dst, kir.AddressOf) and isinstance(dst.value, Element):
        return dst.value.index
    return IntLit(0)


def _only(stmt, names: set[str], keep: bool = True) -> list:
    """`stmt` keeping only the innermost statements that mention one of `names` (loads of
    those registers), or with `keep` False only those that mention none, and the loops and
    conditions around them; [] when none is left."""
    return _keep(stmt, lambda x: bool(_names(x) & names) == keep)


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


def lower_row_loop(fusion: Fusion, ref: TensorView, params: ReductionParams, vector_tensors: frozenset[TensorView],
                   sub: SubFusion, red_classes: frozenset[int], name: str = "fuser_reduction",
                   vector_class: int | None = None) -> Kernel:
    """Kernel IR for an inner-persistent fusion scheduled from `ref` whose blocks take
    groups of rows in turn (`params.row_loop`)."""
    return RowLoopLowering(fusion, ref, params, vector_tensors, sub, red_classes, name, vector_class).lower()
