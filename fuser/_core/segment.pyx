# distutils: language = c++
"""The segmenter's group graph: merge, level and acyclicity bookkeeping.

The segmenter starts from one group per expression of a fusion and merges
producer/consumer groups. :class:`GroupGraph` holds the group-level DAG over
integer ids and does the bookkeeping; the segmenter decides which merges are
legal (``accept`` callbacks asking the schedulers).

Nodes are ``0..n-1``; initially every node is its own group. A group's id is
the smallest node index among its members, so ids, and every result here,
depend only on the inputs and the sequence of merges.
"""

import operator

import numpy as np

from libcpp.algorithm cimport sort
from libcpp.queue cimport priority_queue

from fuser._core.graph import _check_csr
from fuser._core.graph import topo_order as _csr_topo_order


def _check_callable(accept):
    if not callable(accept):
        raise TypeError(f"accept must be callable, got {type(accept).__name__}")


cdef class GroupGraph:
    """Group-level DAG with union-find merges.

    ``GroupGraph(n, offsets, indices)`` starts with one group per node of the
    DAG given in CSR form: node ``i``'s consumers are
    ``indices[offsets[i]:offsets[i + 1]]`` (duplicates allowed). Raises
    ``ValueError`` for malformed arrays or a self-loop and
    :class:`fuser._core.graph.CycleError` (a ``ValueError``) for a cycle.

    Group ids are Python ints; arrays are int64 numpy arrays. Adjacency
    between groups is kept as per-group lists of member nodes of the
    neighbours, resolved through the union-find and cleaned (deduplicated,
    sorted) lazily. A merge concatenates the lists smaller-into-larger and
    looks at the pruning keys of some neighbours: O(degree), amortised.

    **Levels.** ``recompute_levels()`` sets each live group's level to its
    longest-path distance from the sources (sources are 0); then
    ``min_level(g) == max_level(g) == level(g)``. A merge sets the merged
    group's ``min_level`` / ``max_level`` to the min / max of the two groups'
    values; ``level(g)`` is ``min_level(g)``. The constructor computes levels.

    **The pruning invariant** (used by :meth:`would_cycle`): *every live group
    has* ``max_level - min_level <= 1``, i.e. since the last recompute every
    group is a union of groups whose recomputed levels lie within two
    adjacent levels L, L+1 (e.g. each group merged at most once, with a
    partner one level apart, as in :meth:`level_pass`). Then for every edge
    X -> Y there are recompute-time groups u in X, v in Y with an edge u -> v,
    so ``min_level(X) <= level(u) <= level(v) - 1 <= max_level(Y) - 1 <=
    min_level(Y)``: min_level is non-decreasing along every edge, and a search
    from a for b only needs groups with ``min_level <= min_level(b)``. The
    graph tracks whether the invariant holds (it counts the live groups with
    ``max_level - min_level > 1``); while it does not, this pruning is off.

    A second, internal pruning key follows the same idea for arbitrary
    merges: it equals the level after a recompute, and each merge gives the
    merged group a key that keeps the keys non-decreasing along every edge
    (checked in O(degree)); if no such key exists without renumbering other
    groups, that pruning is off until the next recompute. Either way every
    cycle answer here is exact; :meth:`would_cycle_full` never prunes.

    Passes call ``accept(a, b)`` (a Python callable returning a truth value).
    The callback may query the graph but must not modify it (``merge``,
    ``recompute_levels`` or a pass raise ``RuntimeError`` from inside one).
    """

    def __cinit__(self, n, offsets, indices):
        n = operator.index(n)
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        shape = np.shape(offsets)
        if len(shape) == 1 and shape[0] != n + 1:
            raise ValueError(f"offsets must have n + 1 = {n + 1} elements, "
                             f"got {shape[0]}")
        offsets, indices = _check_csr(offsets, indices)
        cdef const int64_t[::1] off = offsets, idx = indices
        cdef int64_t u, v, e
        for u in range(n):
            for e in range(off[u], off[u + 1]):
                if idx[e] == u:
                    raise ValueError(f"indices[{e}] = {u} is a self-loop on node {u}")
        _, levels = _csr_topo_order(offsets, indices)  # raises CycleError
        cdef const int64_t[::1] lv = levels

        self.n = n
        self.ngroups = n
        self.parent.resize(n)
        self.usize.assign(n, 1)
        self.gid.resize(n)
        self.root_of.resize(n)
        self.alive_.assign(n, 1)
        self.out_.resize(n)
        self.in_.resize(n)
        self.clean_out.assign(n, 0)
        self.clean_in.assign(n, 0)
        self.minlv.resize(n)
        self.maxlv.resize(n)
        self.ord_.resize(n)
        self.mono = True
        self.mem_next.assign(n, -1)
        self.mem_head.resize(n)
        self.mem_tail.resize(n)
        self.mark.assign(n, 0)
        self.seen.assign(n, 0)
        self.pass_mark.assign(n, 0)
        self.mark_stamp = self.seen_stamp = self.pass_stamp = 0
        self.nwide = 0
        self.pending = False
        self.busy = False
        for u in range(n):
            self.parent[u] = u
            self.gid[u] = u
            self.root_of[u] = u
            self.mem_head[u] = u
            self.mem_tail[u] = u
            self.minlv[u] = lv[u]
            self.maxlv[u] = lv[u]
            self.ord_[u] = lv[u]
            for e in range(off[u], off[u + 1]):
                v = idx[e]
                self.out_[u].push_back(v)
                self.in_[v].push_back(u)
        self._clean_all()

    # ------------------------------------------------------------ internals

    cdef int64_t _root(self, int64_t x) noexcept:
        # Path halving.
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    cdef int64_t _find(self, int64_t x) noexcept:
        return self.gid[self._root(x)]

    cdef int _clean(self, vector[int64_t]& v, int64_t g) except -1:
        # Resolve entries to live ids, drop g itself and duplicates, sort.
        cdef size_t i, k = 0
        cdef int64_t y, s
        self.mark_stamp += 1
        s = self.mark_stamp
        for i in range(v.size()):
            y = self._find(v[i])
            if y != g and self.mark[y] != s:
                self.mark[y] = s
                v[k] = y
                k += 1
        v.resize(k)
        sort(v.begin(), v.end())
        return 0

    cdef int _clean_out(self, int64_t g) except -1:
        self._clean(self.out_[g], g)
        self.clean_out[g] = <int64_t>self.out_[g].size()
        return 0

    cdef int _clean_in(self, int64_t g) except -1:
        self._clean(self.in_[g], g)
        self.clean_in[g] = <int64_t>self.in_[g].size()
        return 0

    cdef int _clean_all(self) except -1:
        cdef int64_t g
        for g in range(self.n):
            if self.alive_[g]:
                self._clean_out(g)
                self._clean_in(g)
        return 0

    cdef int _search(self, int64_t a, int64_t b, bint full, bint direct) except -1:
        # DFS from a for b over out-edges. direct=False ignores the edge
        # a -> b itself, so it finds exactly the paths through a third group.
        # Unless full, it skips groups that cannot lie on a path to b: every
        # group x on such a path has min_level(x) <= min_level(b) while the
        # invariant of the class docstring holds (nwide == 0), and
        # ord_[x] <= ord_[b] while mono holds. Both prunings are exact.
        cdef int64_t s, u, y, x
        cdef int64_t lv_bound = self.minlv[b], ord_bound = self.ord_[b]
        cdef bint by_level = not full and self.nwide == 0
        cdef bint by_ord = not full and self.mono
        cdef size_t i
        self.seen_stamp += 1
        s = self.seen_stamp
        self.seen[a] = s
        self.stack.clear()
        self.stack.push_back(a)
        while not self.stack.empty():
            u = self.stack.back()
            self.stack.pop_back()
            for i in range(self.out_[u].size()):
                y = self._find(self.out_[u][i])
                if y == b:
                    if direct or u != a:
                        return 1
                    continue
                if self.seen[y] == s:
                    continue
                self.seen[y] = s
                if by_level and self.minlv[y] > lv_bound:
                    continue
                if by_ord and self.ord_[y] > ord_bound:
                    continue
                self.stack.push_back(y)
        return 0

    cdef int _would_cycle(self, int64_t a, int64_t b, bint full) except -1:
        if self._search(a, b, full, False):
            return 1
        return self._search(b, a, full, False)

    cdef int64_t _merge(self, int64_t a, int64_t b) except -1:
        # Unchecked union of live groups a != b; returns min(a, b).
        cdef int64_t m = a if a < b else b
        cdef int64_t o = b if a < b else a
        cdef int64_t ra = self.root_of[m], rb = self.root_of[o], t, c
        cdef int64_t lo = a, hi = b, om = 0, y
        cdef size_t i
        if self.mono:
            # New pruning key: the larger of the lower key and the keys of the
            # higher group's producers. Edges into the merged group and out
            # of the higher group stay non-decreasing; only consumers of the
            # lower group need a look, and only if its key went up.
            if self.ord_[b] < self.ord_[a]:
                lo, hi = b, a
            om = self.ord_[lo]
            for i in range(self.in_[hi].size()):
                y = self._find(self.in_[hi][i])
                if y != lo and y != hi and self.ord_[y] > om:
                    om = self.ord_[y]
            if om > self.ord_[lo]:
                for i in range(self.out_[lo].size()):
                    y = self._find(self.out_[lo][i])
                    if y != lo and y != hi and self.ord_[y] < om:
                        self.mono = False
                        break
        if self.usize[ra] < self.usize[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.usize[ra] += self.usize[rb]
        self.gid[ra] = m
        self.root_of[m] = ra
        self.alive_[o] = 0
        self.ngroups -= 1
        self.ord_[m] = om

        self.nwide -= ((self.maxlv[m] - self.minlv[m] > 1)
                       + (self.maxlv[o] - self.minlv[o] > 1))
        if self.minlv[o] < self.minlv[m]:
            self.minlv[m] = self.minlv[o]
        if self.maxlv[o] > self.maxlv[m]:
            self.maxlv[m] = self.maxlv[o]
        self.nwide += self.maxlv[m] - self.minlv[m] > 1

        # Smaller list into the larger one; the other group's old entries
        # resolve to m through the union-find, so neighbours are untouched.
        if self.out_[m].size() < self.out_[o].size():
            self.out_[m].swap(self.out_[o])
        for i in range(self.out_[o].size()):
            self.out_[m].push_back(self.out_[o][i])
        self.out_[o].clear()
        self.out_[o].shrink_to_fit()
        c = max(self.clean_out[m], self.clean_out[o])
        self.clean_out[m] = c
        if <int64_t>self.out_[m].size() > 2 * c + 16:
            self._clean_out(m)

        if self.in_[m].size() < self.in_[o].size():
            self.in_[m].swap(self.in_[o])
        for i in range(self.in_[o].size()):
            self.in_[m].push_back(self.in_[o][i])
        self.in_[o].clear()
        self.in_[o].shrink_to_fit()
        c = max(self.clean_in[m], self.clean_in[o])
        self.clean_in[m] = c
        if <int64_t>self.in_[m].size() > 2 * c + 16:
            self._clean_in(m)

        t = self.mem_tail[m]
        self.mem_next[t] = self.mem_head[o]
        self.mem_tail[m] = self.mem_tail[o]
        return m

    cdef int _recompute(self) except -1:
        # Longest-path levels by Kahn's algorithm over the live groups.
        cdef vector[int64_t] indeg, queue
        cdef int64_t g, u, y
        cdef size_t i, head = 0
        self._clean_all()
        indeg.assign(self.n, 0)
        for g in range(self.n):
            if self.alive_[g]:
                for i in range(self.out_[g].size()):
                    indeg[self.out_[g][i]] += 1
        for g in range(self.n):
            if self.alive_[g]:
                self.minlv[g] = 0
                if indeg[g] == 0:
                    queue.push_back(g)
        while head < queue.size():
            u = queue[head]
            head += 1
            for i in range(self.out_[u].size()):
                y = self.out_[u][i]
                if self.minlv[y] <= self.minlv[u]:
                    self.minlv[y] = self.minlv[u] + 1
                indeg[y] -= 1
                if indeg[y] == 0:
                    queue.push_back(y)
        if <int64_t>queue.size() != self.ngroups:  # pragma: no cover
            raise RuntimeError("GroupGraph: group graph became cyclic (internal error)")
        for g in range(self.n):
            if self.alive_[g]:
                self.maxlv[g] = self.minlv[g]
                self.ord_[g] = self.minlv[g]
        self.nwide = 0
        self.mono = True
        self.pending = False
        return 0

    cdef int _sync(self) except -1:
        if self.pending:
            self._recompute()
        return 0

    cdef int _topo(self, vector[int64_t]& order) except -1:
        # Kahn, smallest (min_level, id) ready group first.
        cdef vector[int64_t] indeg
        cdef priority_queue[int64_t] heap  # max-heap: push negated keys
        cdef int64_t g, u, y, key, n = self.n
        cdef size_t i
        for g in range(n):
            if self.alive_[g]:
                self._clean_out(g)
        indeg.assign(n, 0)
        for g in range(n):
            if self.alive_[g]:
                for i in range(self.out_[g].size()):
                    indeg[self.out_[g][i]] += 1
        for g in range(n):
            if self.alive_[g] and indeg[g] == 0:
                heap.push(-(self.minlv[g] * n + g))
        order.clear()
        while not heap.empty():
            key = -heap.top()
            heap.pop()
            u = key % n
            order.push_back(u)
            for i in range(self.out_[u].size()):
                y = self.out_[u][i]
                indeg[y] -= 1
                if indeg[y] == 0:
                    heap.push(-(self.minlv[y] * n + y))
        return 0

    # --------------------------------------------------------- validation

    cdef _group(self, g, str name):
        try:
            gi = operator.index(g)
        except TypeError:
            raise TypeError(f"{name} must be an int, got {type(g).__name__}") from None
        if gi < 0 or gi >= self.n:
            raise ValueError(f"{name} = {gi} is not a group of a graph with "
                             f"{self.n} nodes")
        cdef int64_t x = gi
        if not self.alive_[x]:
            raise ValueError(f"{name} = {gi} is not a live group id (node {gi} "
                             f"is in group {self._find(x)})")
        return gi

    cdef _pair(self, a, b):
        a = self._group(a, "a")
        b = self._group(b, "b")
        if a == b:
            raise ValueError(f"a and b must be different groups, got {a} twice")
        return a, b

    cdef _mutable(self):
        if self.busy:
            raise RuntimeError("GroupGraph cannot be modified from inside an "
                               "accept callback")

    # --------------------------------------------------------------- queries

    def __repr__(self):
        return f"GroupGraph(num_nodes={self.n}, num_groups={self.ngroups})"

    @property
    def num_nodes(self):
        """Number of nodes (fixed at construction)."""
        return self.n

    @property
    def num_groups(self):
        """Number of live groups."""
        return self.ngroups

    def alive(self):
        """Sorted int64 array of the live group ids."""
        out = np.empty(self.ngroups, dtype=np.int64)
        cdef int64_t[::1] o = out
        cdef int64_t g, k = 0
        for g in range(self.n):
            if self.alive_[g]:
                o[k] = g
                k += 1
        return out

    def find(self, node):
        """Id of the group that holds ``node``."""
        try:
            x = operator.index(node)
        except TypeError:
            raise TypeError(f"node must be an int, got {type(node).__name__}") from None
        if x < 0 or x >= self.n:
            raise ValueError(f"node = {x} is not a node of a graph with {self.n} nodes")
        return self._find(x)

    def members(self, g):
        """Sorted int64 array of the nodes in group ``g``."""
        cdef int64_t x = self._group(g, "g")
        cdef int64_t k = 0, r = self.root_of[x]
        out = np.empty(self.usize[r], dtype=np.int64)
        x = self.mem_head[x]
        cdef int64_t[::1] o = out
        while x >= 0:
            o[k] = x
            k += 1
            x = self.mem_next[x]
        out.sort()
        return out

    def producers(self, g):
        """Sorted int64 array of the live groups with an edge into ``g``."""
        cdef int64_t x = self._group(g, "g")
        self._clean_in(x)
        return np.array(self.in_[x], dtype=np.int64)

    def consumers(self, g):
        """Sorted int64 array of the live groups ``g`` has an edge into."""
        cdef int64_t x = self._group(g, "g")
        self._clean_out(x)
        return np.array(self.out_[x], dtype=np.int64)

    def edges(self):
        """int64 array of shape (E, 2): the (producer, consumer) pairs of live
        groups, deduplicated, sorted."""
        cdef int64_t g, k = 0, total = 0
        cdef size_t i
        for g in range(self.n):
            if self.alive_[g]:
                self._clean_out(g)
                total += self.out_[g].size()
        out = np.empty((total, 2), dtype=np.int64)
        cdef int64_t[:, ::1] o = out
        for g in range(self.n):
            if self.alive_[g]:
                for i in range(self.out_[g].size()):
                    o[k, 0] = g
                    o[k, 1] = self.out_[g][i]
                    k += 1
        return out

    def level(self, g):
        """``min_level(g)``: the level after a recompute."""
        cdef int64_t x = self._group(g, "g")
        self._sync()
        return self.minlv[x]

    def min_level(self, g):
        """Smallest recomputed level among the groups merged into ``g``."""
        cdef int64_t x = self._group(g, "g")
        self._sync()
        return self.minlv[x]

    def max_level(self, g):
        """Largest recomputed level among the groups merged into ``g``."""
        cdef int64_t x = self._group(g, "g")
        self._sync()
        return self.maxlv[x]

    def recompute_levels(self):
        """Set every live group's level to its longest-path distance from the
        sources (sources are level 0); afterwards min_level == max_level ==
        level for every group, and the pruning invariant holds."""
        self._mutable()
        self._recompute()

    def topo_order(self):
        """int64 array of the live group ids in topological order.

        Kahn's algorithm taking the smallest ``(min_level, id)`` ready group
        first; right after :meth:`recompute_levels` that is exactly the live
        groups sorted by (level, id). Deterministic in every case.
        """
        self._sync()
        cdef vector[int64_t] order
        self._topo(order)
        return np.array(order, dtype=np.int64)

    def has_path(self, a, b):
        """Whether a directed path ``a -> ... -> b`` (of at least one edge)
        exists between the distinct live groups ``a`` and ``b``."""
        cdef int64_t x, y
        x, y = self._pair(a, b)
        return bool(self._search(x, y, False, True))

    def would_cycle(self, a, b):
        """Whether merging ``a`` and ``b`` would create a cycle: whether a path
        between them (either direction) goes through at least one third group.

        Searches from a for b (and from b for a) only through groups with
        ``min_level <= min_level(target)``. That is exact while the pruning
        invariant of the class docstring holds: every live group has
        ``max_level - min_level <= 1``, which is the case when every group
        merged since the last :meth:`recompute_levels` merged at most once,
        with a partner one level apart (spans of at most two adjacent
        levels), since then min_level is non-decreasing along every edge. The
        graph tracks the invariant and drops this pruning while it does not
        hold (falling back to the internal key, or no pruning), so the answer
        is always exact.
        """
        cdef int64_t x, y
        x, y = self._pair(a, b)
        return bool(self._would_cycle(x, y, False))

    def would_cycle_full(self, a, b):
        """:meth:`would_cycle` without pruning: exact for arbitrary merges."""
        cdef int64_t x, y
        x, y = self._pair(a, b)
        return bool(self._would_cycle(x, y, True))

    # ------------------------------------------------------------- mutation

    def merge(self, a, b):
        """Merge groups ``a`` and ``b`` (adjacent or not); return the new id,
        ``min(a, b)``. Edges are combined and self-edges dropped; min/max
        levels are combined (no recompute).

        Raises ``ValueError`` if the merge would create a cycle. The check
        is exact for arbitrary merges (the same answer as
        :meth:`would_cycle_full`), pruned only where the pruning is valid.
        """
        self._mutable()
        cdef int64_t x, y
        x, y = self._pair(a, b)
        if self._would_cycle(x, y, False):
            raise ValueError(f"merging groups {x} and {y} would create a cycle")
        return self._merge(x, y)

    def level_pass(self, accept):
        """One merge round of nvFuser's level-ordered candidate finder.

        Recomputes levels, then visits the live groups in (level, id) order.
        For each group g not merged in this pass, it considers g's consumers c
        with ``level(c) == level(g) + 1`` not merged in this pass, in
        increasing id order; the first c with ``not would_cycle(g, c)`` and a
        true ``accept(g, c)`` is merged with g at once (new id ``min(g, c)``,
        marked as merged in this pass) and the pass moves on to the next
        group. ``accept`` gets the ids (producer, consumer) before the merge;
        if it returns true, the merge happens and its id is ``min(g, c)``.

        Every merge here joins two groups untouched since the recompute, at
        levels L and L+1, so the pruning invariant holds throughout. Returns
        the number of merges.
        """
        self._mutable()
        _check_callable(accept)
        self._recompute()
        cdef vector[int64_t] order, cons
        cdef int64_t g, c, m, target, ps, count = 0
        cdef size_t k, i
        self._topo(order)
        self.pass_stamp += 1
        ps = self.pass_stamp
        self.busy = True
        try:
            for k in range(order.size()):
                g = order[k]
                if not self.alive_[g] or self.pass_mark[g] == ps:
                    continue
                self._clean_out(g)
                cons = self.out_[g]  # a copy: accept may clean lists
                target = self.minlv[g] + 1
                for i in range(cons.size()):
                    c = cons[i]
                    if self.minlv[c] != target or self.pass_mark[c] == ps:
                        continue
                    if self._would_cycle(g, c, False):
                        continue
                    if accept(g, c):
                        m = self._merge(g, c)
                        self.pass_mark[m] = ps
                        count += 1
                        break
        finally:
            self.busy = False
        return count

    def edge_pass(self, accept):
        """The final merge pass over producer -> consumer pairs.

        Sweeps: recompute levels, take :meth:`topo_order`; for each group p of
        that order still live and not yet done in this sweep, for each
        consumer c of p in increasing id order, if ``not would_cycle_full(p,
        c)`` and ``accept(p, c)`` is true, merge them (new id ``min(p, c)``;
        levels are recomputed, lazily: queries from ``accept`` see fresh
        levels) and start over on the consumers of the merged group, which
        takes p's place in the sweep; when p has no more merges it is done
        for this sweep. Sweeps repeat until one merges nothing. The cycle
        check gives exactly would_cycle_full's answer but prunes where that
        is valid. Returns the number of merges.
        """
        self._mutable()
        _check_callable(accept)
        cdef vector[int64_t] order, cons
        cdef int64_t p, c, ds, count = 0, sweep
        cdef size_t k, i
        cdef bint again
        self.busy = True
        try:
            while True:
                self._recompute()
                self._topo(order)
                self.pass_stamp += 1
                ds = self.pass_stamp
                sweep = 0
                for k in range(order.size()):
                    p = order[k]
                    if not self.alive_[p] or self.pass_mark[p] == ds:
                        continue
                    again = True
                    while again:
                        again = False
                        self._clean_out(p)
                        cons = self.out_[p]
                        for i in range(cons.size()):
                            c = cons[i]
                            # Exact: the same answer as would_cycle_full.
                            if self._would_cycle(p, c, False):
                                continue
                            if accept(p, c):
                                p = self._merge(p, c)
                                # Levels are recomputed lazily, on the next
                                # query or sweep: nothing in between reads them.
                                self.pending = True
                                count += 1
                                sweep += 1
                                again = True
                                break
                    self.pass_mark[p] = ds
                if sweep == 0:
                    break
        finally:
            self.busy = False
            self._sync()
        return count
