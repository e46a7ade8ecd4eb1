"""The executor's side of a sharded fusion: its propagated copy (made once per definition
and input placement) and the segmenter's predicate that keeps each resharding in a
segment of its own, so that it becomes a Communication of the host program."""
from __future__ import annotations

from typing import Any, Callable


from fuser.multidevice.sharding import ShardedFusion, shard_fusion
from fuser.preseg import PresegFusion
from fuser.segment import SegmentedGroup


def sharded_fusion(entry: Any, placements: Any = None, keep_partial: bool = False) -> tuple[ShardedFusion, PresegFusion]:
    """The entry's fusion with shardings propagated and reshardings inserted (a copy, cached
    on the entry per `placements`: input position -> Sharding, for DTensor inputs), and a
    PresegFusion whose values map back to the defined fusion's."""
    key = (placements, keep_partial)
    got = entry.sharded_copies.get(key)
    if got is None:
        copy, memo = entry.fusion.clone()
        overrides = {copy.inputs[k]: s for k, s in placements} if placements else None
        sharded = shard_fusion(copy, overrides, keep_partial)
        live = set(copy.vals())
        original = {new: old for old, new in memo.items() if new in live}
        got = entry.sharded_copies[key] = (sharded, PresegFusion(copy, original, ("shard",)))
    return got


def _local_extents(g: SegmentedGroup, sharded: ShardedFusion) -> dict[Any, bool]:
    """Per extent value the group's tensors use: whether it is a sharded (local) axis."""
    got: dict[Any, bool] = {}
    for e in g.exprs:
        for v in (*e.inputs, *e.outputs):
            s = sharded.of(v)
            if s is None:
                continue
            for k, i in enumerate(v.logical_no_reductions()):  # type: ignore[union-attr]
                if not i.is_broadcast:
                    got.setdefault(i.extent, s.axis == k)
    return got


def sharded_should_merge(sharded: ShardedFusion,
                         inner: Callable[[SegmentedGroup, SegmentedGroup], bool] | None = None):
    """The segmenter's predicate: a resharding never merges; two compute groups merge
    when they run on the same mesh, unless one holds an axis as its local block where the
    other holds it whole (their extents would be bound to two sizes); `inner` (stream
    loops) must agree too."""
    reshards = sharded.reshards

    def meshes(g: SegmentedGroup) -> set:
        return {s.mesh for e in g.exprs for s in map(sharded.of, e.outputs) if s is not None}

    def should_merge(a: SegmentedGroup, b: SegmentedGroup) -> bool:
        if any(e in reshards for g in (a, b) for e in g.exprs):
            return False
        if meshes(a) != meshes(b):  # each runs on its own devices
            return False
        ea, eb = _local_extents(a, sharded), _local_extents(b, sharded)
        if any(eb.get(x, local) != local for x, local in ea.items()):
            return False
        return inner(a, b) if inner is not None else True

    return should_merge


__all__ = ["sharded_fusion", "sharded_should_merge"]
