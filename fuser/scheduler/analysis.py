"""Structural facts schedulers decide from, computed once per fusion and cheaply per
sub-fusion.

`FusionAnalysis` numbers a fusion's tensor-level expressions and iteration domains and
records, per expression, which producer and consumer axes are the same axis (the
*permissive* map: a broadcast axis maps to the axis it is broadcast to). `SubFusion` is
a set of those expressions — a candidate segment — and answers what a scheduler asks:
which axes it iterates over, whether one tensor covers them all, its reductions and
their persistent buffers. The segmenter asks about thousands of candidate segments, so a
`SubFusion` works on integer ids and never copies IR.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

import numpy as np

from fuser._core.idmap import IdUnion

from fuser.ir import (
    AtenOp,
    BroadcastOp,
    CatOp,
    Expr,
    ExpandOp,
    FullOp,
    Fusion,
    GatherOp,
    IndexSelectOp,
    IotaOp,
    IterDomain,
    LinearOp,
    LoadStoreOp,
    MatmulOp,
    PadOp,
    ReductionOp,
    ReshapeOp,
    RNGOp,
    ScanOp,
    ScatterOp,
    SelectOp,
    SliceOp,
    SqueezeOp,
    TensorView,
    WelfordOp,
)
from fuser.ir.exprs import LoadStoreOpType
from fuser.ir.mapping import exact_pairs
from fuser.ir.transforms import id_exprs_between

from .runtime_info import PERSISTENT_REGISTER_FRACTION, SMEM_RESERVED_PER_BLOCK, SchedulerRuntimeInfo

# --- expression kinds ---------------------------------------------------------------------
POINTWISE = "pointwise"  # elementwise math, casts, set, factories, indexing
REDUCTION = "reduction"  # a reduction over at least one non-broadcast axis
VIEW = "view"  # broadcast / squeeze / expand: metadata only
RESHAPE = "reshape"
RESIZE = "resize"  # slice, pad, cat
ATEN = "aten"  # work only ATen does (matmul, linear, scan, the AtenOps)
SCATTER = "scatter"  # torch.scatter: the greedy scheduler's
SCALAR = "scalar"  # scalar arithmetic: evaluated on the host wherever it is needed

_ATEN_ONLY = (MatmulOp, LinearOp, ScanOp, AtenOp)
_RESIZE = (SliceOp, PadOp, CatOp)
_VIEW = (BroadcastOp, SqueezeOp, ExpandOp)
_INDEXING = (SelectOp, IndexSelectOp, GatherOp)
#: ops a consumer segment may recompute instead of reading their result from memory
_RECOMPUTABLE_KINDS = frozenset({POINTWISE, VIEW})


def is_segmenter_set(e: Expr) -> bool:
    return isinstance(e, LoadStoreOp) and e.op_type is LoadStoreOpType.SegmenterSet


def is_trivial_reduction(e: Expr) -> bool:
    """A reduction over broadcast axes only: a squeeze in all but name."""
    if not isinstance(e, (ReductionOp, WelfordOp)):
        return False
    out = e.outputs[0]
    inp = e.inputs[0]
    for p, c in zip(inp.logical_no_reductions(), out.root):
        if c.is_reduction and not p.is_broadcast:
            return False
    return True


def expr_kind(e: Expr) -> str:
    if not any(isinstance(v, TensorView) for v in e.outputs):
        return SCALAR
    if isinstance(e, (ReductionOp, WelfordOp)):
        return VIEW if is_trivial_reduction(e) else REDUCTION
    if isinstance(e, _ATEN_ONLY):
        return ATEN
    if isinstance(e, ScatterOp):
        return SCATTER
    if isinstance(e, _RESIZE):
        return RESIZE
    if isinstance(e, ReshapeOp):
        return RESHAPE
    if isinstance(e, _VIEW):
        return VIEW
    return POINTWISE


def reduction_stages(exprs: Iterable[Expr]) -> dict[TensorView, int]:
    """Per tensor `exprs` compute: how many reductions lie upstream of it, in series: the
    pass of a persistent kernel over its rows that computes it (a reduction accumulates in
    its input's pass; its result is read from the next)."""
    st: dict[TensorView, int] = {}
    for e in exprs:
        s = max((st.get(v, 0) for v in e.inputs if isinstance(v, TensorView)), default=0)
        if expr_kind(e) == REDUCTION:
            s += 1
        for o in e.outputs:
            if isinstance(o, TensorView):
                st[o] = s
    return st


def own_scheduler_reason(sub: "SubFusion") -> str | None:
    """Why a kernel scheduler of general work leaves `sub` alone: it holds work that one
    scheduler of its own computes (ATen-only ops: expr_eval's; a scatter: greedy's)."""
    if ATEN in sub.kinds:
        return "has an ATen-only op"
    if SCATTER in sub.kinds:
        return "has a scatter (the greedy scheduler's)"
    return sub.folded_axes_reason()


def is_recomputable(e: Expr) -> bool:
    """Whether a consumer segment may recompute `e` rather than read its output: cheap,
    deterministic work (never RNG, reductions, or ATen-only ops)."""
    return expr_kind(e) in _RECOMPUTABLE_KINDS and not isinstance(e, RNGOp) and not is_segmenter_set(e)


def _permissive_pairs(e: Expr) -> list[tuple[IterDomain, IterDomain]]:
    """exact_pairs plus broadcast producer axes mapped to the consumer axes they meet,
    and a cat's concatenated axes (related by the resize that places each input)."""
    pairs = exact_pairs(e)
    outs = [o for o in e.outputs if isinstance(o, TensorView)]
    ins = [v for v in e.inputs if isinstance(v, TensorView)]
    if isinstance(e, CatOp):
        for inp in ins:
            pairs.append((inp.logical_no_reductions()[e.dim], outs[0].root[e.dim]))
        return pairs
    if isinstance(e, (SqueezeOp, BroadcastOp, SelectOp, IndexSelectOp, GatherOp, ScatterOp, MatmulOp, LinearOp, AtenOp,
                      FullOp, IotaOp, RNGOp)):
        return pairs
    for out in outs:
        for inp in ins:
            p_ids, c_ids = inp.logical_no_reductions(), out.root
            if len(p_ids) == len(c_ids):
                pairs.extend((p, c) for p, c in zip(p_ids, c_ids) if p.is_broadcast and not c.is_broadcast)
    return pairs


def _closed(classes: Iterable[int], relations: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> set[int]:
    """`classes` closed over `relations` (pairs of class tuples): where every class of one
    side is in the set, the other side's are added."""
    closed = set(classes)
    changed = bool(relations)
    while changed:
        changed = False
        for a, b in relations:
            for src, dst in ((a, b), (b, a)):
                if all(c in closed for c in src) and not all(c in closed for c in dst):
                    closed.update(dst)
                    changed = True
    return closed


class FusionAnalysis:
    """Integer-indexed view of one fusion for scheduler checks on its sub-fusions."""

    def __init__(self, fusion: Fusion, info: SchedulerRuntimeInfo | None = None) -> None:
        self.fusion = fusion
        self.info = info
        self.exprs: list[Expr] = [e for e in fusion.exprs()]
        self.expr_index: dict[Expr, int] = {e: k for k, e in enumerate(self.exprs)}
        self.kinds: list[str] = [expr_kind(e) for e in self.exprs]
        self._id_index: dict[IterDomain, int] = {}
        self.ids: list[IterDomain] = []
        self._logical: dict[TensorView, tuple[int, ...]] = {}
        self._concrete: dict[TensorView, tuple[int, ...]] = {}
        #: per expr: (producer id, consumer id) pairs of the same axis
        self.pairs: list[list[tuple[int, int]]] = []
        #: per expr: the Split/Merge/Resize between its outputs' root and logical domains
        self.transforms: list[list[tuple[tuple[int, ...], tuple[int, ...]]]] = []
        for e in self.exprs:
            self.pairs.append([(self.id_of(p), self.id_of(c)) for p, c in _permissive_pairs(e)])
            ts = []
            for out in e.outputs:
                if isinstance(out, TensorView) and out.domain.has_root:
                    for t in id_exprs_between(out.root, out.logical):
                        ts.append(self._relation(t.inputs, t.outputs))
                    if isinstance(e, ReshapeOp):
                        # a reshape's root and logical axes cover each other, also when the
                        # sizes are symbolic and no Split/Merge says how
                        ts.append(self._relation(out.root, out.logical))
                    if isinstance(e, SliceOp):
                        # a stepped slice's axis is a new one (no Resize says how): it and
                        # its root axis cover each other
                        ts.extend(self._relation([r], [lg]) for r, lg in zip(out.root, out.logical)
                                  if lg is not r and lg.definition is None)
            self.transforms.append(ts)
        for tv in fusion.tensors():
            for i in tv.domain.all_ids():
                self.id_of(i)
        offsets = np.zeros(len(self.exprs) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in self.pairs], out=offsets[1:])
        flat = np.fromiter((x for p in self.pairs for pair in p for x in pair), dtype=np.int64, count=2 * int(offsets[-1]))
        #: the axis classes of one sub-fusion at a time (see SubFusion.uf)
        self.idunion = IdUnion(len(self.ids), offsets, flat)
        self._uf_owner: "SubFusion | None" = None
        #: per tensor: the exprs (indices) reading it
        self.uses: dict[TensorView, list[int]] = {}
        for k, e in enumerate(self.exprs):
            for v in e.inputs:
                if isinstance(v, TensorView):
                    lst = self.uses.setdefault(v, [])
                    if not lst or lst[-1] != k:
                        lst.append(k)
        self.outputs = set(fusion.outputs)

    def _relation(self, ins, outs) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(input axes, output axes) of a transform; broadcast axes iterate over nothing,
        except expanded ones, whose extent a reshape counts ([7, 1 ex 8] -> [56])."""
        def ids(xs):
            return tuple(self.id_of(i) for i in xs
                         if isinstance(i, IterDomain) and (not i.is_broadcast or i.has_expanded_extent))
        return ids(ins), ids(outs)

    def id_of(self, i: IterDomain) -> int:
        got = self._id_index.get(i)
        if got is None:
            got = self._id_index[i] = len(self.ids)
            self.ids.append(i)
        return got

    def logical_ids(self, tv: TensorView) -> tuple[int, ...]:
        """`tv`'s logical axes (reductions dropped) as ids (cached)."""
        got = self._logical.get(tv)
        if got is None:
            ids = tv.logical_no_reductions()
            got = self._logical[tv] = tuple(self.id_of(i) for i in ids)
            self._concrete[tv] = tuple(self.id_of(i) for i in ids if not i.is_broadcast)
        return got

    def concrete_ids(self, tv: TensorView) -> tuple[int, ...]:
        """`tv`'s non-broadcast logical axes as ids (cached)."""
        got = self._concrete.get(tv)
        if got is None:
            self.logical_ids(tv)
            got = self._concrete[tv]
        return got

    def sub(self, exprs: Iterable[int], outputs: set[TensorView] | None = None) -> "SubFusion":
        return SubFusion(self, exprs, outputs)

    def whole(self) -> "SubFusion":
        return SubFusion(self, range(len(self.exprs)))


#: a group of axes, outermost first
Axes = tuple[IterDomain, ...]


class IndexPlan(NamedTuple):
    """How a reference tensor's axes reach the other axes of a sub-fusion through its
    reshapes, as a kernel that indexes every tensor from the reference's indices needs."""

    #: (from, to): the axes `to` take the row-major position of the axes `from` (reached by
    #: then), each in its own extent; an empty `from`: `to` have extent 1 (index 0)
    steps: tuple[tuple[Axes, Axes], ...]
    #: the axis classes reached, the reference's included
    known: frozenset[int]
    #: why some axis cannot be indexed from the reference's (None: every axis can)
    reason: str | None


class Reduction:
    """One non-trivial reduction of a sub-fusion: its axes as classes of the sub-fusion's map."""

    __slots__ = ("expr", "index", "input", "iter_classes", "red_classes", "is_inner")

    def __init__(self, expr: Expr, index: int, input: TensorView, iter_classes: frozenset[int],
                 red_classes: frozenset[int], is_inner: bool) -> None:
        self.expr, self.index, self.input = expr, index, input
        self.iter_classes, self.red_classes, self.is_inner = iter_classes, red_classes, is_inner

    def same_axes(self, other: "Reduction") -> bool:
        return self.iter_classes == other.iter_classes and self.red_classes == other.red_classes


class SubFusion:
    """A candidate segment: some of a FusionAnalysis's exprs, and what schedulers ask of them.
    Its outputs: what it makes that the fusion returns or another expr uses, or, where the
    segmenter knows better (another segment recomputes some of those), `outputs`."""

    def __init__(self, analysis: FusionAnalysis, exprs: Iterable[int], outputs: set[TensorView] | None = None) -> None:
        self.a = analysis
        self.expr_ids: list[int] = sorted(set(exprs))
        self._expr_array = np.array(self.expr_ids, dtype=np.int64)
        self.exprs: list[Expr] = [analysis.exprs[k] for k in self.expr_ids]
        self._members = set(self.expr_ids)
        produced: dict[TensorView, None] = {}
        inputs: dict[TensorView, None] = {}
        for e in self.exprs:
            for v in e.inputs:
                if isinstance(v, TensorView) and v not in produced:
                    inputs[v] = None
            for v in e.outputs:
                if isinstance(v, TensorView):
                    produced[v] = None
        self.produced: list[TensorView] = list(produced)
        self.inputs: list[TensorView] = [v for v in inputs if v not in produced]
        members = self._members
        self.outputs: list[TensorView] = [
            v for v in produced
            if (v in outputs if outputs is not None else
                v in analysis.outputs or any(k not in members for k in analysis.uses.get(v, ())))
        ]
        self.kinds: set[str] = {analysis.kinds[k] for k in self.expr_ids}
        self.has_indexing = any(isinstance(e, _INDEXING) for e in self.exprs)
        #: results shared by the schedulers asked about this sub-fusion
        self.memo: dict[str, object] = {}
        self._reductions: list[Reduction] | None = None

    # --- axes ---------------------------------------------------------------------------------
    @property
    def uf(self) -> IdUnion:
        """The analysis's shared union-find, holding this sub-fusion's axis classes: one
        sub-fusion owns it at a time and a query rebuilds it when another did last."""
        a = self.a
        if a._uf_owner is not self:
            a.idunion.build(self._expr_array)
            a._uf_owner = self
        return a.idunion

    def classes_of(self, tv: TensorView, *, concrete: bool = True) -> list[int]:
        """The classes of `tv`'s logical axes (only its non-broadcast ones if `concrete`)."""
        find = self.uf.find
        ids = self.a.concrete_ids(tv) if concrete else self.a.logical_ids(tv)
        return [find(i) for i in ids]

    def spans(self, tv: TensorView, ref: TensorView) -> bool:
        """Whether `tv` has an axis in each of the classes of `ref`'s concrete axes: one of
        its elements for each of ref's (not a weight repeated along some axis of ref)."""
        return set(self.classes_of(ref)) <= set(self.classes_of(tv))

    def tensors(self) -> list[TensorView]:
        return self.inputs + self.produced

    def indexed_axes(self) -> set[int]:
        """Axes of index-op lookup tensors read by position, not iterated over."""
        out: set[int] = set()
        for k in self.expr_ids:
            e = self.a.exprs[k]
            if isinstance(e, _INDEXING):
                mapped = {p for p, _ in self.a.pairs[k]}
                for i in e.inputs[0].logical_no_reductions():
                    ii = self.a.id_of(i)
                    if ii not in mapped:
                        out.add(ii)
        return out

    def lookup_produced_inside(self) -> bool:
        """An index op whose lookup tensor this sub-fusion computes (it must come from memory)."""
        produced = set(self.produced)
        return any(isinstance(e, _INDEXING) and e.inputs[0] in produced for e in self.exprs)

    def index_size_reason(self) -> str | None:
        """Why this call's sizes leave an index op to the reference executor (which raises
        as torch does): a take_along_axis whose input and index have different sizes, neither
        1, along an axis other than the gathered one. No binding check sees it where one of
        the two is an expanded broadcast (only concrete axes map exactly), and a kernel would
        iterate the output's extent and read the broadcast operand at position 0."""
        for e in self.exprs:
            if not (isinstance(e, GatherOp) and e.exact_sizes):
                continue
            x, index = e.inputs[0], e.inputs[1]
            for k, (xi, ii) in enumerate(zip(x.logical_no_reductions(), index.logical_no_reductions())):
                if k == e.dim or not (xi.has_expanded_extent or ii.has_expanded_extent):
                    continue
                a, b = self._runtime_extent(xi), self._runtime_extent(ii)
                if a is not None and b is not None and a != b and 1 not in (a, b):
                    return f"take_along_axis: the input has size {a} and the index {b} in dimension {k}"
        return None

    def folded_axes_reason(self) -> str | None:
        """Why no kernel indexes this sub-fusion by axis classes: a tensor with two axes in
        one class (x + x.T on a square) would read the same coordinate for both (cached)."""
        if "folded_axes" not in self.memo:
            why = None
            for tv in self.tensors():
                cls = self.classes_of(tv)
                if len(set(cls)) != len(cls):
                    why = f"T{tv.name} has two axes the fusion maps onto each other"
                    break
            self.memo["folded_axes"] = why
        return self.memo["folded_axes"]

    def concrete_classes(self) -> set[int]:
        """Every axis class some tensor of the sub-fusion iterates over (cached)."""
        got = self.memo.get("concrete")
        if got is None:
            find = self.uf.find
            concrete_ids = self.a.concrete_ids
            skip = self.indexed_axes() if self.has_indexing else ()
            got = set()
            for tv in self.tensors():
                for i in concrete_ids(tv):
                    if i not in skip:
                        got.add(find(i))
            self.memo["concrete"] = got
        return got

    def covered_by(self, classes: Iterable[int]) -> set[int]:
        """`classes` closed over the reshapes and resizes in the sub-fusion: an axis split or
        merged from covered axes is covered, and so are the axes of a covered split/merge."""
        find = self.uf.find
        ts = [(tuple(find(i) for i in ins), tuple(find(o) for o in outs))
              for k in self.expr_ids for ins, outs in self.a.transforms[k]]
        return _closed(classes, ts)

    def written_whole(self, ref: TensorView, out: TensorView) -> bool:
        """Whether `out` is written whole from `ref`'s loop nest: each axis of it that is not
        one of ref's own is reached through reshapes from ref axes `out` does not hold too (an
        output holding an axis beside a reshape of it, reached from the reference's axes
        through that reshape, would have the one fixed by the other: part never written)."""
        ref_classes = set(self.classes_of(ref))
        classes = self.classes_of(out)
        derived = [c for c in classes if c not in ref_classes]
        if not derived:
            return True
        # the loop covers ref's stored elements (an expanded axis once): fewer than out's cannot
        # write it (a reshape of an expanded axis stores each of its positions)
        n_ref, n_out = self.stored(ref), self.stored(out)
        if n_ref is not None and n_out is not None and n_ref < n_out:
            return False
        free = self.covered_by(ref_classes - set(classes))
        # an axis ref holds broadcast (one element in its loop) reached back through a
        # reshape of the axes ref iterates: the loop never walks it, so whatever is derived
        # through it is written at its first position only (x[:, None] + x.reshape(-1) with
        # x expanded beside x.reshape(2, -1))
        broadcast = set(self.classes_of(ref, concrete=False)) - ref_classes
        if free & broadcast:
            return False
        return all(c in free for c in derived)

    def stored(self, tv: TensorView) -> int | None:
        """The elements `tv` stores (its non-broadcast axes) by this call's sizes; None: unknown."""
        n = 1
        for i in tv.logical_no_reductions():
            if not i.is_broadcast:
                e = self._runtime_extent(i)
                if e is None:
                    return None
                n *= e
        return n

    def reference(self, candidates: Sequence[TensorView], need: set[int]) -> TensorView | None:
        """The first of `candidates` whose axes (closed over reshapes) cover `need`."""
        for tv in candidates:
            if need <= self.covered_by(self.classes_of(tv)):
                return tv
        return None

    # --- reshapes ------------------------------------------------------------------------------
    def _runtime_extent(self, i: IterDomain) -> int | None:
        """`i`'s extent (expanded: as the user sees it): a constant, or (with runtime info)
        this call's size; None: unknown."""
        ext = i.user_extent
        if ext.is_const:
            return int(ext.value)
        if self.a.info is None:
            return None
        try:
            return self.a.info.evaluate(ext)
        except Exception:  # noqa: BLE001 - an extent only an executed op knows
            return None

    def _reshape_relations(self) -> list[tuple[Axes, Axes]]:
        """The relations of the sub-fusion's reshapes. A reshape keeps row-major order: an
        element's position in its root axes equals its position in its logical ones. Where
        the extents are known (constants, or this call's sizes) that splits into runs of
        axes with equal element counts, each a relation of its own (a static reshape's
        Splits and Merges are such runs); unknown extents leave one relation, less the
        leading and trailing axes of the same extent, which pair one to one (cached)."""
        got = self.memo.get("reshape_relations")
        if got is not None:
            return got
        rels: list[tuple[Axes, Axes]] = []
        for e in self.exprs:
            if not isinstance(e, ReshapeOp):
                continue
            out = e.outputs[0]
            # an expanded input axis counts in the positions (a static reshape made it a
            # concrete root axis; a symbolic one kept it expanded)
            src = [i for i in out.root if not i.is_broadcast or i.has_expanded_extent]
            dst = [i for i in out.logical if not i.is_broadcast or i.has_expanded_extent]
            runs = self._runs(src, dst)
            if runs is not None:
                rels.extend(runs)
                continue
            while src and dst and src[0].user_extent is dst[0].user_extent:
                rels.append(((src.pop(0),), (dst.pop(0),)))
            tail = []
            while src and dst and src[-1].user_extent is dst[-1].user_extent:
                tail.append(((src.pop(),), (dst.pop(),)))
            if src or dst:
                rels.append((tuple(src), tuple(dst)))
            rels.extend(reversed(tail))
        self.memo["reshape_relations"] = rels
        return rels

    def _runs(self, src: list[IterDomain], dst: list[IterDomain]) -> list[tuple[Axes, Axes]] | None:
        """`src` and `dst` (of equal element counts, row-major) cut into the shortest runs
        of equal element counts (axes of extent 1 join a neighbouring run); None where an
        extent is unknown or zero."""
        sa = [self._runtime_extent(i) for i in src]
        sb = [self._runtime_extent(i) for i in dst]
        if None in sa or None in sb or 0 in sa or 0 in sb:
            return None
        runs: list[tuple[list[IterDomain], list[IterDomain]]] = []
        i = j = 0
        while i < len(src) and j < len(dst):
            a, b = [src[i]], [dst[j]]
            pa, pb = sa[i], sb[j]
            i, j = i + 1, j + 1
            while pa != pb:
                if pa < pb and i < len(src):
                    a.append(src[i])
                    pa *= sa[i]
                    i += 1
                elif pb < pa and j < len(dst):
                    b.append(dst[j])
                    pb *= sb[j]
                    j += 1
                else:
                    return None
            runs.append((a, b))
        rest_a, rest_b = src[i:], dst[j:]
        if any(n != 1 for n in sa[i:] + sb[j:]):
            return None
        if runs:  # trailing axes of extent 1
            runs[-1][0].extend(rest_a)
            runs[-1][1].extend(rest_b)
        elif rest_a or rest_b:  # only axes of extent 1: index 0
            runs.append((rest_a, rest_b))
        return [(tuple(a), tuple(b)) for a, b in runs]

    def _relation_classes(self) -> list[tuple[Axes, Axes, tuple[int, ...], tuple[int, ...]]]:
        """Each reshape relation's two sides with their axes' classes (cached)."""
        got = self.memo.get("relation_classes")
        if got is None:
            find, id_of = self.uf.find, self.a.id_of
            got = self.memo["relation_classes"] = [
                (a, b, tuple(find(id_of(i)) for i in a), tuple(find(id_of(i)) for i in b))
                for a, b in self._reshape_relations()]
        return got

    def index_plan(self, start: Iterable[int]) -> IndexPlan:
        """How the axes of this sub-fusion's tensors are indexed from a reference whose axes
        are the classes `start`, through its reshapes (cached). A relation gives the axes of
        one side their position from the other once that side is reached and none of its
        own axes is; a relation whose both sides are reached otherwise must be one already
        used (a reshape and its inverse), since nothing shows that two ways of indexing an
        axis agree. Without reshapes the plan has no steps."""
        start = frozenset(start)
        key = ("index_plan", start)
        got = self.memo.get(key)
        if got is not None:
            return got
        known = set(start)
        steps: list[tuple[Axes, Axes]] = []
        pending = [p for p in self._relation_classes() if p[2] != p[3]]
        used: set[frozenset] = set()
        progress = True
        while progress:
            progress = False
            rest = []
            for a, b, ca, cb in pending:
                for src, dst, cs, cd in ((a, b, ca, cb), (b, a, cb, ca)):
                    if all(c in known for c in cs) and not any(c in known for c in cd):
                        steps.append((src, dst))
                        known.update(cd)
                        used.add(frozenset((ca, cb)))
                        progress = True
                        break
                else:
                    rest.append((a, b, ca, cb))
            pending = rest
        reason = None
        for a, b, ca, cb in pending:
            reached = [c in known for c in ca + cb]
            if not any(reached):  # (unreached: the check below tells where a tensor has them)
                continue
            if not all(reached):
                reason = "a reshape's axes are partly reached another way (their positions may disagree)"
                break
            if frozenset((ca, cb)) not in used:
                reason = "a reshape relates axes that other ops relate too (their positions may disagree)"
                break
        if reason is None and not self.concrete_classes() <= known:
            reason = "some axis is not reached from the reference's axes through the reshapes"
        got = self.memo[key] = IndexPlan(tuple(steps), frozenset(known), reason)
        return got

    def reshape_closure(self, classes: Iterable[int]) -> frozenset[int]:
        """`classes` closed over the reshapes' relations (cached): where every axis of one
        side is in the set, the other side's are too (equal positions: an index that is a
        function of those axes' indices alone)."""
        classes = frozenset(classes)
        key = ("reshape_closure", classes)
        got = self.memo.get(key)
        if got is not None:
            return got
        rels = [(ca, cb) for _, _, ca, cb in self._relation_classes()]
        got = self.memo[key] = frozenset(_closed(classes, rels))
        return got

    def column_classes(self, r: "Reduction") -> frozenset[int]:
        """The axis classes whose index depends on the columns of reduction `r` (the axes it
        reduces): its reduced axes, and those reshapes relate to them (with or without kept
        axes). A tensor with such an axis spans the reduced axes."""
        if RESHAPE not in self.kinds:
            return r.red_classes
        plan = self.index_plan(self.classes_of(r.input))
        if plan.reason is not None:
            return r.red_classes
        return frozenset(plan.known - self.reshape_closure(r.iter_classes))

    # --- reductions -----------------------------------------------------------------------------
    def reductions(self) -> list[Reduction]:
        if self._reductions is None:
            find = self.uf.find
            a = self.a
            reds = []
            for k in self.expr_ids:
                if a.kinds[k] != REDUCTION:
                    continue
                e = a.exprs[k]
                out, inp = e.outputs[0], e.inputs[0]
                red = frozenset(find(a.id_of(c)) for c in out.root if c.is_reduction)
                it = frozenset(find(a.id_of(c)) for c in out.root if not c.is_reduction and not c.is_broadcast)
                order = inp.allocation if inp.is_fusion_input else inp.logical_no_reductions()
                concrete = [i for i in order if not i.is_broadcast and not i.is_reduction]
                inner = bool(concrete) and find(a.id_of(concrete[-1])) in red
                reds.append(Reduction(e, k, inp, it, red, inner))
            self._reductions = reds
        return self._reductions

    def _flow(self, reds: list[Reduction]) -> tuple[dict[TensorView, int], dict[TensorView, int]]:
        """Bitmasks per tensor: reductions it depends on (downstream) and reductions it
        feeds (upstream), within the sub-fusion."""
        bit = {r.index: 1 << n for n, r in enumerate(reds)}
        down: dict[TensorView, int] = {}
        for k, e in zip(self.expr_ids, self.exprs):
            m = 0
            for v in e.inputs:
                if isinstance(v, TensorView):
                    m |= down.get(v, 0)
            m |= bit.get(k, 0)
            for v in e.outputs:
                if isinstance(v, TensorView):
                    down[v] = m
        up: dict[TensorView, int] = {}
        for k, e in zip(reversed(self.expr_ids), reversed(self.exprs)):
            m = bit.get(k, 0)
            for v in e.outputs:
                if isinstance(v, TensorView):
                    m |= up.get(v, 0)
            for v in e.inputs:
                if isinstance(v, TensorView):
                    up[v] = up.get(v, 0) | m
        return down, up

    def reductions_in_series(self) -> bool:
        """A reduction that reads (through any path) another reduction's output."""
        reds = self.reductions()
        if len(reds) < 2:
            return False
        down, _ = self._flow(reds)
        return any(down.get(r.input, 0) for r in reds)

    def post_reduction_broadcast_resolved(self) -> bool:
        """Some tensor computed from a reduction's result iterates over that reduction's
        axes again: the reduced input must stay available (persistent) or be reread."""
        reds = self.reductions()
        if not reds:
            return False
        down, _ = self._flow(reds)
        for tv in self.produced:
            m = down.get(tv, 0)
            if not m:
                continue
            classes = set(self.classes_of(tv))
            for n, r in enumerate(reds):
                if m >> n & 1 and classes & self.column_classes(r):
                    return True
        return False

    def persistent_buffers(self) -> list[tuple[TensorView, Reduction]]:
        """(buffer, reduction) pairs: tensors feeding a reduction that are read again by
        an op computed from that reduction's result, along the reduced axes."""
        reds = self.reductions()
        if not reds:
            return []
        down, up = self._flow(reds)
        out = []
        members = set(self.expr_ids)
        for tv in self.tensors():
            u = up.get(tv, 0)
            if not u:
                continue
            # reductions the operands of tv's consumers already depend on: such a consumer
            # runs after the reduction (a reduction's own operand does not count)
            after = 0
            for k in self.a.uses.get(tv, ()):
                if k in members:
                    for v in self.a.exprs[k].inputs:
                        if isinstance(v, TensorView):
                            after |= down.get(v, 0)
            hit = u & after & ~down.get(tv, 0)
            if not hit:
                continue
            classes = set(self.classes_of(tv))
            for n, r in enumerate(reds):
                if hit >> n & 1 and classes & self.column_classes(r):
                    out.append((tv, r))
        return out

    def persistent_buffer_bytes(self) -> int:
        """Bytes of persistent buffer one reduction row needs: each buffer's extent along
        the reduced axes times its element size, unless re-reading the sub-fusion inputs it
        is computed from costs no more (projection to inputs; inputs already held count once)."""
        if self.a.info is None:
            raise ValueError("persistent buffer sizes need the call's SchedulerRuntimeInfo")
        buffers: dict[TensorView, Reduction] = {}
        for tv, r in self.persistent_buffers():
            buffers.setdefault(tv, r)
        leaves = {tv: self._projection_leaves(tv) for tv in buffers}
        held: set[TensorView] = set()
        total = 0
        for tv, r in buffers.items():  # buffers with no projection are held as they are
            if leaves[tv] is None:
                held.add(tv)
                total += self._row_bytes(tv, r)
        for tv, r in buffers.items():
            if leaves[tv] is None:
                continue
            new = [v for v in leaves[tv] if v not in held]
            projected = sum(self._row_bytes(v, r) for v in new)
            direct = self._row_bytes(tv, r)
            if projected <= direct:
                held.update(new)
                total += projected
            else:
                held.add(tv)
                total += direct
        return total

    def _row_bytes(self, tv: TensorView, r: Reduction) -> int:
        info = self.a.info
        find = self.uf.find
        # (an axis a reshape derives from reduced and kept axes counts whole: an over-estimate)
        cols = self.column_classes(r)
        n = 1
        for i in tv.logical_no_reductions():
            if not i.is_broadcast and find(self.a.id_of(i)) in cols:
                n *= info.extent(i)
        return n * tv.dtype.itemsize

    def _projection_leaves(self, tv: TensorView) -> list[TensorView] | None:
        """The sub-fusion inputs `tv` is computed from by recomputable ops (reductions'
        results count as held), or None when it is an input itself or another op that
        cannot be recomputed lies on the way."""
        produced = {v: e for e in self.exprs for v in e.outputs if isinstance(v, TensorView)}
        if tv not in produced:
            return None
        leaves: dict[TensorView, None] = {}
        stack, seen = [tv], set()
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            e = produced.get(v)
            if e is None:
                leaves[v] = None
                continue
            if expr_kind(e) == REDUCTION:
                continue  # a reduction's result is held per row already: free to reuse
            if not is_recomputable(e):
                return None
            stack.extend(x for x in e.inputs if isinstance(x, TensorView))
        return list(leaves)

    def persistent_budget(self) -> int:
        lim = self.a.info.device_limits
        return int(lim.register_file_bytes * PERSISTENT_REGISTER_FRACTION) + lim.smem_per_block - SMEM_RESERVED_PER_BLOCK
