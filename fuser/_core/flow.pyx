"""Minimum s-t cut (maximum flow) for IO-aware rematerialisation.

Dinic's algorithm over float64 capacities on a directed graph given as an
edge list. Deterministic: arcs are visited in edge order, so the same input
always yields the same cut. Meant for graphs of at most a few thousand nodes.
"""

import math
import operator

import numpy as np

from libc.stdint cimport int64_t, uint8_t

from fuser._core.graph import _check_nodes, _index_array

# Capacities at or above this are infinite.
INF_THRESHOLD = 1e300
cdef double _INF_THRESHOLD = 1e300


cdef Py_ssize_t _first_bad_capacity(const double[::1] cap) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(cap.shape[0]):
        if not (cap[k] >= 0.0):  # also catches NaN
            return k
    return -1


cdef void _bfs(const int64_t[::1] start, const int64_t[::1] to,
               const double[::1] res, int64_t s, int64_t[::1] level,
               int64_t[::1] queue) noexcept nogil:
    # level[v] = BFS distance from s over arcs with positive residual, or -1.
    cdef Py_ssize_t n = level.shape[0], head = 0, tail = 1
    cdef int64_t u, v, a
    level[:] = -1
    level[s] = 0
    queue[0] = s
    while head < tail:
        u = queue[head]
        head += 1
        for a in range(start[u], start[u + 1]):
            v = to[a]
            if res[a] > 0.0 and level[v] < 0:
                level[v] = level[u] + 1
                queue[tail] = v
                tail += 1


cdef void _dinic(const int64_t[::1] start, const int64_t[::1] to,
                 const int64_t[::1] rev, double[::1] res, int64_t s, int64_t t,
                 int64_t[::1] level, int64_t[::1] queue, int64_t[::1] it,
                 int64_t[::1] path) noexcept nogil:
    # Blocking flows on the BFS level graph until t is unreachable; on return
    # ``level`` marks (>= 0) the nodes reachable from s in the residual graph.
    #
    # Every augmentation subtracts the bottleneck from itself, leaving exactly
    # 0.0, so even in floating point each one saturates an arc and each phase
    # raises the s-t distance: it terminates without tolerances.
    cdef Py_ssize_t n = level.shape[0], depth, i
    cdef int64_t u, v, a
    cdef double f
    cdef bint found
    while True:
        _bfs(start, to, res, s, level, queue)
        if level[t] < 0:
            return
        for u in range(n):
            it[u] = start[u]
        depth = 0
        u = s
        while True:
            if u == t:
                f = res[path[0]]
                for i in range(1, depth):
                    if res[path[i]] < f:
                        f = res[path[i]]
                for i in range(depth):
                    res[path[i]] -= f
                    res[rev[path[i]]] += f
                # Back up to the tail of the first saturated arc.
                i = 0
                while res[path[i]] > 0.0:  # the bottleneck arc stops it
                    i += 1
                depth = i
                u = s if depth == 0 else to[path[depth - 1]]
                continue
            found = False
            while it[u] < start[u + 1]:
                a = it[u]
                v = to[a]
                if res[a] > 0.0 and level[v] == level[u] + 1:
                    found = True
                    break
                it[u] += 1
            if found:
                path[depth] = a
                depth += 1
                u = v
            else:
                if u == s:
                    break
                level[u] = -1  # dead end for the rest of this phase
                depth -= 1
                u = s if depth == 0 else to[path[depth - 1]]
                it[u] += 1


def _node(x, int64_t n, str name):
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(x).__name__}") from None
    if v < 0 or v >= n:
        raise ValueError(f"{name} = {v} is not a node of a graph with {n} nodes")
    return v


def min_cut(n, src, dst, capacity, source, sink):
    """Minimum ``source``-``sink`` cut of a directed graph (max-flow value).

    The graph has ``n`` nodes and edges ``src[k] -> dst[k]`` with float64
    capacities ``capacity[k] >= 0``; a capacity of ``math.inf`` (or anything
    ``>= 1e300``) is infinite. Parallel edges add up; self-loops never cross
    a cut.

    Returns ``(value, source_side)``: ``value`` is the cut's capacity as a
    float (``math.inf`` when every cut is infinite) and ``source_side`` a
    bool array of length ``n`` marking the nodes reachable from ``source`` in
    the final residual graph, i.e. the source side of a minimum cut; ``value``
    is the sum of the capacities of the edges leaving that set. When every
    cut is infinite, ``source_side`` marks the nodes reachable from
    ``source`` through positive-capacity edges (it includes ``sink``).

    Dinic's algorithm; deterministic. Infinite capacities are replaced by a
    bound larger than the sum of all finite ones, which changes no minimum
    cut (so finite capacities should sum to well below 1e300). Raises
    ``ValueError``, naming the argument, for mismatched lengths, nodes out of
    range, negative or NaN capacities, or ``source == sink``.
    """
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    src = _index_array(src, "src")
    dst = _index_array(dst, "dst")
    cap = np.asarray(capacity)
    if cap.ndim != 1:
        raise ValueError(f"capacity must be 1-D, got shape {cap.shape}")
    if cap.size and cap.dtype.kind not in "iuf":
        raise ValueError(f"capacity must have a numeric dtype, got {cap.dtype}")
    cap = np.ascontiguousarray(cap, dtype=np.float64)
    m = src.shape[0]
    if dst.shape[0] != m or cap.shape[0] != m:
        raise ValueError(f"src, dst and capacity must have the same length, got "
                         f"{m}, {dst.shape[0]} and {cap.shape[0]}")
    _check_nodes(src, n, "src")
    _check_nodes(dst, n, "dst")
    cdef const double[::1] c = cap
    cdef Py_ssize_t bad = _first_bad_capacity(c)
    if bad >= 0:
        raise ValueError(f"capacity[{bad}] = {cap[bad]} must be >= 0")
    source = _node(source, n, "source")
    sink = _node(sink, n, "sink")
    if source == sink:
        raise ValueError(f"source and sink must differ, got {source} for both")

    cdef const int64_t[::1] es = src, ed = dst
    cdef int64_t s = source, t = sink, k, u, v, a, b
    cdef Py_ssize_t nn = n
    cdef double finite_sum = 0.0, big, value = 0.0
    cdef bint infinite = False
    # Arcs: every edge with u != v and positive capacity gives a forward arc
    # (residual = capacity) and a reverse arc (residual 0), grouped by tail.
    start = np.zeros(nn + 1, dtype=np.int64)
    cdef int64_t[::1] st = start
    for k in range(m):
        u = es[k]
        v = ed[k]
        if u == v or not (c[k] > 0.0):
            continue
        if c[k] >= _INF_THRESHOLD:
            infinite = True
        else:
            finite_sum += c[k]
        st[u + 1] += 1
        st[v + 1] += 1
    for u in range(nn):
        st[u + 1] += st[u]
    narcs = st[nn]
    to = np.empty(narcs, dtype=np.int64)
    rev = np.empty(narcs, dtype=np.int64)
    res = np.empty(narcs, dtype=np.float64)
    cursor = start[:nn].copy()
    cdef int64_t[::1] tt = to, rv = rev, cur = cursor
    cdef double[::1] r = res
    big = 2.0 * finite_sum + 1.0
    if not math.isfinite(big):
        big = 1e300
    for k in range(m):
        u = es[k]
        v = ed[k]
        if u == v or not (c[k] > 0.0):
            continue
        a = cur[u]
        cur[u] += 1
        b = cur[v]
        cur[v] += 1
        tt[a] = v
        tt[b] = u
        rv[a] = b
        rv[b] = a
        r[a] = big if c[k] >= _INF_THRESHOLD else c[k]
        r[b] = 0.0

    level = np.empty(nn, dtype=np.int64)
    queue = np.empty(nn, dtype=np.int64)
    cdef int64_t[::1] lv = level, q = queue
    if infinite:
        # A path of infinite edges makes every cut infinite.
        inf_res = np.where(res >= big, 1.0, 0.0)
        _bfs(st, tt, inf_res, s, lv, q)
        if lv[t] >= 0:
            _bfs(st, tt, r, s, lv, q)
            return math.inf, level >= 0
    iters = np.empty(nn, dtype=np.int64)
    path = np.empty(nn, dtype=np.int64)
    cdef int64_t[::1] itv = iters, pv = path
    with nogil:
        _dinic(st, tt, rv, r, s, t, lv, q, itv, pv)
    side = level >= 0
    cdef const uint8_t[::1] sd = side.view(np.uint8)
    for k in range(m):
        if sd[es[k]] and not sd[ed[k]]:
            value += c[k]
    if value >= _INF_THRESHOLD:  # pragma: no cover - big arcs never saturate
        value = math.inf
    return value, side
