"""Indexing tensors from a reference's loop nest.

The loop indices are walked back through the reference's Split/Merge history to its logical
axes. Every other tensor is indexed at an *index map*: one index per logical axis. An
output's map comes from the reference's axes of its class (closed over the reshapes,
slices, pads and cats that relate its axes to the reference's); an operand's map comes from
its consumer's (`operand_maps`): through a slice an axis reads `start + step * i`, through
a pad `i - left` (where that is inside the operand), through a cat `i - offset` of the
input whose range holds `i`, through a reshape the consumer's indices walked back to its
root. A tensor's offset sums index × stride over its stored axes; a run of contiguous
innermost axes whose indices are the reference's (plus constant shifts) is indexed by the
reference's merged index directly, with no division.
"""
from __future__ import annotations

from fuser.ir import BinaryOp, CatOp, Fusion, IterDomain, Merge, PadOp, ReshapeOp, Scalar, SliceOp, Split, TensorView
from fuser.ir.domain import Resize
from fuser.ir.exprs import BinaryOpType
from fuser.ir.mapping import ExactMap, exact_pairs
from fuser.ir.transforms import id_exprs_between
from fuser.scheduler.analysis import RESHAPE, SubFusion, _permissive_pairs

from .errors import NotLowerable
from .kir import Expr, IndexBinary, IntLit, Var, all_of, eq, lt
from .params import ParamTable

#: integer extent arithmetic the kernel does itself (the rest, such as a slice's bounds
#: clamped with min/max or chosen with where, the runtime evaluates into a parameter)
_EXTENT_OPS = frozenset({BinaryOpType.Add, BinaryOpType.Sub, BinaryOpType.Mul, BinaryOpType.Div,
                         BinaryOpType.CeilDiv})

Indices = dict[IterDomain, Expr]
#: a tensor's index map: an index per logical (non-reduction) axis
Map = dict[IterDomain, Expr]


def _lit(e: Expr) -> int | None:
    return e.value if isinstance(e, IntLit) else None


def add(a: Expr, b: Expr) -> Expr:
    """a + b, folding literals (and `a + (0 - c)` to `a - c`)."""
    if isinstance(b, IndexBinary) and b.op is BinaryOpType.Sub and _lit(b.lhs) == 0:
        return sub(a, b.rhs)
    la, lb = _lit(a), _lit(b)
    if lb == 0:
        return a
    if la == 0:
        return b
    if la is not None and lb is not None:
        return IntLit(la + lb)
    return a + b


def sub(a: Expr, b: Expr) -> Expr:
    """a - b, folding literals."""
    la, lb = _lit(a), _lit(b)
    if lb == 0:
        return a
    if la is not None and lb is not None:
        return IntLit(la - lb)
    return a - b


def mul(a: Expr, b: Expr) -> Expr:
    """a * b, folding literals."""
    la, lb = _lit(a), _lit(b)
    if la == 0 or lb == 0:
        return IntLit(0)
    if lb == 1:
        return a
    if la == 1:
        return b
    if la is not None and lb is not None:
        return IntLit(la * lb)
    return a * b


def unsplit(outer: Expr, inner: Expr, ext: Expr) -> Expr:
    """outer * ext + inner; `a / ext` and `a % ext` give `a` back (an axis split by a
    reshape and merged again indexes as the original)."""
    if (isinstance(outer, IndexBinary) and outer.op is BinaryOpType.Div and isinstance(inner, IndexBinary)
            and inner.op is BinaryOpType.Mod and outer.lhs == inner.lhs and outer.rhs == inner.rhs == ext):
        return outer.lhs
    return add(mul(outer, ext), inner)


def _div(a: Expr, b: Expr) -> Expr:
    """a / b, folding literals (and division by 1)."""
    la, lb = _lit(a), _lit(b)
    if lb == 1 or la == 0:
        return a
    if la is not None and lb is not None:
        return IntLit(la // lb)
    return a // b


def _mod(a: Expr, b: Expr) -> Expr:
    """a % b, folding literals (and modulo 1)."""
    la, lb = _lit(a), _lit(b)
    if lb == 1 or la == 0:
        return IntLit(0)
    if la is not None and lb is not None:
        return IntLit(la % lb)
    return a % b


def ge(a: Expr, b: Expr | int) -> IndexBinary:
    """`a >= b` in index arithmetic."""
    return IndexBinary(BinaryOpType.Ge, a, IntLit(b) if isinstance(b, int) else b)


def uses(e: Expr, var: Expr) -> bool:
    """Whether expression `e` contains `var` (a variable, or any sub-expression)."""
    if e == var:
        return True
    if isinstance(e, (IntLit, Var)):
        return False
    fields = getattr(e, "__dataclass_fields__", None)
    if not fields:
        return False
    for name in fields:
        v = getattr(e, name)
        if isinstance(v, Expr) and uses(v, var):
            return True
        if isinstance(v, tuple) and any(isinstance(x, Expr) and uses(x, var) for x in v):
            return True
    return False


def shift_of(e: Expr, base: Expr) -> Expr | None:
    """`s` where `e` is `base + s` (`base - s` gives `0 - s`; `e == base` gives 0), else None."""
    if e == base:
        return IntLit(0)
    if isinstance(e, IndexBinary) and e.op is BinaryOpType.Add and e.rhs == base:
        return e.lhs
    if isinstance(e, IndexBinary) and e.lhs == base:
        if e.op is BinaryOpType.Add:
            return e.rhs
        if e.op is BinaryOpType.Sub:
            return IntLit(-e.rhs.value) if isinstance(e.rhs, IntLit) else IntLit(0) - e.rhs
    return None


class _Classes:
    """Union-find over axes: the permissive map without a cat's concatenated axes (those
    differ in extent: a cat input's axis is indexed at an offset, not as the output's)."""

    def __init__(self, fusion: Fusion) -> None:
        self.parent: dict[IterDomain, IterDomain] = {}
        for e in fusion.exprs():
            skip = None
            if isinstance(e, CatOp):
                skip = e.outputs[0].root[e.dim]
            for p, c in _permissive_pairs(e):
                if c is not skip:
                    self.union(p, c)

    def find(self, i: IterDomain) -> IterDomain:
        parent = self.parent
        root = i
        while parent.get(root, root) is not root:
            root = parent[root]
        while parent.get(i, i) is not root:
            parent[i], i = root, parent[i]
        return root

    def union(self, a: IterDomain, b: IterDomain) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra


class TensorIndexer:
    """Indices, offsets and predicates of a fusion's tensors in the loop nest of `ref`."""

    def __init__(self, fusion: Fusion, ref: TensorView, sub: SubFusion, params: ParamTable) -> None:
        self.fusion = fusion
        self.ref = ref
        self.params = params
        self.ref_logical = [i for i in ref.domain.logical if not i.is_reduction]
        for tv in fusion.inputs:
            if getattr(tv, "is_cpu_scalar", False):
                raise NotLowerable(f"{tv!r} is a CPU scalar tensor (its value would be read on the host)")
        # outputs and the other lowerings index through axis classes: two axes of one tensor
        # in one class (x + x.T on a square) would read the same coordinate twice
        for tv in sub.tensors():
            cls = sub.classes_of(tv)
            if len(set(cls)) != len(cls):
                raise NotLowerable(f"{tv!r} has two axes the fusion maps onto each other")
        self._classes = _Classes(fusion)
        # the permissive classes join a broadcast axis to whatever it meets: an input's one
        # broadcast axis read at two positions joins both (seed 23030 case 1658: T0's [1]
        # reaching a where's 16-axis through one path and its trailing [1] through another).
        # A class holding a concrete reference axis stands for it, never for a broadcast one
        # beside it (the output of all four axes was written only at index 0 of the 16-axis,
        # as if it lacked it); two concrete reference axes in one class cannot be told apart
        self._ref_by_class: dict[IterDomain, IterDomain] = {}
        for r in sorted(self.ref_logical, key=lambda r: not r.is_broadcast):
            c = self._classes.find(r)
            seen = self._ref_by_class.get(c)
            if seen is not None and not seen.is_broadcast and not r.is_broadcast:
                raise NotLowerable(f"{ref!r}: axes {seen!r} and {r!r} map onto each other")
            self._ref_by_class[c] = r
        #: the reshapes' position relations (runs of equal element counts, by this call's
        #: sizes): what relates a symbolic reshape's sides, which have no Split/Merge
        self._reshape_runs = sub._reshape_relations() if RESHAPE in sub.kinds else []
        #: expanded broadcasts this call's sizes expand to one element: position 0, as a
        #: plain broadcast's
        self._one = {i for tv in sub.tensors() for i in tv.domain.maybe_root + tv.logical_no_reductions()
                     if i.has_expanded_extent and sub._runtime_extent(i) == 1}
        self._exact: ExactMap | None = None
        #: extents the runtime binds from the input tensors' sizes: parameters, even where
        #: they are expressions of the complete fusion's sizes (a segment's inputs)
        self._bound = {e for tv in fusion.inputs if isinstance(tv, TensorView) for i in tv.logical_no_reductions()
                       for e in (i.extent, i.expanded_extent) if e is not None and not e.is_const}
        self._history = id_exprs_between(ref.domain.logical, ref.domain.loop)
        self._suffix_node = self._suffix_nodes()
        self._closure: dict[IterDomain, tuple[Expr, tuple[Expr, ...]]] | None = None
        self._closure_idx: Indices | None = None
        self._derived_memo: tuple | None = None

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
        if not s.dtype.is_integral:
            raise NotLowerable(f"extent {s!r} is not an integer")
        return self.params.extent(s)

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
        return self._ref_by_class.get(self._classes.find(i))

    # --- index maps ---------------------------------------------------------------------------
    def class_map(self, tv: TensorView, idx: Indices) -> Map:
        """`tv`'s indices where every concrete axis is a reference axis's class (the
        indexing of segments without resizes)."""
        amap: Map = {}
        for i in tv.logical_no_reductions():
            if i.is_broadcast:
                amap[i] = IntLit(0)
                continue
            r = self.ref_axis(i)
            if r is None:
                raise NotLowerable(f"{tv!r}: axis {i!r} has no counterpart in the reference")
            amap[i] = idx[r]
        return amap

    def _direct_index(self, i: IterDomain, idx: Indices) -> Expr | None:
        """Axis `i`'s index without going through resizes or reshapes: 0 for a broadcast,
        the reference axis's of its class; None where it has neither."""
        if i.is_broadcast:
            return IntLit(0)
        r = self.ref_axis(i)
        return idx[r] if r is not None else None

    def output_map(self, out: TensorView, idx: Indices) -> tuple[Map, list[Expr]]:
        """The indices output `out` is written at in the reference's loop nest, and the
        conditions under which this thread writes it (an output that the reference's
        axes reach through a slice, pad or cat covers part of them)."""
        if out is self.ref:
            return {i: (IntLit(0) if i.is_broadcast else idx[i]) for i in out.logical_no_reductions()}, []
        amap: Map = {}
        conds: list[Expr] = []
        for i in out.logical_no_reductions():
            direct = self._direct_index(i, idx)
            if direct is not None:
                amap[i] = direct
                continue
            got = self._closure_of(idx).get(self._classes.find(i))
            if got is None:
                raise NotLowerable(f"{out!r}: axis {i!r} is not reached from the reference's axes")
            amap[i] = got[0]
            conds.extend(c for c in got[1] if c not in conds)
        return amap, conds

    def _closure_of(self, idx: Indices) -> dict[IterDomain, tuple[Expr, tuple[Expr, ...]]]:
        """Index (and write conditions) of every axis class the reference's axes reach
        through the fusion's Split/Merge/Resize transforms and cats."""
        if self._closure is not None and self._closure_idx is idx:
            return self._closure
        find = self._classes.find
        known: dict[IterDomain, tuple[Expr, tuple[Expr, ...]]] = {}
        for r in self.ref_logical:
            if not r.is_broadcast:
                known.setdefault(find(r), (idx[r], ()))
        rels = []
        for tv in self.fusion.tensors():
            if tv.domain.root is not None:
                rels.extend(id_exprs_between(tv.domain.root, tv.domain.logical))
        cats = [e for e in self.fusion.exprs() if isinstance(e, CatOp)]
        # a resize reaches the other side whole from a pad's output (its input) or a slice's
        # input (its output), partly the other way: partial routes only once no whole one
        # is left, so an axis reached both ways takes the whole one (an output indexed
        # through a slice of its axis would be written only over the slice)
        partial = False
        changed = True
        while changed or not partial:
            if not changed:
                partial = True
            changed = False

            # an expanded broadcast has positions a reshape counts (a reshape of an expanded
            # input reads it at every one, through stride 0); a plain broadcast only 0
            def put(i: IterDomain, v: Expr, c: tuple[Expr, ...]) -> None:
                nonlocal changed
                if (i.is_broadcast and (not i.has_expanded_extent or i in self._one)) or find(i) in known:
                    return
                known[find(i)] = (v, c)
                changed = True

            def get(i: IterDomain):
                if i.is_broadcast and (not i.has_expanded_extent or i in self._one):
                    return IntLit(0), ()
                return known.get(find(i))

            for t in rels:
                if isinstance(t, (Split, Merge)):
                    # one relation either way: whole = outer * extent(inner) + inner
                    whole, (o, n) = (t.inputs[0], t.outputs) if isinstance(t, Split) else (t.outputs[0], t.inputs)
                    kw, ko, kn = get(whole), get(o), get(n)
                    ext = self.extent(n.user_extent)
                    if kw is not None and (ko is None or kn is None):
                        put(o, kw[0] // ext, kw[1])
                        put(n, kw[0] % ext, kw[1])
                    elif kw is None and ko is not None and kn is not None:
                        put(whole, unsplit(ko[0], kn[0], ext), ko[1] + kn[1])
                elif isinstance(t, Resize):
                    a, (b,) = t.inputs[0], t.outputs
                    left = self.extent(t.left_expand)
                    lo, hi = _lit(left), _lit(self.extent(t.right_expand))
                    ka, kb = get(a), get(b)
                    if kb is not None and ka is None and (partial or (lo is not None and hi is not None
                                                                       and lo >= 0 and hi >= 0)):
                        v = sub(kb[0], left)
                        put(a, v, kb[1] + (ge(v, 0), lt(v, self.extent(a.user_extent))))
                    elif ka is not None and kb is None and (partial or (lo is not None and hi is not None
                                                                         and lo <= 0 and hi <= 0)):
                        v = add(ka[0], left)
                        put(b, v, ka[1] + (ge(v, 0), lt(v, self.extent(b.user_extent))))
            for side_a, side_b in self._reshape_runs:
                # the position in one side's axes is the position in the other's
                for src, dst in ((side_a, side_b), (side_b, side_a)):
                    ks = [get(x) for x in src]
                    if not dst or any(k is None for k in ks) or all(get(x) is not None for x in dst):
                        continue
                    pos: Expr = IntLit(0)
                    conds: tuple[Expr, ...] = ()
                    for x, k in zip(src, ks):
                        pos = unsplit(pos, k[0], self._axis_extent(x))
                        conds += tuple(c for c in k[1] if c not in conds)
                    for x in reversed(dst[1:]):
                        ext = self._axis_extent(x)
                        put(x, _mod(pos, ext), conds)
                        pos = _div(pos, ext)
                    put(dst[0], pos, conds)
            for e in cats:
                out_axes = e.outputs[0].logical_no_reductions()
                # the other axes: an input's expanded broadcast is at the output's position
                # (a cat's inputs agree there; its class holds no concrete axis to map it)
                for d, o in enumerate(out_axes):
                    k = get(o) if d != e.dim else None
                    if k is not None:
                        for x in e.inputs:
                            put(x.logical_no_reductions()[d], k[0], k[1])
                out_axis = out_axes[e.dim]
                ko = get(out_axis)
                if ko is None:
                    continue
                off: Expr = IntLit(0)
                for x in e.inputs:
                    ax = x.logical_no_reductions()[e.dim]
                    n = self.extent(ax.user_extent)
                    v = sub(ko[0], off)
                    put(ax, v, ko[1] + (ge(v, 0), lt(v, n)))
                    off = add(off, n)
        self._closure, self._closure_idx = known, idx
        return known

    def index_map(self, tv: TensorView, idx: Indices, steps=()) -> Map:
        """`tv`'s indices where the reference's are `idx`, for kernels that index every
        tensor at the reference's position: an axis of a reference axis's class takes its
        index, another its index through the reshapes, as `steps` (`IndexPlan.steps` of the
        analysis) derive it. The plan reaches each axis one way, so a reshape's output and
        input have the same element at any one position (a reshape is then a view)."""
        amap: Map = {}
        derived = None
        for i in tv.logical_no_reductions():
            direct = self._direct_index(i, idx)
            if direct is not None:
                amap[i] = direct
                continue
            if derived is None:
                derived = self._derived(steps, idx)
            got = derived.get(self._classes.find(i))
            if got is None:
                if not (i.extent.is_const and int(i.extent.value) == 1):
                    raise NotLowerable(f"{tv!r}: axis {i!r} is not reached from the reference's axes")
                got = IntLit(0)
            amap[i] = got
        return amap

    def _derived(self, steps, idx: Indices) -> dict[IterDomain, Expr]:
        """Index per axis class: the reference's, then those `steps` derive, in order."""
        memo = self._derived_memo
        if memo is not None and memo[0] is steps and memo[1] is idx:
            return memo[2]
        find = self._classes.find
        known: dict[IterDomain, Expr] = {find(r): idx[r] for r in self.ref_logical if not r.is_broadcast}
        for src, dst in steps:
            pos: Expr = IntLit(0)
            for a in src:
                got = known.get(find(a))
                if got is None:
                    raise NotLowerable(f"reshape axis {a!r} is used before it is indexed")
                pos = unsplit(pos, got, self._axis_extent(a))
            for b in reversed(dst[1:]):
                ext = self._axis_extent(b)
                known.setdefault(find(b), _mod(pos, ext))
                pos = _div(pos, ext)
            if dst:
                known.setdefault(find(dst[0]), pos)
        self._derived_memo = (steps, idx, known)
        return known

    def _axis_extent(self, i: IterDomain) -> Expr:
        """`i`'s extent as the reference's axis of its class has it (so that a position
        built from the reference's merged indices folds back into the merged index)."""
        r = self.ref_axis(i)
        if r is not None:
            return self.extent(r.extent)
        # (an expanded input axis a reshape reads counts in its positions)
        return self.extent(i.user_extent if i.is_broadcast else i.extent)

    def lanes_walk(self, tv: TensorView, amap: Map, index: Expr) -> bool:
        """Whether `tv`'s innermost stored axis is indexed at `index` plus a shift free of
        it, and no other stored axis's index depends on `index`: consecutive values of
        `index` (vector lanes) are then consecutive elements along that axis."""
        alloc = [i for i in tv.domain.maybe_allocation if not i.is_reduction and not i.is_broadcast]
        if not alloc:
            return False
        s = shift_of(amap[alloc[-1]], index)
        return s is not None and not uses(s, index) and not any(uses(amap[i], index) for i in alloc[:-1])

    def root_indices(self, out: TensorView, amap: Map) -> Indices:
        """`out`'s root indices from its logical ones (`amap`): the root→logical Split,
        Merge and Resize transforms walked back; a reshape whose symbolic sizes left no
        transforms goes through the linear index."""
        if out.domain.root is None:
            return dict(amap)
        idx: Indices = dict(amap)
        for t in reversed(id_exprs_between(out.domain.root, out.domain.logical)):
            if not all(o in idx for o in t.outputs):
                continue
            if isinstance(t, Split):
                o, n = t.outputs
                idx[t.inputs[0]] = unsplit(idx[o], idx[n], self.extent(n.extent))
            elif isinstance(t, Merge):
                o, n = t.inputs
                m = idx[t.outputs[0]]
                ext = self.extent(n.extent)
                idx[o] = m // ext
                idx[n] = m % ext
            elif isinstance(t, Resize):
                idx[t.inputs[0]] = sub(idx[t.outputs[0]], self.extent(t.left_expand))
        missing = [r for r in out.domain.root if r not in idx]
        for r in list(missing):
            if r.is_broadcast or (r.extent.is_const and int(r.extent.value) == 1):
                idx[r] = IntLit(0)
                missing.remove(r)
        if missing:
            if not isinstance(out.definition, ReshapeOp):
                raise NotLowerable(f"{out!r}: root axis {missing[0]!r} has no index")
            lin: Expr = IntLit(0)
            for i in out.logical_no_reductions():
                if not i.is_broadcast:
                    lin = add(mul(lin, self.extent(i.extent)), amap[i])
            root = out.domain.root
            for k in range(len(root) - 1, -1, -1):
                r = root[k]
                n = self.extent(r.user_extent)
                idx[r] = lin % n if k else lin
                lin = lin // n
        return idx

    def operand_maps(self, e, out: TensorView, amap: Map,
                     operands: list[TensorView]) -> list[tuple[TensorView, Map, Expr | None]]:
        """(operand, its indices, the condition under which `e` reads it there; None:
        always) for each of `operands` (tensor inputs of `e`) where `e` computes `out` at
        `amap`."""
        if isinstance(e, CatOp):
            return self._cat_maps(e, out, amap)
        if isinstance(e, (SliceOp, PadOp)):
            (x,) = operands
            m: Map = {}
            conds: list[Expr] = []
            for k, (p, r, lg) in enumerate(zip(x.logical_no_reductions(), out.domain.maybe_root,
                                               out.logical_no_reductions())):
                i = amap[lg]
                if isinstance(e, SliceOp):
                    start, _, step = e.ranges[k]
                    j = i if lg is r else add(self.extent(start), mul(self.extent(step), i))
                else:
                    left, right = e.pad_widths[k]
                    j = i if lg is r else sub(i, self.extent(left))
                    if lg is not r:
                        # negative widths crop: that side needs no check
                        if not (left.is_const and int(left.value) <= 0):
                            conds.append(ge(j, 0))
                        if not (right.is_const and int(right.value) <= 0):
                            conds.append(lt(j, self.extent(r.user_extent)))
                m[p] = IntLit(0) if p.is_broadcast else j
            return [(x, m, all_of(conds))]
        ridx = self.root_indices(out, amap)
        pair = {p: c for p, c in exact_pairs(e)}
        res = []
        for x in operands:
            m = {}
            for a in x.logical_no_reductions():
                c = pair.get(a)
                if c is not None and c in ridx and not a.is_broadcast:
                    m[a] = ridx[c]
                elif a.is_broadcast or (a.extent.is_const and int(a.extent.value) == 1):
                    m[a] = IntLit(0)
                else:
                    raise NotLowerable(f"{type(e).__name__}: operand axis {a!r} of {x!r} has no index")
            res.append((x, m, None))
        return res

    def cat_offsets(self, e: CatOp) -> list[Expr]:
        """Where each input of cat `e` starts along its dim, and (last) the total extent."""
        offs: list[Expr] = [IntLit(0)]
        for x in e.inputs:
            offs.append(add(offs[-1], self.extent(x.logical_no_reductions()[e.dim].user_extent)))
        return offs

    def _cat_maps(self, e: CatOp, out: TensorView, amap: Map) -> list[tuple[TensorView, Map, Expr | None]]:
        ids = out.logical_no_reductions()
        i = amap[ids[e.dim]]
        offs = self.cat_offsets(e)
        res = []
        n = len(e.inputs)
        for k, x in enumerate(e.inputs):
            m: Map = {}
            for d, (a, o) in enumerate(zip(x.logical_no_reductions(), ids)):
                if a.is_broadcast:
                    m[a] = IntLit(0)
                else:
                    m[a] = sub(i, offs[k]) if d == e.dim else amap[o]
            conds = []
            if k > 0:
                conds.append(ge(i, offs[k]))
            if k < n - 1:
                conds.append(lt(i, offs[k + 1]))
            res.append((x, m, all_of(conds)))
        return res

    # --- offsets ------------------------------------------------------------------------------
    def _same_extent(self, a: IterDomain, b: IterDomain) -> bool:
        if a.extent is b.extent or (a.extent.is_const and b.extent.is_const and a.extent.value == b.extent.value):
            return True
        if self._exact is None:
            self._exact = ExactMap(self.fusion)
        return self._exact.same(a, b)

    def offset(self, tv: TensorView, idx: Indices, amap: Map | None = None) -> Expr:
        """tv's element offset at index map `amap` (default: its axes' reference classes),
        `idx` the reference's indices."""
        if amap is None:
            amap = self.class_map(tv, idx)
        logical = tv.logical_no_reductions()
        pos = {i: d for d, i in enumerate(logical)}
        alloc = [i for i in (tv.domain.maybe_allocation if tv in self.fusion.inputs or tv in self.fusion.outputs
                             else logical) if not i.is_reduction]
        contig = dict(zip(tv.domain.maybe_allocation, tv.domain.contiguity))
        terms: list[Expr] = []
        rest = [i for i in reversed(alloc) if not i.is_broadcast]  # innermost first
        # the innermost run of contiguous axes indexed as the reference's (up to constant
        # shifts) that the reference merged in the same order
        run, k = 0, len(self.ref.domain.logical) - 1
        matched_start = None
        shifts: list[Expr] = []
        prev = None
        while run < len(rest) and k >= 0:
            r = self.ref.domain.logical[k]
            if r.is_broadcast:
                k -= 1
                continue
            i = rest[run]
            s = shift_of(amap[i], idx[r])
            if s is None or contig.get(i) is not True or (prev is not None and not self._same_extent(*prev)):
                break
            shifts.append(s)
            prev = (i, r)
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
            # declared contiguous innermost: stride 1, and the merged index walks the run;
            # its shifts step by the strides the merged index implies (the product of the
            # inner axes' extents), which a size-1 axis's own stride need not be
            terms.append(idx[self._suffix_node[matched_start]])
            implied: Expr = IntLit(1)
            for j in range(run):
                s = shifts[j]
                if _lit(s) != 0:
                    terms.append(s if j == 0 else mul(s, implied))
                implied = mul(implied, self.extent(rest[j].extent))
        for i in rest[run:]:
            terms.append(mul(amap[i], self.params.stride(tv, pos[i])))
        if not terms:
            return IntLit(0)
        total = terms[0]
        for t in terms[1:]:
            total = add(total, t)
        return total

    def lanes_contiguous(self, tv: TensorView, amap: Map, idx: Indices, lane: Var) -> bool:
        """Whether the vector lanes (`lane` in the reference's innermost index) walk `tv`'s
        innermost stored axis one element apart: its index is the reference's innermost
        one plus a shift the same for every lane."""
        inner_ref = [r for r in self.ref_logical if not r.is_broadcast]
        alloc = [i for i in tv.domain.maybe_allocation if not i.is_reduction and not i.is_broadcast]
        if not inner_ref or not alloc:
            return False
        i_in = alloc[-1]
        s = shift_of(amap[i_in], idx[inner_ref[-1]])
        # the other axes' indices are the same for every lane: the heuristics keep the
        # width a divisor of the innermost extents, shifts and boundaries
        return s is not None and not uses(s, lane)

    def in_bounds(self, loop_index: Indices) -> list[Expr]:
        """Every outermost scheduling split's input index below its extent (lane 0 decides for
        a whole vector). A split of an earlier scheduling split's output is in bounds when
        that split's input is, if it splits the outer side or divides the inner side exactly;
        a logical axis that a reshape's split defined is an outermost input all the same."""
        idx = self.ref_indices(loop_index)
        outers = {e.outputs[0] for e in self._history if isinstance(e, Split)}
        inners = {e.outputs[1] for e in self._history if isinstance(e, Split)}

        def covered(e: Split) -> bool:
            x = e.inputs[0]
            if x in outers:
                return True
            f = e.factor if e.inner_split else e.outputs[0].extent
            return (x in inners and x.extent.is_const and f.is_const
                    and int(x.extent.value) % int(f.value) == 0)

        return list(dict.fromkeys(
            lt(idx[e.inputs[0]], self.extent(e.inputs[0].extent)) for e in self._history
            if isinstance(e, Split) and not covered(e)))

    def writer_guard(self, out: TensorView, idx: Indices) -> Expr | None:
        """Outputs lacking some reference axis are written by the threads at index 0 of it
        (None: every thread writes its own element)."""
        have = {self.ref_axis(i) for i in out.logical_no_reductions()}
        missing = [r for r in self.ref_logical if not r.is_broadcast and r not in have]
        if missing and out is not self.ref:
            # axes reached through reshapes or resizes span the reference axes they derive
            # from: which ones shows in the output's indices as functions of one variable per
            # reference axis (the loop's own indices hide them: a merged index is not the
            # sum of its parts' expressions)
            sym: Indices = {r: Var(f"ref{k}") for k, r in enumerate(self.ref_logical)}
            amap, _ = self.output_map(out, sym)
            missing = [r for r in missing if not any(uses(v, sym[r]) for v in amap.values())]
        return all_of([eq(idx[r], 0) for r in missing])
