// fuser_reduction.cuh: reductions across the threads of a block and across blocks, for
// the reduction and persistent kernels fuser generates. Included after fuser_runtime.cuh.
//
// Values are reduced in their compute type (float for half/bfloat16, as PyTorch
// accumulates). The combining operation is a functor `op(a, b)` that the generated code
// passes (a lambda printed from the fusion's op: NaN-propagating max, integer add, ...).
//
// Blocks are 2D: `blockDim.x` threads by `blockDim.y`. A reduction "over x" combines the
// threads of one row (same threadIdx.y): blockDim.x must be a power of two, and a row of
// fewer than 32 threads lies in one warp (rows are consecutive thread ids). A reduction
// "over y" combines the threads of one column (same threadIdx.x): blockDim.y must be a
// power of two. Every function is an allreduce: each thread of the row (column) gets the
// result. Every thread of the block must call it (they synchronise), and each leaves its
// shared scratch free on return (it ends with a barrier), so none needs one on entry.
//
// Grid reductions combine one partial per block along gridDim.y in one kernel: every block
// writes its partial to a work buffer and counts itself in a semaphore; the last block to
// arrive (no waiting, so no co-residency is needed) combines the partials in a fixed order,
// so results are deterministic, and resets the semaphore for the next launch.
#pragma once

#define FUSER_DEVICE __device__ __forceinline__

namespace fuser {

// --- Welford triples -------------------------------------------------------------------------

template <typename T>
struct Welford {
  T avg;
  T m2;
  long long n;
};

// Chan et al.'s combination of two partial results.
template <typename T>
FUSER_DEVICE Welford<T> welford_combine(const Welford<T>& a, const Welford<T>& b) {
  long long n = a.n + b.n;
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  T nb_over_n = static_cast<T>(b.n) / static_cast<T>(n);
  T delta = b.avg - a.avg;
  Welford<T> out;
  out.avg = a.avg + delta * nb_over_n;
  out.m2 = a.m2 + b.m2 + delta * delta * static_cast<T>(a.n) * nb_over_n;
  out.n = n;
  return out;
}

// Merge `n` samples of mean `mean` and sum of squared deviations `m2` into `w` (a thread
// folds in each tile of values it loaded, computed with two cheap passes over registers,
// rather than paying a division per element).
template <typename T>
FUSER_DEVICE void welford_merge(Welford<T>& w, T mean, T m2, long long n) {
  Welford<T> b;
  b.avg = mean;
  b.m2 = m2;
  b.n = n;
  w = welford_combine(w, b);
}

struct WelfordOp {
  template <typename T>
  FUSER_DEVICE Welford<T> operator()(const Welford<T>& a, const Welford<T>& b) const {
    return welford_combine(a, b);
  }
};

// --- register arrays ---------------------------------------------------------------------------

// An empty asm that may change every word of `a`: the compiler must assume new contents, so
// it recomputes what it derived from `a` earlier (a bf16 row converted to float, say) instead
// of keeping those values live across a reduction. Costs no instruction.
template <typename T, int N>
FUSER_DEVICE void launder(T (&a)[N]) {
  if constexpr (sizeof(T) == 8) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+l"(*reinterpret_cast<unsigned long long*>(&a[i])));
  } else if constexpr (sizeof(a) % 4 == 0 && sizeof(T) <= 4) {
    unsigned int* w = reinterpret_cast<unsigned int*>(a);
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(a) / 4); ++i) asm volatile("" : "+r"(w[i]));
  } else if constexpr (sizeof(T) == 2) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+h"(*reinterpret_cast<unsigned short*>(&a[i])));
  }
}

// --- warp shuffles of any value ---------------------------------------------------------------

template <typename T>
FUSER_DEVICE T shfl_xor(T v, int lane_mask, int width) {
  static_assert(sizeof(T) % 4 == 0 || sizeof(T) < 4, "shuffled values are whole 32-bit words or smaller");
  if constexpr (sizeof(T) < 4) {
    int w = 0;
    memcpy(&w, &v, sizeof(T));
    w = __shfl_xor_sync(0xffffffffu, w, lane_mask, width);
    T out;
    memcpy(&out, &w, sizeof(T));
    return out;
  } else {
    constexpr int words = sizeof(T) / 4;
    int w[words];
    memcpy(w, &v, sizeof(T));
#pragma unroll
    for (int k = 0; k < words; ++k) w[k] = __shfl_xor_sync(0xffffffffu, w[k], lane_mask, width);
    T out;
    memcpy(&out, w, sizeof(T));
    return out;
  }
}

// Allreduce over `width` consecutive lanes (a power of two, at most 32).
template <typename T, typename Op>
FUSER_DEVICE T warp_allreduce(T v, Op op, int width) {
  for (int m = width / 2; m > 0; m /= 2) v = op(v, shfl_xor(v, m, width));
  return v;
}

// --- block reductions ------------------------------------------------------------------------

// Allreduce over the threads of each row (same threadIdx.y). `smem` holds at least
// blockDim.y * max(1, blockDim.x / 32) values; it is free again when this returns, unless
// `Free` is false: then the caller alternates buffers, so that the next block reduction's
// barrier orders this one's reads before any later write to `smem`. `BDX`: blockDim.x
// where the kernel fixes it (its loops then unroll), else 0.
template <bool Free = true, int BDX = 0, typename T, typename Op>
FUSER_DEVICE T block_allreduce_x(T v, Op op, T* smem) {
  const int bdx = BDX > 0 ? BDX : blockDim.x;
  if (bdx == 1) return v;
  if (bdx <= 32) return warp_allreduce(v, op, bdx);
  v = warp_allreduce(v, op, 32);
  const int warps = bdx / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T* row = smem + threadIdx.y * warps;
  // no barrier first: every user of smem ends with one, so earlier readers are done
  if (lane == 0) row[warp] = v;
  __syncthreads();
  T r = row[0];
  for (int k = 1; k < warps; ++k) r = op(r, row[k]);
  if (Free) __syncthreads();  // smem may be reused as soon as everyone has read it
  return r;
}

// A ratio of counts as a Welford merge's weight: float's fast division (2 ulp; counts'
// ratios need no more, and an IEEE division costs a call).
FUSER_DEVICE float count_ratio(float a, float b) { return __fdividef(a, b); }
FUSER_DEVICE double count_ratio(double a, double b) { return a / b; }

// Chan's merge of the (avg, m2, n) triples of `width` consecutive lanes (a power of two, at
// most 32), counts in T. The two lanes of a shuffle take the pair in one order (the lower
// lane's first), so every lane ends with the same bits; a merge with an empty side
// returns the other side exactly (empty triples are {0, 0, 0}), as does one of equal means.
template <typename T>
FUSER_DEVICE void warp_welford(T& avg, T& m2, T& n, int width) {
  const int lane = threadIdx.x % 32;
  for (int m = width / 2; m > 0; m /= 2) {
    const T o_avg = shfl_xor(avg, m, width), o_m2 = shfl_xor(m2, m, width), o_n = shfl_xor(n, m, width);
    const bool hi = (lane & m) != 0;
    const T a_avg = hi ? o_avg : avg, b_avg = hi ? avg : o_avg, a_n = hi ? o_n : n, b_n = hi ? n : o_n;
    const T total = a_n + b_n;
    const T w = a_n > T(0) ? count_ratio(b_n, total) : T(1);  // (both empty: d is 0)
    const T d = b_avg - a_avg;
    avg = a_avg + d * w;
    m2 = (m2 + o_m2) + d * d * a_n * w;
    n = total;
  }
}

// Welford triples combined over the threads of each row, as block_allreduce_x with
// fuser::WelfordOp (same `smem`, `Free`, `BDX`), where the kernel knows every count stays
// exact in T (below 2^24 for float): merged with counts in T, no chain of IEEE divisions,
// in two rounds of shuffles (within warps, then each warp's lanes over the warps'
// triples), one barrier between. Every thread gets the same bits.
template <bool Free = true, int BDX = 0, typename T>
FUSER_DEVICE Welford<T> block_welford_x(Welford<T> v, Welford<T>* smem) {
  const int bdx = BDX > 0 ? BDX : blockDim.x;
  if (bdx == 1) return v;
  T avg = v.avg, m2 = v.m2, n = static_cast<T>(v.n);
  warp_welford(avg, m2, n, bdx < 32 ? bdx : 32);
  if (bdx > 32) {
    const int warps = bdx / 32, lane = threadIdx.x % 32;
    Welford<T>* row = smem + threadIdx.y * warps;
    // no barrier first: every user of smem ends with one, so earlier readers are done
    if (lane == 0) row[threadIdx.x / 32] = Welford<T>{avg, m2, static_cast<long long>(n)};
    __syncthreads();
    const Welford<T> p = row[lane % warps];  // (every group of `warps` lanes merges them all)
    avg = p.avg;
    m2 = p.m2;
    n = static_cast<T>(p.n);
    warp_welford(avg, m2, n, warps);
    if (Free) __syncthreads();
  }
  return Welford<T>{avg, m2, static_cast<long long>(n)};
}

// The most shared-memory reads per thread (warps of the block times elements of the tile)
// for which a block's columns combine by warp shuffles first (see columns_shuffle). H100,
// sum over dim 0: [128, 1000] fp32 in 4 x 32 blocks of 2-element vectors 3.16 -> 2.71 us
// (8 reads); [16384, 1024] bf16 in 16 x 16 blocks of 8-element vectors 12.74 -> 15.05 us
// had the shuffles taken its 64 reads.
#ifndef FUSER_SHUFFLE_READS_MAX
#define FUSER_SHUFFLE_READS_MAX 8
#endif

// Whether a column allreduce of an N-element tile goes through warp shuffles first: a warp
// holds whole columns' runs of rows (blockDim.x divides 32, the block is whole warps), and
// every thread then reads each warp's N partials, at most FUSER_SHUFFLE_READS_MAX.
template <int N>
FUSER_DEVICE bool columns_shuffle(int bdx, int bdy) {
  return bdx < 32 && (32 % bdx) == 0 && (bdx * bdy) % 32 == 0 && (bdx * bdy / 32) * N <= FUSER_SHUFFLE_READS_MAX;
}

// Allreduce each element of a register tile over the threads of each column where
// columns_shuffle holds: over the rows a warp holds by shuffles (lanes tx, tx + bdx, ...),
// then over the warps through shared memory (N * bdx values a warp), one barrier (two with
// Free). A fixed order: deterministic, every thread of a column getting the same bits.
template <bool Free, typename T, int N, typename Op>
FUSER_DEVICE void block_allreduce_tile_y_shfl(T (&a)[N], Op op, T* smem, int bdx, int bdy) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    for (int m = bdx; m < 32; m *= 2) a[i] = op(a[i], shfl_xor(a[i], m, 32));
  const int tx = threadIdx.x, tid = threadIdx.y * bdx + tx;
  const int warps = bdx * bdy / 32, warp = tid / 32;
  // (every user of smem ends with a barrier: it is free)
  if (tid % 32 < bdx) {
#pragma unroll
    for (int i = 0; i < N; ++i) smem[(warp * N + i) * bdx + tx] = a[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    T r = smem[i * bdx + tx];
    for (int w = 1; w < warps; ++w) r = op(r, smem[(w * N + i) * bdx + tx]);
    a[i] = r;
  }
  if (Free) __syncthreads();
}

// Allreduce over the threads of each column (same threadIdx.x). `smem` holds at least
// blockDim.x * blockDim.y values. `BDX`, `BDY`: blockDim.x and .y where the kernel fixes
// them, else 0.
template <bool Free = true, int BDX = 0, int BDY = 0, typename T, typename Op>
FUSER_DEVICE T block_allreduce_y(T v, Op op, T* smem) {
  const int bdy = BDY > 0 ? BDY : blockDim.y;
  if (bdy == 1) return v;
  const int bdx = BDX > 0 ? BDX : blockDim.x;
  if (columns_shuffle<1>(bdx, bdy)) {
    T a[1] = {v};
    block_allreduce_tile_y_shfl<Free>(a, op, smem, bdx, bdy);
    return a[0];
  }
  const int tx = threadIdx.x, ty = threadIdx.y;
  smem[ty * bdx + tx] = v;  // (every user of smem ends with a barrier: it is free)
  __syncthreads();
  for (int s = bdy / 2; s > 0; s /= 2) {
    if (ty < s) smem[ty * bdx + tx] = op(smem[ty * bdx + tx], smem[(ty + s) * bdx + tx]);
    __syncthreads();
  }
  T r = smem[tx];
  if (Free) __syncthreads();
  return r;
}

// Allreduce each element of a register tile over the threads of each column (same
// threadIdx.x): every thread gets its column's N totals. `smem` holds N * blockDim.x *
// blockDim.y values. Where columns_shuffle holds, block_allreduce_tile_y_shfl; else the
// whole tile goes through shared memory at once: three barriers (four with Free) whatever
// N, where one element at a time takes 2 + log2(blockDim.y) each. Each (element, column)
// pair is combined over the rows in a fixed order (runs of rows by several threads when
// the pairs are fewer than the threads): deterministic. `BDX`, `BDY` as in block_allreduce_y.
template <bool Free = true, int BDX = 0, int BDY = 0, typename T, int N, typename Op>
FUSER_DEVICE void block_allreduce_tile_y(T (&a)[N], Op op, T* smem) {
  const int bdx = BDX > 0 ? BDX : blockDim.x, bdy = BDY > 0 ? BDY : blockDim.y;
  if (bdy == 1) return;
  if (columns_shuffle<N>(bdx, bdy)) {
    block_allreduce_tile_y_shfl<Free>(a, op, smem, bdx, bdy);
    return;
  }
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int slots = N * bdx, threads = bdx * bdy, tid = ty * bdx + tx;
  // row y of pair (i, x) at smem[y * slots + i * bdx + x]
#pragma unroll
  for (int i = 0; i < N; ++i) smem[ty * slots + i * bdx + tx] = a[i];
  __syncthreads();
  int parts = 1;  // runs of rows per pair, so that every thread has work
  while (parts * 2 * slots <= threads && parts * 2 <= bdy) parts *= 2;
  const int per = (bdy + parts - 1) / parts;
  for (int s = tid; s < slots * parts; s += threads) {
    const int pair = s % slots, y0 = (s / slots) * per;
    const int y1 = y0 + per < bdy ? y0 + per : bdy;
    if (y0 < y1) {
      T r = smem[y0 * slots + pair];
      for (int y = y0 + 1; y < y1; ++y) r = op(r, smem[y * slots + pair]);
      smem[y0 * slots + pair] = r;  // (only this thread reads rows y0 .. y1 - 1 of the pair)
    }
  }
  if (parts > 1) {
    __syncthreads();
    for (int s = tid; s < slots; s += threads) {
      T r = smem[s];
      for (int p = 1; p < parts && p * per < bdy; ++p) r = op(r, smem[p * per * slots + s]);
      smem[s] = r;
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = smem[i * bdx + tx];
  if (Free) __syncthreads();
}

// --- grid reductions -------------------------------------------------------------------------

// A load through L2 only: partials other blocks wrote are never stale in this SM's L1.
template <typename T>
FUSER_DEVICE T load_global_cg(const T* p) {
  T out;
  if constexpr (sizeof(T) % 4 == 0) {
    int w[sizeof(T) / 4];
#pragma unroll
    for (int k = 0; k < static_cast<int>(sizeof(T) / 4); ++k) w[k] = __ldcg(reinterpret_cast<const int*>(p) + k);
    memcpy(&out, w, sizeof(T));
  } else {
    unsigned char b[sizeof(T)];
#pragma unroll
    for (int k = 0; k < static_cast<int>(sizeof(T)); ++k) b[k] = __ldcg(reinterpret_cast<const unsigned char*>(p) + k);
    memcpy(&out, b, sizeof(T));
  }
  return out;
}

// A grid reduction in three steps, so that one kernel can combine several reductions and
// its epilogue runs in one block with every total at hand:
//   grid_write   each block stores its partial for each output slot (one writer thread per
//                slot; `work` holds gridDim.x * gridDim.y * slots values per reduction);
//   grid_arrive  the block counts itself in `sem[blockIdx.x]` (zeroed before the launch);
//                only the last block of the grid column to arrive gets true (the others
//                return), and it zeroes the counter again for the next launch;
//   grid_finish  in that block, the threads sharing a slot (a row: OverX, or a column)
//                split the partials in a fixed order and combine them as a block reduction
//                does: the result is deterministic.
template <typename T>
FUSER_DEVICE void grid_write(const T& v, T* work, int slot, int slots, bool writer) {
  if (writer) work[(static_cast<long long>(blockIdx.x) * gridDim.y + blockIdx.y) * slots + slot] = v;
}

FUSER_DEVICE bool grid_arrive(unsigned int* sem, int* flag) {
  __threadfence();  // this block's partials are visible before it counts itself
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    unsigned int prev = atomicAdd(sem + blockIdx.x, 1u);
    bool last = prev == gridDim.y - 1;
    if (last) sem[blockIdx.x] = 0;
    *flag = last;
  }
  __syncthreads();
  if (!*flag) return false;
  __threadfence();
  return true;
}

template <bool OverX, typename T, typename Op>
FUSER_DEVICE T grid_finish(Op op, T init, const T* work, int slot, int slots, T* smem) {
  const T* col = work + static_cast<long long>(blockIdx.x) * gridDim.y * slots;
  const unsigned int part = OverX ? threadIdx.x : threadIdx.y;
  const unsigned int parts = OverX ? blockDim.x : blockDim.y;
  T acc = init;
  for (unsigned int by = part; by < gridDim.y; by += parts) acc = op(acc, load_global_cg(col + static_cast<long long>(by) * slots + slot));
  return OverX ? block_allreduce_x(acc, op, smem) : block_allreduce_y(acc, op, smem);
}


// grid_write and grid_finish for a register tile of N adjacent slots (a column
// reduction's vector lanes): slots slot .. slot + N - 1, combined over the blocks of the
// grid column and the threads of each block column together.
template <typename T, int N>
FUSER_DEVICE void grid_write_tile(const T (&a)[N], T* work, int slot, int slots, bool writer) {
  if (!writer) return;
  T* at = work + (static_cast<long long>(blockIdx.x) * gridDim.y + blockIdx.y) * slots + slot;
#pragma unroll
  for (int i = 0; i < N; ++i) at[i] = a[i];
}

template <typename T, int N, typename Op>
FUSER_DEVICE void grid_finish_tile_y(T (&a)[N], Op op, T init, const T* work, int slot, int slots, T* smem) {
  const T* col = work + static_cast<long long>(blockIdx.x) * gridDim.y * slots + slot;
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = init;
  // four rows of partials in flight a thread: the last block's loads are the kernel's tail
  // (H100, sum over dim 0 bf16 [16384, 1024], 50 partials over 16 rows of threads: 17.0 ->
  // 16.6 us; with grid_y balanced, 16.6 -> 16.4)
#pragma unroll 4
  for (unsigned int by = threadIdx.y; by < gridDim.y; by += blockDim.y) {
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] = op(a[i], load_global_cg(col + static_cast<long long>(by) * slots + i));
  }
  block_allreduce_tile_y(a, op, smem);
}

// --- reductions across the rows of a grid (inner-outer persistent kernels) --------------------

// A barrier for every block of the grid. The blocks must all be resident at once (the
// launch caps the grid at what the SMs hold), else it never returns. `sem` holds two
// counters, zero before the launch: arrivals, then departures; the last block to leave
// zeroes both for the next launch (on the same stream, so it starts after this one ends).
FUSER_DEVICE void grid_sync(unsigned int* sem) {
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const unsigned int blocks = gridDim.x * gridDim.y;
    __threadfence();  // this block's writes are visible before it counts itself
    atomicAdd(sem, 1u);
    while (*static_cast<volatile unsigned int*>(sem) < blocks) __nanosleep(32);
    __threadfence();
    if (atomicAdd(sem + 1, 1u) == blocks - 1) {
      sem[0] = 0;
      sem[1] = 0;
    }
  }
  __syncthreads();
}

// Combine each element of a register tile over the threads of a column (same threadIdx.x):
// the results are in the threads with threadIdx.y == 0. `smem` holds blockDim.x *
// blockDim.y values and is free on entry and on return.
template <typename T, int N, typename Op>
FUSER_DEVICE void block_reduce_tile_y(T (&a)[N], Op op, T* smem) {
  const int bdx = blockDim.x, bdy = blockDim.y;
  if (bdy == 1) return;
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    smem[ty * bdx + tx] = a[i];
    __syncthreads();
    if (ty == 0) {
      for (int y = 1; y < bdy; ++y) a[i] = op(a[i], smem[y * bdx + tx]);
    }
    __syncthreads();
  }
}

// Columns a block combines per step of a grid-wide column reduction: enough that the
// steps spread over the grid's blocks, at least 8 (a 32-byte sector of each partial row)
// and at most a quarter of the block's threads (each column keeps 4 runs of partials).
template <typename I>
FUSER_DEVICE int column_width(I n_cols, int threads) {
  const I per_block = n_cols / static_cast<I>(gridDim.x);
  int w = 8;
  while (w * 2 <= threads / 4 && w * 2 <= per_block) w *= 2;
  return w < threads ? w : threads;
}

// Combine the partials of columns c0 .. c0 + w - 1 of K buffers by the same `op` (row p
// of `work[k]` holds block p's partials, `n_cols` per row, `parts` rows): the block's
// threads take the w adjacent columns by (blockDim.x * blockDim.y) / w interleaved runs of
// rows (w and the thread count are powers of two, w at most the thread count), so loads
// are coalesced and four are in flight per thread, then combine the runs in shared memory
// in a fixed order. Thread t < w gets column c0 + t of each buffer in out[k] (columns past
// n_cols give init). Every thread of the block calls it; `smem` holds K * blockDim.x *
// blockDim.y values and is free on return. The buffers go together: one wait for their
// loads and one set of barriers.
template <int K, typename T, typename Op, typename I>
FUSER_DEVICE void column_partials(T (&out)[K], Op op, T init, const T* const (&work)[K], int parts, I n_cols, I c0,
                                  int w, T* smem) {
  constexpr int R = K >= 4 ? 1 : 4 / K;  // rows of partials per step and buffer
  const int threads = blockDim.x * blockDim.y;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int runs = threads / w;
  const int lane = tid % w, run = tid / w;
  const I c = c0 + lane;
  T a[K][R];
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int r = 0; r < R; ++r) a[k][r] = init;
  }
  if (c < n_cols) {
    const long long stride = static_cast<long long>(n_cols) * runs;
    int p = run;
    for (; p + (R - 1) * runs < parts; p += R * runs) {
      const long long at = static_cast<long long>(p) * n_cols + c;
      T x[K][R];
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int r = 0; r < R; ++r) x[k][r] = load_global_cg(work[k] + at + r * stride);
      }
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int r = 0; r < R; ++r) a[k][r] = op(a[k][r], x[k][r]);
      }
    }
    for (; p < parts; p += runs) {
      const long long at = static_cast<long long>(p) * n_cols + c;
#pragma unroll
      for (int k = 0; k < K; ++k) a[k][0] = op(a[k][0], load_global_cg(work[k] + at));
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    T t = a[k][0];
#pragma unroll
    for (int r = 1; r < R; ++r) t = op(t, a[k][r]);
    smem[k * threads + tid] = t;
  }
  __syncthreads();
  for (int s = runs / 2; s > 0; s /= 2) {
    if (run < s) {
#pragma unroll
      for (int k = 0; k < K; ++k) smem[k * threads + tid] = op(smem[k * threads + tid], smem[k * threads + tid + s * w]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int k = 0; k < K; ++k) out[k] = smem[k * threads + lane];
  __syncthreads();
}

// Combine the partials of column `col` of row segment `seg`: blocks `first` .. `last`
// hold them, block b's at row b + seg of `work` (n_cols per row), in block order.
template <typename T, typename Op, typename I>
FUSER_DEVICE T segment_partials(Op op, T init, const T* work, I n_cols, I seg, I col, I first, I last) {
  T a = init;
  for (I b = first; b <= last; ++b) a = op(a, load_global_cg(work + static_cast<long long>(b + seg) * n_cols + col));
  return a;
}

}  // namespace fuser

#undef FUSER_DEVICE
