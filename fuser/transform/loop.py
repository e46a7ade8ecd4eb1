"""Scheduling primitives on a TensorView's loop domain: split, merge, reorder, parallelize.

The loop domain starts as the logical domain; each primitive replaces loop axes with the
outputs of a Split or Merge between IterDomains, so the transforms from logical to loop
stay in the IR (lowering walks them back to index each tensor).
"""
from __future__ import annotations

from typing import Mapping

from fuser.ir import IterDomain, ParallelType, TensorView
from fuser.ir import domain as _domain


def _axis(tv: TensorView, axis: int) -> int:
    n = len(tv.domain.loop)
    if not -n <= axis < n:
        raise IndexError(f"axis {axis} is out of range for {tv!r}'s {n} loop axes")
    return axis % n


def split(tv: TensorView, axis: int, factor: int, *, inner_split: bool = True) -> TensorView:
    """Replace loop axis `axis` by (outer, inner); `inner_split`: the inner extent is `factor`.
    A split that does not divide evenly leaves a tail that lowering predicates."""
    if int(factor) < 1:
        raise ValueError(f"split factor must be >= 1, got {factor}")
    k = _axis(tv, axis)
    loop = tv.domain.loop
    with tv.fusion.guard():
        outer, inner = _domain.split(loop[k], int(factor), inner_split)
    loop[k:k + 1] = [outer, inner]
    return tv


def merge(tv: TensorView, outer: int = 0, inner: int | None = None) -> TensorView:
    """Merge loop axes `outer` and `inner` (default: the next one) into one at `outer`'s place."""
    o = _axis(tv, outer)
    i = o + 1 if inner is None else _axis(tv, inner)
    if o == i:
        raise ValueError(f"cannot merge loop axis {o} with itself")
    loop = tv.domain.loop
    with tv.fusion.guard():
        m = _domain.merge(loop[o], loop[i])
    first, second = min(o, i), max(o, i)
    del loop[second]
    loop[first] = m
    return tv


def merge_all(tv: TensorView) -> TensorView:
    """Merge every loop axis into one (a tensor with no axes keeps none)."""
    while len(tv.domain.loop) > 1:
        merge(tv, 0, 1)
    return tv


def reorder(tv: TensorView, old_to_new: Mapping[int, int]) -> TensorView:
    """Move loop axes: `{old position: new position}`; the others keep their relative order."""
    loop = tv.domain.loop
    n = len(loop)
    moves = {_axis(tv, o): _axis(tv, p) for o, p in old_to_new.items()}
    if len(set(moves.values())) != len(moves):
        raise ValueError(f"reorder targets collide: {dict(old_to_new)}")
    rest = iter([loop[k] for k in range(n) if k not in moves])
    placed = {p: loop[o] for o, p in moves.items()}
    tv.domain.loop = [placed[k] if k in placed else next(rest) for k in range(n)]
    return tv


def parallelize(tv: TensorView, axis: int, ptype: ParallelType) -> TensorView:
    """Bind loop axis `axis` to a GPU index (BIDx.., TIDx..), or mark it Vectorize/Unroll/Serial."""
    tv.domain.loop[_axis(tv, axis)].parallel_type = ptype
    return tv


def loop_ids(tv: TensorView) -> list[IterDomain]:
    return list(tv.domain.loop)
