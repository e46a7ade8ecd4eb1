"""The segmenter: cover a fusion with as few kernels as possible, moving as few bytes
between them as possible.

1. Forwarded chains (see `forwarding`) and scalar arithmetic are set aside: every
   segment that needs them recomputes them.
2. When a scheduler accepts the whole fusion and no segment_set cuts it, that is the
   one segment (as nvFuser asks the schedulers about the complete fusion first): greedy
   pairwise merging can get stuck where only a merge of three groups is schedulable.
3. Otherwise every other expression starts as its own group. Producer/consumer groups
   merge in level-ordered passes, then in a pass over any remaining producer/consumer
   pair, then horizontally (groups reading a common tensor); a merge is kept when the
   merged group stays acyclic with the rest and a scheduler accepts it as the segment
   would be (with the forwarded and scalar work it reads), or, in custom segmentation,
   when the caller's predicate says so. The group graph and its bookkeeping are
   `fuser._core.segment.GroupGraph`.
4. IO-aware rematerialisation (see `remat`) moves pointwise work into consumer segments
   where recomputing is cheaper than writing and reading an intermediate.
5. A last pass retries every producer/consumer pair of the resulting groups (the
   horizontal merges and remat can make new pairs schedulable), rematerialising again
   after any merge, until no pair merges: no two groups joined by an edge are left whose
   merge would stay acyclic and be accepted.
6. Groups get their forwarded chains back and are ordered; edges are the tensors that
   still cross a boundary.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fuser._core import GroupGraph, topo_order
from fuser.ir import Fusion, TensorView
from fuser.options import disabled, dump, dump_enabled
from fuser.scheduler import (REGISTRY_ORDER, FusionAnalysis, SchedulerRuntimeInfo, SchedulerType, SubFusion, explain,
                             propose, reject_reason)
from fuser.scheduler.analysis import SCALAR, is_segmenter_set

from . import remat
from .forwarding import forwarded_exprs
from .segmented_fusion import SegmentedEdge, SegmentedFusion, SegmentedGroup, scalar_inputs_used

ShouldMerge = Callable[[SegmentedGroup, SegmentedGroup], bool]


class SegmentationError(RuntimeError):
    """The fusion could not be segmented into schedulable groups."""


class _Proto:
    """A group under construction: the exprs it is home to and the copies it recomputes."""

    __slots__ = ("owned", "extra", "scheduler")

    def __init__(self, owned: set[int], scheduler: SchedulerType, extra: set[int] | None = None) -> None:
        self.owned = owned
        self.extra = extra if extra is not None else set()
        self.scheduler = scheduler

    def all(self) -> set[int]:
        return self.owned | self.extra


def segment_fusion(
    fusion: Fusion,
    info: SchedulerRuntimeInfo | None,
    *,
    custom_should_merge: ShouldMerge | None = None,
    forwarding: bool | None = None,
    rematerialize: bool | None = None,
) -> SegmentedFusion:
    """Segment `fusion` for the call `info` describes (None only with a custom predicate).

    `forwarding`/`rematerialize` default to on, unless FUSER_DISABLE names them
    (`forwarding`, `remat`); custom segmentation does neither.
    """
    custom = custom_should_merge is not None
    if info is None and not custom:
        raise ValueError("segmenting for schedulers needs the call's SchedulerRuntimeInfo (its inputs)")
    if forwarding is None:
        forwarding = not custom and not disabled("forwarding")
    if rematerialize is None:
        rematerialize = not custom and not disabled("remat")
    attempts = [(forwarding, rematerialize)]
    if rematerialize:
        attempts.append((forwarding, False))
    if forwarding:
        attempts.append((False, False))
    last: Exception | None = None
    for fwd, rm in attempts:
        try:
            seg = _Segmenter(fusion, info, custom_should_merge, fwd, rm).run()
            if dump_enabled("segmented_fusion"):
                dump("segmented_fusion", str(seg))
            return seg
        except _Unschedulable as err:  # a later attempt does less and may succeed
            last = err
    raise SegmentationError(f"no segmentation of the fusion is schedulable: {last}")


class _Unschedulable(Exception):
    pass


class _Segmenter:
    def __init__(self, fusion: Fusion, info: SchedulerRuntimeInfo | None, custom: ShouldMerge | None,
                 forwarding: bool, rematerialize: bool) -> None:
        self.fusion = fusion
        self.info = info
        self.custom = custom
        self.remat = rematerialize
        self.a = FusionAnalysis(fusion, info)
        a = self.a
        live = set(a.exprs)
        self.host = {k for k, kind in enumerate(a.kinds) if kind == SCALAR}
        self.forwarded = {a.expr_index[e] for e in forwarded_exprs(fusion, live)} if forwarding else set()
        self.def_index: dict[Any, int] = {}
        for k, e in enumerate(a.exprs):
            for v in e.outputs:
                self.def_index[v] = k
        # a segment_set's operand is always a boundary: (segment_set expr, operand's producer)
        self.segment_sets = [
            (k, self.def_index[e.inputs[0]]) for k, e in enumerate(a.exprs)
            if is_segmenter_set(e) and e.inputs[0] in self.def_index
        ]
        self.segment_set_operands = {a.exprs[k].inputs[0] for k, _ in self.segment_sets}
        # per expr: the forwarded or scalar exprs it reads directly (for `closure`)
        side = self.forwarded | self.host
        self.side_inputs: list[tuple[int, ...]] = [
            tuple(d for v in e.inputs for d in (self.def_index.get(v),) if d is not None and d in side)
            for e in a.exprs
        ]
        # the schedulers' verdict (None: refused) per expr set asked about, without its
        # closure: passes offer the same sets again, and _finalize asks about the groups
        self.verdicts: dict[frozenset[int], SchedulerType | None] = {}
        # expr sets one scheduler is known to accept (remat asked it), for _finalize
        self.accepted_by: dict[frozenset[int], SchedulerType] = {}

    # --- merging ---------------------------------------------------------------------------
    def run(self) -> SegmentedFusion:
        a = self.a
        nodes = [k for k in range(len(a.exprs)) if k not in self.host and k not in self.forwarded]
        if self.custom is None and len(nodes) > 1 and not self.segment_sets:
            # nvFuser asks about the complete fusion first: pairwise merging can get stuck
            # where only a merge of three or more groups is schedulable
            st = self._verdict(set(nodes))
            if st is not None:
                return self._finalize([_Proto(set(nodes), st)])
        pos = {k: i for i, k in enumerate(nodes)}
        succ: list[list[int]] = []
        for k in nodes:
            s: list[int] = []
            for v in a.exprs[k].outputs:
                if isinstance(v, TensorView):
                    s.extend(pos[u] for u in a.uses.get(v, ()) if u in pos)
            succ.append(s)
        offsets = np.zeros(len(nodes) + 1, dtype=np.int64)
        np.cumsum([len(s) for s in succ], out=offsets[1:])
        indices = np.fromiter((j for s in succ for j in s), dtype=np.int64, count=int(offsets[-1]))
        graph = GroupGraph(len(nodes), offsets, indices)
        self.members: dict[int, list[int]] = {i: [k] for i, k in enumerate(nodes)}
        # a group's scheduler; a single expr's is looked up when first needed
        self.sched: dict[int, SchedulerType | None] = dict.fromkeys(range(len(nodes)))
        self.version: dict[int, int] = {}
        self.refused: set[tuple[int, int, int, int]] = set()
        accept = self._accept_custom if self.custom is not None else self._accept
        while graph.level_pass(accept):
            pass
        graph.edge_pass(accept)
        self._horizontal(graph, accept)
        protos = [_Proto(set(self.members[g]), self._scheduler(g)) for g in graph.topo_order()]
        if self.custom is None:
            protos = self._settle(protos)
        elif self.remat:
            protos = remat.rematerialize(self, protos)
        return self._finalize(protos)

    def _settle(self, protos: list[_Proto]) -> list[_Proto]:
        """Rematerialise, then merge remaining producer/consumer pairs, until a merge pass
        merges nothing: each round that merges leaves fewer groups, so this ends."""
        while True:
            if self.remat:
                protos = remat.rematerialize(self, protos)
            n = len(protos)
            protos = self._merge_pairs(protos)
            if len(protos) == n:
                return protos

    def _scheduler(self, g: int) -> SchedulerType:
        """Group g's scheduler; a single expr no scheduler takes runs through ATen (expr_eval)."""
        st = self.sched[g]
        if st is None:
            st = SchedulerType.none if self.custom is not None else self._verdict(set(self.members[g]))
            st = self.sched[g] = st if st is not None else SchedulerType.expr_eval
        return st

    def _splits_segment_set(self, ks: set[int]) -> bool:
        return any(k in ks and p in ks for k, p in self.segment_sets)

    def _merged(self, a: int, b: int, ks: list[int], st: SchedulerType) -> None:
        new, old = min(a, b), max(a, b)
        self.members[new] = ks
        self.sched[new] = st
        self.version[new] = self.version.get(new, 0) + 1
        del self.members[old]
        del self.sched[old]

    def _verdict(self, ks: set[int]) -> SchedulerType | None:
        """The scheduler of a segment made of `ks` (with the forwarded and scalar work it
        reads, as `_finalize` builds it), or None when it may not be one segment."""
        if self.segment_sets and self._splits_segment_set(ks):
            return None
        key = frozenset(ks)
        try:
            return self.verdicts[key]
        except KeyError:
            st = self.verdicts[key] = propose(self.a.sub(self.closure(ks)))
            return st

    def accepts(self, ks: set[int], st: SchedulerType) -> bool:
        """Whether `st` schedules a segment made of `ks` (with its closure); remembered."""
        if reject_reason(self.a.sub(self.closure(ks)), st) is not None:
            return False
        self.accepted_by[frozenset(ks)] = st
        return True

    def _propose(self, ks: set[int], sub: SubFusion) -> SchedulerType | None:
        """propose(sub) for `sub`, the closure of `ks`, asking no more than it must: a
        scheduler known to accept it stands for itself and every later one."""
        key = frozenset(ks)
        st = self.verdicts.get(key)
        if st is not None:
            return st
        known = self.accepted_by.get(key)
        if known not in REGISTRY_ORDER:  # None: nothing known about this set
            return propose(sub)
        earlier = REGISTRY_ORDER[:REGISTRY_ORDER.index(known)]
        return next((e for e in earlier if reject_reason(sub, e) is None), known)

    def _accept(self, a: int, b: int) -> bool:
        # passes offer the same pair again until one side changes: remember refusals
        key = (a, self.version.get(a, 0), b, self.version.get(b, 0))
        if key in self.refused:
            return False
        ks = self.members[a] + self.members[b]
        st = self._verdict(set(ks))
        if st is None:
            self.refused.add(key)
            return False
        self._merged(a, b, ks, st)
        return True

    def _merge_pairs(self, protos: list[_Proto]) -> list[_Proto]:
        """Merge finished groups joined by an edge (a tensor one reads from the other) while
        a scheduler accepts the merge and it stays acyclic; returns them in topological order."""
        n = len(protos)
        if n < 2:
            return protos
        a = self.a
        home: dict[Any, int] = {}
        for pi, p in enumerate(protos):
            for k in p.owned:
                for v in a.exprs[k].outputs:
                    home[v] = pi
        cons: list[set[int]] = [set() for _ in range(n)]
        for ci, p in enumerate(protos):
            for v in self.reads(p.all()):
                pi = home.get(v)
                if pi is not None and pi != ci:
                    cons[pi].add(ci)
        if not any(cons):
            return protos
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(c) for c in cons], out=offsets[1:])
        indices = np.fromiter((j for c in cons for j in sorted(c)), dtype=np.int64, count=int(offsets[-1]))
        graph = GroupGraph(n, offsets, indices)
        by_id = dict(enumerate(protos))

        def accept(x: int, y: int) -> bool:
            p, c = by_id[x], by_id[y]
            owned = p.owned | c.owned
            extra = (p.extra | c.extra) - owned
            st = self._verdict(owned | extra)
            if st is None:
                return False
            by_id[min(x, y)] = _Proto(owned, st, extra)
            del by_id[max(x, y)]
            return True

        graph.edge_pass(accept)
        return [by_id[int(g)] for g in graph.topo_order()]

    def _accept_custom(self, a: int, b: int) -> bool:
        if not self.custom(self._provisional(a), self._provisional(b)):
            return False
        self._merged(a, b, self.members[a] + self.members[b], SchedulerType.none)
        return True

    def _provisional(self, g: int) -> SegmentedGroup:
        sub = self.a.sub(self.members[g])
        return SegmentedGroup(g, sub.exprs, sub.inputs, sub.outputs, SchedulerType.none, sub.expr_ids, sub.exprs)

    def _horizontal(self, graph: GroupGraph, accept: Callable[[int, int], bool]) -> None:
        """Merge groups no path connects when they read a common tensor (read once instead of
        twice); custom segmentation offers every such pair to its predicate."""
        changed = True
        while changed:
            changed = False
            order = [int(g) for g in graph.topo_order()]
            reads = {g: set(self.reads(self.members[g], closed=False)) for g in order}
            for i, x in enumerate(order):
                for y in order[i + 1:]:
                    if self.custom is None and not (reads[x] & reads[y]):
                        continue
                    if graph.has_path(x, y) or graph.has_path(y, x):
                        continue
                    if accept(x, y):
                        graph.merge(x, y)
                        changed = True
                        break
                if changed:
                    break

    # --- results -------------------------------------------------------------------------------
    def reads(self, ks: set[int], *, closed: bool = True) -> list[TensorView]:
        """The tensors the exprs `ks` (with their closure unless not `closed`) read and do
        not make: the inputs of `self.a.sub(...)`, in its order, without building one."""
        exprs = self.a.exprs
        made: set[Any] = set()
        seen: dict[TensorView, None] = {}
        for k in sorted(self.closure(ks) if closed else ks):
            e = exprs[k]
            for v in e.inputs:
                if isinstance(v, TensorView) and v not in made:
                    seen[v] = None
            made.update(e.outputs)
        return [v for v in seen if v not in made]

    def closure(self, ks: set[int]) -> set[int]:
        """`ks` plus the forwarded and scalar exprs they read from, transitively."""
        out = set(ks)
        side = self.side_inputs
        stack = [d for k in ks for d in side[k] if d not in out]
        while stack:
            d = stack.pop()
            if d not in out:
                out.add(d)
                stack.extend(side[d])
        return out

    def group_outputs(self, protos: list[_Proto]) -> list[set[TensorView]]:
        """What each group writes to memory: what it is home to that the fusion returns or
        another group reads (not what another group recomputes for itself)."""
        # a group never reads what it computes, so anything read is another group's output
        read_anywhere = set().union(*(self.reads(p.all()) for p in protos))
        return [{v for k in p.owned for v in self.a.exprs[k].outputs if v in self.a.outputs or v in read_anywhere}
                for p in protos]

    def exact_sub(self, p: _Proto, outputs: set[TensorView]) -> SubFusion:
        """The segment `p` becomes, with the outputs `group_outputs` gives it."""
        return self.a.sub(self.closure(p.all()), outputs)

    def _finalize(self, protos: list[_Proto]) -> SegmentedFusion:
        a = self.a
        fusion = self.fusion
        home: dict[Any, int] = {}
        for pi, p in enumerate(protos):
            for k in p.owned:
                for v in a.exprs[k].outputs:
                    home[v] = pi
        written = self.group_outputs(protos)
        subs = [self.exact_sub(p, w) for p, w in zip(protos, written)]
        reads: list[list[TensorView]] = [s.inputs for s in subs]
        # order the groups: producer -> consumer through the tensors they pass
        n = len(protos)
        succ = [sorted({pi for v in reads[ci] for pi in [home.get(v)] if pi is not None and pi != ci}) for ci in range(n)]
        cons: list[list[int]] = [[] for _ in range(n)]
        for ci, ps in enumerate(succ):
            for pi in ps:
                cons[pi].append(ci)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(c) for c in cons], out=offsets[1:])
        indices = np.fromiter((j for c in cons for j in c), dtype=np.int64, count=int(offsets[-1]))
        order, levels = topo_order(offsets, indices)
        groups: list[SegmentedGroup] = []
        new_id = {int(pi): gi for gi, pi in enumerate(order)}
        for gi, pi in enumerate(order):
            pi = int(pi)
            p, sub = protos[pi], subs[pi]
            if self.custom is not None:
                st = SchedulerType.none
            else:
                judged = a.sub(sub.expr_ids)  # what the verdicts saw: outputs another group recomputes too
                st = self._propose(p.all(), judged)
                if set(judged.outputs) != written[pi] and (st is None or reject_reason(sub, st) is not None):
                    st = propose(sub)  # judged with an output the group no longer writes
                if st is None and p.scheduler is SchedulerType.expr_eval and len(p.owned) == 1:
                    st = SchedulerType.expr_eval  # a lone op no kernel takes: ATen runs it
                if st is None:
                    why = "; ".join(f"{k.value}: {v}" for k, v in explain(sub).items())
                    raise _Unschedulable(f"group of {len(sub.exprs)} exprs is unschedulable ({why})")
            owned_exprs = [a.exprs[k] for k in sorted(p.owned)]
            outputs = sorted(written[pi], key=lambda v: v.name)
            tensor_inputs = sorted(sub.inputs, key=lambda v: v.name)
            inputs = tensor_inputs + scalar_inputs_used(fusion, sub.exprs, sub.tensors(), tensor_inputs)
            groups.append(SegmentedGroup(gi, sub.exprs, inputs, outputs, st, sub.expr_ids, owned_exprs, int(levels[pi])))
        edges = []
        for g in groups:
            for v in g.inputs:
                pi = home.get(v)
                if pi is not None and isinstance(v, TensorView):
                    edges.append(SegmentedEdge(v, groups[new_id[pi]], g))
        return SegmentedFusion(fusion, groups, edges, self.info)


__all__ = ["segment_fusion", "SegmentationError", "ShouldMerge"]
