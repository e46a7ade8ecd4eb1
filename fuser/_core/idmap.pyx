"""Union-find over integer axis ids, rebuilt per candidate segment.

The segmenter asks schedulers about thousands of candidate segments; each question needs
the classes of axes that the segment's expressions map onto each other. `IdUnion` keeps
one parent array for all of a fusion's axes and resets only what the last build touched,
so building the classes of a segment costs time in its size, not the fusion's.
"""

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t


cdef class IdUnion:
    """Classes of `n_ids` axes under the pairs of a chosen set of expressions.

    `pair_offsets`/`pairs` are CSR: expression k maps axis `pairs[2j]` onto `pairs[2j+1]`
    for j in `pair_offsets[k]:pair_offsets[k+1]`. `build(exprs)` forgets the previous
    classes and unions the pairs of `exprs`; `find(i)` is then the smallest id of i's class.
    """

    cdef int64_t[::1] parent
    cdef int64_t[::1] touched
    cdef Py_ssize_t n_touched
    cdef const int64_t[::1] offsets
    cdef const int64_t[::1] pairs
    cdef readonly Py_ssize_t n_ids

    def __init__(self, Py_ssize_t n_ids, pair_offsets, pairs):
        po = np.ascontiguousarray(pair_offsets, dtype=np.int64)
        pp = np.ascontiguousarray(pairs, dtype=np.int64)
        if po.ndim != 1 or po.shape[0] < 1 or po[0] != 0 or po[po.shape[0] - 1] * 2 != pp.shape[0]:
            raise ValueError("pair_offsets must be CSR offsets into pairs (two ids per pair)")
        if pp.shape[0] and (pp.min() < 0 or pp.max() >= n_ids):
            raise ValueError(f"pairs must hold axis ids in [0, {n_ids})")
        self.n_ids = n_ids
        self.offsets = po
        self.pairs = pp
        self.parent = np.arange(n_ids, dtype=np.int64)
        self.touched = np.empty(max(1, pp.shape[0]), dtype=np.int64)
        self.n_touched = 0

    cdef inline int64_t _find(self, int64_t x) noexcept nogil:
        cdef int64_t r = x, nxt
        while self.parent[r] != r:
            r = self.parent[r]
        while self.parent[x] != r:
            nxt = self.parent[x]
            self.parent[x] = r
            x = nxt
        return r

    def build(self, const int64_t[::1] exprs):
        """Reset, then union the pairs of `exprs` (indices into pair_offsets)."""
        cdef Py_ssize_t i, j, k
        cdef int64_t a, b, ra, rb
        cdef Py_ssize_t n_expr = self.offsets.shape[0] - 1
        for i in range(exprs.shape[0]):
            if exprs[i] < 0 or exprs[i] >= n_expr:
                raise IndexError(f"expression {exprs[i]} out of range [0, {n_expr})")
        with nogil:
            # only ids a union re-pointed have parent != self (path compression rewrites
            # non-roots only), so resetting them restores the identity
            for i in range(self.n_touched):
                self.parent[self.touched[i]] = self.touched[i]
            self.n_touched = 0
            for i in range(exprs.shape[0]):
                k = exprs[i]
                for j in range(self.offsets[k], self.offsets[k + 1]):
                    a = self.pairs[2 * j]
                    b = self.pairs[2 * j + 1]
                    ra = self._find(a)
                    rb = self._find(b)
                    if ra == rb:
                        continue
                    if ra < rb:
                        self.parent[rb] = ra
                        self.touched[self.n_touched] = rb
                    else:
                        self.parent[ra] = rb
                        self.touched[self.n_touched] = ra
                    self.n_touched += 1
        return None

    def find(self, int64_t i):
        if i < 0 or i >= self.n_ids:
            raise IndexError(f"axis {i} out of range [0, {self.n_ids})")
        return self._find(i)

    def find_many(self, const int64_t[::1] ids):
        """find() of each id, as an int64 array."""
        out = np.empty(ids.shape[0], dtype=np.int64)
        cdef int64_t[::1] o = out
        cdef Py_ssize_t i
        for i in range(ids.shape[0]):
            if ids[i] < 0 or ids[i] >= self.n_ids:
                raise IndexError(f"axis {ids[i]} out of range [0, {self.n_ids})")
            o[i] = self._find(ids[i])
        return out
