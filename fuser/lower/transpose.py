"""Lowering a scheduled transpose segment to kernel IR.

The schedule gave the reference the loop domain [batch (blockIdx.y), tiles (blockIdx.x),
B in the tile, A in the tile] (`fuser.scheduler.transpose`). A block works on one
`tile_a` x `tile_b` tile of the (A, B) plane at one batch index, in three phases:

1. staged inputs (innermost axis B) are read with threads along B, `vector_b` elements per
   access, and written into their shared tiles;
2. after a barrier, with threads along A (`vector_a` elements each): direct inputs are read
   from global memory, staged ones from their shared tiles, the elementwise work runs,
   direct outputs are written to global memory and staged ones into their shared tiles;
3. after a barrier, staged outputs are read from their tiles with threads along B and
   written to global memory.

Both mappings of threads onto the tile are `fuser.scheduler.transpose.tile_mapping`'s: a
warp covers 128 bytes along the contiguous axis per row of lanes. The shared tiles are
padded as the heuristics chose (fewest bank conflicts for those two mappings). Tiles at
the edges of A and B are predicated per vector (vector widths divide the extents); batch
indices past gridDim.y are taken in a block-uniform loop.
"""
from __future__ import annotations

from fuser.ir import DataType, Fusion, IterDomain, MemoryType, ParallelType, TensorView, Val
from fuser.ir.exprs import BinaryOpType
from fuser.scheduler.analysis import SubFusion
from fuser.scheduler.transpose import Layout, TransposeParams

from .errors import NotLowerable
from .index import TensorIndexer
from .kir import (
    AddressOf,
    Assign,
    Comment,
    Decl,
    Element,
    Expr,
    For,
    If,
    IndexBinary,
    IndexCast,
    IntLit,
    Kernel,
    ParallelDim,
    ParallelIndex,
    Stmt,
    Sync,
    Var,
    VecLoad,
    VecStore,
    all_of,
    eq,
    lt,
    substitute_stmt,
)
from .params import ParamTable
from .values import scalar, tensor_value

_K = Var("k")  # the pass over a thread's part of the tile
_V = Var("v")  # the element of a vector


def _tid() -> Expr:
    """threadIdx.x in index arithmetic."""
    return IndexCast(ParallelIndex(ParallelType.TIDx))


def simplify(e: Expr) -> Expr:
    """`e` with arithmetic on the literals 0 and 1 folded away (x + 0, x * 1, x % 1, ...)."""
    if not isinstance(e, IndexBinary):
        return e
    a, b = simplify(e.lhs), simplify(e.rhs)
    op = e.op
    zero_a, zero_b = a == IntLit(0), b == IntLit(0)
    if op is BinaryOpType.Add:
        if zero_a:
            return b
        if zero_b:
            return a
    elif op is BinaryOpType.Sub and zero_b:
        return a
    elif op is BinaryOpType.Mul:
        if zero_a or zero_b:
            return IntLit(0)
        if a == IntLit(1):
            return b
        if b == IntLit(1):
            return a
    elif op in (BinaryOpType.Div, BinaryOpType.Mod):
        if b == IntLit(1):
            return IntLit(0) if op is BinaryOpType.Mod else a
        if zero_a:
            return IntLit(0)
        if (op is BinaryOpType.Mod and isinstance(a, IndexBinary) and a.op is BinaryOpType.Mod
                and isinstance(a.rhs, IntLit) and isinstance(b, IntLit) and a.rhs.value % b.value == 0):
            return IndexBinary(op, a.lhs, b)  # (x % 32) % 8 == x % 8
    if isinstance(a, IntLit) and isinstance(b, IntLit) and op in (BinaryOpType.Add, BinaryOpType.Mul):
        return IntLit(a.value + b.value if op is BinaryOpType.Add else a.value * b.value)
    return e if a is e.lhs and b is e.rhs else IndexBinary(op, a, b)


def _sum(terms: list[Expr]) -> Expr:
    """The sum of `terms` (0 for none)."""
    out: Expr = IntLit(0)
    for t in terms:
        out = out + t
    return simplify(out)


class _Reg:
    """A tensor's register values in a pass: `array[base + v]`."""

    __slots__ = ("array", "base")

    def __init__(self, array: Var, base: Expr = IntLit(0)) -> None:
        self.array, self.base = array, base

    def at(self, lane: Expr) -> Expr:
        """The value of element `lane`."""
        return Element(self.array, simplify(self.base + lane))

    def address(self) -> Expr:
        """The address of element 0 (a vector access's register side)."""
        return simplify(self.array + self.base)


class _Scalar(_Reg):
    """A register value of a one-element vector: a scalar variable."""

    def at(self, lane: Expr) -> Expr:
        """The value (whatever the lane: there is one)."""
        return self.array

    def address(self) -> Expr:
        """The variable's address."""
        return AddressOf(self.array)


class TransposeLowering:
    """Builds the kernel IR of one scheduled transpose fusion."""

    def __init__(self, fusion: Fusion, lay: Layout, params: TransposeParams, sub: SubFusion,
                 vector_a: frozenset[TensorView], vector_b: frozenset[TensorView], name: str) -> None:
        self.fusion, self.lay, self.p, self.name = fusion, lay, params, name
        self.params = ParamTable(list(fusion.inputs), params.index_type)
        self.ix = TensorIndexer(fusion, lay.ref, sub, self.params)
        self.vector_a = vector_a if params.vector_a > 1 else frozenset()
        self.vector_b = vector_b if params.vector_b > 1 else frozenset()
        find, id_of = sub.uf.find, sub.a.id_of
        self._class = lambda i: find(id_of(i))
        self._ref_by_class = {self._class(r): r for r in lay.ref.logical_no_reductions() if not r.is_broadcast}
        exprs = fusion.exprs()
        self.exprs = [e for e in exprs if any(isinstance(o, TensorView) for o in e.outputs)]
        used = {v for e in self.exprs for v in e.inputs if isinstance(v, TensorView)}
        staged = set(lay.staged[:params.n_staged])
        self.inputs = [tv for tv in fusion.inputs if isinstance(tv, TensorView) and tv in used]
        self.outputs = [tv for tv in fusion.outputs if isinstance(tv, TensorView)]
        self.staged_in = [tv for tv in self.inputs if tv in staged]
        self.direct_in = [tv for tv in self.inputs if tv not in staged]
        self.staged_out = [tv for tv in self.outputs if tv in staged and tv not in fusion.inputs]
        self.ext_a = self.ix.extent(lay.axis_a.extent)
        self.ext_b = self.ix.extent(lay.axis_b.extent)
        self.a0, self.b0 = Var("a0"), Var("b0")  # the tile's origin
        #: per batch axis of the reference: the variable holding its index
        self.batch_index: dict[IterDomain, Expr] = {}
        #: per tensor: the variable holding its offset at the batch index (absent: 0)
        self.base: dict[TensorView, Var] = {}
        self.smem: dict[TensorView, Var] = {}
        self.index_dtype = DataType.Int if params.index_type == "int64" else DataType.Int32

    # --- indices ---------------------------------------------------------------------------------
    def _ref_axis(self, i: IterDomain) -> IterDomain | None:
        """The reference's non-broadcast axis of `i`'s class (None: it has none)."""
        return self._ref_by_class.get(self._class(i))

    def _stride(self, tv: TensorView, axis: IterDomain) -> Expr:
        """`tv`'s stride along its axis `axis`: 1 for a contiguous innermost stored axis."""
        alloc = [(i, c) for i, c in zip(tv.domain.maybe_allocation, tv.domain.contiguity)
                 if not i.is_broadcast and not i.is_reduction]
        if tv not in self.fusion.inputs and tv not in self.fusion.outputs:
            raise NotLowerable(f"{tv!r} is not in global memory")
        if alloc and alloc[-1][0] is axis and alloc[-1][1] is True:
            return IntLit(1)
        return self.params.stride(tv, tv.logical_no_reductions().index(axis))

    def _terms(self, tv: TensorView, want) -> list[Expr]:
        """index x stride of `tv`'s non-broadcast axes whose reference axis `want` maps to
        an index (None: skip the axis)."""
        terms = []
        for i in tv.logical_no_reductions():
            if i.is_broadcast:
                continue
            r = self._ref_axis(i)
            if r is None:
                raise NotLowerable(f"{tv!r}: axis {i!r} has no counterpart in the reference")
            idx = want(r)
            if idx is not None:
                terms.append(simplify(idx * self._stride(tv, i)))
        return terms

    def offset(self, tv: TensorView, a: Expr, b: Expr) -> Expr:
        """`tv`'s element offset at (a, b) of the current batch index."""
        lay = self.lay
        base = self.base.get(tv)
        terms = [base] if base is not None else []
        terms += self._terms(tv, lambda r: a if r is lay.axis_a else b if r is lay.axis_b else None)
        return _sum(terms)

    def guard(self, tv: TensorView, a: Expr, b: Expr) -> Expr | None:
        """Outputs lacking some axis of the reference are written where its index is 0."""
        have = {self._ref_axis(i) for i in tv.logical_no_reductions() if not i.is_broadcast}
        conds = []
        for r in self._ref_by_class.values():
            if r in have:
                continue
            idx = a if r is self.lay.axis_a else b if r is self.lay.axis_b else self.batch_index[r]
            conds.append(eq(idx, 0))
        return all_of(conds)

    def mapping(self, along_a: bool, k: Expr, lane: Expr) -> tuple[Expr, Expr]:
        """(a, b) in the tile of element `lane` of pass `k` of this thread: with threads
        along A (where the work runs) or along B (the staged tensors' global side); the
        formulas of `tile_mapping`."""
        p = self.p
        tx, ty = (p.tile_a, p.tile_b) if along_a else (p.tile_b, p.tile_a)
        vector, lanes = (p.vector_a, p.lanes_a) if along_a else (p.vector_b, p.lanes_b)
        rows = 32 // lanes
        per_row = tx // (vector * lanes)
        warps = p.threads // 32
        tid = _tid()
        lane_id, warp = tid % 32, tid // 32
        w = simplify(warp + k * warps)
        x = simplify(((w % per_row) * lanes + lane_id % lanes) * vector + lane)
        y = simplify((w // per_row) * rows + lane_id // lanes)
        return (x, y) if along_a else (y, x)

    def passes(self, along_a: bool) -> int:
        """How many vectors of each tensor a thread accesses per tile in a mapping."""
        return self.p.per_thread // (self.p.vector_a if along_a else self.p.vector_b)

    def in_tile(self, a: Expr, b: Expr) -> Expr:
        """The element (a, b) of the tile (lane 0 of a vector: vectors divide the extents) lies
        inside the tensor."""
        return all_of([lt(simplify(self.a0 + a), self.ext_a), lt(simplify(self.b0 + b), self.ext_b)])

    def smem_at(self, tv: TensorView, a: Expr, b: Expr) -> Expr:
        """Element (a, b) of `tv`'s padded shared tile."""
        b_inner, pad = self.p.smem_layout(tv.dtype.itemsize)
        if b_inner:
            return Element(self.smem[tv], simplify(a * (self.p.tile_b + pad) + b))
        return Element(self.smem[tv], simplify(b * (self.p.tile_a + pad) + a))

    def _lanes(self, n: int, var: Var, stmts: list[Stmt]) -> list[Stmt]:
        """`stmts` for each of `n` elements of a vector (`var` their index)."""
        if n == 1:
            return [substitute_stmt(s, {var: IntLit(0)}) for s in stmts]
        return [For(var, IntLit(n), stmts, unroll=True, dtype=DataType.Int32)]

    def _passes(self, along_a: bool, body: list[Stmt]) -> list[Stmt]:
        """`body` for each pass `_K` of a mapping."""
        n = self.passes(along_a)
        if n == 1:
            return [substitute_stmt(s, {_K: IntLit(0)}) for s in body]
        return [For(_K, IntLit(n), body, unroll=True)]

    # --- the kernel ------------------------------------------------------------------------------
    def lower(self) -> Kernel:
        """The kernel: the tile's origin, its batch indices (a loop past gridDim.y), the phases."""
        p, lay = self.p, self.lay
        shared: list[Stmt] = []
        for tv in self.staged_in + self.staged_out:
            b_inner, pad = p.smem_layout(tv.dtype.itemsize)
            size = p.tile_a * (p.tile_b + pad) if b_inner else p.tile_b * (p.tile_a + pad)
            self.smem[tv] = Var(f"smem{tv.name}")
            shared.append(Decl(self.smem[tv].name, tv.dtype, size, space=MemoryType.Shared))
        loop = lay.ref.domain.loop
        tiles = [i for i in loop if i.parallel_type is ParallelType.BIDx]
        batch = [i for i in loop if i.parallel_type is ParallelType.BIDy]
        if len(tiles) != 1 or len(loop) < 3:
            raise NotLowerable(f"transpose reference {lay.ref!r} is not scheduled as [batch, tiles, B, A]")
        n = Var("n") if p.batch_loop else IndexCast(ParallelIndex(ParallelType.BIDy))
        at = {i: IntLit(0) for i in loop}
        at[tiles[0]] = IndexCast(ParallelIndex(ParallelType.BIDx))
        if batch:
            at[batch[0]] = n
        idx = self.ix.ref_indices(at)
        body: list[Stmt] = [Decl("a0", None, None, simplify(idx[lay.axis_a])),
                            Decl("b0", None, None, simplify(idx[lay.axis_b]))]
        tile: list[Stmt] = []
        for k, r in enumerate(lay.batch):
            var = Var(f"n{k}")
            self.batch_index[r] = var
            tile.append(Decl(var.name, None, None, simplify(idx[r])))
        for tv in self.inputs + self.outputs:
            terms = self._terms(tv, lambda r: self.batch_index.get(r))
            if terms:
                self.base[tv] = Var(f"o{tv.name}")
                tile.append(Decl(self.base[tv].name, None, None, _sum(terms)))
        # every global load is issued before the first barrier: all inputs' bytes in flight
        stage_loads, stage_writes = self._stage_inputs()
        direct_loads, work = self._compute()
        tile += stage_loads + direct_loads + stage_writes + work + self._unstage_outputs()
        if p.batch_loop:
            total = self.ix.extent(batch[0].extent)
            g = Var("g")
            steps = IndexBinary(BinaryOpType.CeilDiv, total, IndexCast(ParallelDim(ParallelType.BIDy)))
            start = Decl("n", None, None, IndexCast(ParallelIndex(ParallelType.BIDy))
                         + g * IndexCast(ParallelDim(ParallelType.BIDy)))
            again = [Sync()] if self.smem else []  # the next batch index rewrites the tiles
            body.append(Comment("batch indices past gridDim.y: a block-uniform loop"))
            body.append(For(g, steps, [start, If(lt(n, total), tile + again)]))
        else:
            body += tile
        return Kernel(self.name, self.params.params, shared + body, p.index_type, threads=p.threads)

    def _stage_inputs(self) -> tuple[list[Stmt], list[Stmt]]:
        """Phase 1: staged inputs, read along B (the first list), into their shared tiles
        (the second, ending with the barrier)."""
        if not self.staged_in:
            return [], []
        p = self.p
        V = p.vector_b
        size = self.passes(False) * V
        out: list[Stmt] = [Comment("staged inputs: read along their innermost axis into shared tiles")]
        a, b = self.mapping(False, _K, IntLit(0))
        loads: list[Stmt] = []
        writes: list[Stmt] = []
        for tv in self.staged_in:
            q = Var(f"q{tv.name}")
            out.append(Decl(q.name, tv.dtype, size))
            ptr = self.params.tensor(tv)
            if tv in self.vector_b:
                loads.append(VecLoad(tv.dtype, V, simplify(q + _K * V),
                                     AddressOf(Element(ptr, self.offset(tv, simplify(self.a0 + a), simplify(self.b0 + b))))))
            else:
                off = self.offset(tv, simplify(self.a0 + a), simplify(self.b0 + b + _V))
                loads += self._lanes(V, _V, [Assign(Element(q, simplify(_K * V + _V)), Element(ptr, off))])
            writes += self._lanes(V, _V, [Assign(self.smem_at(tv, a, simplify(b + _V)),
                                                 Element(q, simplify(_K * V + _V)))])
        inside = self.in_tile(a, b)
        out += self._passes(False, [If(inside, loads)])
        return out, self._passes(False, [If(inside, writes)]) + [Sync()]

    def _compute(self) -> tuple[list[Stmt], list[Stmt]]:
        """Phase 2, with threads along A: the direct inputs' loads (the first list), then
        the elementwise work and the outputs' stores (the second)."""
        p = self.p
        V = p.vector_a
        first: list[Stmt] = [Comment("direct inputs: read along their innermost axis")]
        a, b = self.mapping(True, _K, IntLit(0))
        inside = self.in_tile(a, b)
        ga, gb = simplify(self.a0 + a), simplify(self.b0 + b)
        regs: dict[Val, _Reg] = {}
        # direct inputs: every pass's loads first (more bytes in flight), then the work
        loads: list[Stmt] = []
        size = self.passes(True) * V
        for tv in self.direct_in:
            r = Var(f"r{tv.name}")
            first.append(Decl(r.name, tv.dtype, size))
            regs[tv] = _Reg(r, _K * V)
            ptr = self.params.tensor(tv)
            if tv in self.vector_a:
                loads.append(VecLoad(tv.dtype, V, regs[tv].address(), AddressOf(Element(ptr, self.offset(tv, ga, gb)))))
            else:
                off = self.offset(tv, simplify(ga + _V), gb)
                loads += self._lanes(V, _V, [Assign(regs[tv].at(_V), Element(ptr, off))])
        first += self._passes(True, [If(inside, loads)]) if loads else []
        out: list[Stmt] = [Comment("the elementwise work, with threads along A")]
        decls: list[Stmt] = []
        lane: list[Stmt] = []
        for tv in self.staged_in:
            s = Var(f"s{tv.name}")
            decls.append(Decl(s.name, tv.dtype, V if V > 1 else None))
            regs[tv] = _Reg(s, IntLit(0)) if V > 1 else _Scalar(s)
            lane.append(Assign(regs[tv].at(_V), self.smem_at(tv, simplify(a + _V), b)))

        def operand(v: Val) -> Expr:
            if isinstance(v, TensorView):
                got = regs.get(v)
                if got is None:
                    raise NotLowerable(f"{v!r} is read before it is computed")
                return got.at(_V)
            return scalar(v, self.params)

        def axis_index(axis: IterDomain) -> Expr:
            r = self._ref_axis(axis)
            if r is self.lay.axis_a:
                return simplify(ga + _V)
            if r is self.lay.axis_b:
                return gb
            return self.batch_index.get(r, IntLit(0))

        for e in self.exprs:
            (o,) = [x for x in e.outputs if isinstance(x, TensorView)]
            rhs = tensor_value(e, o, operand, self.params, axis_index, self.index_dtype)
            if rhs is None:  # a view: the same element as its operand
                regs[o] = regs[e.inputs[0]]
                continue
            t = Var(f"t{o.name}")
            decls.append(Decl(t.name, o.dtype, V if V > 1 else None))
            regs[o] = _Reg(t, IntLit(0)) if V > 1 else _Scalar(t)
            lane.append(Assign(regs[o].at(_V), rhs))
        stores: list[Stmt] = []
        for tv in self.outputs:
            if tv not in regs:
                raise NotLowerable(f"output {tv!r} is not computed")
            if tv in self.staged_out:
                lane.append(Assign(self.smem_at(tv, simplify(a + _V), b), regs[tv].at(_V)))
                continue
            ptr = self.params.tensor(tv)
            if tv in self.vector_a:
                st: list[Stmt] = [VecStore(tv.dtype, V, AddressOf(Element(ptr, self.offset(tv, ga, gb))),
                                           regs[tv].address())]
                guard = self.guard(tv, ga, gb)
            else:
                st = self._lanes(V, _V, self._guarded(tv, simplify(ga + _V), gb,
                                                      [Assign(Element(ptr, self.offset(tv, simplify(ga + _V), gb)),
                                                              regs[tv].at(_V))]))
                guard = None
            stores += [If(guard, st)] if guard is not None else st
        out += self._passes(True, [If(inside, decls + self._lanes(V, _V, lane) + stores)])
        if self.staged_out:
            out.append(Sync())
        return (first if self.direct_in else []), out

    def _guarded(self, tv: TensorView, a: Expr, b: Expr, stmts: list[Stmt]) -> list[Stmt]:
        """`stmts` (a store of output `tv` at (a, b)) under its writer guard, if any."""
        guard = self.guard(tv, a, b)
        return [If(guard, stmts)] if guard is not None else stmts

    def _unstage_outputs(self) -> list[Stmt]:
        """Phase 3: staged outputs, from their shared tiles, written along B."""
        if not self.staged_out:
            return []
        p = self.p
        V = p.vector_b
        a, b = self.mapping(False, _K, IntLit(0))
        ga, gb = simplify(self.a0 + a), simplify(self.b0 + b)
        body: list[Stmt] = []
        for tv in self.staged_out:
            ptr = self.params.tensor(tv)
            if tv in self.vector_b:
                w = Var(f"w{tv.name}")
                st: list[Stmt] = [Decl(w.name, tv.dtype, V)]
                st += self._lanes(V, _V, [Assign(Element(w, _V), self.smem_at(tv, a, simplify(b + _V)))])
                st.append(VecStore(tv.dtype, V, AddressOf(Element(ptr, self.offset(tv, ga, gb))), w))
                guard = self.guard(tv, ga, gb)
                body += [If(guard, st)] if guard is not None else st
            else:
                gbv = simplify(gb + _V)
                body += self._lanes(V, _V, self._guarded(tv, ga, gbv, [
                    Assign(Element(ptr, self.offset(tv, ga, gbv)), self.smem_at(tv, a, simplify(b + _V)))]))
        return [Comment("staged outputs: from shared tiles, written along their innermost axis")] + \
            self._passes(False, [If(self.in_tile(a, b), body)])


def lower_transpose(fusion: Fusion, lay: Layout, params: TransposeParams, sub: SubFusion,
                    vector_a: frozenset[TensorView], vector_b: frozenset[TensorView],
                    name: str = "fuser_transpose") -> Kernel:
    """Kernel IR for a transpose fusion scheduled by `fuser.scheduler.transpose.schedule`:
    `vector_a` / `vector_b` name the tensors accessed `params.vector_a` / `vector_b`
    elements at a time along A / B."""
    return TransposeLowering(fusion, lay, params, sub, vector_a, vector_b, name).lower()
