"""Lowering a scheduled pointwise segment to kernel IR.

Every tensor of a pointwise kernel is inlined into the reference's loop nest, so the
nest is the reference's loop domain: grid and block indices for parallel axes, loops for
unrolled and serial ones, register arrays for the vector lanes. A tensor is indexed by
walking the loop indices back through the reference's Split/Merge history to its logical
axes, mapping each of the tensor's axes to the reference axis it is (broadcast axes read
element 0), and summing index × stride over the axes; a run of contiguous innermost axes
that the reference merged is indexed by the merged index directly, with no division.
"""
from __future__ import annotations

from typing import Any

from fuser.codegen import ops as cops
from fuser.ir import (
    BinaryOp,
    BroadcastOp,
    ExpandOp,
    FullOp,
    Fusion,
    IotaOp,
    IterDomain,
    LoadStoreOp,
    Merge,
    ParallelType,
    ReductionOp,
    Scalar,
    Split,
    SqueezeOp,
    TensorView,
    TernaryOp,
    UnaryOp,
    Val,

)
from fuser.ir.exprs import BinaryOpType, TernaryOpType
from fuser.ir.transforms import id_exprs_between
from fuser.scheduler.analysis import FusionAnalysis, SubFusion, is_trivial_reduction

from .kir import Assign, Comment, Decl, For, If, Kernel, Param, VecLoad, VecStore


class NotLowerable(NotImplementedError):
    """The segment uses something this lowering does not generate code for yet."""


_INDEX_FMT = {"int32": "i", "int64": "q"}
#: integer extent arithmetic as C (ceilDiv spelled out: extents are non-negative)
_EXTENT_MATH = {
    BinaryOpType.Add: "({a} + {b})",
    BinaryOpType.Sub: "({a} - {b})",
    BinaryOpType.Mul: "({a} * {b})",
    BinaryOpType.Div: "({a} / {b})",
    BinaryOpType.CeilDiv: "(({a} + {b} - 1) / {b})",
    BinaryOpType.Max: "max({a}, {b})",
    BinaryOpType.Min: "min({a}, {b})",
}
_SCALAR_FMT = {1: "b", 2: "h", 4: "i", 8: "q"}


class PointwiseLowering:
    """Builds the kernel IR of one scheduled pointwise fusion."""

    def __init__(self, fusion: Fusion, ref: TensorView, vectorize: int, vector_tensors: frozenset[int],
                 index_type: str, name: str = "fuser_pointwise", sub: SubFusion | None = None) -> None:
        self.fusion = fusion
        self.ref = ref
        self.V = vectorize
        self.vector_tensors = vector_tensors
        self.index_type = index_type
        self.name = name
        self.params: list[Param] = []
        self._param_of: dict[Any, str] = {}
        sub = sub if sub is not None else FusionAnalysis(fusion).whole()
        self.sub = sub
        find = sub.uf.find
        a = sub.a
        self.ref_logical = [i for i in ref.domain.logical if not i.is_reduction]
        self._ref_by_class = {find(a.id_of(r)): r for r in self.ref_logical}
        # indexing goes through axis classes: two axes of one tensor in one class (x + x.T on
        # a square) would read the same coordinate twice
        for tv in fusion.inputs:
            if getattr(tv, "is_cpu_scalar", False):
                raise NotLowerable(f"{tv!r} is a CPU scalar tensor (its value would be read on the host)")
        for tv in sub.tensors():
            cls = sub.classes_of(tv)
            if len(set(cls)) != len(cls):
                raise NotLowerable(f"{tv!r} has two axes the fusion maps onto each other")
        self._find, self._id_of = find, a.id_of
        self._history = id_exprs_between(ref.domain.logical, ref.domain.loop)
        self._suffix_node = self._suffix_nodes()

    # --- parameters ---------------------------------------------------------------------
    def _param(self, key: Any, name: str, ctype: str, kind: str, source: Any, fmt: str) -> str:
        got = self._param_of.get(key)
        if got is None:
            self.params.append(Param(name, ctype, kind, source, fmt))
            got = self._param_of[key] = name
        return got

    def tensor_ptr(self, tv: TensorView) -> str:
        const = "const " if tv in self.fusion.inputs else ""
        return self._param(("tensor", tv), f"T{tv.name}", f"{const}{cops.ctype(tv.dtype)}* __restrict__", "tensor", tv, "P")

    def stride(self, tv: TensorView, dim: int) -> str:
        return self._param(("stride", tv, dim), f"s{tv.name}_{dim}", "nvfuser_index_t", "stride", (tv, dim),
                           _INDEX_FMT[self.index_type])

    def extent(self, s: Scalar) -> str:
        """A C expression for an integer scalar of the fusion (an extent)."""
        if s.is_const:
            return str(int(s.value))
        d = s.definition
        if d is None:
            return self._param(("extent", s), f"i{s.name}", "nvfuser_index_t", "extent", s, _INDEX_FMT[self.index_type])
        if isinstance(d, BinaryOp) and d.op_type in _EXTENT_MATH:
            a, b = (self.extent(x) for x in d.inputs)
            return _EXTENT_MATH[d.op_type].format(a=a, b=b)
        raise NotLowerable(f"extent {s!r} is computed by {type(d).__name__}")

    def scalar(self, s: Val) -> str:
        """A C expression for a scalar operand (constant, input or host arithmetic)."""
        if s.is_const:
            return cops.emit_constant(s.value, s.dtype)
        d = s.definition
        if d is None:
            fmt = "d" if s.dtype.is_floating and s.dtype.itemsize == 8 else ("f" if s.dtype.is_floating else
                                                                           _SCALAR_FMT.get(s.dtype.itemsize, "q"))
            if s.dtype.is_complex:
                raise NotLowerable("complex scalar inputs")
            if s.dtype.is_boolean:
                fmt = "?"
            return self._param(("scalar", s), f"{s.dtype.scalar_prefix}{s.name}", cops.ctype(s.dtype), "scalar", s, fmt)
        return self._value(d, s, lambda v: self.scalar(v))

    # --- indexing -------------------------------------------------------------------------
    def _suffix_nodes(self) -> dict[int, IterDomain]:
        """Reference logical position j -> the merged axis covering logical axes j.. (the
        schedule merges innermost first, so each suffix is one axis)."""
        pos = {r: k for k, r in enumerate(self.ref.domain.logical)}
        leaves: dict[IterDomain, list[int]] = {r: [k] for r, k in pos.items()}
        out: dict[int, IterDomain] = {}
        n = len(self.ref.domain.logical)
        if n:
            out[n - 1] = self.ref.domain.logical[n - 1]
        for e in self._history:
            if isinstance(e, Merge):
                ls = leaves.get(e.inputs[0], []) + leaves.get(e.inputs[1], [])
                leaves[e.outputs[0]] = ls
                if ls and ls == list(range(ls[0], n)):
                    out[ls[0]] = e.outputs[0]
        return out

    def ref_indices(self, loop_index: dict[IterDomain, str]) -> dict[IterDomain, str]:
        """Every reference axis's index, from its loop axes' indices."""
        idx = dict(loop_index)
        for e in reversed(self._history):
            if isinstance(e, Split):
                outer, inner = e.outputs
                f = self.extent(e.factor) if e.inner_split else self.extent(inner.extent)
                idx[e.inputs[0]] = f"({idx[outer]} * {f} + {idx[inner]})"
            elif isinstance(e, Merge):
                o, i = e.inputs
                m = idx[e.outputs[0]]
                ext = self.extent(i.extent)
                idx[o] = f"({m} / {ext})"
                idx[i] = f"({m} % {ext})"
            else:
                raise NotLowerable(f"reference transform {type(e).__name__}")
        return idx

    def ref_axis(self, i: IterDomain) -> IterDomain | None:
        return self._ref_by_class.get(self._find(self._id_of(i)))

    def offset(self, tv: TensorView, idx: dict[IterDomain, str], *, lane_broadcast: bool = False) -> str:
        """tv's element offset at the reference indices `idx`."""
        logical = tv.logical_no_reductions()
        pos = {i: d for d, i in enumerate(logical)}
        alloc = [i for i in (tv.domain.maybe_allocation if tv in self.fusion.inputs or tv in self.fusion.outputs
                             else logical) if not i.is_reduction]
        contig = dict(zip(tv.domain.maybe_allocation, tv.domain.contiguity))
        terms: list[str] = []
        rest = [i for i in reversed(alloc) if not i.is_broadcast]  # innermost first
        # the innermost run of contiguous axes that the reference merged in the same order
        run, k = 0, len(self.ref.domain.logical) - 1
        matched_start = None
        while run < len(rest) and k >= 0:
            r = self.ref.domain.logical[k]
            if r.is_broadcast:
                k -= 1
                continue
            i = rest[run]
            if self.ref_axis(i) is not r or contig.get(i) is not True:
                break
            matched_start = k
            run += 1
            k -= 1
        while run and matched_start not in self._suffix_node:
            # the reference merged no axis over this whole run (2D schedules merge the outer
            # and inner axes apart): shorten it to a suffix it did merge
            matched_start += 1
            run -= 1
            while run and self.ref.domain.logical[matched_start].is_broadcast:
                matched_start += 1
        if run:
            # declared contiguous innermost: stride 1, and the merged index walks the run
            terms.append(idx[self._suffix_node[matched_start]])
        for i in rest[run:]:
            r = self.ref_axis(i)
            if r is None:
                raise NotLowerable(f"{tv!r}: axis {i!r} has no counterpart in the reference")
            terms.append(f"{idx[r]} * {self.stride(tv, pos[i])}")
        return " + ".join(terms) if terms else "0"

    # --- values -----------------------------------------------------------------------------
    def _value(self, e, out: Val, operand) -> str:
        """The C expression computing `out` of elementwise expr `e`, operands via `operand`."""
        if isinstance(e, UnaryOp):
            (x,) = e.inputs
            return cops.emit_unary(e.op_type, operand(x), x.dtype, out.dtype)
        if isinstance(e, BinaryOp):
            a, b = e.inputs
            # comparisons run in the type PyTorch compares in (a scalar does not widen a tensor)
            return cops.emit_binary(e.op_type, operand(a), operand(b), a.dtype, b.dtype, out.dtype,
                                    common=cops.common_dtype(a, b))
        if isinstance(e, TernaryOp):
            a, b, c = e.inputs
            common = cops.common_dtype(a, b) if e.op_type is TernaryOpType.Threshold else None
            return cops.emit_ternary(e.op_type, operand(a), operand(b), operand(c), (a.dtype, b.dtype, c.dtype),
                                     out.dtype, common=common)
        raise NotLowerable(f"{type(e).__name__} on scalars")

    def lower(self) -> Kernel:
        ref = self.ref
        loop = ref.domain.loop
        lane_var = "v"
        loop_index: dict[IterDomain, str] = {}
        serial: list[tuple[IterDomain, str]] = []  # loops, outermost first
        block_extent = block_extent_y = None
        threads = 1
        lanes = 1
        for ax in loop:
            pt = ax.parallel_type
            if pt is ParallelType.BIDx:
                loop_index[ax] = "((nvfuser_index_t)blockIdx.x)"
                block_extent = ax.extent
            elif pt is ParallelType.BIDy:
                loop_index[ax] = "((nvfuser_index_t)blockIdx.y)"
                block_extent_y = ax.extent
            elif pt is ParallelType.TIDx:
                loop_index[ax] = "((nvfuser_index_t)threadIdx.x)"
                threads = int(ax.extent.value)
            elif pt is ParallelType.Vectorize:
                loop_index[ax] = lane_var
                lanes = int(ax.extent.value)
            elif pt in (ParallelType.Unroll, ParallelType.Serial):
                var = f"u{len(loop_index)}"
                loop_index[ax] = var
                serial.append((ax, var))
            else:
                raise NotLowerable(f"loop axis parallelised as {pt}")
        if lanes == 1:
            loop_index = {ax: ("0" if s == lane_var else s) for ax, s in loop_index.items()}
        self.lanes = lanes
        at_lane0 = {ax: ("0" if s == lane_var else s) for ax, s in loop_index.items()}
        preds = self._in_bounds(at_lane0)
        ri_lane = lane_var if lanes > 1 else "0"
        body: list = []
        if not loop:
            body.append(Comment("no axes: one thread computes the single element"))
            guard = If("blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0")
            body.append(guard)
            guard.body.extend(self._stages(loop_index, at_lane0, lanes, "0", "0", per_stage=False))
        elif len(serial) == 1 and preds:
            # unswitch: when the last unrolled iteration is in bounds, so are all (indices grow
            # with the unroll index); that path has no predicates and issues every load of the
            # unrolled iterations before any math, so more bytes are in flight per thread
            ax, var = serial[0]
            stop = self.extent(ax.extent)
            last = {a: (f"({stop} - 1)" if s == var else s) for a, s in at_lane0.items()}
            all_in = " && ".join(self._in_bounds(last))
            size = int(ax.extent.value) * lanes if ax.extent.is_const else None
            if size is None:
                raise NotLowerable("an unrolled axis of symbolic extent")
            ri_fast = f"{var} * {lanes} + {lane_var}" if lanes > 1 else var
            fast = self._stages(loop_index, at_lane0, size, ri_fast, f"{var} * {lanes}", per_stage=True, unroll=(var, stop))
            slow_loop = For(var, stop, [If(" && ".join(preds), self._stages(loop_index, at_lane0, lanes, ri_lane, "0",
                                                                              per_stage=False))], unroll=True)
            body.append(If(all_in, fast))
            body.append(If(f"!({all_in})", [slow_loop]))
        else:
            nest = body
            for ax, var in serial:
                f = For(var, self.extent(ax.extent), unroll=ax.parallel_type is ParallelType.Unroll)
                nest.append(f)
                nest = f.body
            inner = self._stages(loop_index, at_lane0, lanes, ri_lane, "0", per_stage=False)
            nest.append(If(" && ".join(preds), inner) if preds else Comment("every index in bounds"))
            if not preds:
                nest.extend(inner)
        return Kernel(self.name, self.params, body, self.index_type, threads=threads,
                      grid_extent=block_extent, grid_extent_y=block_extent_y)

    def _in_bounds(self, idx_map: dict[IterDomain, str]) -> list[str]:
        """Every outermost split's input index below its extent (a split of a split's output
        is in bounds when the first split's input is; lane 0 decides for a whole vector)."""
        idx = self.ref_indices(idx_map)
        return list(dict.fromkeys(
            f"{idx[e.inputs[0]]} < {self.extent(e.inputs[0].extent)}" for e in self._history
            if isinstance(e, Split) and not isinstance(e.inputs[0].definition, Split)))

    def _stages(self, loop_index, at_lane0, size: int, ri: str, base: str, *, per_stage: bool,
                unroll: tuple[str, str] | None = None) -> list:
        """Declarations, loads, math and stores of one tile of `size` register elements:
        register element `ri` (over the lane variable), vector accesses at `base`. With
        `per_stage`, each stage is its own loop over the unrolled axis `unroll`."""
        fusion, lanes = self.fusion, self.lanes
        idx_v = self.ref_indices(loop_index)
        idx_0 = self.ref_indices(at_lane0)
        regs: dict[Val, str] = {}
        decls: list = []
        loads: list = []
        lane_loads: list = []
        compute: list = []
        stores: list = []
        exprs = fusion.exprs()
        for tv in fusion.inputs:
            if not isinstance(tv, TensorView) or not any(tv in e.inputs for e in exprs):
                continue
            name = f"r{tv.name}"
            ct = cops.ctype(tv.dtype)
            decls.append(Decl(ct, name, size))
            regs[tv] = f"{name}[{ri}]"
            ptr = self.tensor_ptr(tv)
            if lanes > 1 and tv.name in self.vector_tensors:
                loads.append(VecLoad(ct, lanes, f"{name} + {base}" if base != "0" else name, f"&{ptr}[{self.offset(tv, idx_0)}]"))
            else:
                lane_loads.append(Assign(regs[tv], f"{ptr}[{self.offset(tv, idx_v)}]"))
        for e in exprs:
            outs = [o for o in e.outputs if isinstance(o, TensorView)]
            if not outs:
                continue  # host arithmetic: inlined where used
            if len(outs) != 1:
                raise NotLowerable(f"{type(e).__name__} with several outputs")
            (out,) = outs
            rhs = self._tensor_value(e, out, regs, idx_v)
            if rhs is None:  # a view: the same element as its operand
                regs[out] = regs[e.inputs[0]]
                continue
            name = f"t{out.name}"
            decls.append(Decl(cops.ctype(out.dtype), name, size))
            regs[out] = f"{name}[{ri}]"
            compute.append(Assign(regs[out], rhs))
        for out in fusion.outputs:
            if not isinstance(out, TensorView):
                continue
            ptr = self.tensor_ptr(out)
            src = regs[out]
            array = src.split("[")[0]
            guard = self._redundant_guard(out, idx_0)
            if lanes > 1 and out.name in self.vector_tensors:
                st = [VecStore(cops.ctype(out.dtype), lanes, f"&{ptr}[{self.offset(out, idx_0)}]",
                               f"{array} + {base}" if base != "0" else array)]
            else:
                st = self._lanes([Assign(f"{ptr}[{self.offset(out, idx_v)}]", src)])
            stores.extend([If(guard, st)] if guard else st)

        def over_unroll(stmts: list) -> list:
            if not stmts:
                return []
            if per_stage and unroll is not None:
                return [For(unroll[0], unroll[1], stmts, unroll=True)]
            return stmts

        out: list = list(decls)
        if per_stage:
            out += over_unroll(loads + self._lanes(lane_loads))
            out += over_unroll(self._lanes(compute))
            out += over_unroll(stores)
        else:
            out += loads + self._lanes(lane_loads + compute) + stores
        return out

    def _lanes(self, stmts: list) -> list:
        if not stmts:
            return []
        if self.lanes > 1:
            return [For("v", str(self.lanes), stmts, unroll=True, ctype="int")]
        return stmts

    def _redundant_guard(self, out: TensorView, idx: dict[IterDomain, str]) -> str:
        """Outputs lacking some reference axis are written by the threads at index 0 of it."""
        have = {self.ref_axis(i) for i in out.logical_no_reductions()}
        conds = [f"{idx[r]} == 0" for r in self.ref_logical if not r.is_broadcast and r not in have]
        return " && ".join(conds)

    def _tensor_value(self, e, out: TensorView, regs: dict[Val, str], idx: dict[IterDomain, str]) -> str | None:
        def operand(v: Val) -> str:
            if isinstance(v, TensorView):
                got = regs.get(v)
                if got is None:
                    raise NotLowerable(f"{v!r} is read before it is computed")
                return got
            return self.scalar(v)

        if isinstance(e, (UnaryOp, BinaryOp, TernaryOp)):
            return self._value(e, out, operand)
        if isinstance(e, (BroadcastOp, ExpandOp, SqueezeOp)):
            return None
        if isinstance(e, LoadStoreOp):
            return None if e.inputs[0].dtype == out.dtype else cops.emit_cast(operand(e.inputs[0]), e.inputs[0].dtype, out.dtype)
        if isinstance(e, ReductionOp) and is_trivial_reduction(e):  # a squeeze in all but name
            x = e.inputs[0]
            return cops.emit_cast(operand(x), x.dtype, out.dtype) if x.dtype != out.dtype else None
        if isinstance(e, FullOp):
            fill = e.inputs[-1]
            return cops.emit_cast(self.scalar(fill), fill.dtype, out.dtype) if fill.dtype != out.dtype else self.scalar(fill)
        if isinstance(e, IotaOp):
            _, start, step = e.inputs
            (axis,) = out.logical_no_reductions()
            r = self.ref_axis(axis)
            pos = idx[r] if r is not None else "0"
            i = cops.emit_cast(f"({pos})", _index_dtype(self.index_type), out.dtype)
            return cops.emit_binary(BinaryOpType.Add, cops.emit_cast(self.scalar(start), start.dtype, out.dtype),
                                    cops.emit_binary(BinaryOpType.Mul, i, cops.emit_cast(self.scalar(step), step.dtype, out.dtype),
                                                     out.dtype, out.dtype, out.dtype), out.dtype, out.dtype, out.dtype)
        raise NotLowerable(f"{type(e).__name__} in a pointwise kernel")


def _index_dtype(index_type: str):
    from fuser.ir import DataType

    return DataType.Int if index_type == "int64" else DataType.Int32


def lower_pointwise(fusion: Fusion, ref: TensorView, vectorize: int, vector_tensors: frozenset[int],
                    index_type: str, sub: SubFusion | None = None, name: str = "fuser_pointwise") -> Kernel:
    """Kernel IR for a pointwise fusion scheduled from `ref` (`sub`: the fusion's analysis,
    when the caller has one)."""
    return PointwiseLowering(fusion, ref, vectorize, vector_tensors, index_type, name, sub).lower()
