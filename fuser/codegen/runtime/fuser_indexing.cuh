// fuser_indexing.cuh: index ops (select, index_select, gather, take_along_axis) in the
// kernels fuser generates. Included after fuser_runtime.cuh.
//
// An index op reads its lookup tensor at a position an index gives along one axis. The
// position is checked against the axis's extent before anything is read: an out-of-range
// index reads nothing (the op's value is zero) and is recorded in the kernel's error flag,
// three unsigned long longs the runtime zeroes, passes to the kernel and reads after the
// launch: [0] the failed check's number + 1 (the first thread to fail wins), [1] the index
// value, [2] the extent. The runtime turns it into an IndexError naming the op and dim.
#pragma once

#define FUSER_DEVICE __device__ __forceinline__

namespace fuser {

// `value` as a position along an axis of `n` elements, or -1 when out of range (recorded
// as check `check` in `flag` unless it is null: the host checked the value already).
// With `wrap`, negative values count from the end (select's rule, -n .. n-1).
template <bool wrap>
FUSER_DEVICE long long checked_index(long long value, long long n, unsigned long long* flag, int check) {
  long long i = (wrap && value < 0) ? value + n : value;
  if (i >= 0 && i < n) {
    return i;
  }
  if (flag != nullptr && atomicCAS(flag, 0ull, (unsigned long long)(check + 1)) == 0ull) {
    flag[1] = (unsigned long long)value;
    flag[2] = (unsigned long long)n;
  }
  return -1;
}

// base[offset + position * stride], or zero (nothing read) where the position is -1.
template <typename T, typename I, typename J>
FUSER_DEVICE T lookup(const T* base, I offset, long long position, J stride) {
  if (position < 0) {
    return T{};
  }
  return base[offset + (J)position * stride];
}

}  // namespace fuser
