"""Tests for the Cython graph core (fuser/_core/graph.pyx)."""

import heapq
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuser._core import CycleError, reachable_from, reverse_csr, topo_order


def csr(n, edges):
    """CSR arrays for ``n`` nodes from ``(src, dst)`` pairs, keeping edge order."""
    succ = [[] for _ in range(n)]
    for u, v in edges:
        succ[u].append(v)
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in succ], dtype=np.int64)
    indices = np.array([v for s in succ for v in s], dtype=np.int64)
    return offsets, indices


def edge_set(offsets, indices):
    return {(u, int(v)) for u in range(len(offsets) - 1)
            for v in indices[offsets[u]:offsets[u + 1]]}


def reference_levels(n, edges):
    """Longest path from any source, by memoized recursion over predecessors."""
    preds = [[] for _ in range(n)]
    for u, v in edges:
        preds[v].append(u)
    memo = {}

    def level(v):
        if v not in memo:
            memo[v] = max((level(u) + 1 for u in preds[v]), default=0)
        return memo[v]

    return [level(v) for v in range(n)]


def reference_order(n, edges):
    """Kahn with a heapq min-heap: the order topo_order promises."""
    indeg = [0] * n
    succ = [[] for _ in range(n)]
    for u, v in edges:
        succ[u].append(v)
        indeg[v] += 1
    ready = [v for v in range(n) if indeg[v] == 0]
    order = []
    while ready:
        u = heapq.heappop(ready)
        order.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, v)
    return order


def assert_cycle_in_graph(cycle, offsets, indices):
    edges = edge_set(offsets, indices)
    assert cycle, "empty cycle"
    assert len(set(cycle)) == len(cycle), f"cycle repeats a node: {cycle}"
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        assert (a, b) in edges, f"{a} -> {b} is not an edge (cycle {cycle})"


# ------------------------------------------------------------------ topo_order

def test_diamond():
    #   0
    #  / \
    # 1   2
    #  \ /
    #   3
    order, levels = topo_order(*csr(4, [(0, 1), (0, 2), (1, 3), (2, 3)]))
    assert order.dtype == np.int64 and levels.dtype == np.int64
    assert order.tolist() == [0, 1, 2, 3]
    assert levels.tolist() == [0, 1, 1, 2]


def test_diamond_with_long_side():
    # 0 -> 1 -> 2 -> 4 and 0 -> 3 -> 4: level is the longest path, not the shortest.
    order, levels = topo_order(*csr(5, [(0, 1), (1, 2), (2, 4), (0, 3), (3, 4)]))
    assert order.tolist() == [0, 1, 2, 3, 4]
    assert levels.tolist() == [0, 1, 2, 1, 3]


def test_reversed_chain():
    order, levels = topo_order(*csr(4, [(3, 2), (2, 1), (1, 0)]))
    assert order.tolist() == [3, 2, 1, 0]
    assert levels.tolist() == [3, 2, 1, 0]


def test_smallest_ready_node_first():
    # Ready sets: {0, 2} -> take 0 -> {2, 3} -> take 2 -> {1, 3} -> 1 -> 3.
    # A FIFO queue would give [0, 2, 3, 1].
    order, levels = topo_order(*csr(4, [(0, 3), (2, 1)]))
    assert order.tolist() == [0, 2, 1, 3]
    assert levels.tolist() == [0, 1, 0, 1]


def test_disconnected():
    order, levels = topo_order(*csr(6, [(4, 5), (1, 0)]))
    assert order.tolist() == [1, 0, 2, 3, 4, 5]
    assert levels.tolist() == [1, 0, 0, 0, 0, 1]


def test_isolated_nodes_only():
    order, levels = topo_order(np.zeros(4, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert order.tolist() == [0, 1, 2]
    assert levels.tolist() == [0, 0, 0]


def test_duplicate_edges():
    order, levels = topo_order(*csr(3, [(0, 1), (0, 1), (1, 2), (0, 2), (1, 2)]))
    assert order.tolist() == [0, 1, 2]
    assert levels.tolist() == [0, 1, 2]


def test_empty_graph():
    order, levels = topo_order([0], [])
    assert order.shape == (0,) and levels.shape == (0,)
    assert order.dtype == np.int64 and levels.dtype == np.int64


def test_stable_when_already_ordered():
    # Every edge goes from a lower to a higher index: the identity order.
    n = 50
    rng = np.random.default_rng(0)
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.1]
    order, _ = topo_order(*csr(n, edges))
    assert order.tolist() == list(range(n))


def test_accepts_lists_and_other_int_dtypes():
    order, levels = topo_order(np.array([0, 1, 2, 2], dtype=np.int32),
                               np.array([2, 0], dtype=np.uint16))
    assert order.tolist() == [1, 0, 2]
    assert levels.tolist() == [1, 0, 2]
    assert topo_order([0, 1, 1], [1])[0].tolist() == [0, 1]


def test_does_not_modify_inputs():
    offsets, indices = csr(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    before = offsets.copy(), indices.copy()
    offsets.flags.writeable = False
    indices.flags.writeable = False
    topo_order(offsets, indices)
    reverse_csr(offsets, indices)
    reachable_from(offsets, indices, [0])
    assert np.array_equal(offsets, before[0]) and np.array_equal(indices, before[1])


# ---------------------------------------------------------------------- cycles

def test_cycle_reported_exactly():
    # 0 -> 1 -> 2 -> 3 -> 1, plus 3 -> 4 hanging off the cycle.
    offsets, indices = csr(5, [(0, 1), (1, 2), (2, 3), (3, 1), (3, 4)])
    with pytest.raises(CycleError) as info:
        topo_order(offsets, indices)
    assert info.value.cycle == [1, 2, 3]
    assert "1 -> 2 -> 3 -> 1" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_two_cycles_reports_one_that_is_real():
    offsets, indices = csr(6, [(0, 1), (1, 0), (2, 3), (3, 4), (4, 2), (5, 2)])
    with pytest.raises(CycleError) as info:
        topo_order(offsets, indices)
    assert info.value.cycle == [0, 1]
    assert_cycle_in_graph(info.value.cycle, offsets, indices)


def test_self_loop():
    with pytest.raises(CycleError) as info:
        topo_order(*csr(3, [(0, 1), (1, 1), (1, 2)]))
    assert info.value.cycle == [1]
    assert "1 -> 1" in str(info.value)


def test_cycle_error_pickles():
    err = pickle.loads(pickle.dumps(CycleError([2, 5])))
    assert err.cycle == [2, 5] and str(err) == "graph has a cycle: 2 -> 5 -> 2"


# ----------------------------------------------------------------- reverse_csr

def test_reverse_csr():
    offsets, indices = csr(4, [(2, 0), (0, 1), (0, 2), (1, 3), (2, 3), (0, 1)])
    off2, idx2 = reverse_csr(offsets, indices)
    assert off2.dtype == np.int64 and idx2.dtype == np.int64
    preds = [idx2[off2[v]:off2[v + 1]].tolist() for v in range(4)]
    assert preds == [[2], [0, 0], [0], [1, 2]]
    # Transposing twice gives back the graph (with successors sorted).
    off3, idx3 = reverse_csr(off2, idx2)
    assert off3.tolist() == offsets.tolist()
    assert sorted(edge_set(off3, idx3)) == sorted(edge_set(offsets, indices))


def test_reverse_csr_empty():
    off2, idx2 = reverse_csr([0], [])
    assert off2.tolist() == [0] and idx2.tolist() == []


# --------------------------------------------------------------- reachable_from

def test_reachable_from():
    offsets, indices = csr(6, [(0, 1), (1, 2), (3, 2), (4, 5), (5, 4)])
    mask = reachable_from(offsets, indices, [1])
    assert mask.dtype == np.uint8
    assert mask.tolist() == [0, 1, 1, 0, 0, 0]
    assert reachable_from(offsets, indices, [0, 5]).tolist() == [1, 1, 1, 0, 1, 1]
    assert reachable_from(offsets, indices, []).tolist() == [0] * 6
    assert reachable_from(offsets, indices, [3, 3]).tolist() == [0, 0, 1, 1, 0, 0]


def test_reachable_from_reverse_graph_gives_dependencies():
    offsets, indices = csr(5, [(0, 2), (1, 2), (2, 3), (4, 3)])
    assert reachable_from(*reverse_csr(offsets, indices), [2]).tolist() == [1, 1, 1, 0, 0]


# ------------------------------------------------------------------ validation

@pytest.mark.parametrize("fn", [
    topo_order,
    reverse_csr,
    lambda o, i: reachable_from(o, i, []),
])
@pytest.mark.parametrize("offsets, indices, match", [
    ([], [], r"offsets must have"),
    ([[0, 1]], [0], r"offsets must be 1-D"),
    ([0, 1], [[0]], r"indices must be 1-D"),
    ([0.0, 1.0], [0], r"offsets must have an integer dtype"),
    ([0, 1], [0.5], r"indices must have an integer dtype"),
    ([1, 1], [0], r"offsets\[0\] must be 0"),
    ([0, 1, 1], [0, 1], r"offsets\[-1\] must equal len\(indices\) = 2"),
    ([0, 2, 1, 2], [0, 1], r"offsets must be non-decreasing.*offsets\[1\] = 2"),
    ([0, 1, 2], [1, 2], r"indices\[1\] = 2 is not a node of a graph with 2 nodes"),
    ([0, 1, 2], [-1, 0], r"indices\[0\] = -1 is not a node"),
])
def test_invalid_csr(fn, offsets, indices, match):
    with pytest.raises(ValueError, match=match):
        fn(offsets, indices)


@pytest.mark.parametrize("sources, match", [
    ([3], r"sources\[0\] = 3 is not a node of a graph with 3 nodes"),
    ([0, -1], r"sources\[1\] = -1 is not a node"),
    ([[0]], r"sources must be 1-D"),
    ([0.0], r"sources must have an integer dtype"),
])
def test_invalid_sources(sources, match):
    with pytest.raises(ValueError, match=match):
        reachable_from(*csr(3, [(0, 1)]), sources)


# ------------------------------------------------------------------ properties

@st.composite
def dags(draw, max_nodes=30):
    """A random DAG: edges go forward in a random permutation of the nodes."""
    n = draw(st.integers(0, max_nodes))
    perm = draw(st.permutations(range(n)))
    pairs = st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, max(n - 1, 0)))
    raw = draw(st.lists(pairs, max_size=3 * n)) if n else []
    edges = [(perm[a], perm[b]) for a, b in raw if a < b]  # duplicates kept
    return n, perm, edges


@settings(max_examples=300, deadline=None)
@given(dags())
def test_random_dag(dag):
    n, _, edges = dag
    offsets, indices = csr(n, edges)
    order, levels = topo_order(offsets, indices)
    assert sorted(order.tolist()) == list(range(n))
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    assert all(position[u] < position[v] for u, v in edges)
    assert levels.tolist() == reference_levels(n, edges)
    assert order.tolist() == reference_order(n, edges)


@settings(max_examples=300, deadline=None)
@given(dags(), st.data())
def test_random_dag_with_back_edge(dag, data):
    n, perm, edges = dag
    if n == 0:
        return
    # Close a loop perm[a] -> ... -> perm[b] -> perm[a] (a self-loop if a == b).
    a = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(a, n - 1))
    extra = [(perm[b], perm[a])] if a == b else [(perm[a], perm[b]), (perm[b], perm[a])]
    all_edges = data.draw(st.permutations(edges + extra))
    offsets, indices = csr(n, all_edges)
    with pytest.raises(CycleError) as info:
        topo_order(offsets, indices)
    cycle = info.value.cycle
    assert_cycle_in_graph(cycle, offsets, indices)
    assert cycle[0] == min(cycle)
    assert " -> ".join(map(str, cycle + cycle[:1])) in str(info.value)


@settings(max_examples=200, deadline=None)
@given(dags(), st.data())
def test_random_reverse_and_reachable(dag, data):
    n, _, edges = dag
    offsets, indices = csr(n, edges)
    off2, idx2 = reverse_csr(offsets, indices)
    assert sorted(edge_set(off2, idx2)) == sorted((v, u) for u, v in set(edges))
    assert len(idx2) == len(edges)
    for v in range(n):
        preds = idx2[off2[v]:off2[v + 1]].tolist()
        assert preds == sorted(u for u, w in edges if w == v)

    sources = data.draw(st.lists(st.integers(0, n - 1), max_size=4)) if n else []
    expected = set(sources)
    frontier = list(sources)
    while frontier:
        u = frontier.pop()
        for x, v in edges:
            if x == u and v not in expected:
                expected.add(v)
                frontier.append(v)
    mask = reachable_from(offsets, indices, sources)
    assert mask.tolist() == [int(v in expected) for v in range(n)]
