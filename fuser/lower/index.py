"""Indexing tensors from a reference's loop nest.

The loop indices are walked back through the reference's Split/Merge history to its logical
axes; each tensor's axes map to the reference axes of their class (broadcast axes read
element 0), and a tensor's offset sums index × stride over its stored axes. A run of
contiguous innermost axes that the reference merged is indexed by the merged index directly,
with no division.
"""
from __future__ import annotations

from fuser.ir import BinaryOp, Fusion, IterDomain, Merge, Scalar, Split, TensorView
from fuser.ir.exprs import BinaryOpType
from fuser.ir.transforms import id_exprs_between
from fuser.scheduler.analysis import SubFusion

from .errors import NotLowerable
from .kir import Expr, IndexBinary, IntLit, all_of, eq, lt
from .params import ParamTable

#: integer extent arithmetic the index type can do
_EXTENT_OPS = frozenset({BinaryOpType.Add, BinaryOpType.Sub, BinaryOpType.Mul, BinaryOpType.Div,
                         BinaryOpType.CeilDiv, BinaryOpType.Max, BinaryOpType.Min})

Indices = dict[IterDomain, Expr]


class TensorIndexer:
    """Indices, offsets and predicates of a fusion's tensors in the loop nest of `ref`."""

    def __init__(self, fusion: Fusion, ref: TensorView, sub: SubFusion, params: ParamTable) -> None:
        self.fusion = fusion
        self.ref = ref
        self.params = params
        find, id_of = sub.uf.find, sub.a.id_of
        self.ref_logical = [i for i in ref.domain.logical if not i.is_reduction]
        self._ref_by_class = {find(id_of(r)): r for r in self.ref_logical}
        for tv in fusion.inputs:
            if getattr(tv, "is_cpu_scalar", False):
                raise NotLowerable(f"{tv!r} is a CPU scalar tensor (its value would be read on the host)")
        # indexing goes through axis classes: two axes of one tensor in one class (x + x.T on
        # a square) would read the same coordinate twice
        for tv in sub.tensors():
            cls = sub.classes_of(tv)
            if len(set(cls)) != len(cls):
                raise NotLowerable(f"{tv!r} has two axes the fusion maps onto each other")
        self._find, self._id_of = find, id_of
        #: extents the runtime binds from the input tensors' sizes: parameters, even where
        #: they are expressions of the complete fusion's sizes (a segment's inputs)
        self._bound = {e for tv in fusion.inputs if isinstance(tv, TensorView) for i in tv.logical_no_reductions()
                       for e in (i.extent, i.expanded_extent) if e is not None and not e.is_const}
        self._history = id_exprs_between(ref.domain.logical, ref.domain.loop)
        self._suffix_node = self._suffix_nodes()

    def extent(self, s: Scalar) -> Expr:
        """An integer scalar of the fusion (an extent) in index arithmetic."""
        if s.is_const:
            return IntLit(int(s.value))
        d = s.definition
        if d is None or s in self._bound:
            return self.params.extent(s)
        if isinstance(d, BinaryOp) and d.op_type in _EXTENT_OPS:
            a, b = (self.extent(x) for x in d.inputs)
            return IndexBinary(d.op_type, a, b)
        raise NotLowerable(f"extent {s!r} is computed by {type(d).__name__}")

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

    def ref_indices(self, loop_index: Indices) -> Indices:
        """Every reference axis's index, from its loop axes' indices."""
        idx = dict(loop_index)
        for e in reversed(self._history):
            if isinstance(e, Split):
                outer, inner = e.outputs
                f = self.extent(e.factor) if e.inner_split else self.extent(inner.extent)
                idx[e.inputs[0]] = idx[outer] * f + idx[inner]
            elif isinstance(e, Merge):
                o, i = e.inputs
                m = idx[e.outputs[0]]
                ext = self.extent(i.extent)
                idx[o] = m // ext
                idx[i] = m % ext
            else:
                raise NotLowerable(f"reference transform {type(e).__name__}")
        return idx

    def ref_axis(self, i: IterDomain) -> IterDomain | None:
        """The reference axis of `i`'s class (None: the reference has none)."""
        return self._ref_by_class.get(self._find(self._id_of(i)))

    def offset(self, tv: TensorView, idx: Indices) -> Expr:
        """tv's element offset at the reference indices `idx`."""
        logical = tv.logical_no_reductions()
        pos = {i: d for d, i in enumerate(logical)}
        alloc = [i for i in (tv.domain.maybe_allocation if tv in self.fusion.inputs or tv in self.fusion.outputs
                             else logical) if not i.is_reduction]
        contig = dict(zip(tv.domain.maybe_allocation, tv.domain.contiguity))
        terms: list[Expr] = []
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
            terms.append(idx[r] * self.params.stride(tv, pos[i]))
        if not terms:
            return IntLit(0)
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total

    def in_bounds(self, loop_index: Indices) -> list[Expr]:
        """Every outermost split's input index below its extent (a split of a split's output
        is in bounds when the first split's input is; lane 0 decides for a whole vector)."""
        idx = self.ref_indices(loop_index)
        return list(dict.fromkeys(
            lt(idx[e.inputs[0]], self.extent(e.inputs[0].extent)) for e in self._history
            if isinstance(e, Split) and not isinstance(e.inputs[0].definition, Split)))

    def writer_guard(self, out: TensorView, idx: Indices) -> Expr | None:
        """Outputs lacking some reference axis are written by the threads at index 0 of it
        (None: every thread writes its own element)."""
        have = {self.ref_axis(i) for i in out.logical_no_reductions()}
        return all_of([eq(idx[r], 0) for r in self.ref_logical if not r.is_broadcast and r not in have])
