# C-level graph kernels, for other Cython modules (e.g. the segmenter) to
# cimport without going through the Python wrappers in graph.pyx.
# All arrays are CSR int64: node i's successors are
# indices[offsets[i]:offsets[i+1]]. Callers must validate inputs first.

from libc.stdint cimport int64_t, uint8_t

cdef Py_ssize_t kahn(const int64_t[::1] offsets, const int64_t[::1] indices,
                     int64_t[::1] order, int64_t[::1] levels,
                     int64_t[::1] indeg, int64_t[::1] heap) noexcept nogil

cdef void transpose(const int64_t[::1] offsets, const int64_t[::1] indices,
                    int64_t[::1] offsets2, int64_t[::1] indices2) noexcept nogil

cdef void mark_reachable(const int64_t[::1] offsets, const int64_t[::1] indices,
                         const int64_t[::1] sources, uint8_t[::1] mask,
                         int64_t[::1] stack) noexcept nogil
