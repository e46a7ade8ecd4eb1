"""Iter-domain replay: give other tensors the loop structure of a reference tensor.

`replay_loop(reference, target, mapping)` re-applies the Split/Merge history between the
reference's logical and loop domains to the target's axes that `mapping` pairs with the
reference's logical axes; a reference axis the target lacks gets a broadcast stand-in of
extent 1 (best-effort replay through broadcasts), so every target ends with a loop domain
of the reference's length whose axes line up position by position and carry the same
parallel types. `propagate` does this for many tensors at once (the scheduler's
"transform propagation"), and `inline_most` records that each tensor is computed inside
the full loop nest.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from fuser.ir import IterDomain, IterType, Merge, Split, TensorView
from fuser.ir import domain as _domain
from fuser.ir.transforms import id_exprs_between


class ReplayError(ValueError):
    """The reference's transforms cannot be replayed on a tensor."""


def replay_loop(reference: TensorView, target: TensorView, mapping: Mapping[IterDomain, IterDomain | None]) -> None:
    """Set `target`'s loop domain to the reference's transforms replayed on its axes.

    `mapping`: reference logical axis -> the target axis that is the same axis (None or
    absent: the target does not have it)."""
    ref_dom = reference.domain
    history = id_exprs_between(ref_dom.logical, ref_dom.loop)
    m: dict[IterDomain, IterDomain] = {}
    with target.fusion.guard():
        used: set[IterDomain] = set()
        for r in ref_dom.logical:
            t = mapping.get(r)
            if t is not None:
                if t in used:
                    raise ReplayError(f"{target!r}: axis {t!r} is mapped to two reference axes")
                used.add(t)
                m[r] = t
            else:
                m[r] = IterDomain(1, IterType.Broadcast)
        for e in history:
            if isinstance(e, Split):
                outer, inner = _domain.split(m[e.inputs[0]], e.factor, e.inner_split)
                m[e.outputs[0]], m[e.outputs[1]] = outer, inner
            elif isinstance(e, Merge):
                m[e.outputs[0]] = _domain.merge(m[e.inputs[0]], m[e.inputs[1]])
            else:
                raise ReplayError(f"cannot replay {type(e).__name__} from {reference!r}")
        loop = []
        for r in ref_dom.loop:
            t = m[r]
            t.parallel_type = r.parallel_type
            loop.append(t)
    # target axes the reference has no counterpart for (broadcasts only) lead the loop
    extra = [i for i in target.domain.logical if i not in used and not i.is_reduction]
    for i in extra:
        if not i.is_broadcast:
            raise ReplayError(f"{target!r}: axis {i!r} has no counterpart in the reference {reference!r}")
    target.domain.loop = extra + loop


def propagate(reference: TensorView, targets: Iterable[TensorView],
              mapping: Mapping[TensorView, Mapping[IterDomain, IterDomain | None]]) -> None:
    """Replay the reference's schedule on every target (`mapping[target]` as in replay_loop)."""
    for tv in targets:
        if tv is not reference:
            replay_loop(reference, tv, mapping.get(tv, {}))


def inline_most(tvs: Iterable[TensorView]) -> None:
    """Compute each tensor inside its whole loop nest (nvFuser's inlineMost)."""
    for tv in tvs:
        tv.compute_at_pos = len(tv.domain.loop)
