# The segmenter's group graph, for other Cython modules to cimport (they must
# be compiled as C++ too: the class holds std::vectors). See segment.pyx for
# the meaning of every field; callers going through the cdef methods must
# validate ids themselves (live group ids, a != b, merges that keep the graph
# acyclic).

cimport cython
from libc.stdint cimport int64_t, uint8_t
from libcpp.vector cimport vector


@cython.final
cdef class GroupGraph:
    cdef int64_t n            # number of nodes (fixed)
    cdef int64_t ngroups      # number of live groups
    # Union-find over nodes: parent links, tree sizes (union by size), and
    # for each root the id (smallest member) of its group; root_of maps a
    # live group id back to its tree root.
    cdef vector[int64_t] parent, usize, gid, root_of
    cdef vector[uint8_t] alive_
    # Adjacency per live group id, lazily cleaned: entries are nodes of the
    # neighbouring group (resolve with _find), may repeat, and may resolve to
    # the group itself after a merge. clean_out/clean_in: list length right
    # after the last cleanup (drives the amortised cleanup on merge).
    cdef vector[vector[int64_t]] out_, in_
    cdef vector[int64_t] clean_out, clean_in
    # Levels: exact after a recompute; a merge takes the min / max.
    cdef vector[int64_t] minlv, maxlv
    cdef int64_t nwide        # live groups with maxlv - minlv > 1
    # A second pruning key: equal to the level after a recompute and kept
    # non-decreasing along every edge by merges (O(degree) check per merge)
    # while mono is true; once a merge cannot keep it so, mono is false until
    # the next recompute.
    cdef vector[int64_t] ord_
    cdef bint mono
    cdef bint pending         # a recompute is owed (edge_pass merges)
    # Members as singly linked lists of nodes: head/tail per group id.
    cdef vector[int64_t] mem_next, mem_head, mem_tail
    # Stamp arrays (indexed by group id) so that no pass clears an n-array.
    cdef vector[int64_t] mark, seen, pass_mark
    cdef int64_t mark_stamp, seen_stamp, pass_stamp
    cdef vector[int64_t] stack
    cdef bint busy            # inside a pass: accept callbacks must not mutate

    cdef int64_t _root(self, int64_t x) noexcept
    cdef int64_t _find(self, int64_t x) noexcept
    cdef int _clean(self, vector[int64_t]& v, int64_t g) except -1
    cdef int _clean_out(self, int64_t g) except -1
    cdef int _clean_in(self, int64_t g) except -1
    cdef int _clean_all(self) except -1
    cdef int _search(self, int64_t a, int64_t b, bint full, bint direct) except -1
    cdef int _would_cycle(self, int64_t a, int64_t b, bint full) except -1
    cdef int64_t _merge(self, int64_t a, int64_t b) except -1
    cdef int _recompute(self) except -1
    cdef int _sync(self) except -1
    cdef int _topo(self, vector[int64_t]& order) except -1
    # Python-facing validation helpers.
    cdef _group(self, g, str name)
    cdef _pair(self, a, b)
    cdef _mutable(self)
