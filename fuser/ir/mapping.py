"""Exact mapping of IterDomains: which axes of a fusion's tensors are the same axis.

Two IterDomains are exactly mapped when they must have the same extent at run time:
an elementwise op's operand and output axes, a reduction's input axis and the axis it
reduces, and so on. Broadcast axes only map to broadcast axes, since a broadcast
operand does not constrain the extent it is broadcast to.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from .base import Expr
from .domain import IterDomain
from .exprs import (
    BinaryOp,
    BroadcastOp,
    CatOp,
    ExpandOp,
    GatherOp,
    IndexSelectOp,
    LoadStoreOp,
    PadOp,
    ReductionOp,
    ReshapeOp,
    ScanOp,
    ScatterOp,
    SelectOp,
    SliceOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from .fusion import Fusion
from .tensor import TensorView

Pair = tuple[IterDomain, IterDomain]

# ops whose tensor operands line up with the output root position by position
_POSITIONAL = (
    UnaryOp,
    BinaryOp,
    TernaryOp,
    LoadStoreOp,
    ExpandOp,
    ScanOp,
    ReductionOp,
    WelfordOp,
    ReshapeOp,
    SliceOp,
    PadOp,
)


def _pair(p: IterDomain, c: IterDomain) -> bool:
    """Whether producer axis `p` constrains consumer axis `c` (a broadcast only maps to a broadcast)."""
    return not p.is_broadcast or c.is_broadcast


def _positional(producer: Sequence[IterDomain], consumer: Sequence[IterDomain], expr: Expr) -> list[Pair]:
    if len(producer) != len(consumer):
        raise ValueError(
            f"{type(expr).__name__}: an operand has {len(producer)} axes but the output root has "
            f"{len(consumer)}; cannot map them position by position"
        )
    return [(p, c) for p, c in zip(producer, consumer) if _pair(p, c)]


def _skip(ids: Sequence[IterDomain], dim: int) -> list[IterDomain]:
    return [i for k, i in enumerate(ids) if k != dim]


def exact_pairs(expr: Expr) -> list[Pair]:
    """(producer logical ID, consumer root ID) pairs of `expr` that are the same axis."""
    outs = [o for o in expr.outputs if isinstance(o, TensorView)]
    if not outs:
        return []
    tensor_inputs = [v for v in expr.inputs if isinstance(v, TensorView)]
    pairs: list[Pair] = []
    if isinstance(expr, _POSITIONAL):
        for out in outs:
            for inp in tensor_inputs:
                pairs += _positional(inp.logical_no_reductions(), out.root, expr)
    elif isinstance(expr, BroadcastOp):
        (out,) = outs
        kept = [c for c, flag in zip(out.root, expr.flags) if not flag]
        pairs += _positional(expr.input.logical_no_reductions(), kept, expr)
    elif isinstance(expr, SqueezeOp):
        (out,) = outs
        kept = [p for p, flag in zip(expr.input.logical_no_reductions(), expr.flags) if not flag]
        pairs += _positional(kept, out.root, expr)
    elif isinstance(expr, CatOp):
        (out,) = outs
        for inp in tensor_inputs:
            pairs += _positional(_skip(inp.logical_no_reductions(), expr.dim), _skip(out.root, expr.dim), expr)
    elif isinstance(expr, SelectOp):
        (out,) = outs
        pairs += _positional(_skip(expr.input.logical_no_reductions(), expr.dim), out.root, expr)
    elif isinstance(expr, IndexSelectOp):
        (out,) = outs
        lookup, index = expr.inputs[0], expr.inputs[1]
        pairs += _positional(_skip(lookup.logical_no_reductions(), expr.dim), _skip(out.root, expr.dim), expr)
        # the output's selected axis has one element per index entry
        pairs += _positional(index.logical_no_reductions(), [out.root[expr.dim]], expr)
    elif isinstance(expr, GatherOp):
        (out,) = outs
        lookup, index = expr.inputs[0], expr.inputs[1]
        pairs += _positional(index.logical_no_reductions(), out.root, expr)
        if expr.exact_sizes:
            pairs += _positional(_skip(lookup.logical_no_reductions(), expr.dim), _skip(out.root, expr.dim), expr)
    elif isinstance(expr, ScatterOp):
        (out,) = outs
        pairs += _positional(expr.inputs[0].logical_no_reductions(), out.root, expr)
    # MatmulOp, LinearOp, FullOp, IotaOp, RNGOp: no axis is exactly mapped
    return pairs


class ExactMap:
    """Disjoint sets of the IterDomains of a fusion's live tensors that are the same axis."""

    def __init__(self, fusion: Fusion) -> None:
        self._parent: dict[IterDomain, IterDomain] = {}
        self._classes: dict[IterDomain, list[IterDomain]] | None = None
        for tv in fusion.tensors():
            self._add_all(tv.domain.all_ids())
        for expr in fusion.exprs():
            for p, c in exact_pairs(expr):
                self._union(p, c)

    def _add_all(self, ids: Iterable[IterDomain]) -> None:
        for i in ids:
            self._parent.setdefault(i, i)

    def _find(self, i: IterDomain) -> IterDomain:
        parent = self._parent
        root = i
        while parent[root] is not root:
            root = parent[root]
        while parent[i] is not root:  # path compression
            parent[i], i = root, parent[i]
        return root

    def _union(self, a: IterDomain, b: IterDomain) -> None:
        # IDs of tensors outside the live set (should not happen) still join
        self._add_all((a, b))
        ra, rb = self._find(a), self._find(b)
        if ra is not rb:
            self._parent[rb] = ra

    def same(self, a: IterDomain, b: IterDomain) -> bool:
        """Whether `a` and `b` are exactly mapped (an unknown ID only maps to itself)."""
        if a is b:
            return True
        if a not in self._parent or b not in self._parent:
            return False
        return self._find(a) is self._find(b)

    def _by_root(self) -> dict[IterDomain, list[IterDomain]]:
        if self._classes is None:
            groups: dict[IterDomain, list[IterDomain]] = {}
            for i in self._parent:
                groups.setdefault(self._find(i), []).append(i)
            self._classes = groups
        return self._classes

    def classes(self) -> list[list[IterDomain]]:
        """Every class, each in registration order, ordered by its first member."""
        return [list(c) for c in self._by_root().values()]

    def class_of(self, id_: IterDomain) -> list[IterDomain]:
        """The class holding `id_`; KeyError if `id_` is not an axis of the fusion's live tensors."""
        if id_ not in self._parent:
            raise KeyError(f"{id_!r} is not an IterDomain of this fusion's live tensors")
        return list(self._by_root()[self._find(id_)])


__all__ = ["exact_pairs", "ExactMap"]
