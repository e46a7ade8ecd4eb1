"""resize: elementwise work with slices, pads and concatenations.

A resize segment is a pointwise kernel over one output (the reference); every other tensor
is computed at the indices its consumers read it at (a slice reads its input shifted, a pad
reads inside its input only, a cat reads the input whose range holds the index). What is
decided here: which output is the reference, whether every other output is written whole
from its loop nest, and how wide vector accesses may be (every shift and boundary along the
innermost axis a multiple of the width).
"""
from __future__ import annotations

from math import gcd

from fuser.ir import CatOp, IterDomain, PadOp, ReshapeOp, SliceOp, TensorView
from fuser.ir.domain import Merge, Resize, Split
from fuser.ir.transforms import id_exprs_between

from . import pointwise
from .analysis import RESIZE, SubFusion
from .vectorize import VECTOR_BYTES


def reject_reason(sub: SubFusion) -> str | None:
    if RESIZE not in sub.kinds:
        return "has no slice, pad or cat"
    why = pointwise.structure_reason(sub)
    if why is not None:
        return why
    if not any(unwritten_reason(sub, ref) is None for ref in _candidates(sub)):
        return "no output's loop nest writes every other output whole"
    return None


def _candidates(sub: SubFusion) -> list[TensorView]:
    need = sub.concrete_classes()
    return [tv for tv in sub.outputs if need <= sub.covered_by(sub.classes_of(tv))]


def reference_tensor(sub: SubFusion) -> TensorView:
    """The output whose loop nest the kernel runs: one that spans the segment and from
    which every other output is written whole; the one with the most elements (a cat's or
    pad's output rather than its inputs), the first of those."""
    cands = [tv for tv in _candidates(sub) if unwritten_reason(sub, tv) is None]
    if not cands:
        raise ValueError("no output spans the segment and writes every other output whole")
    info = sub.a.info
    if info is None:
        return cands[0]
    return max(cands, key=info.numel)


def _local_classes(sub: SubFusion):
    """Find of the axis classes without a cat's concatenated axes (an input's axis there is
    a range of the output's, not the same axis)."""
    from .analysis import _permissive_pairs

    parent: dict[IterDomain, IterDomain] = {}

    def find(i: IterDomain) -> IterDomain:
        while parent.get(i, i) is not i:
            i = parent[i]
        return i

    for e in sub.exprs:
        skip = e.outputs[0].root[e.dim] if isinstance(e, CatOp) else None
        for p, c in _permissive_pairs(e):
            if c is not skip:
                a, b = find(p), find(c)
                if a is not b:
                    parent[b] = a
    return find


def _const(s) -> int | None:
    return int(s.value) if s.is_const else None


def unwritten_reason(sub: SubFusion, ref: TensorView) -> str | None:
    """Why some output would not be written whole from `ref`'s loop nest (None: all are).
    An output's axis is written whole when it is a reference axis's class, or reached from
    one through a reshape's splits and merges, a slice (the output is the narrower side), a
    pad (the output is the padded tensor's input) or a cat (the output is a cat input) --
    from reference axes the output does not hold itself: an output holding an axis beside a
    pad or slice of it iterates both, which one reference axis cannot (nor can a loop nest
    of fewer elements than the output stores)."""
    find = _local_classes(sub)
    start = {find(r) for r in ref.logical_no_reductions() if not r.is_broadcast}
    known = _reached(sub, find, start)
    n_ref = sub.stored(ref)
    for out in sub.outputs:
        concrete = [i for i in out.logical_no_reductions() if not i.is_broadcast]
        for i in concrete:
            if find(i) not in known:
                return f"output {out!r}: axis {i!r} is not written whole from {ref!r}'s loop nest"
        if out is ref:
            continue
        n_out = sub.stored(out)
        if n_ref is not None and n_out is not None and n_ref < n_out:
            return f"output {out!r} stores {n_out} elements, more than {ref!r}'s loop nest covers ({n_ref})"
        own = {find(i) for i in concrete}
        derived = [i for i in concrete if find(i) not in start]
        if derived:
            free = _reached(sub, find, start - own)
            for i in derived:
                if find(i) not in free:
                    return f"output {out!r}: axis {i!r} is reached from {ref!r} only through another of its axes"
            # two axes reached from one reference axis, one through a slice, pad or cat (a
            # range of it), are not independent positions of it (the digits of a split
            # are): [x, y] from cat([x, y])'s one axis would be written only where both agree
            for k, a in enumerate(derived):
                for b in derived[k + 1:]:
                    (oa, ra), (ob, rb) = known[find(a)], known[find(b)]
                    if oa & ob and (ra or rb):
                        return f"output {out!r}: axes {a!r} and {b!r} are both ranges of one axis of {ref!r}"
    return None


def _reached(sub: SubFusion, find, start: set) -> dict:
    """The axis classes written whole from reference classes `start`: closed over the
    reshapes' splits and merges, slices (to the narrower side), pads (to the padded
    tensor's input) and cats (to their inputs). Each with (the reference classes it is
    reached from, whether through a slice, pad or cat: a range of them)."""
    known: dict = {c: (frozenset((c,)), False) for c in start}
    none = (frozenset(), False)
    rels = []
    for tv in sub.produced:
        if tv.domain.root is not None:
            rels.extend(id_exprs_between(tv.domain.root, tv.domain.logical))
    cats = [e for e in sub.exprs if isinstance(e, CatOp)]

    def has(i: IterDomain) -> bool:
        return i.is_broadcast or find(i) in known

    def src(*ids: IterDomain, ranged: bool = False) -> tuple:
        got = [known.get(find(i), none) for i in ids]
        return frozenset().union(*(o for o, _ in got)), ranged or any(r for _, r in got)

    changed = True
    while changed:
        changed = False

        def put(i: IterDomain, origin: tuple) -> None:
            nonlocal changed
            if not has(i):
                known[find(i)] = origin
                changed = True

        for t in rels:
            if isinstance(t, Split):
                a, (o, n) = t.inputs[0], t.outputs
                if has(a):
                    put(o, src(a)), put(n, src(a))
                elif has(o) and has(n):
                    put(a, src(o, n))
            elif isinstance(t, Merge):
                (o, n), m = t.inputs, t.outputs[0]
                if has(m):
                    put(o, src(m)), put(n, src(m))
                elif has(o) and has(n):
                    put(m, src(o, n))
            elif isinstance(t, Resize):
                a, b = t.inputs[0], t.outputs[0]
                left, right = _const(t.left_expand), _const(t.right_expand)
                if has(b) and not has(a) and left is not None and right is not None and left >= 0 and right >= 0:
                    put(a, src(b, ranged=True))  # the padded tensor's indices cover its input
                elif has(a) and not has(b) and left is not None and right is not None and left <= 0 and right <= 0:
                    put(b, src(a, ranged=True))  # the sliced tensor's indices are a range of its input's
        for e in cats:
            out_axis = e.outputs[0].logical_no_reductions()[e.dim]
            if has(out_axis):
                for x in e.inputs:
                    put(x.logical_no_reductions()[e.dim], src(out_axis, ranged=True))
    return known


def vector_candidates(sub: SubFusion, ref: TensorView) -> list[TensorView]:
    """Inputs and outputs whose innermost stored axis has stride 1 and is the reference's
    innermost axis, or a slice, pad or cat of it: consecutive lanes are consecutive
    elements (the lowering checks each access's indices before it uses a vector)."""
    info = sub.a.info
    find, id_of = sub.uf.find, sub.a.id_of
    concrete = [i for i in ref.logical_no_reductions() if not i.is_broadcast]
    if not concrete:
        return []
    related = {find(id_of(concrete[-1]))}
    pairs = []
    for e in sub.exprs:
        if isinstance(e, (SliceOp, PadOp)):
            out = e.outputs[0]
            for r, lg in zip(out.domain.maybe_root, out.logical_no_reductions()):
                if r is not lg:
                    pairs.append((find(id_of(r)), find(id_of(lg))))
    changed = True
    while changed:
        changed = False
        for a, b in pairs:
            if (a in related) != (b in related):
                related.update((a, b))
                changed = True
    out = []
    fusion = sub.a.fusion
    for tv in [*fusion.inputs, *fusion.outputs]:
        if not isinstance(tv, TensorView):
            continue
        alloc = [i for i in tv.domain.maybe_allocation if not i.is_reduction and not i.is_broadcast]
        if not alloc or find(id_of(alloc[-1])) not in related:
            continue
        strides = info.strides.get(tv)
        if strides is not None:
            d = tv.logical_no_reductions().index(alloc[-1])
            if strides[d] != 1 and info.sizes[tv][d] > 1:
                continue
        if tv not in out:
            out.append(tv)
    return out


def vector_limit(sub: SubFusion, ref: TensorView) -> int:
    """The widest vector (elements, a power of two up to 16) that every slice start and width, pad
    width, cat boundary and reshaped innermost extent along the innermost axis is a multiple
    of: the lanes of a vector then take the same branch and load from one aligned run. A
    step along the innermost axis allows no vectors."""
    info = sub.a.info
    find, id_of = sub.uf.find, sub.a.id_of
    concrete = [i for i in ref.logical_no_reductions() if not i.is_broadcast]
    if not concrete:
        return 1
    vals: list[int] = []
    lanes = _lane_classes(sub, find(id_of(concrete[-1])), vals)

    def inner_pos(tv: TensorView) -> int | None:
        ids = tv.logical_no_reductions()
        for k in range(len(ids) - 1, -1, -1):
            if not ids[k].is_broadcast:
                return k
        return None

    def along_inner(tv: TensorView, k: int, *axes: IterDomain) -> bool:
        return k == inner_pos(tv) or any(find(id_of(a)) in lanes for a in axes)

    for e in sub.exprs:
        if isinstance(e, SliceOp):
            x, out = e.inputs[0], e.outputs[0]
            for k, (r, lg) in enumerate(zip(out.domain.maybe_root, out.logical_no_reductions())):
                if r is lg or not along_inner(out, k, r, lg) and k != inner_pos(x):
                    continue
                start, _, step = e.ranges[k]
                if info.evaluate(step) != 1:
                    return 1
                # both ends: a vector must not straddle the slice's start or its stop
                vals += [info.evaluate(start), info.extent(lg)]
        elif isinstance(e, PadOp):
            x, out = e.inputs[0], e.outputs[0]
            for k, (r, lg) in enumerate(zip(out.domain.maybe_root, out.logical_no_reductions())):
                if r is lg or not along_inner(out, k, r, lg) and k != inner_pos(x):
                    continue
                left, _ = e.pad_widths[k]
                vals += [info.evaluate(left), info.extent(r)]
        elif isinstance(e, CatOp):
            out = e.outputs[0]
            axis = out.logical_no_reductions()[e.dim]
            if along_inner(out, e.dim, axis):
                vals += [info.extent(x.logical_no_reductions()[e.dim]) for x in e.inputs]
        elif isinstance(e, ReshapeOp):
            out = e.outputs[0]
            roots = [i for i in out.domain.maybe_root if not i.is_broadcast]
            logical = [i for i in out.logical_no_reductions() if not i.is_broadcast]
            if roots and logical and roots[-1] is not logical[-1]:
                vals += [info.extent(roots[-1]), info.extent(logical[-1])]
    g = 0
    for v in vals:
        g = gcd(g, abs(v))
    width = VECTOR_BYTES
    while width > 1 and g % width:
        width //= 2
    return width


def _lane_classes(sub: SubFusion, inner: int, vals: list[int]) -> set[int]:
    """The axis classes whose index steps with the reference's innermost index inside a
    vector: that class, and through each reshape the inner part of a merge or split of a
    class already here (and the whole of one whose inner part is here). A vector stays
    inside one run of such an inner part when the width divides its extent, so each extent
    is appended to `vals`; a pad, slice or cat along any class here bounds the width too
    (a reshape that merges [4, 8] puts a pad of the 8 along the reference's innermost). A
    slice's or pad's input and output axis, and a cat's inputs' and output's concatenated
    axes, are lanes together: a cat whose inputs a later permute puts innermost splits
    vectors there too."""
    info = sub.a.info
    find, id_of = sub.uf.find, sub.a.id_of
    rels = []  # (whole, part, the part's extent where joining them bounds the width)
    for e in sub.exprs:
        out = e.outputs[0] if e.outputs else None
        if isinstance(e, ReshapeOp):
            for t in id_exprs_between(out.domain.maybe_root, out.domain.logical):
                if isinstance(t, Merge):
                    rels.append((t.outputs[0], t.inputs[1], True))
                elif isinstance(t, Split):
                    rels.append((t.inputs[0], t.outputs[1], True))
        elif isinstance(e, (SliceOp, PadOp)):
            rels += [(r, lg, False) for r, lg in zip(out.domain.maybe_root, out.logical_no_reductions())
                     if r is not lg]
        elif isinstance(e, CatOp):
            axis = out.logical_no_reductions()[e.dim]
            rels += [(axis, x.logical_no_reductions()[e.dim], False) for x in e.inputs]
    lanes = {inner}
    changed = True
    while changed:
        changed = False
        for whole, part, bounds in rels:
            w, p = find(id_of(whole)), find(id_of(part))
            if (w in lanes) != (p in lanes):
                lanes.update((w, p))
                if bounds:
                    vals.append(info.extent(part))
                changed = True
    return lanes
