"""Lowering a scheduled pointwise segment to kernel IR.

Every tensor of a pointwise kernel is inlined into the reference's loop nest, so the nest
is the reference's loop domain: grid and block indices for parallel axes, loops for
unrolled and serial ones, register arrays for the vector lanes. `TensorIndexer` indexes
each tensor from it.
"""
from __future__ import annotations

import collections
import sys

from fuser.ir import CatOp, DataType, Fusion, IterDomain, PadOp, ParallelType, ReshapeOp, SliceOp, TensorView, Val
from fuser.ir.exprs import BinaryOpType, TernaryOpType
from fuser.scheduler.analysis import FusionAnalysis, SubFusion

from .errors import NotLowerable
from .index import Indices, Map, TensorIndexer
from .lookup import INDEX_OPS, Lookups
from .kir import (
    AddressOf,
    Assign,
    Cast,
    Comment,
    Const,
    Decl,
    Element,
    Expr,
    For,
    If,
    IndexBinary,
    IndexCast,
    IntLit,
    Kernel,
    Not,
    ParallelIndex,
    Stmt,
    Ternary,
    Var,
    VecLoad,
    VecStore,
    all_of,
    data_block,
    eq,
    lt,
    substitute,
)
from .params import ParamTable
from .values import scalar, tensor_value

#: a pointwise kernel stores its vectors evict-first (st.global.cs), so that its writes do
#: not push the part of its input its producer wrote last, and that it has yet to read,
#: out of L2. `bench --sweep pointwise_stream_stores_after_producer`, H100, GELU bf16 µs
#: plain / evict-first: [16384, 8192] 177.2 / 177.1, [4096, 4096] 23.9 / 23.6, [1024,
#: 1024] 5.2 / 5.2: level, so off
POINTWISE_STREAM_STORES = False
#: ... and loads evict-first (ld.global.cs) the inputs whose every element it reads once
#: (spanning the reference, one load each: no weight read again by every row), as nvFuser's
#: pointwise kernel for GELU does (its generated code; its runtime stores every vector
#: evict-first too). `bench --sweep pointwise_stream_loads*`, H100, GELU bf16 µs plain /
#: evict-first: after the producer 177.2 / 178.8, 23.6 / 23.2, 5.2 / 5.2; loop-timed 176.8 /
#: 179.9, 23.7 / 24.3, 2.6 / 2.5: off
POINTWISE_STREAM_LOADS = False

_LANE = Var("v")
_PARALLEL = (ParallelType.BIDx, ParallelType.BIDy, ParallelType.TIDx)


class PointwiseLowering:
    """Builds the kernel IR of one scheduled pointwise fusion."""

    def __init__(self, fusion: Fusion, ref: TensorView, vector_tensors: frozenset[int], index_type: str,
                 name: str = "fuser_pointwise", sub: SubFusion | None = None, blocks_from_end: bool = True) -> None:
        self.fusion = fusion
        self.blocks_from_end = blocks_from_end
        self.ref = ref
        self.vector_tensors = vector_tensors
        self.index_type = index_type
        self.name = name
        self.params = ParamTable(fusion.inputs, index_type)
        self.sub = sub = sub if sub is not None else FusionAnalysis(fusion).whole()
        self.index = TensorIndexer(fusion, ref, sub, self.params)
        self.lookups = Lookups(fusion, self.index, self.params)
        self.lanes = 1

    def lower(self) -> Kernel:
        """The kernel: the loop nest, unswitched where one unrolled loop has predicates."""
        # values are made depth first from the outputs: one frame or two per op on a path
        need = 4 * len(self.fusion.exprs()) + 500
        if sys.getrecursionlimit() < need:
            sys.setrecursionlimit(need)
        loop_index: Indices = {}
        serial: list[tuple[IterDomain, Var]] = []  # loops, outermost first
        grid_extent = grid_extent_y = None
        threads = 1
        lanes = 1
        for ax in self.ref.domain.loop:
            pt = ax.parallel_type
            if pt in _PARALLEL:
                loop_index[ax] = (data_block(self.blocks_from_end) if pt is ParallelType.BIDx
                                  else IndexCast(ParallelIndex(pt)))
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
        return self.lookups.finish(Kernel(self.name, self.params.params, body, self.index_type, threads=threads,
                                          grid_extent=grid_extent, grid_extent_y=grid_extent_y))

    def _read_once(self, graph: "_ValueGraph") -> set[TensorView]:
        """The inputs whose every element the kernel reads once: those spanning the
        reference that one load reads (not also at another index, as a rotation's halves)."""
        loads = collections.Counter(n.tv for n in graph.order if n.kind == "load")
        return {tv for tv, k in loads.items() if k == 1 and tv in self.fusion.inputs and self.sub.spans(tv, self.ref)}

    def _stages(self, loop_index: Indices, at_lane0: Indices, size: int, ri: Expr, base: Expr | None, *,
                per_stage: bool, unroll: tuple[Var, Expr] | None = None) -> list[Stmt]:
        """Declarations, loads, math and stores of one tile of `size` register elements:
        register element `ri` (over the lane variable), vector accesses at register offset
        `base` (None: the arrays' start). With `per_stage`, each stage is its own loop over
        the unrolled axis `unroll`."""
        lanes, index, params = self.lanes, self.index, self.params
        idx_v = index.ref_indices(loop_index)
        idx_0 = index.ref_indices(at_lane0)
        lane0 = {_LANE: IntLit(0)}
        graph = _ValueGraph(self, idx_v, ri)
        outs = []
        for out in self.fusion.outputs:
            if isinstance(out, TensorView):
                amap, conds = index.output_map(out, idx_v)
                outs.append((out, amap, conds, graph.node(out, amap)))
        graph.sort()
        guards = graph.guards([(n, conds) for _, _, conds, n in outs])
        decls: list[Stmt] = []
        loads: list[Stmt] = []
        lane_loads: list[Stmt] = []
        compute: list[Stmt] = []
        stores: list[Stmt] = []

        def at(array: Var) -> Expr:
            return array if base is None else array + base

        def at_lane0(amap: Map) -> Map:
            return {a: substitute(e, lane0) for a, e in amap.items()}

        def vector(n: _Node) -> bool:
            return lanes > 1 and n.tv.name in self.vector_tensors and index.lanes_contiguous(n.tv, n.amap, idx_v,
                                                                                             _LANE)

        streamed = self._read_once(graph) if POINTWISE_STREAM_LOADS else set()
        shared = _exclusive_pairs([n for n in graph.order if n.kind == "load" and vector(n)],
                                  {n: substitute(g, lane0) for n, g in guards.items()})
        for n in graph.order:
            if n.kind == "alias":
                continue
            decls.append(Decl(n.reg.base.name, n.tv.dtype, size))
            if n.kind == "compute":
                rhs, guard = n.rhs, guards.get(n)
                if guard is not None:  # an index op's lookup, read only where its value is used
                    dt = n.tv.dtype
                    rhs = Ternary(TernaryOpType.Where, (guard, rhs, _zero(dt)), (DataType.Bool, dt, dt), dt)
                compute.append(Assign(n.reg, rhs))
                continue
            tv = n.tv
            ptr = params.tensor(tv)
            guard = guards.get(n)
            pair = shared.get(n)
            if pair is not None:
                # two reads of one tensor under exclusive conditions (the halves a rotation
                # swaps): one load from whichever address applies, each read selecting it
                first, second = pair
                g1, g2 = (substitute(guards[m], lane0) for m in pair)
                if n is first:
                    tmp = Var(f"m{first.reg.base.name}")
                    decls.append(Decl(tmp.name, tv.dtype, size))
                    idt = graph.index_dtype
                    off = Ternary(TernaryOpType.Where, (g1, index.offset(tv, idx_0, at_lane0(first.amap)),
                                                        index.offset(tv, idx_0, at_lane0(second.amap))),
                                  (DataType.Bool, idt, idt), idt)
                    vec = VecLoad(tv.dtype, lanes, at(tmp), AddressOf(Element(ptr, off)))
                    loads.append(If(IndexBinary(BinaryOpType.LogicalOr, g1, g2), [vec],
                                    self._lanes([Assign(Element(tmp, ri), _zero(tv.dtype))])))
                tmp_el = Element(Var(f"m{first.reg.base.name}"), ri)
                mine = g1 if n is first else g2
                lane_loads.append(Assign(n.reg, Ternary(TernaryOpType.Where, (mine, tmp_el, _zero(tv.dtype)),
                                                        (DataType.Bool, tv.dtype, tv.dtype), tv.dtype)))
                continue
            if vector(n):
                vec = VecLoad(tv.dtype, lanes, at(n.reg.base),
                              AddressOf(Element(ptr, index.offset(tv, idx_0, at_lane0(n.amap)))),
                              stream=tv in streamed)
                if guard is None:
                    loads.append(vec)
                else:  # a pad's or cat's boundary is a multiple of the width: lane 0 decides
                    loads.append(If(substitute(guard, lane0), [vec], self._lanes([Assign(n.reg, _zero(tv.dtype))])))
            else:
                value: Expr = Element(ptr, index.offset(tv, idx_v, n.amap))
                if guard is not None:  # read only where the element is used: never out of bounds
                    value = Ternary(TernaryOpType.Where, (guard, value, _zero(tv.dtype)),
                                    (DataType.Bool, tv.dtype, tv.dtype), tv.dtype)
                lane_loads.append(Assign(n.reg, value))
        for out, amap, conds, n in outs:
            ptr = params.tensor(out)
            src = n.reg
            guard = index.writer_guard(out, idx_0)
            if lanes > 1 and out.name in self.vector_tensors and index.lanes_contiguous(out, amap, idx_v, _LANE):
                st: list[Stmt] = [VecStore(out.dtype, lanes, AddressOf(Element(ptr, index.offset(out, idx_0,
                                                                                           at_lane0(amap)))),
                                           at(src.base), stream=POINTWISE_STREAM_STORES)]
                guard = all_of([c for c in (guard, *(substitute(c, lane0) for c in conds)) if c is not None])
            else:
                st = [Assign(Element(ptr, index.offset(out, idx_v, amap)), src)]
                if conds:
                    st = [If(all_of(conds), st)]
                st = self._lanes(st)
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


def _zero(dtype: DataType) -> Const:
    return Const(False if dtype.is_boolean else 0, dtype)


class _Node:
    """One tensor's value at one index map: loaded (a kernel input), computed into a
    register array, or an alias of an operand's register (a view). An index op's value is
    computed, but it reads memory (its lookup tensor), so it is guarded as a load is."""

    __slots__ = ("tv", "amap", "kind", "reg", "rhs", "children")

    def reads_memory(self) -> bool:
        return self.kind == "load" or (self.kind == "compute" and isinstance(self.tv.definition, INDEX_OPS))

    def __init__(self, tv: TensorView, amap: Map) -> None:
        self.tv, self.amap = tv, amap
        self.kind = "load"
        self.reg: Element | None = None
        self.rhs: Expr | None = None
        #: (operand node, the condition under which this node reads it; None: always)
        self.children: list[tuple[_Node, Expr | None]] = []


class _ValueGraph:
    """The values a tile computes: each tensor once per distinct index map it is used at
    (x and slices of x read x at several maps), operands before their uses in `order`."""

    def __init__(self, low: PointwiseLowering, idx: Indices, ri: Expr) -> None:
        self.low, self.idx, self.ri = low, idx, ri
        self.memo: dict[tuple, _Node] = {}
        self.order: list[_Node] = []
        self._names: dict[str, int] = {}
        self.index_dtype = DataType.Int if low.index_type == "int64" else DataType.Int32

    def _reg(self, prefix: str, tv: TensorView) -> Element:
        name = f"{prefix}{tv.name}"
        k = self._names.get(name, 0)
        self._names[name] = k + 1
        return Element(Var(name if k == 0 else f"{name}_{k}"), self.ri)

    def node(self, tv: TensorView, amap: Map) -> _Node:
        """The value of `tv` at `amap` (made with its operands on first use)."""
        key = (tv, tuple(amap[i] for i in tv.logical_no_reductions()))
        got = self.memo.get(key)
        if got is not None:
            return got
        n = self.memo[key] = _Node(tv, amap)
        low = self.low
        e = tv.definition
        if tv in low.fusion.inputs or e is None:
            n.reg = self._reg("r", tv)
            self.order.append(n)
            return n
        outs = [o for o in e.outputs if isinstance(o, TensorView)]
        if len(outs) != 1:
            raise NotLowerable(f"{type(e).__name__} with several outputs")
        # an index op's lookup tensor is read where the op computes (see lookup.Lookups)
        skip = 1 if isinstance(e, INDEX_OPS) else 0
        operands = [v for v in e.inputs[skip:] if isinstance(v, TensorView)]
        maps = low.index.operand_maps(e, tv, amap, list(dict.fromkeys(operands)))
        n.children = [(self.node(x, m), cond) for x, m, cond in maps]
        by_tv = {c.tv: c for c, _ in n.children}
        n.kind = "compute"
        if isinstance(e, CatOp):
            offs = low.index.cat_offsets(e)
            i = amap[tv.logical_no_reductions()[e.dim]]
            value: Expr = n.children[-1][0].reg
            dt = tv.dtype
            for k in range(len(n.children) - 2, -1, -1):
                value = Ternary(TernaryOpType.Where, (self.uniform(lt(i, offs[k + 1])), n.children[k][0].reg, value),
                                (DataType.Bool, dt, dt), dt)
            n.rhs = value
        elif isinstance(e, PadOp):
            (child, cond), = n.children
            if cond is None:
                n.kind, n.reg = "alias", child.reg
            else:
                fill = e.inputs[1]
                pad = scalar(fill, low.params)
                if fill.dtype != tv.dtype:
                    pad = Cast(pad, fill.dtype, tv.dtype)
                n.rhs = Ternary(TernaryOpType.Where, (self.uniform(cond), child.reg, pad), (DataType.Bool, tv.dtype, tv.dtype),
                                tv.dtype)
        elif isinstance(e, (SliceOp, ReshapeOp)):
            n.kind, n.reg = "alias", n.children[0][0].reg
        else:
            def operand(v: Val) -> Expr:
                if isinstance(v, TensorView):
                    return by_tv[v].reg
                return scalar(v, low.params)

            rhs = tensor_value(e, tv, operand, low.params, lambda a: amap[a], self.index_dtype, low.lookups.value)
            if rhs is None:  # a view: the same element as its operand
                n.kind, n.reg = "alias", by_tv[e.inputs[0]].reg
            else:
                n.rhs = rhs
        if n.reg is None:
            n.reg = self._reg("t", tv)
        self.order.append(n)
        return n

    def uniform(self, cond: Expr) -> Expr:
        """A pad's or cat's condition as lane 0 of a vector evaluates it: the resize
        scheduler keeps every boundary a multiple of the vector width, so all lanes agree,
        and one test per vector replaces one per element (RoPE backward at seed 002's
        shape: 560 -> 448 SASS instructions per thread)."""
        return substitute(cond, {_LANE: IntLit(0)}) if self.low.lanes > 1 else cond

    def sort(self) -> None:
        """Order the values as the fusion orders their ops (a topological order too: the
        generated code reads as the definition does)."""
        pos = {e: k for k, e in enumerate(self.low.fusion.exprs())}
        self.order.sort(key=lambda n: pos.get(n.tv.definition, -1) if n.kind != "load" else -1)

    def guards(self, roots: list[tuple[_Node, list[Expr]]]) -> dict[_Node, Expr]:
        """The condition under which each value read from memory is used (absent: always): the
        disjunction, over the ways outputs read it (each output under the conditions it is
        written in), of the pads' and cats' conditions on the way."""
        ways: dict[_Node, list[tuple[Expr, ...]]] = {}
        for n, conds in roots:
            got = ways.setdefault(n, [])
            c = tuple(conds)
            if not c:
                got[:] = [()]
            elif () not in got and c not in got:
                got.append(c)
        for n in reversed(self.order):  # consumers before their operands
            mine = ways.get(n)
            if mine is None:
                continue
            for child, cond in n.children:
                got = ways.setdefault(child, [])
                if () in got:
                    continue
                for conj in mine:
                    c = conj + (cond,) if cond is not None else conj
                    if not c:
                        got[:] = [()]
                        break
                    if c not in got:
                        got.append(c)
        out: dict[_Node, Expr] = {}
        for n in self.order:
            if not n.reads_memory():
                continue
            w = ways.get(n, [()])
            if () in w:
                continue
            expr = None
            for conj in w:
                term = all_of(list(dict.fromkeys(conj)))
                expr = term if expr is None else IndexBinary(BinaryOpType.LogicalOr, expr, term)
            out[n] = expr
        return out


def _bounds(cond: Expr) -> dict[Expr, tuple[float, float]] | None:
    """The half-open ranges [lo, hi) a conjunction of comparisons with literals puts on the
    index expressions it compares (`x - 64 >= 0` bounds x below by 64); None when some term
    is not such a comparison."""
    terms = []
    stack = [cond]
    while stack:
        c = stack.pop()
        if isinstance(c, IndexBinary) and c.op is BinaryOpType.LogicalAnd:
            stack += [c.lhs, c.rhs]
        else:
            terms.append(c)
    out: dict[Expr, tuple[float, float]] = {}
    for t in terms:
        if not (isinstance(t, IndexBinary) and t.op in (BinaryOpType.Lt, BinaryOpType.Ge)
                and isinstance(t.rhs, IntLit)):
            return None
        x, k = t.lhs, t.rhs.value
        if isinstance(x, IndexBinary) and x.op in (BinaryOpType.Add, BinaryOpType.Sub) and isinstance(x.rhs, IntLit):
            k -= x.rhs.value if x.op is BinaryOpType.Add else -x.rhs.value
            x = x.lhs
        lo, hi = out.get(x, (float("-inf"), float("inf")))
        out[x] = (lo, min(hi, k)) if t.op is BinaryOpType.Lt else (max(lo, k), hi)
    return out


def _exclusive_pairs(loads: list["_Node"], guards: dict["_Node", Expr]) -> dict["_Node", tuple["_Node", "_Node"]]:
    """Pairs of vector loads of one tensor whose conditions never hold together (each node
    -> its pair, the first-ordered node first): they can share one load."""
    out: dict[_Node, tuple[_Node, _Node]] = {}
    for k, a in enumerate(loads):
        if a in out or a not in guards:
            continue
        ba = _bounds(guards[a])
        if ba is None:
            continue
        for b in loads[k + 1:]:
            if b in out or b.tv is not a.tv or b not in guards:
                continue
            bb = _bounds(guards[b])
            if bb is not None and any(x in bb and max(ba[x][0], bb[x][0]) >= min(ba[x][1], bb[x][1]) for x in ba):
                out[a] = out[b] = (a, b)
                break
    return out


def _at_lane0(loop_index: Indices) -> Indices:
    return {ax: (IntLit(0) if s == _LANE else s) for ax, s in loop_index.items()}


def lower_pointwise(fusion: Fusion, ref: TensorView, vectorize: int, vector_tensors: frozenset[int],
                    index_type: str, sub: SubFusion | None = None, name: str = "fuser_pointwise",
                    blocks_from_end: bool = True) -> Kernel:
    """Kernel IR for a pointwise fusion scheduled from `ref`: `vector_tensors` names the
    tensors accessed `vectorize` elements at a time (the width the loop domain's Vectorize
    axis carries), `sub` is the fusion's analysis when the caller has one. Blocks take the
    data from its end (kir.BLOCKS_FROM_END) unless `blocks_from_end` is False (a user's
    schedule, lowered as written)."""
    return PointwiseLowering(fusion, ref, vector_tensors, index_type, name, sub, blocks_from_end).lower()
