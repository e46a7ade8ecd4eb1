// fuser_random.cuh: the counter-based generator of RNG ops (uniform, normal, rand_like,
// randn_like) in fuser's generated kernels. Included after fuser_runtime.cuh.
//
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC'11): a 128-bit counter and a 64-bit key give four 32-bit words. An RNG op's stream is
// a 64-bit seed and a 64-bit offset; element i of its output (the row-major linear index in
// its logical shape) takes its bits from the block of
//   key     = (seed lo, seed hi)
//   counter = (offset lo, offset hi, q lo, q hi),  q = i / E,
// with E = 4 elements per block in float (half and bfloat16 are computed in float) and E = 2
// in double. So a given seed and offset give the same numbers whatever the schedule (vector
// width, unroll, block shape, reduction or pointwise kernel): fuser/runtime/philox.py
// computes the very same numbers with PyTorch integer ops for the reference executor.
//
// Words to values (each multiply and add rounded on its own: no contraction into FMA, so
// uniform agrees bit for bit with the reference):
//   float uniform   word i % 4, u = (w >> 8) * 2^-24 in [0, 1)
//   double uniform  words (0, 1) or (2, 3) by i % 2, u = ((a >> 5) * 2^26 + (b >> 6)) * 2^-53
//   float normal    Box-Muller on words (0, 1) (elements 0, 1: r cos t, r sin t) and (2, 3)
//                   (elements 2, 3), u1 = ((a >> 8) + 1) * 2^-24 in (0, 1], u2 = (b >> 8) * 2^-24
//   double normal   u1 from words (0, 1) (53 bits, plus one ulp), u2 from (2, 3); elements
//                   0, 1: r cos t, r sin t
// uniform is then u * (high - low) + low, kept below high where rounding reaches it (and
// low < high); normal z * std + mean.
//
// A thread draws its elements through one `Philox` per RNG op, which keeps the op's last
// block: consecutive elements (vector lanes, unrolled columns) share a block, so the rounds
// run once per E elements. The cache is only a shortcut: an element's value depends on
// (seed, offset, i) alone, and each RNG op has its own cache (its seed and offset are fixed
// for the kernel), so the block is recomputed only when q changes.
#pragma once

#define FUSER_DEVICE __device__ __forceinline__

namespace fuser {

struct Philox4 {
  unsigned int x, y, z, w;
};

// a * b as 64 bits: one multiply (IMAD.WIDE.U32) for both halves
FUSER_DEVICE unsigned long long philox_mul(unsigned int a, unsigned int b) {
  unsigned long long p;
  asm("mul.wide.u32 %0, %1, %2;" : "=l"(p) : "r"(a), "r"(b));
  return p;
}

// Philox4x32-10 of `c` under key (k0, k1).
FUSER_DEVICE Philox4 philox4x32_10(Philox4 c, unsigned int k0, unsigned int k1) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {  // the Weyl key schedule
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const unsigned long long p0 = philox_mul(c.x, 0xD2511F53u);
    const unsigned long long p1 = philox_mul(c.z, 0xCD9E8D57u);
    c = Philox4{(unsigned int)(p1 >> 32) ^ c.y ^ k0, (unsigned int)p1, (unsigned int)(p0 >> 32) ^ c.w ^ k1,
                (unsigned int)p0};
  }
  return c;
}

// One RNG op's per-thread cache: the block of counter q (none yet: q = ~0, which no linear
// index reaches).
struct Philox {
  unsigned long long q = ~0ull;
  Philox4 w;
};

FUSER_DEVICE const Philox4& philox_block(Philox& s, unsigned long long seed, unsigned long long offset,
                                         unsigned long long q) {
  if (q != s.q) {
    s.q = q;
    s.w = philox4x32_10(Philox4{(unsigned int)offset, (unsigned int)(offset >> 32), (unsigned int)q,
                                (unsigned int)(q >> 32)},
                        (unsigned int)seed, (unsigned int)(seed >> 32));
  }
  return s.w;
}

FUSER_DEVICE unsigned int philox_word(const Philox4& w, unsigned int k) {
  return k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w;
}

// 24 random bits as a float in [0, 1) (with `plus_one`: in (0, 1]); exact.
FUSER_DEVICE float philox_u24(unsigned int w, unsigned int plus_one = 0) {
  return __fmul_rn(__uint2float_rn((w >> 8) + plus_one), 5.9604644775390625e-08f);
}

// 53 random bits of two words as a double in [0, 1) (with `plus_one`: in (0, 1]); exact.
FUSER_DEVICE double philox_u53(unsigned int a, unsigned int b, unsigned int plus_one = 0) {
  const unsigned long long m = ((unsigned long long)(a >> 5) << 26) + (b >> 6) + plus_one;
  return __dmul_rn(__ull2double_rn(m), 1.1102230246251565404236316680908203125e-16);
}

FUSER_DEVICE float rng_uniform_f32(Philox& s, unsigned long long seed, unsigned long long offset,
                                   unsigned long long i, float lo, float hi) {
  const Philox4& w = philox_block(s, seed, offset, i >> 2);
  const float u = philox_u24(philox_word(w, (unsigned int)(i & 3)));
  const float v = __fadd_rn(__fmul_rn(u, __fsub_rn(hi, lo)), lo);
  return (v >= hi && lo < hi) ? ::nextafterf(hi, lo) : v;
}

FUSER_DEVICE double rng_uniform_f64(Philox& s, unsigned long long seed, unsigned long long offset,
                                    unsigned long long i, double lo, double hi) {
  const Philox4& w = philox_block(s, seed, offset, i >> 1);
  const double u = (i & 1) ? philox_u53(w.z, w.w) : philox_u53(w.x, w.y);
  const double v = __dadd_rn(__dmul_rn(u, __dsub_rn(hi, lo)), lo);
  return (v >= hi && lo < hi) ? ::nextafter(hi, lo) : v;
}

FUSER_DEVICE float rng_normal_f32(Philox& s, unsigned long long seed, unsigned long long offset,
                                  unsigned long long i, float mean, float std) {
  const Philox4& w = philox_block(s, seed, offset, i >> 2);
  const unsigned int c = (unsigned int)(i & 3);
  const float u1 = philox_u24(c < 2 ? w.x : w.z, 1);
  const float u2 = philox_u24(c < 2 ? w.y : w.w);
  const float r = ::sqrtf(__fmul_rn(::logf(u1), -2.0f));
  const float t = __fmul_rn(u2, 6.283185307179586f);
  const float z = __fmul_rn(r, (c & 1) ? ::sinf(t) : ::cosf(t));
  return __fadd_rn(__fmul_rn(z, std), mean);
}

FUSER_DEVICE double rng_normal_f64(Philox& s, unsigned long long seed, unsigned long long offset,
                                   unsigned long long i, double mean, double std) {
  const Philox4& w = philox_block(s, seed, offset, i >> 1);
  const double u1 = philox_u53(w.x, w.y, 1);
  const double u2 = philox_u53(w.z, w.w);
  const double r = ::sqrt(__dmul_rn(::log(u1), -2.0));
  const double t = __dmul_rn(u2, 6.283185307179586);
  const double z = __dmul_rn(r, (i & 1) ? ::sin(t) : ::cos(t));
  return __dadd_rn(__dmul_rn(z, std), mean);
}

}  // namespace fuser
