"""The executor's side of a sharded fusion: its propagated copy (made once per definition
and input placement) and the segmenter's predicate that keeps each resharding in a
segment of its own, so that it becomes a Communication of the host program."""
from __future__ import annotations

import zlib
from typing import Any, Callable

import torch

from fuser.options import disabled
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


#: the gloo group the ranks agree on (a CPU collective: no GPU synchronisation)
_AGREE: dict[str, Any] = {}


def _fingerprint(inputs: Any) -> int:
    """A digest of the inputs' kinds, dtypes and local shapes, equal on ranks whose calls
    agree (addresses and alignment may differ; Python's hash is salted per process)."""
    parts = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            parts.append(f"{tuple(x.shape)}:{x.dtype}")
        else:
            parts.append(type(x).__name__)
    return zlib.crc32("|".join(parts).encode())


def agree(inputs: Any, failure: BaseException | None) -> None:
    """Every rank tells the others whether it could start this call and what it was
    given; then each raises if any rank failed or the ranks' inputs differ in shape or
    dtype, so that no rank waits in a collective for one that never comes
    (FUSER_DISABLE=rank_agreement skips it)."""
    import torch.distributed as dist

    if disabled("rank_agreement") or not dist.is_initialized() or dist.get_world_size() == 1:
        if failure is not None:
            raise failure
        return
    group = _AGREE.get("group")
    if group is None:
        group = _AGREE["group"] = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else None
    rank, size = dist.get_rank(), dist.get_world_size()
    mine = torch.tensor([0 if failure is None else 1, _fingerprint(inputs)], dtype=torch.int64)
    every = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(every, mine, group=group)
    failed = [k for k, t in enumerate(every) if int(t[0])]
    if failure is not None:
        note = f" (on rank {rank}; the other ranks stop too)"
        try:
            failure.args = (f"{failure.args[0]}{note}",) + tuple(failure.args[1:]) if failure.args else (note,)
        except Exception:
            pass
        raise failure
    if failed:
        raise RuntimeError(f"rank {failed[0]} failed before its communications (see its error); rank {rank} stops "
                           "instead of waiting for it")
    prints = [int(t[1]) for t in every]
    if len(set(prints)) > 1:
        odd = next(k for k, p in enumerate(prints) if p != prints[0])
        raise ValueError(f"the ranks' inputs differ in shape or dtype (rank 0 and rank {odd} disagree): each rank "
                         "passes its own block of every sharded input, and the same replicated inputs")


__all__ = ["agree", "sharded_fusion", "sharded_should_merge"]
