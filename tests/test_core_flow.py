"""Tests for the minimum s-t cut (fuser/_core/flow.pyx)."""

import itertools
import math
import random
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuser._core import min_cut


def cut_capacity(side, src, dst, cap):
    """Capacity of the edges leaving the node set ``side`` (a bool list)."""
    total = 0.0
    for u, v, c in zip(src, dst, cap):
        if side[u] and not side[v]:
            total += math.inf if c >= 1e300 else c
    return total


def brute_force(n, src, dst, cap, s, t):
    """Smallest cut capacity over all 2^(n-2) node sets with s in, t out."""
    others = [v for v in range(n) if v not in (s, t)]
    best = math.inf
    for bits in itertools.product([False, True], repeat=len(others)):
        side = [False] * n
        side[s] = True
        for v, b in zip(others, bits):
            side[v] = b
        best = min(best, cut_capacity(side, src, dst, cap))
    return best


def edmonds_karp(n, src, dst, cap, s, t):
    """Reference max flow (finite capacities only) on a dense matrix."""
    r = [[0.0] * n for _ in range(n)]
    for u, v, c in zip(src, dst, cap):
        if u != v:
            r[u][v] += c
    flow = 0.0
    while True:
        parent = [-1] * n
        parent[s] = s
        queue = deque([s])
        while queue and parent[t] < 0:
            u = queue.popleft()
            for v in range(n):
                if parent[v] < 0 and r[u][v] > 1e-12:
                    parent[v] = u
                    queue.append(v)
        if parent[t] < 0:
            return flow
        f, v = math.inf, t
        while v != s:
            f = min(f, r[parent[v]][v])
            v = parent[v]
        v = t
        while v != s:
            r[parent[v]][v] -= f
            r[v][parent[v]] += f
            v = parent[v]
        flow += f


def check(n, src, dst, cap, s, t, expected):
    value, side = min_cut(n, src, dst, cap, s, t)
    assert isinstance(value, float)
    assert side.dtype == np.bool_ and side.shape == (n,)
    assert side[s]
    if value == math.inf:
        assert expected == math.inf
        return value, side
    assert value == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert not side[t]
    # The returned side is a cut of exactly the returned value.
    assert cut_capacity(side.tolist(), src, dst, cap) == pytest.approx(value, rel=1e-12)
    return value, side


# ------------------------------------------------------------------- examples

def test_textbook_network():
    # CLRS figure 26.1: max flow 23, min cut {s, v1, v2, v4}.
    s, v1, v2, v3, v4, t = range(6)
    edges = [(s, v1, 16), (s, v2, 13), (v1, v3, 12), (v2, v1, 4), (v2, v4, 14),
             (v3, v2, 9), (v3, t, 20), (v4, v3, 7), (v4, t, 4)]
    src, dst, cap = zip(*edges)
    value, side = check(6, src, dst, cap, s, t, 23.0)
    assert value == 23.0
    assert side.tolist() == [True, True, True, False, True, False]


def test_single_edge_and_parallel_edges():
    assert min_cut(2, [0], [1], [2.5], 0, 1)[0] == 2.5
    value, side = min_cut(2, [0, 0, 1], [1, 1, 0], [1.0, 2.0, 7.0], 0, 1)
    assert value == 3.0  # the backward edge does not count
    assert side.tolist() == [True, False]


def test_source_side_is_reachable_set_not_just_any_min_cut():
    # 0 -> 1 (cap 5) -> 2 (cap 1): the cut is 1 -> 2 and node 1 is on the
    # source side; 3 hangs off the sink side.
    value, side = min_cut(4, [0, 1, 2], [1, 2, 3], [5, 1, 9], 0, 2)
    assert value == 1.0
    assert side.tolist() == [True, True, False, False]


def test_disconnected_source_and_sink():
    value, side = min_cut(5, [0, 1, 3], [1, 0, 4], [3.0, 2.0, 1.0], 0, 4)
    assert value == 0.0
    assert side.tolist() == [True, True, False, False, False]
    value, side = min_cut(2, [], [], [], 1, 0)
    assert value == 0.0 and side.tolist() == [False, True]


def test_edge_into_source_or_out_of_sink_is_ignored():
    value, _ = min_cut(3, [1, 2, 0, 1], [0, 0, 1, 2], [9, 9, 4, 3], 0, 2)
    assert value == 3.0


def test_zero_capacity_and_self_loops():
    value, side = min_cut(3, [0, 1, 1, 0], [1, 1, 2, 2], [2, 100, 5, 0], 0, 2)
    assert value == 2.0
    assert side.tolist() == [True, False, False]


def test_infinite_path_gives_infinite_cut():
    value, side = min_cut(3, [0, 1], [1, 2], [math.inf, np.inf], 0, 2)
    assert value == math.inf
    assert side.tolist() == [True, True, True]
    # Anything >= 1e300 is infinite too.
    value, _ = min_cut(3, [0, 1, 0], [1, 2, 2], [1e300, 2e300, 1.0], 0, 2)
    assert value == math.inf


def test_infinite_edges_force_the_cut_elsewhere():
    # 0 -> 1 infinite, 1 -> 2 cap 3, 0 -> 2 cap 4, 2 -> 3 infinite,
    # 1 -> 3 cap 10. The cut must keep 1 with 0 and 2 with 3: 3 + 4 + 10.
    src, dst = [0, 1, 0, 2, 1], [1, 2, 2, 3, 3]
    cap = [math.inf, 3.0, 4.0, math.inf, 10.0]
    value, side = check(4, src, dst, cap, 0, 3, 17.0)
    assert side.tolist() == [True, True, False, False]
    # The rematerialisation shape: recomputing a value is free (infinite
    # edges inside), writing a tensor costs its size.
    value, side = min_cut(4, [0, 1, 1, 2], [1, 2, 3, 3], [8, math.inf, 2, 1], 0, 3)
    assert value == 3.0 and side.tolist() == [True, True, True, False]


def test_infinite_edges_with_huge_finite_capacities():
    value, _ = min_cut(3, [0, 0, 1], [1, 2, 2], [math.inf, 1e299, 1e299], 0, 2)
    assert value == 2e299


def test_float_capacities():
    value, side = min_cut(4, [0, 0, 1, 2], [1, 2, 3, 3], [0.1, 0.2, 0.7, 0.05], 0, 3)
    assert value == pytest.approx(0.15)
    assert side.tolist() == [True, False, True, False]


def test_accepts_lists_ints_and_other_dtypes():
    value, side = min_cut(np.int64(3), np.array([0, 1], dtype=np.int32),
                          np.array([1, 2], dtype=np.uint8),
                          np.array([4, 6], dtype=np.int16), np.int32(0), 2)
    assert value == 4.0 and side.tolist() == [True, False, False]


def test_deterministic_and_inputs_unchanged():
    rng = random.Random(7)
    n, m = 40, 160
    src = np.array([rng.randrange(n) for _ in range(m)], dtype=np.int64)
    dst = np.array([rng.randrange(n) for _ in range(m)], dtype=np.int64)
    cap = np.array([rng.choice([1.0, 2.0, 3.5, math.inf]) for _ in range(m)])
    for a in (src, dst, cap):
        a.flags.writeable = False
    before = cap.copy()
    first = min_cut(n, src, dst, cap, 0, n - 1)
    second = min_cut(n, src, dst, cap, 0, n - 1)
    assert first[0] == second[0]
    assert first[1].tolist() == second[1].tolist()
    assert np.array_equal(cap, before)


def test_larger_graph_matches_edmonds_karp():
    rng = random.Random(3)
    for _ in range(5):
        n = 60
        edges = [(u, v, float(rng.randint(1, 20))) for u in range(n) for v in range(n)
                 if u != v and rng.random() < 0.08]
        src, dst, cap = (list(x) for x in zip(*edges))
        check(n, src, dst, cap, 0, n - 1, edmonds_karp(n, src, dst, cap, 0, n - 1))


# ------------------------------------------------------------ brute force

def random_graph(rng, n, m, p_inf):
    src, dst, cap = [], [], []
    for _ in range(m):
        src.append(rng.randrange(n))
        dst.append(rng.randrange(n))
        r = rng.random()
        if r < p_inf:
            cap.append(math.inf)
        elif r < p_inf + 0.1:
            cap.append(0.0)
        elif r < 0.6:
            cap.append(float(rng.randint(1, 9)))
        else:
            cap.append(rng.uniform(0.0, 5.0))
    return src, dst, cap


@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_match_brute_force(seed):
    rng = random.Random(seed)
    for _ in range(60):
        n = rng.randint(2, 8)
        m = rng.randint(0, 3 * n)
        src, dst, cap = random_graph(rng, n, m, p_inf=rng.choice([0.0, 0.15, 0.4]))
        s, t = rng.sample(range(n), 2)
        check(n, src, dst, cap, s, t, brute_force(n, src, dst, cap, s, t))


@st.composite
def networks(draw):
    n = draw(st.integers(2, 7))
    node = st.integers(0, n - 1)
    capacity = st.one_of(st.integers(0, 6).map(float), st.just(math.inf),
                         st.floats(0.0, 100.0))
    edges = draw(st.lists(st.tuples(node, node, capacity), max_size=4 * n))
    s, t = draw(st.lists(node, min_size=2, max_size=2, unique=True))
    src = [e[0] for e in edges]
    dst = [e[1] for e in edges]
    cap = [e[2] for e in edges]
    return n, src, dst, cap, s, t


@settings(max_examples=300, deadline=None)
@given(networks())
def test_hypothesis_matches_brute_force(net):
    n, src, dst, cap, s, t = net
    check(n, src, dst, cap, s, t, brute_force(n, src, dst, cap, s, t))


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("args, match", [
    ((3, [0, 1], [1], [1.0, 1.0], 0, 2), r"src, dst and capacity must have the same length, got 2, 1 and 2"),
    ((3, [0], [1], [1.0, 2.0], 0, 2), r"same length, got 1, 1 and 2"),
    ((3, [3], [1], [1.0], 0, 2), r"src\[0\] = 3 is not a node of a graph with 3 nodes"),
    ((3, [0, 1], [1, -1], [1.0, 1.0], 0, 2), r"dst\[1\] = -1 is not a node"),
    ((3, [0], [1], [-1.0], 0, 2), r"capacity\[0\] = -1.0 must be >= 0"),
    ((3, [0, 1], [1, 2], [1.0, math.nan], 0, 2), r"capacity\[1\] = nan must be >= 0"),
    ((3, [0], [1], [1.0], 3, 2), r"source = 3 is not a node of a graph with 3 nodes"),
    ((3, [0], [1], [1.0], 0, -1), r"sink = -1 is not a node"),
    ((3, [0], [1], [1.0], 1, 1), r"source and sink must differ, got 1 for both"),
    ((3, [0.0], [1], [1.0], 0, 2), r"src must have an integer dtype"),
    ((3, [[0]], [1], [1.0], 0, 2), r"src must be 1-D"),
    ((3, [0], [1], [[1.0]], 0, 2), r"capacity must be 1-D"),
    ((3, [0], [1], ["a"], 0, 2), r"capacity must have a numeric dtype"),
    ((-1, [], [], [], 0, 1), r"n must be >= 0"),
    ((0, [], [], [], 0, 1), r"source = 0 is not a node of a graph with 0 nodes"),
])
def test_invalid_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        min_cut(*args)


def test_non_integer_source():
    with pytest.raises(TypeError, match="source must be an int"):
        min_cut(2, [0], [1], [1.0], 0.0, 1)
