"""Tests for the segmenter's group graph (fuser/_core/segment.pyx)."""

import heapq
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuser._core import CycleError, GroupGraph


def csr(n, edges):
    """CSR arrays for ``n`` nodes from ``(src, dst)`` pairs, keeping edge order."""
    succ = [[] for _ in range(n)]
    for u, v in edges:
        succ[u].append(v)
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in succ], dtype=np.int64)
    indices = np.array([v for s in succ for v in s], dtype=np.int64)
    return offsets, indices


def gg(n, edges):
    return GroupGraph(n, *csr(n, edges))


def chain(n):
    return [(i, i + 1) for i in range(n - 1)]


def diamond_chain(n):
    """Node 3k feeds 3k+1 and 3k+2, which both feed 3k+3."""
    edges = []
    for k in range(0, n, 3):
        for u, v in [(k, k + 1), (k, k + 2), (k + 1, k + 3), (k + 2, k + 3)]:
            if v < n:
                edges.append((u, v))
    return edges


class Recorder:
    """An accept callback that records its calls and answers from ``answer``."""

    def __init__(self, answer=True):
        self.answer = answer
        self.calls = []

    def __call__(self, a, b):
        self.calls.append((a, b))
        return self.answer(a, b) if callable(self.answer) else self.answer


def levels_of(g):
    return {int(x): g.level(x) for x in g.alive()}


# ------------------------------------------------------------- reference model

class RefGraph:
    """Plain-Python model of GroupGraph: node -> group id, groups' edges
    derived from the node edges every time."""

    def __init__(self, n, edges):
        self.n = n
        self.edges = list(edges)
        self.group = list(range(n))
        self.lo, self.hi = {}, {}
        self.recompute()

    def live(self):
        return sorted(set(self.group))

    def gedges(self):
        return sorted({(self.group[u], self.group[v]) for u, v in self.edges
                       if self.group[u] != self.group[v]})

    def consumers(self, g):
        return sorted({c for p, c in self.gedges() if p == g})

    def producers(self, g):
        return sorted({p for p, c in self.gedges() if c == g})

    def reach(self, starts):
        succ = {}
        for p, c in self.gedges():
            succ.setdefault(p, []).append(c)
        seen, stack = set(starts), list(starts)
        while stack:
            for c in succ.get(stack.pop(), []):
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
        return seen

    def has_path(self, a, b):
        return b in self.reach(self.consumers(a))

    def would_cycle(self, a, b):
        return (b in self.reach([c for c in self.consumers(a) if c != b])
                or a in self.reach([c for c in self.consumers(b) if c != a]))

    def recompute(self):
        memo = {}

        def level(g):
            if g not in memo:
                memo[g] = max((level(p) + 1 for p in self.producers(g)), default=0)
            return memo[g]

        self.lo = {g: level(g) for g in self.live()}
        self.hi = dict(self.lo)

    def merge(self, a, b):
        m = min(a, b)
        self.group = [m if x in (a, b) else x for x in self.group]
        lo, hi = min(self.lo[a], self.lo[b]), max(self.hi[a], self.hi[b])
        for x in (a, b):
            del self.lo[x], self.hi[x]
        self.lo[m], self.hi[m] = lo, hi
        return m

    def topo(self):
        """Kahn, smallest (min_level, id) ready group first."""
        indeg = {g: len(self.producers(g)) for g in self.live()}
        ready = [(self.lo[g], g) for g in self.live() if indeg[g] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, g = heapq.heappop(ready)
            order.append(g)
            for c in self.consumers(g):
                indeg[c] -= 1
                if indeg[c] == 0:
                    heapq.heappush(ready, (self.lo[c], c))
        return order

    def level_pass(self, accept):
        self.recompute()
        merged = set()
        for g in self.topo():
            if g not in self.lo or g in merged:
                continue
            for c in self.consumers(g):
                if self.lo[c] != self.lo[g] + 1 or c in merged:
                    continue
                if self.would_cycle(g, c):
                    continue
                if accept(g, c):
                    merged.add(self.merge(g, c))
                    break
        return len(merged)

    def edge_pass(self, accept):
        total = 0
        while True:
            self.recompute()
            done, sweep = set(), 0
            for p in self.topo():
                if p not in self.lo or p in done:
                    continue
                again = True
                while again:
                    again = False
                    for c in self.consumers(p):
                        if not self.would_cycle(p, c) and accept(p, c):
                            p = self.merge(p, c)
                            self.recompute()
                            total += 1
                            sweep += 1
                            again = True
                            break
                done.add(p)
            if sweep == 0:
                return total


def assert_same(g, ref):
    assert g.alive().tolist() == ref.live()
    assert g.num_groups == len(ref.live())
    assert [tuple(e) for e in g.edges().tolist()] == ref.gedges()
    for x in range(ref.n):
        assert g.find(x) == ref.group[x]
    for x in ref.live():
        assert g.members(x).tolist() == [v for v in range(ref.n) if ref.group[v] == x]
        assert g.consumers(x).tolist() == ref.consumers(x)
        assert g.producers(x).tolist() == ref.producers(x)
        assert (g.min_level(x), g.max_level(x)) == (ref.lo[x], ref.hi[x])


# ----------------------------------------------------------------- construction

def test_initial_state():
    g = gg(5, [(0, 1), (0, 2), (1, 3), (2, 3), (0, 1)])  # 4 isolated
    assert g.num_groups == 5 and g.num_nodes == 5
    assert g.alive().tolist() == [0, 1, 2, 3, 4]
    assert g.alive().dtype == np.int64
    assert g.edges().tolist() == [[0, 1], [0, 2], [1, 3], [2, 3]]
    assert g.edges().dtype == np.int64
    assert g.consumers(0).tolist() == [1, 2]
    assert g.producers(3).tolist() == [1, 2]
    assert g.producers(0).tolist() == [] and g.consumers(4).tolist() == []
    assert levels_of(g) == {0: 0, 1: 1, 2: 1, 3: 2, 4: 0}
    assert [g.find(x) for x in range(5)] == [0, 1, 2, 3, 4]
    assert g.members(3).tolist() == [3]
    assert g.topo_order().tolist() == [0, 4, 1, 2, 3]
    assert repr(g) == "GroupGraph(num_nodes=5, num_groups=5)"


def test_empty_graph():
    g = GroupGraph(0, [0], [])
    assert g.num_groups == 0
    assert g.alive().tolist() == []
    assert g.edges().shape == (0, 2)
    assert g.topo_order().tolist() == []
    assert g.level_pass(lambda a, b: True) == 0
    assert g.edge_pass(lambda a, b: True) == 0


def test_accepts_lists_and_other_int_dtypes():
    g = GroupGraph(3, np.array([0, 1, 2, 2], dtype=np.int32), [1, 2])
    assert g.edges().tolist() == [[0, 1], [1, 2]]
    assert GroupGraph(np.int64(2), [0, 1, 1], np.array([1], dtype=np.uint8)).num_groups == 2


def test_constructor_does_not_modify_inputs():
    offsets, indices = csr(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    offsets.flags.writeable = False
    indices.flags.writeable = False
    g = GroupGraph(4, offsets, indices)
    g.merge(0, 1)
    assert indices.tolist() == [1, 2, 3, 3]


def test_self_loop_rejected():
    with pytest.raises(ValueError, match=r"indices\[1\] = 1 is a self-loop on node 1"):
        gg(3, [(0, 1), (1, 1), (1, 2)])


def test_cycle_rejected():
    with pytest.raises(CycleError) as info:
        gg(4, [(0, 1), (1, 2), (2, 3), (3, 1)])
    assert info.value.cycle == [1, 2, 3]
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("n, offsets, indices, match", [
    (2, [0, 1], [1], r"offsets must have n \+ 1 = 3 elements, got 2"),
    (-1, [0], [], r"n must be >= 0"),
    (1, [], [], r"offsets must have"),
    (2, [0, 1, 1], [2], r"indices\[0\] = 2 is not a node of a graph with 2 nodes"),
    (3, [0, 2, 1, 2], [1, 2], r"offsets must be non-decreasing"),
    (2, [0, 1, 1], [0.5], r"indices must have an integer dtype"),
])
def test_invalid_construction(n, offsets, indices, match):
    with pytest.raises(ValueError, match=match):
        GroupGraph(n, offsets, indices)


def test_n_must_be_int():
    with pytest.raises(TypeError):
        GroupGraph(2.0, [0, 0, 0], [])


# ------------------------------------------------------------------- merging

def test_diamond_merges():
    #   0
    #  / \
    # 1   2
    #  \ /
    #   3
    g = gg(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    assert g.would_cycle(0, 3) and g.would_cycle(3, 0)  # through 1 (and 2)
    assert g.would_cycle_full(0, 3)
    with pytest.raises(ValueError, match="merging groups 0 and 3 would create a cycle"):
        g.merge(0, 3)
    assert g.num_groups == 4  # a refused merge changes nothing
    assert not g.would_cycle(0, 1) and not g.would_cycle(1, 2)

    assert g.merge(1, 0) == 0
    assert g.alive().tolist() == [0, 2, 3]
    assert g.find(1) == 0 and g.members(0).tolist() == [0, 1]
    assert g.consumers(0).tolist() == [2, 3]
    assert g.producers(3).tolist() == [0, 2]
    assert g.producers(2).tolist() == [0]
    assert g.edges().tolist() == [[0, 2], [0, 3], [2, 3]]
    assert (g.level(0), g.min_level(0), g.max_level(0)) == (0, 0, 1)
    assert (g.min_level(3), g.max_level(3)) == (2, 2)
    # Still a cycle risk, now through 2.
    assert g.would_cycle(0, 3)

    assert g.merge(3, 2) == 2
    assert g.edges().tolist() == [[0, 2]]
    assert (g.min_level(2), g.max_level(2)) == (1, 2)
    assert g.members(2).tolist() == [2, 3]
    assert g.merge(2, 0) == 0
    assert g.num_groups == 1
    assert g.members(0).tolist() == [0, 1, 2, 3]
    assert g.edges().shape == (0, 2)
    assert (g.min_level(0), g.max_level(0)) == (0, 2)
    g.recompute_levels()
    assert (g.min_level(0), g.max_level(0)) == (0, 0)


def test_merge_id_is_smallest_member():
    g = gg(6, chain(6))
    assert g.merge(4, 3) == 3
    assert g.merge(3, 5) == 3
    assert g.merge(1, 2) == 1
    assert g.merge(3, 1) == 1
    assert g.alive().tolist() == [0, 1]
    assert [g.find(x) for x in range(6)] == [0, 1, 1, 1, 1, 1]
    assert g.members(1).tolist() == [1, 2, 3, 4, 5]
    assert g.edges().tolist() == [[0, 1]]


def test_merge_non_adjacent_groups():
    # Two independent chains; merging across them is fine.
    g = gg(4, [(0, 1), (2, 3)])
    assert not g.would_cycle(0, 2) and not g.has_path(0, 2)
    assert g.merge(2, 0) == 0
    assert g.consumers(0).tolist() == [1, 3]
    assert g.merge(1, 3) == 1
    assert g.edges().tolist() == [[0, 1]]


def test_merged_edges_drop_self_edges_and_duplicates():
    # 0 -> 2, 1 -> 2, 0 -> 1, 2 -> 3, 1 -> 3 (twice).
    g = gg(4, [(0, 2), (1, 2), (0, 1), (2, 3), (1, 3), (1, 3)])
    assert g.merge(1, 2) == 1
    assert g.consumers(1).tolist() == [3]
    assert g.producers(1).tolist() == [0]
    assert g.edges().tolist() == [[0, 1], [1, 3]]


def test_would_cycle_either_direction():
    # 3 -> 0 -> 1 -> 2 and 3 -> 2: merging 2 and 3 would close 3 -> 0 -> 1 -> 2.
    g = gg(4, [(3, 0), (0, 1), (1, 2), (3, 2)])
    assert g.would_cycle(2, 3) and g.would_cycle(3, 2)
    assert g.would_cycle_full(2, 3)
    assert g.would_cycle(0, 2)  # through 1
    assert not g.would_cycle(3, 0) and not g.would_cycle(1, 2)
    # The direct edge alone never counts.
    assert not gg(2, [(0, 1)]).would_cycle(0, 1)


def test_would_cycle_falls_back_when_a_group_spans_many_levels():
    # 0 -> 1 -> 2 -> 3, and 4 alone. Merging 4 (level 0) with 3 (level 3)
    # gives a group spanning levels 0..3; a search pruned by min_level would
    # then miss 0 -> 1 -> 2 -> {3, 4}.
    g = gg(5, chain(4))
    assert g.merge(4, 3) == 3
    assert (g.min_level(3), g.max_level(3)) == (0, 3)
    assert g.would_cycle(0, 3) and g.would_cycle_full(0, 3)
    assert g.has_path(0, 3)
    with pytest.raises(ValueError, match="would create a cycle"):
        g.merge(0, 3)
    g.recompute_levels()
    assert levels_of(g) == {0: 0, 1: 1, 2: 2, 3: 3}
    assert g.would_cycle(0, 3)


def test_cycle_checks_after_merge_of_far_apart_groups():
    # 0 -> 1 -> ... -> 5 -> 6 and 7 -> 8 -> 9. Merging 7 (level 0) into 6
    # (level 6) adds the path 5 -> {6, 7} -> 8 -> 9, which climbs down from
    # level 6 to level 1: no numbering of the levels prunes a search from 5
    # for 9 correctly any more.
    g = gg(10, chain(7) + [(7, 8), (8, 9)])
    assert not g.would_cycle(7, 6)
    assert g.merge(7, 6) == 6
    assert g.has_path(5, 9) and g.would_cycle(5, 9) and g.would_cycle_full(5, 9)
    with pytest.raises(ValueError, match="would create a cycle"):
        g.merge(9, 5)
    assert not g.would_cycle(5, 6) and not g.would_cycle(6, 8) and g.would_cycle(6, 9)
    assert g.topo_order().tolist() == [0, 1, 2, 3, 4, 5, 6, 8, 9]
    g.recompute_levels()
    assert levels_of(g) == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 8: 7, 9: 8}
    assert g.would_cycle(5, 9)


def test_has_path():
    g = gg(4, [(0, 1), (1, 2)])
    assert g.has_path(0, 2) and g.has_path(0, 1)
    assert not g.has_path(2, 0) and not g.has_path(0, 3) and not g.has_path(3, 0)
    g.merge(1, 2)
    assert g.has_path(0, 1) and not g.has_path(1, 0)


def test_recompute_levels_and_topo_order():
    # 0 -> 1 -> 2 -> 3 -> 4, 5 -> 4, 6 alone.
    g = gg(7, chain(5) + [(5, 4)])
    assert g.topo_order().tolist() == [0, 5, 6, 1, 2, 3, 4]
    g.merge(1, 2)
    g.merge(3, 4)
    assert (g.min_level(3), g.max_level(3)) == (3, 4)
    assert g.topo_order().tolist() == [0, 5, 6, 1, 3]
    g.recompute_levels()
    assert levels_of(g) == {0: 0, 1: 1, 3: 2, 5: 0, 6: 0}
    assert [(g.min_level(x), g.max_level(x)) for x in g.alive()] == [
        (0, 0), (1, 1), (2, 2), (0, 0), (0, 0)]
    assert g.topo_order().tolist() == [0, 5, 6, 1, 3]
    g.merge(6, 3)  # levels 0 and 2: a wide group
    order = g.topo_order().tolist()
    assert order == [0, 5, 1, 3]
    g.recompute_levels()
    assert levels_of(g) == {0: 0, 1: 1, 3: 2, 5: 0}


# ---------------------------------------------------------------- level_pass

def test_level_pass_chain_of_8_merges_pairs():
    g = gg(8, chain(8))
    accept = Recorder()
    assert g.level_pass(accept) == 4
    assert accept.calls == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert g.alive().tolist() == [0, 2, 4, 6]
    assert [g.members(x).tolist() for x in g.alive()] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g.edges().tolist() == [[0, 2], [2, 4], [4, 6]]
    assert [(g.min_level(x), g.max_level(x)) for x in g.alive()] == [
        (0, 1), (2, 3), (4, 5), (6, 7)]
    assert g.level_pass(accept) == 2
    assert accept.calls[4:] == [(0, 2), (4, 6)]
    # Levels were recomputed at the start of the pass (0, 1, 2, 3), then merged.
    assert [(g.min_level(x), g.max_level(x)) for x in g.alive()] == [(0, 1), (2, 3)]
    assert g.level_pass(accept) == 1
    assert g.level_pass(accept) == 0
    assert g.alive().tolist() == [0] and g.members(0).tolist() == list(range(8))
    assert len(accept.calls) == 7


def test_level_pass_accept_argument_order_is_producer_consumer():
    # 3 -> 2 -> 1 -> 0: producers have the larger ids; the merged id is the
    # consumer's, which is then marked as merged in this pass.
    g = gg(4, [(3, 2), (2, 1), (1, 0)])
    accept = Recorder()
    assert g.level_pass(accept) == 2
    assert accept.calls == [(3, 2), (1, 0)]
    assert g.alive().tolist() == [0, 2]
    assert g.edges().tolist() == [[2, 0]]


def test_level_pass_reject_all_asks_every_eligible_pair_once():
    g = gg(4, chain(4))
    accept = Recorder(False)
    assert g.level_pass(accept) == 0
    assert accept.calls == [(0, 1), (1, 2), (2, 3)]
    assert g.num_groups == 4


def test_level_pass_only_next_level_consumers():
    # 0 -> 1 -> 2 and 0 -> 2: 2 is two levels below 0.
    g = gg(3, [(0, 1), (1, 2), (0, 2)])
    accept = Recorder(False)
    assert g.level_pass(accept) == 0
    assert accept.calls == [(0, 1), (1, 2)]


def test_level_pass_consumers_in_id_order():
    g = gg(4, [(0, 3), (0, 1), (2, 3)])
    accept = Recorder(lambda a, b: (a, b) != (0, 1))
    assert g.level_pass(accept) == 1
    # 0 tries 1 (refused), then 3; then 2's only consumer was merged.
    assert accept.calls == [(0, 1), (0, 3)]
    assert g.alive().tolist() == [0, 1, 2]
    assert g.edges().tolist() == [[0, 1], [2, 0]]


def test_level_pass_skips_groups_merged_in_this_pass():
    # 0 -> 2 and 1 -> 2: once 2 joins 0, 1 has no candidate left.
    g = gg(3, [(0, 2), (1, 2)])
    accept = Recorder()
    assert g.level_pass(accept) == 1
    assert accept.calls == [(0, 2)]
    assert g.edges().tolist() == [[1, 0]]
    assert g.level_pass(accept) == 1
    assert accept.calls[1:] == [(1, 0)]
    assert g.num_groups == 1


def test_level_pass_cross_pattern_does_not_create_a_cycle():
    # A1 = 0, A2 = 1 at level 0; B1 = 2, B2 = 3 at level 1.
    # A1 -> B1, A2 -> B2 and the cross A1 -> B2, A2 -> B1. After {A1, B1}
    # merge, merging A2 with B2 would close A2 -> {A1, B1} -> B2 -> A2.
    g = gg(4, [(0, 2), (1, 3), (0, 3), (1, 2)])
    accept = Recorder()
    assert g.level_pass(accept) == 1
    assert accept.calls == [(0, 2)]  # (1, 3) is refused without asking
    assert g.alive().tolist() == [0, 1, 3]
    assert g.edges().tolist() == [[0, 3], [1, 0], [1, 3]]
    assert g.topo_order().tolist() == [1, 0, 3]
    g.recompute_levels()
    assert levels_of(g) == {1: 0, 0: 1, 3: 2}
    assert g.would_cycle(1, 3) and g.would_cycle_full(1, 3)


def test_level_pass_refuses_cycle_through_third_group():
    # Diamond: 0 -> 1, 0 -> 2, 1 -> 3, 2 -> 3. Only level-adjacent pairs are
    # candidates, so the pass merges (0, 1) and then (2, 3).
    g = gg(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    accept = Recorder()
    assert g.level_pass(accept) == 2
    assert accept.calls == [(0, 1), (2, 3)]
    assert g.edges().tolist() == [[0, 2]]


def test_accept_may_query_but_not_modify():
    g = gg(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    seen = []

    def accept(a, b):
        seen.append((g.level(a), g.level(b), g.consumers(a).tolist(),
                     g.would_cycle(a, b), g.num_groups))
        return True

    assert g.level_pass(accept) == 2
    assert seen == [(0, 1, [1, 2], False, 4), (1, 2, [3], False, 3)]

    g = gg(3, chain(3))
    with pytest.raises(RuntimeError, match="inside an accept callback"):
        g.level_pass(lambda a, b: g.merge(a, b))
    with pytest.raises(RuntimeError, match="inside an accept callback"):
        g.edge_pass(lambda a, b: g.recompute_levels())
    with pytest.raises(RuntimeError, match="inside an accept callback"):
        g.level_pass(lambda a, b: g.level_pass(bool))
    # Nothing was merged, and the graph works again afterwards.
    assert g.num_groups == 3
    assert g.merge(0, 1) == 0


def test_accept_exception_propagates():
    g = gg(4, chain(4))

    def accept(a, b):
        if a == 2:
            raise KeyError("boom")
        return True

    with pytest.raises(KeyError, match="boom"):
        g.level_pass(accept)
    assert g.alive().tolist() == [0, 2, 3]  # the merge before the error stays
    assert g.level_pass(lambda a, b: True) == 1


def test_accept_must_be_callable():
    g = gg(2, [(0, 1)])
    with pytest.raises(TypeError, match="accept must be callable"):
        g.level_pass(None)
    with pytest.raises(TypeError, match="accept must be callable"):
        g.edge_pass(1)


def test_level_pass_big_chain_halves_each_pass():
    n = 12000
    g = gg(n, chain(n))
    counts = []
    while True:
        groups = g.num_groups
        k = g.level_pass(lambda a, b: True)
        counts.append(k)
        assert k == groups // 2
        if k == 0:
            break
    assert len(counts) == 15
    assert g.alive().tolist() == [0]
    assert g.members(0).tolist() == list(range(n))


def test_level_pass_big_diamond_chain():
    n = 12000
    edges = diamond_chain(n)
    g = gg(n, edges)
    accept = Recorder(False)
    assert g.level_pass(accept) == 0
    assert len(accept.calls) == len(edges)  # every edge is level-adjacent
    assert sorted(accept.calls) == sorted(edges)
    while g.level_pass(lambda a, b: True):
        assert g.edges().shape[0] == g.num_groups - 1 or g.num_groups > 1
    assert g.num_groups == 1


# ----------------------------------------------------------------- edge_pass

def test_edge_pass_merges_pairs_level_pass_cannot():
    # 0 -> 3 and 1 -> 2 -> 3: 3 is two levels below 0.
    edges = [(0, 3), (1, 2), (2, 3)]
    g = gg(4, edges)
    assert g.level_pass(Recorder(lambda a, b: (a, b) == (0, 3))) == 0
    accept = Recorder()
    assert g.edge_pass(accept) == 3
    assert accept.calls == [(0, 3), (1, 2), (1, 0)]
    assert g.alive().tolist() == [0]
    assert g.level(0) == 0


def test_edge_pass_sweeps_until_nothing_merges():
    g = gg(4, [(0, 3), (1, 2), (2, 3)])
    accept = Recorder(lambda a, b: (a, b) == (0, 3))
    assert g.edge_pass(accept) == 1
    # Sweep 1 in order 0, 1, 2: merges (0, 3); sweep 2 in order 1, 2, 0.
    assert accept.calls == [(0, 3), (1, 2), (2, 0), (1, 2), (2, 0)]
    assert levels_of(g) == {0: 2, 1: 0, 2: 1}  # recomputed


def test_edge_pass_refuses_cycles():
    g = gg(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    accept = Recorder(lambda a, b: (a, b) in {(0, 3), (0, 2), (2, 3)})
    # (0, 1) refused by accept, (0, 2) merged; then 0's consumers are 1, 3:
    # (0, 1) asked again, (0, 3) would cycle through 1.
    assert g.edge_pass(accept) == 1
    assert accept.calls[:3] == [(0, 1), (0, 2), (0, 1)]
    assert (0, 3) not in accept.calls
    assert g.edges().tolist() == [[0, 1], [0, 3], [1, 3]]


# ---------------------------------------------------------------- validation

def test_invalid_ids():
    g = gg(4, chain(4))
    g.merge(1, 2)
    with pytest.raises(ValueError, match=r"g = 2 is not a live group id \(node 2 is in group 1\)"):
        g.members(2)
    with pytest.raises(ValueError, match=r"g = 4 is not a group of a graph with 4 nodes"):
        g.level(4)
    with pytest.raises(ValueError, match=r"g = -1 is not a group"):
        g.consumers(-1)
    with pytest.raises(ValueError, match=r"b = 2 is not a live group id"):
        g.merge(0, 2)
    with pytest.raises(ValueError, match=r"a and b must be different groups, got 1 twice"):
        g.would_cycle(1, 1)
    with pytest.raises(ValueError, match=r"a and b must be different"):
        g.has_path(0, 0)
    with pytest.raises(ValueError, match=r"node = 4 is not a node of a graph with 4 nodes"):
        g.find(4)
    with pytest.raises(TypeError, match=r"g must be an int"):
        g.producers(1.0)
    with pytest.raises(TypeError, match=r"node must be an int"):
        g.find("0")
    assert g.find(np.int32(2)) == 1
    assert g.members(np.int64(1)).tolist() == [1, 2]


# ---------------------------------------------------------------- properties

@st.composite
def dags(draw, max_nodes=14):
    """A random DAG: edges go forward in a random permutation of the nodes."""
    n = draw(st.integers(0, max_nodes))
    perm = draw(st.permutations(range(n)))
    pairs = st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, max(n - 1, 0)))
    raw = draw(st.lists(pairs, max_size=3 * n)) if n else []
    return n, [(perm[a], perm[b]) for a, b in raw if a < b]


def random_accept(seed, p):
    def accept(a, b):
        return random.Random(seed * 1000003 + a * 1009 + b).random() < p
    return accept


@settings(max_examples=200, deadline=None)
@given(dags(), st.integers(0, 10**6), st.sampled_from([0.3, 0.7, 1.0]))
def test_random_passes_match_reference(dag, seed, p):
    n, edges = dag
    g, ref = gg(n, edges), RefGraph(n, edges)
    got, want = Recorder(random_accept(seed, p)), Recorder(random_accept(seed, p))
    for _ in range(3):
        assert g.level_pass(got) == ref.level_pass(want)
        assert got.calls == want.calls
        assert_same(g, ref)
        assert g.topo_order().tolist() == ref.topo()
    assert g.edge_pass(got) == ref.edge_pass(want)
    assert got.calls == want.calls
    assert_same(g, ref)
    # After the final pass no accepted pair is left.
    assert all(g.would_cycle_full(a, b) or not random_accept(seed, p)(a, b)
               for a, b in g.edges().tolist())


@settings(max_examples=200, deadline=None)
@given(dags(), st.data())
def test_random_merges_match_reference(dag, data):
    n, edges = dag
    g, ref = gg(n, edges), RefGraph(n, edges)
    for _ in range(n):
        live = ref.live()
        if len(live) < 2:
            break
        if data.draw(st.integers(0, 4)) == 0:
            g.recompute_levels()
            ref.recompute()
            assert g.topo_order().tolist() == sorted(live, key=lambda x: (ref.lo[x], x))
        a, b = data.draw(st.lists(st.sampled_from(live), min_size=2, max_size=2,
                                  unique=True))
        cyc = ref.would_cycle(a, b)
        assert g.would_cycle(a, b) == cyc == g.would_cycle_full(a, b)
        assert g.has_path(a, b) == ref.has_path(a, b)
        # min_level never decreases along an edge while no group is wide.
        if all(ref.hi[x] - ref.lo[x] <= 1 for x in live):
            assert all(ref.lo[u] <= ref.lo[v] for u, v in ref.gedges())
        order = g.topo_order().tolist()
        assert order == ref.topo()
        pos = {x: i for i, x in enumerate(order)}
        assert sorted(order) == live
        assert all(pos[u] < pos[v] for u, v in ref.gedges())
        if cyc:
            with pytest.raises(ValueError, match="would create a cycle"):
                g.merge(a, b)
        else:
            assert g.merge(a, b) == ref.merge(a, b) == min(a, b)
        assert_same(g, ref)
