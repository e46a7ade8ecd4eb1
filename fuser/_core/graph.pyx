"""Deterministic graph primitives over CSR adjacency arrays.

A graph with ``n`` nodes is two int64 arrays: ``offsets`` (length ``n + 1``)
and ``indices``; the successors (consumers) of node ``i`` are
``indices[offsets[i]:offsets[i + 1]]``. Duplicate edges are allowed.

The IR's ``Fusion`` uses :func:`topo_order` to order its exprs; the segmenter
uses :func:`topo_order`, :func:`reverse_csr` and :func:`reachable_from` to
partition a fusion into kernels. Results depend only on the input arrays, so
generated code is reproducible run to run.
"""

import numpy as np


class CycleError(ValueError):
    """The graph has a cycle.

    ``cycle`` is a list of node indices ``[c0, c1, ..., ck]`` with edges
    ``c0 -> c1 -> ... -> ck -> c0``, starting at its smallest node.
    """

    def __init__(self, cycle):
        self.cycle = list(cycle)
        path = " -> ".join(map(str, self.cycle + self.cycle[:1]))
        super().__init__(f"graph has a cycle: {path}")

    def __reduce__(self):
        # The default would pass the message back in as ``cycle``.
        return (type(self), (self.cycle,))


# ---------------------------------------------------------------- validation

def _index_array(obj, name):
    arr = np.asarray(obj)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    # An empty list comes in as float64; there is nothing to misread in it.
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must have an integer dtype, got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)


cdef Py_ssize_t _first_decrease(const int64_t[::1] a) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(a.shape[0] - 1):
        if a[i] > a[i + 1]:
            return i
    return -1


cdef Py_ssize_t _first_out_of_range(const int64_t[::1] a, int64_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(a.shape[0]):
        if a[i] < 0 or a[i] >= n:
            return i
    return -1


def _check_csr(offsets, indices):
    offsets = _index_array(offsets, "offsets")
    indices = _index_array(indices, "indices")
    n = offsets.shape[0] - 1
    if n < 0:
        raise ValueError("offsets must have n + 1 >= 1 elements, got none")
    if offsets[0] != 0:
        raise ValueError(f"offsets[0] must be 0, got {offsets[0]}")
    # offsets[n], not offsets[-1]: wraparound is off in this module.
    if offsets[n] != indices.shape[0]:
        raise ValueError(f"offsets[-1] must equal len(indices) = {indices.shape[0]}, "
                         f"got {offsets[n]}")
    cdef const int64_t[::1] off = offsets
    cdef Py_ssize_t bad
    with nogil:
        bad = _first_decrease(off)
    if bad >= 0:
        raise ValueError(f"offsets must be non-decreasing, but offsets[{bad}] = "
                         f"{offsets[bad]} > offsets[{bad + 1}] = {offsets[bad + 1]}")
    _check_nodes(indices, n, "indices")
    return offsets, indices


def _check_nodes(arr, int64_t n, name):
    cdef const int64_t[::1] a = arr
    cdef Py_ssize_t bad
    with nogil:
        bad = _first_out_of_range(a, n)
    if bad >= 0:
        raise ValueError(f"{name}[{bad}] = {arr[bad]} is not a node of a graph "
                         f"with {n} nodes")


# ------------------------------------------------------------------- kernels

cdef inline void _heap_push(int64_t* heap, Py_ssize_t size, int64_t x) noexcept nogil:
    cdef Py_ssize_t i = size, parent
    while i > 0:
        parent = (i - 1) >> 1
        if heap[parent] <= x:
            break
        heap[i] = heap[parent]
        i = parent
    heap[i] = x


cdef inline int64_t _heap_pop(int64_t* heap, Py_ssize_t size) noexcept nogil:
    # ``size`` is the size before the pop.
    cdef int64_t top = heap[0], x = heap[size - 1]
    cdef Py_ssize_t i = 0, child
    size -= 1
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if x <= heap[child]:
            break
        heap[i] = heap[child]
        i = child
    heap[i] = x
    return top


cdef Py_ssize_t kahn(const int64_t[::1] offsets, const int64_t[::1] indices,
                     int64_t[::1] order, int64_t[::1] levels,
                     int64_t[::1] indeg, int64_t[::1] heap) noexcept nogil:
    """Kahn's algorithm, smallest ready node first; all arrays have n slots.

    Returns how many nodes were ordered: fewer than n means a cycle, and then
    exactly the nodes with ``indeg > 0`` are left unprocessed.
    """
    cdef Py_ssize_t n = offsets.shape[0] - 1, size = 0, count = 0, e
    cdef int64_t u, v
    if n == 0:
        return 0
    cdef int64_t* h = &heap[0]
    indeg[:] = 0
    levels[:] = 0
    for e in range(indices.shape[0]):
        indeg[indices[e]] += 1
    # Ascending order is already a valid heap.
    for u in range(n):
        if indeg[u] == 0:
            h[size] = u
            size += 1
    while size:
        u = _heap_pop(h, size)
        size -= 1
        order[count] = u
        count += 1
        for e in range(offsets[u], offsets[u + 1]):
            v = indices[e]
            if levels[v] <= levels[u]:
                levels[v] = levels[u] + 1
            indeg[v] -= 1
            if indeg[v] == 0:
                _heap_push(h, size, v)
                size += 1
    return count


cdef void transpose(const int64_t[::1] offsets, const int64_t[::1] indices,
                    int64_t[::1] offsets2, int64_t[::1] indices2) noexcept nogil:
    cdef Py_ssize_t n = offsets.shape[0] - 1, e
    cdef int64_t u, v
    offsets2[:] = 0
    for e in range(indices.shape[0]):
        offsets2[indices[e] + 1] += 1
    for v in range(n):
        offsets2[v + 1] += offsets2[v]
    # Fill using offsets2[v] as v's cursor, which leaves it at v's end, i.e.
    # at offsets2[v + 1]'s correct value; shift back afterwards.
    for u in range(n):
        for e in range(offsets[u], offsets[u + 1]):
            v = indices[e]
            indices2[offsets2[v]] = u
            offsets2[v] += 1
    for v in range(n, 0, -1):
        offsets2[v] = offsets2[v - 1]
    offsets2[0] = 0


cdef void mark_reachable(const int64_t[::1] offsets, const int64_t[::1] indices,
                         const int64_t[::1] sources, uint8_t[::1] mask,
                         int64_t[::1] stack) noexcept nogil:
    # A node is pushed only when first marked, so n stack slots suffice.
    cdef Py_ssize_t top = 0, i, e
    cdef int64_t u, v
    mask[:] = 0
    for i in range(sources.shape[0]):
        u = sources[i]
        if not mask[u]:
            mask[u] = 1
            stack[top] = u
            top += 1
    while top:
        top -= 1
        u = stack[top]
        for e in range(offsets[u], offsets[u + 1]):
            v = indices[e]
            if not mask[v]:
                mask[v] = 1
                stack[top] = v
                top += 1


def _find_cycle(offsets, indices, const int64_t[::1] indeg):
    # Every node Kahn left behind has an unprocessed predecessor, so walking
    # predecessors from one must revisit a node; the loop walked is a cycle
    # (backwards). Taking the smallest start and predecessor keeps it stable.
    pred_offsets, preds = reverse_csr(offsets, indices)
    cdef const int64_t[::1] po = pred_offsets, pr = preds
    cdef Py_ssize_t n = indeg.shape[0], e
    cdef int64_t v = 0
    while indeg[v] == 0:
        v += 1
    seen = {}
    walk = []
    while v not in seen:
        seen[v] = len(walk)
        walk.append(v)
        for e in range(po[v], po[v + 1]):
            if indeg[pr[e]] > 0:
                v = pr[e]
                break
    cycle = walk[seen[v]:][::-1]
    start = cycle.index(min(cycle))
    return cycle[start:] + cycle[:start]


# ---------------------------------------------------------------- public API

def topo_order(offsets, indices):
    """Topological order and longest-path levels of a CSR graph.

    Kahn's algorithm, taking the smallest-index ready node first, so the
    result is deterministic and stable: a graph already topologically ordered
    by index comes back as ``0..n-1``. Used by ``Fusion`` to order exprs and
    by the segmenter.

    Returns ``(order, levels)``, int64 arrays of length n; ``levels[i]`` is
    the number of edges on the longest path from any source to node ``i``
    (sources are level 0). Raises :class:`CycleError`, carrying one cycle
    among the nodes Kahn could not order, if the graph is not a DAG, and
    ``ValueError`` for malformed arrays.
    """
    offsets, indices = _check_csr(offsets, indices)
    n = offsets.shape[0] - 1
    order = np.empty(n, dtype=np.int64)
    levels = np.empty(n, dtype=np.int64)
    indeg = np.empty(n, dtype=np.int64)
    heap = np.empty(n, dtype=np.int64)
    cdef const int64_t[::1] off = offsets, idx = indices
    cdef int64_t[::1] o = order, lv = levels, d = indeg, h = heap
    cdef Py_ssize_t count
    with nogil:
        count = kahn(off, idx, o, lv, d, h)
    if count < n:
        raise CycleError(_find_cycle(offsets, indices, indeg))
    return order, levels


def reverse_csr(offsets, indices):
    """The transpose graph: each node's predecessors (producers), as CSR.

    Returns ``(offsets2, indices2)``; node ``v``'s predecessors
    ``indices2[offsets2[v]:offsets2[v + 1]]`` are in ascending node order,
    one entry per edge (duplicates kept). Used by the segmenter to walk
    producers.
    """
    offsets, indices = _check_csr(offsets, indices)
    offsets2 = np.empty(offsets.shape[0], dtype=np.int64)
    indices2 = np.empty(indices.shape[0], dtype=np.int64)
    cdef const int64_t[::1] off = offsets, idx = indices
    cdef int64_t[::1] off2 = offsets2, idx2 = indices2
    with nogil:
        transpose(off, idx, off2, idx2)
    return offsets2, indices2


def reachable_from(offsets, indices, sources):
    """uint8 mask (length n) of the nodes reachable from any of ``sources``.

    Sources themselves are included. Follows successor edges; pass the
    :func:`reverse_csr` graph to get everything a set of nodes depends on.
    Used by the segmenter.
    """
    offsets, indices = _check_csr(offsets, indices)
    sources = _index_array(sources, "sources")
    n = offsets.shape[0] - 1
    _check_nodes(sources, n, "sources")
    mask = np.empty(n, dtype=np.uint8)
    stack = np.empty(n, dtype=np.int64)
    cdef const int64_t[::1] off = offsets, idx = indices, src = sources
    cdef uint8_t[::1] m = mask
    cdef int64_t[::1] st = stack
    with nogil:
        mark_reachable(off, idx, src, m, st)
    return mask
