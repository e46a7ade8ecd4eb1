"""Fold broadcasts of fusion inputs into the inputs' domains (seed 000, nvFuser #3366).

    Inputs: T0[iS0{i0}], T1[iS1{i0}, iS2{i1}]          Inputs: T5[iS8{i0}, bS9{1}] (root: iS8{i0}), T1
    T2[iS3{i0}] = -T0                            ->    T3[iS4{i0}, bS5{1}] = -T5
    T3[iS4{i0}, bS5{1}] = broadcast(T2)                T4 = T3 * T1
    T4 = T3 * T1

A BroadcastOp that reads a fusion input directly, or through single-use unary ops
(casts, negations, `set` copies), becomes a broadcast in the input's own domain: the new
input's logical domain is the old one with the broadcast axes inserted, its root is the
old input's (what the user's tensor holds; the added axes are in no memory), and the
unary ops are replayed on the broadcast tensor, the last one writing the broadcast's
output, so every consumer reads the same tensor as before. Results cannot change: an
elementwise op commutes with inserting size-1 axes. The schedulers then see one
BroadcastOp fewer.

Left alone: a broadcast of anything but such a chain (in particular a reduction's result
broadcast back in its place, the allreduce pattern), chains whose tensors have other
readers or are fusion outputs, an input an output is aliased to (written in place), a CPU
scalar input, and a broadcast of an input straight into a fusion output (the output would
be the input).
"""
from __future__ import annotations

from fuser.ir import (
    BroadcastOp,
    Expr,
    Fusion,
    IterDomain,
    LoadStoreOp,
    LoadStoreOpType,
    TensorDomain,
    TensorView,
    UnaryOp,
    Val,
)

#: the pass's FUSER_DISABLE name
NAME = "fold_input_broadcasts"


def _replayable(e: Expr | None) -> bool:
    """An elementwise op on one tensor that can be re-issued on a broadcast operand."""
    if isinstance(e, UnaryOp):
        return isinstance(e.input, TensorView) and isinstance(e.output, TensorView)
    if isinstance(e, LoadStoreOp):
        dom = e.output.domain
        return e.op_type is LoadStoreOpType.Set and dom.root is None and dom.allocation is None
    return False


def foldable(fusion: Fusion, b: BroadcastOp) -> tuple[TensorView, list[Expr]] | None:
    """The fusion input `b` reads and the unary ops between them (input first), when `b`
    can be folded into that input; None otherwise."""
    ops: list[Expr] = []
    consumer: Expr = b
    x = b.input
    while True:
        if not isinstance(x, TensorView) or x.is_fusion_output or x.uses != [consumer]:
            return None
        if x.is_fusion_input:
            break
        d = x.definition
        if not _replayable(d):
            return None
        ops.append(d)
        consumer, x = d, d.input
    if any(i.is_reduction for i in x.logical) or getattr(x, "is_cpu_scalar", False):
        return None
    if x in fusion.output_aliases.values():
        return None  # written in place: its tensor must stay the one the user passed
    if not ops and b.output.is_fusion_output:
        return None
    return x, ops[::-1]


def _candidates(fusion: Fusion) -> list[BroadcastOp]:
    return [e for e in fusion.exprs() if isinstance(e, BroadcastOp) and foldable(fusion, e) is not None]


def applies(fusion: Fusion) -> bool:
    """Whether some broadcast of `fusion` can be folded into an input."""
    return bool(_candidates(fusion))


def fold_input_broadcasts(fusion: Fusion, original: dict[Val, Val] | None = None) -> int:
    """Fold every foldable broadcast of `fusion` into its input, in place, until none is
    left (a folded input can be broadcast again); returns how many were folded.
    `original` (the rewritten fusion's values -> the defined fusion's) learns that each
    new input stands for the input it replaced."""
    n = 0
    while True:
        found = _candidates(fusion)
        if not found:
            return n
        b = found[0]
        inp, ops = foldable(fusion, b)
        new = _fold(fusion, b, inp, ops)
        if original is not None:
            original[new] = original.get(inp, inp)
        n += 1


def _fold(fusion: Fusion, b: BroadcastOp, inp: TensorView, ops: list[Expr]) -> TensorView:
    out = b.output
    with fusion.guard():
        # fresh axes with the old ones' extents: every extent scalar stays bound
        new_of: dict[IterDomain, IterDomain] = {i: i.clone_like() for i in inp.logical_no_reductions()}
        kept = iter(inp.logical_no_reductions())
        logical = [o.clone_like() if flag else new_of[next(kept)] for o, flag in zip(out.logical, b.flags)]
        root = [new_of[i] for i in inp.tensor_axes()]
        dom = inp.domain
        if dom.allocation is None:
            contig = dict(zip(dom.maybe_allocation, dom.contiguity))
            old_of = {v: k for k, v in new_of.items()}
            domain = TensorDomain(logical, root=root,
                                  contiguity=[contig.get(old_of[i]) if i in old_of else None for i in logical])
        else:
            # the allocation domain orders what the tensor holds: the added axes are in no memory
            domain = TensorDomain(logical, root=root, allocation=[new_of[i] for i in dom.allocation],
                                  contiguity=list(dom.contiguity))
        new = TensorView(domain, inp.dtype)
        # the new tensors take the names of those they replace, so the IR and the kernels
        # read as the definition did
        new.name = inp.name
        fusion.replace_input(inp, new)
        for e in (*ops, b):
            fusion.remove_expr(e)
        if not ops:
            _redirect_uses(out, new)
            return new
        cur = new
        for k, d in enumerate(ops):
            if k == len(ops) - 1:
                nxt = out
            else:
                nxt = TensorView(TensorDomain([i.clone_like() for i in cur.logical]), d.output.dtype)
                nxt.name = d.output.name
            type(d)([cur], [nxt], **{a: getattr(d, a) for a in d.attr_names})
            cur = nxt
    return new


def _redirect_uses(old: TensorView, new: TensorView) -> None:
    """Every expr reading `old` reads `new` instead (same logical structure)."""
    for u in list(old.uses):
        u.inputs = [new if v is old else v for v in u.inputs]
        if u not in new.uses:
            new.uses.append(u)
    old.uses.clear()
    old.fusion._sorted = None


__all__ = ["NAME", "applies", "foldable", "fold_input_broadcasts"]
