// fuser_runtime.cuh: the device runtime that fuser's generated kernels include.
//
// Self-contained: compiled by NVRTC with no include paths (`--std=c++17`) and by
// `nvcc -cubin` (which pre-includes cuda_runtime.h), so it includes nothing and uses only
// CUDA built-ins (math functions, __float_as_uint & co., inline PTX).
//
// Sections:
//   1. storage types       ::__half, ::__bfloat, ::__e4m3, ::__e5m2 (the names nvFuser prints)
//   2. conversions         narrow float <-> float, bit-pattern constructors
//   3. complex<T>          fuser::complex<float>, fuser::complex<double>, arithmetic
//   4. Array, load_vec/store_vec
//   5. classification      nonzero, is_nan, is_inf, ... (never the macro-prone isnan & co.)
//   6. unary ops           real, integer and complex overloads
//   7. binary ops          fmod, remainder, pow, maximum, shifts, gcd, nextafter, ...
//   8. ternary ops         clamp, lerp, threshold
//   9. complex math        exp, log, trig, hyperbolic and inverses, pow (computed in double)
//
// Semantics are PyTorch's as fuser's reference executor (fuser/runtime/reference.py)
// defines them; half, bfloat16 and fp8 values are computed in float (the emitter converts
// them) and rounded once on output. Everything except the four storage types lives in
// namespace fuser.
#pragma once

#define FUSER_RUNTIME_VERSION 1
// float -> float8_e4m3fn past the range: 1 saturates to +-448 (as PyTorch 2.13), 0 gives NaN
// (as PyTorch 2.11, where values from 464 up round to NaN). fuser.codegen.ops.runtime_headers()
// defines it to match the installed PyTorch.
#ifndef FUSER_E4M3_SATURATE
#define FUSER_E4M3_SATURATE 1
#endif
#define FUSER_DEVICE __device__ __forceinline__

// =====================================================================================
// 1. Storage types
// =====================================================================================
// Plain aggregates holding the bit pattern: trivially constructible (usable in __shared__
// arrays and unions), with no arithmetic of their own. cuda_runtime.h declares none of these
// names; a translation unit must not also include cuda_fp16.h (which declares ::__half).
struct alignas(2) __half {
  unsigned short bits;
};
struct alignas(2) __bfloat {
  unsigned short bits;
};
struct alignas(1) __e4m3 {  // float8_e4m3fn: no infinities, NaN = S.1111.111, max 448
  unsigned char bits;
};
struct alignas(1) __e5m2 {  // float8_e5m2: IEEE-like, the upper byte of a half
  unsigned char bits;
};

namespace fuser {

typedef ::__half half;
typedef ::__bfloat bfloat;
typedef ::__e4m3 e4m3;
typedef ::__e5m2 e5m2;

// =====================================================================================
// 2. Conversions
// =====================================================================================
FUSER_DEVICE constexpr __half half_from_bits(unsigned short b) { return __half{b}; }
FUSER_DEVICE constexpr __bfloat bfloat_from_bits(unsigned short b) { return __bfloat{b}; }
FUSER_DEVICE constexpr __e4m3 e4m3_from_bits(unsigned char b) { return __e4m3{b}; }
FUSER_DEVICE constexpr __e5m2 e5m2_from_bits(unsigned char b) { return __e5m2{b}; }

FUSER_DEVICE float half_to_float(__half h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}

// round to nearest even; overflow gives inf (as __float2half_rn and c10::Half)
FUSER_DEVICE __half float_to_half(float f) {
  __half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}

// the bits moved to the high half of a float: built as the pair {0, b} rather than shifted,
// so that ptxas (sm_90) takes the high bfloat16 of a loaded 32-bit word into place with one
// PRMT; the shift cost a PRMT and a SHF for it (RMSNorm backward's row loop: 803 -> 729
// instructions, LayerNorm forward's kernel 516 -> 468)
FUSER_DEVICE float bfloat_to_float(__bfloat b) {
  unsigned int u;
  asm("mov.b32 %0, {%1, %2};" : "=r"(u) : "h"((unsigned short)0), "h"(b.bits));
  return __uint_as_float(u);
}

// round to nearest even, NaN stays NaN (c10::BFloat16)
FUSER_DEVICE __bfloat float_to_bfloat(float f) {
  __bfloat b;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(f));
#else
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    b.bits = (unsigned short)((u >> 16) | 0x0040u);
  } else {
    b.bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
#endif
  return b;
}

FUSER_DEVICE float e4m3_to_float(__e4m3 v) {
  unsigned int b = v.bits;
  unsigned int sign = (b & 0x80u) << 24;
  unsigned int e = (b >> 3) & 0xfu;
  unsigned int m = b & 0x7u;
  if ((b & 0x7fu) == 0x7fu) return __uint_as_float(sign | 0x7fc00000u);
  if (e == 0u) return __uint_as_float(__float_as_uint((float)m * 0.001953125f) | sign);  // m * 2^-9
  return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

// c10's fp8e4m3fn_from_fp32_value: round to nearest even; NaN gives NaN; finite overflow and
// infinities saturate to +-448 (FUSER_E4M3_SATURATE) or give NaN.
FUSER_DEVICE __e4m3 float_to_e4m3(float f) {
  const unsigned int fp8_max = 1087u << 20;      // 480.0f, the first value past the range
  const unsigned int denorm_mask = 141u << 23;
  unsigned int f_bits = __float_as_uint(f);
  const unsigned int sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  unsigned int result;
  if (f_bits >= fp8_max) {
    result = (FUSER_E4M3_SATURATE && f_bits <= 0x7f800000u) ? 0x7eu : 0x7fu;
  } else if (f_bits < (121u << 23)) {  // below 2^-6: subnormal in fp8
    f_bits = __float_as_uint(__uint_as_float(f_bits) + __uint_as_float(denorm_mask));
    result = (f_bits - denorm_mask) & 0xffu;
  } else {
    unsigned int mant_odd = (f_bits >> 20) & 1u;
    f_bits += ((unsigned int)(7 - 127) << 23) + 0x7ffffu;
    f_bits += mant_odd;
    result = (f_bits >> 20) & 0xffu;
    if (FUSER_E4M3_SATURATE && result == 0x7fu) result = 0x7eu;
  }
  return __e4m3{(unsigned char)(result | (sign >> 24))};
}

FUSER_DEVICE float e5m2_to_float(__e5m2 v) { return half_to_float(__half{(unsigned short)(((unsigned int)v.bits) << 8)}); }

// c10's fp8e5m2_from_fp32_value: round to nearest even; overflow gives +-inf; NaN gives NaN.
FUSER_DEVICE __e5m2 float_to_e5m2(float f) {
  const unsigned int fp32_inf = 255u << 23;
  const unsigned int fp8_max = 143u << 23;  // 65536.0f
  const unsigned int denorm_mask = 134u << 23;
  unsigned int f_bits = __float_as_uint(f);
  const unsigned int sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  unsigned int result;
  if (f_bits >= fp8_max) {
    result = f_bits > fp32_inf ? 0x7fu : 0x7cu;
  } else if (f_bits < (113u << 23)) {  // below 2^-14: subnormal in fp8
    f_bits = __float_as_uint(__uint_as_float(f_bits) + __uint_as_float(denorm_mask));
    result = (f_bits - denorm_mask) & 0xffu;
  } else {
    unsigned int mant_odd = (f_bits >> 21) & 1u;
    f_bits += ((unsigned int)(15 - 127) << 23) + 0xfffffu;
    f_bits += mant_odd;
    result = (f_bits >> 21) & 0xffu;
  }
  return __e5m2{(unsigned char)(result | (sign >> 24))};
}

// =====================================================================================
// 3. complex<T>
// =====================================================================================
// Layout of c10::complex / std::complex: {real, imag}, aligned to its size.
template <typename T>
struct alignas(2 * sizeof(T)) complex {
  T re, im;
  complex() = default;
  FUSER_DEVICE constexpr complex(T r, T i) : re(r), im(i) {}
  FUSER_DEVICE constexpr explicit complex(T r) : re(r), im(T(0)) {}
  template <typename U>
  FUSER_DEVICE constexpr explicit complex(const complex<U>& o) : re(T(o.re)), im(T(o.im)) {}
  FUSER_DEVICE constexpr T real() const { return re; }
  FUSER_DEVICE constexpr T imag() const { return im; }
};

template <typename T>
FUSER_DEVICE complex<T> operator+(const complex<T>& a, const complex<T>& b) { return complex<T>(a.re + b.re, a.im + b.im); }
template <typename T>
FUSER_DEVICE complex<T> operator-(const complex<T>& a, const complex<T>& b) { return complex<T>(a.re - b.re, a.im - b.im); }
template <typename T>
FUSER_DEVICE complex<T> operator-(const complex<T>& a) { return complex<T>(-a.re, -a.im); }
template <typename T>
FUSER_DEVICE complex<T> operator*(const complex<T>& a, const complex<T>& b) {
  return complex<T>(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}
namespace detail {
FUSER_DEVICE float fabs_(float x) { return ::fabsf(x); }
FUSER_DEVICE double fabs_(double x) { return ::fabs(x); }
}  // namespace detail
// c10::complex's division (numpy's algorithm: scale by the larger component; |-0| = +0, so
// (x + yi) / (-0 + 0i) = (x / +0) + (y / +0)i, as PyTorch's CUDA kernels)
template <typename T>
FUSER_DEVICE complex<T> operator/(const complex<T>& x, const complex<T>& y) {
  T a = x.re, b = x.im, c = y.re, d = y.im;
  T abs_c = detail::fabs_(c);
  T abs_d = detail::fabs_(d);
  if (abs_c >= abs_d) {
    if (abs_c == T(0) && abs_d == T(0)) return complex<T>(a / abs_c, b / abs_d);
    T rat = d / c;
    T scl = T(1) / (c + d * rat);
    return complex<T>((a + b * rat) * scl, (b - a * rat) * scl);
  }
  T rat = c / d;
  T scl = T(1) / (d + c * rat);
  return complex<T>((a * rat + b) * scl, (b * rat - a) * scl);
}
// torch.add / torch.sub on complex tensors compute a + alpha * b with alpha = 1 (-1): an
// infinite part of b turns the other part of the result into NaN (inf * 0), as in PyTorch
template <typename T>
FUSER_DEVICE complex<T> add(const complex<T>& a, const complex<T>& b) { return a + complex<T>(T(1), T(0)) * b; }
template <typename T>
FUSER_DEVICE complex<T> sub(const complex<T>& a, const complex<T>& b) { return a + complex<T>(T(-1), T(0)) * b; }
template <typename T>
FUSER_DEVICE bool operator==(const complex<T>& a, const complex<T>& b) { return a.re == b.re && a.im == b.im; }
template <typename T>
FUSER_DEVICE bool operator!=(const complex<T>& a, const complex<T>& b) { return !(a == b); }

// =====================================================================================
// 4. Array and vectorised access
// =====================================================================================
namespace detail {
// the largest power of two (at most 16) dividing `Bytes`: the alignment of an Array
template <int Bytes>
struct VecAlign {
  static constexpr int value = Bytes % 16 == 0 ? 16 : Bytes % 8 == 0 ? 8 : Bytes % 4 == 0 ? 4 : Bytes % 2 == 0 ? 2 : 1;
};
struct alignas(8) u32x2 {
  unsigned int x, y;
};
struct alignas(16) u32x4 {
  unsigned int x, y, z, w;
};
template <int Bytes>
struct VecWord;
template <>
struct VecWord<1> { typedef unsigned char type; };
template <>
struct VecWord<2> { typedef unsigned short type; };
template <>
struct VecWord<4> { typedef unsigned int type; };
template <>
struct VecWord<8> { typedef u32x2 type; };
template <>
struct VecWord<16> { typedef u32x4 type; };

// the access word of N elements of T: N * sizeof(T) bytes up to 16, else 16 (several accesses)
template <typename T, int N>
struct Vec {
  static constexpr int bytes = (int)sizeof(T) * N;
  static_assert(bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8 || bytes % 16 == 0,
                "load_vec/store_vec: N * sizeof(T) must be 1, 2, 4, 8 or a multiple of 16 bytes");
  static constexpr int word_bytes = bytes < 16 ? bytes : 16;
  static constexpr int per_word = word_bytes / (int)sizeof(T);  // elements per access
  static constexpr int words = bytes / word_bytes;
  typedef typename VecWord<word_bytes>::type word;
  union Pun {
    word w;
    T e[per_word];
  };
};
}  // namespace detail

// N elements of T in registers, aligned for one vector access (nvFuser's Array)
template <typename T, int N, int Align = N>
struct alignas(detail::VecAlign<(int)sizeof(T) * Align>::value) Array {
  T array[N];
  FUSER_DEVICE T& operator[](int i) { return array[i]; }
  FUSER_DEVICE const T& operator[](int i) const { return array[i]; }
  FUSER_DEVICE void set(T v) {
#pragma unroll
    for (int i = 0; i < N; ++i) array[i] = v;
  }
};

// dst[0..N) = src[0..N) with one 2/4/8/16-byte load (several 16-byte ones past 16 bytes);
// `src` must be aligned to min(N * sizeof(T), 16) bytes; `dst` is a register array (any
// alignment: the words are split into elements).
template <typename T, int N, bool Stream = false>
FUSER_DEVICE void load_vec(T* dst, const T* src) {
  typedef detail::Vec<T, N> V;
#pragma unroll
  for (int k = 0; k < V::words; ++k) {
    typename V::Pun u;
    const typename V::word* p = reinterpret_cast<const typename V::word*>(src) + k;
    if constexpr (Stream && V::word_bytes >= 4) {  // (1- and 2-byte words load plainly)
      unsigned* w = reinterpret_cast<unsigned*>(&u.w);
      if constexpr (V::word_bytes == 16) {
        asm("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
      } else if constexpr (V::word_bytes == 8) {
        asm("ld.global.cs.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
      } else {
        asm("ld.global.cs.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
      }
    } else {
      u.w = *p;
    }
#pragma unroll
    for (int e = 0; e < V::per_word; ++e) dst[k * V::per_word + e] = u.e[e];
  }
}

// load_vec for data read once (ld.global.cs: evict first), so that it does not push what is
// read again out of the caches (see kir.VecLoad.stream)
template <typename T, int N>
FUSER_DEVICE void load_vec_stream(T* dst, const T* src) { load_vec<T, N, true>(dst, src); }
template <typename T, int N>
FUSER_DEVICE void load_vec(Array<T, N>& dst, const T* src) { load_vec<T, N>(dst.array, src); }
template <typename T, int N>
FUSER_DEVICE Array<T, N> load_vec(const T* src) {
  Array<T, N> r;
  load_vec<T, N>(r.array, src);
  return r;
}

// Programmatic dependent launch (sm_90+): wait until the grids before this one in the stream
// have completed and their writes are visible. Every generated kernel calls it before its
// first global access, which lets the runtime launch it while the previous kernel's last
// blocks exit (kir.Kernel.waits_for_prior_grids); after an ordinary launch it returns at once.
FUSER_DEVICE void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Asynchronous global -> shared copies (sm_80+): BYTES (4, 8 or 16) from `src` to `dst`,
// both aligned to BYTES; complete once the issuing thread has committed and waited for them.
// 16-byte copies bypass L1 (.cg): staged rows are read once. Below sm_80, which has no
// cp.async (ptxas refuses it), the copy is an ordinary load and store, complete at once, and
// commit / wait do nothing: the thread that copies is the one that reads the copy back.
template <int BYTES>
FUSER_DEVICE void cp_async(void* dst, const void* src) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp_async copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(src), "n"(BYTES) : "memory");
  }
#else
  typedef typename detail::VecWord<BYTES>::type W;
  *static_cast<W*>(dst) = *static_cast<const W*>(src);
#endif
}
FUSER_DEVICE void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// wait until at most PENDING of the thread's newest committed groups are still in flight
template <int PENDING>
FUSER_DEVICE void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
#endif
}

// dst[0..N) = src[0..N) with one 2/4/8/16-byte store; `dst` aligned as `src` of load_vec.
template <typename T, int N, bool Stream = false>
FUSER_DEVICE void store_vec(T* dst, const T* src) {
  typedef detail::Vec<T, N> V;
#pragma unroll
  for (int k = 0; k < V::words; ++k) {
    typename V::Pun u;
#pragma unroll
    for (int e = 0; e < V::per_word; ++e) u.e[e] = src[k * V::per_word + e];
    typename V::word* p = reinterpret_cast<typename V::word*>(dst) + k;
    if constexpr (Stream && V::word_bytes >= 4) {  // (1- and 2-byte words store plainly)
      const unsigned* w = reinterpret_cast<const unsigned*>(&u.w);
      if constexpr (V::word_bytes == 16) {
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                     : "memory");
      } else if constexpr (V::word_bytes == 8) {
        asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
      } else {
        asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(w[0]) : "memory");
      }
    } else {
      *p = u.w;
    }
  }
}

// store_vec for data written once (st.global.cs: evict first; see kir.VecStore.stream)
template <typename T, int N>
FUSER_DEVICE void store_vec_stream(T* dst, const T* src) { store_vec<T, N, true>(dst, src); }
template <typename T, int N>
FUSER_DEVICE void store_vec(T* dst, const Array<T, N>& src) { store_vec<T, N>(dst, src.array); }

// =====================================================================================
// 5. Classification
// =====================================================================================
// nonzero: C++'s conversion to bool (NaN is true; a complex is true if either part is)
FUSER_DEVICE bool nonzero(bool x) { return x; }
FUSER_DEVICE bool nonzero(int x) { return x != 0; }
FUSER_DEVICE bool nonzero(long long x) { return x != 0; }
FUSER_DEVICE bool nonzero(float x) { return x != 0.0f; }
FUSER_DEVICE bool nonzero(double x) { return x != 0.0; }
template <typename T>
FUSER_DEVICE bool nonzero(const complex<T>& x) { return x.re != T(0) || x.im != T(0); }

FUSER_DEVICE bool is_nan(float x) { return x != x; }
FUSER_DEVICE bool is_nan(double x) { return x != x; }
FUSER_DEVICE bool is_inf(float x) { return (__float_as_uint(x) & 0x7fffffffu) == 0x7f800000u; }
FUSER_DEVICE bool is_inf(double x) {
  return (__double_as_longlong(x) & 0x7fffffffffffffffLL) == 0x7ff0000000000000LL;
}
FUSER_DEVICE bool is_finite(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }
FUSER_DEVICE bool is_finite(double x) {
  return (__double_as_longlong(x) & 0x7ff0000000000000LL) != 0x7ff0000000000000LL;
}
FUSER_DEVICE bool is_posinf(float x) { return __float_as_uint(x) == 0x7f800000u; }
FUSER_DEVICE bool is_posinf(double x) { return __double_as_longlong(x) == 0x7ff0000000000000LL; }
FUSER_DEVICE bool is_neginf(float x) { return __float_as_uint(x) == 0xff800000u; }
FUSER_DEVICE bool is_neginf(double x) { return (unsigned long long)__double_as_longlong(x) == 0xfff0000000000000ULL; }
FUSER_DEVICE bool sign_bit(float x) { return (__float_as_uint(x) >> 31) != 0u; }
FUSER_DEVICE bool sign_bit(double x) { return __double_as_longlong(x) < 0; }

// integers and bools are finite numbers
#define FUSER_EXACT_PREDICATES(T, NEG)                      \
  FUSER_DEVICE bool is_nan(T) { return false; }             \
  FUSER_DEVICE bool is_inf(T) { return false; }             \
  FUSER_DEVICE bool is_finite(T) { return true; }           \
  FUSER_DEVICE bool is_posinf(T) { return false; }          \
  FUSER_DEVICE bool is_neginf(T) { return false; }          \
  FUSER_DEVICE bool is_real(T) { return true; }             \
  FUSER_DEVICE bool sign_bit(T x) { return NEG; }
FUSER_EXACT_PREDICATES(bool, ((void)x, false))
FUSER_EXACT_PREDICATES(int, x < 0)
FUSER_EXACT_PREDICATES(long long, x < 0)
#undef FUSER_EXACT_PREDICATES
FUSER_DEVICE bool is_real(float) { return true; }
FUSER_DEVICE bool is_real(double) { return true; }

template <typename T>
FUSER_DEVICE bool is_nan(const complex<T>& x) { return is_nan(x.re) || is_nan(x.im); }
template <typename T>
FUSER_DEVICE bool is_inf(const complex<T>& x) { return is_inf(x.re) || is_inf(x.im); }
template <typename T>
FUSER_DEVICE bool is_finite(const complex<T>& x) { return is_finite(x.re) && is_finite(x.im); }
template <typename T>
FUSER_DEVICE bool is_real(const complex<T>& x) { return x.im == T(0); }

// =====================================================================================
// 6. Unary ops
// =====================================================================================
// Float and double: the CUDA math library (no fast-math approximations), as PyTorch;
// float sigmoid and silu below are the exceptions.
#define FUSER_FD(name, ffn, dfn)                              \
  FUSER_DEVICE float name(float x) { return ffn(x); }         \
  FUSER_DEVICE double name(double x) { return dfn(x); }
FUSER_FD(acos, ::acosf, ::acos)
FUSER_FD(acosh, ::acoshf, ::acosh)
FUSER_FD(asin, ::asinf, ::asin)
FUSER_FD(asinh, ::asinhf, ::asinh)
FUSER_FD(atan, ::atanf, ::atan)
FUSER_FD(atanh, ::atanhf, ::atanh)
FUSER_FD(cos, ::cosf, ::cos)
FUSER_FD(cosh, ::coshf, ::cosh)
FUSER_FD(exp, ::expf, ::exp)
FUSER_FD(exp2, ::exp2f, ::exp2)
FUSER_FD(expm1, ::expm1f, ::expm1)
FUSER_FD(erf, ::erff, ::erf)
FUSER_FD(erfc, ::erfcf, ::erfc)
FUSER_FD(erfinv, ::erfinvf, ::erfinv)
FUSER_FD(lgamma, ::lgammaf, ::lgamma)
FUSER_FD(log, ::logf, ::log)
FUSER_FD(log10, ::log10f, ::log10)
FUSER_FD(log1p, ::log1pf, ::log1p)
FUSER_FD(log2, ::log2f, ::log2)
FUSER_FD(rsqrt, ::rsqrtf, ::rsqrt)
FUSER_FD(sin, ::sinf, ::sin)
FUSER_FD(sinh, ::sinhf, ::sinh)
FUSER_FD(sqrt, ::sqrtf, ::sqrt)
FUSER_FD(tan, ::tanf, ::tan)
FUSER_FD(tanh, ::tanhf, ::tanh)
FUSER_FD(ceil, ::ceilf, ::ceil)
FUSER_FD(floor, ::floorf, ::floor)
FUSER_FD(trunc, ::truncf, ::trunc)
FUSER_FD(round, ::nearbyintf, ::nearbyint)  // half to even, as torch.round
FUSER_FD(abs, ::fabsf, ::fabs)
#undef FUSER_FD

// rounding an integer is the identity
#define FUSER_INT_IDENTITY(name)                            \
  FUSER_DEVICE int name(int x) { return x; }                \
  FUSER_DEVICE long long name(long long x) { return x; }
FUSER_INT_IDENTITY(ceil)
FUSER_INT_IDENTITY(floor)
FUSER_INT_IDENTITY(trunc)
FUSER_INT_IDENTITY(round)
#undef FUSER_INT_IDENTITY

// the reference's erfcinv(x) = erfinv(1 - x), in the operand's type
FUSER_DEVICE float erfcinv(float x) { return ::erfinvf(1.0f - x); }
FUSER_DEVICE double erfcinv(double x) { return ::erfinv(1.0 - x); }

FUSER_DEVICE float frac(float x) { return x - ::truncf(x); }
FUSER_DEVICE double frac(double x) { return x - ::trunc(x); }

FUSER_DEVICE float reciprocal(float x) { return 1.0f / x; }
FUSER_DEVICE double reciprocal(double x) { return 1.0 / x; }

// a / b as a * (1 / b), for a divisor the same across a row: nvcc computes the reciprocal
// once and multiplies each element (fuser.preseg.reciprocal_divisors marks where the
// rounding difference cannot show). Where 1/b could overflow (|b| below the smallest normal,
// zero included) b is scaled by s = 2^64 (2^512 in double) before the reciprocal and the
// product by s after, exactly: (a * (1 / (b s))) s, within an ulp of a / b as a * (1/b) is
// elsewhere (where s is 1); zero, infinite and NaN divisors give what the division gives.
// Each element costs two multiplies and no branch: falling back to a / b per element put a
// convergence barrier and a jump around every element's multiply (ptxas sm_90), which kept
// the elements from interleaving (H200: Thunder's bf16 softmax 73-74 us on its first run
// against 66-68 us for the same softmax multiplying by its own reciprocal).
// A kernel that reaches the divisor once a row (a reduction's result) computes s and
// 1 / (b s) there, once, and each element as (a r) s: inlined, the reciprocal stayed once
// per vector of a thread's row (each under its own bounds check, and its slow path a call
// ptxas does not hoist): Thunder's bf16 softmax, H200 plan, 771 -> 720 SASS instructions.
FUSER_DEVICE float reciprocal_scale(float b) { return ::fabsf(b) < 0x1p-126f ? 0x1p64f : 1.0f; }
FUSER_DEVICE double reciprocal_scale(double b) { return ::fabs(b) < 0x1p-1022 ? 0x1p512 : 1.0; }
template <typename T>
FUSER_DEVICE T div_by_reciprocal(T a, T b) {
  const T s = reciprocal_scale(b);
  return (a * (T(1) / (b * s))) * s;
}

// exp(x) as 2^(x log2 e) by ex2.approx, subnormal results kept (no .ftz): two instructions
// where expf takes eight. Within (2 + 1.173|x|) ulp (CUDA's bound for __expf, the same
// computation but for flushing subnormals): under 1.5e-5 relatively for |x| <= 100;
// exp(-inf) = 0, overflow gives inf, NaN stays NaN.
// Only for values the pass fuser.preseg.approx_exp shows reach bfloat16 / half outputs,
// where that error shows at most as one unit of the narrow type's last place.
FUSER_DEVICE float exp_approx(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x * 1.44269504088896341f));
  return y;
}

// sigmoid and silu in float: the fast intrinsics (an ex2.approx and an rcp.approx), not
// expf and a division (~3x the instructions): GELU rewritten to sigmoid (tanh_to_sigmoid)
// and SiLU run at copy bandwidth only so. Error: __expf(-x) is within (2 + 1.173|x|) ulp,
// which moves s = 1/(1 + e) by s(1 - s)(2 + 1.173|x|) ulp at most, below 0.94 ulp of 1
// (s(1 - s) <= 1/4 and <= e^-|x|, |x| e^-|x| <= 1/e); the add rounds by half an ulp,
// __fdividef by 2 ulp of s: all told under 4 ulp of 1, 5e-7 (float's tolerance: 1e-5).
// silu is x times that: absolute error below 2e-7 for x < 0 (|x| s is tiny where the
// error grows), relative under 4 ulp for x > 0. Extremes: __fdividef(1, y) is 0 for
// y > 2^126 and for y = inf (__expf overflowing: x < -88.7), where sigmoid is below
// 2^-126 anyway, so sigmoid(-100) = sigmoid(-inf) = 0, silu(-100) = -0; __expf(-inf) = 0
// gives sigmoid(inf) = 1, silu(inf) = inf; NaN stays NaN; silu(-inf) = -inf * 0 is NaN,
// as x / (1 + exp(-x)) (PyTorch's) is. Half and bfloat16 convert to float first.
FUSER_DEVICE float sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
FUSER_DEVICE double sigmoid(double x) { return 1.0 / (1.0 + ::exp(-x)); }

FUSER_DEVICE float silu(float x) { return x * sigmoid(x); }
FUSER_DEVICE double silu(double x) { return x / (1.0 + ::exp(-x)); }

// Signed ints compared in the unsigned order (a ^ 0x80000000 keeps the signed order), as
// relu, maximum, minimum and clamp do: ptxas (CUDA 12.8 to 13.3, sm_90) fuses chains of
// signed int max / min into VIMNMX3 and can drop a negated source: max(max(acc, -a), -b)
// ran as max(max(acc, a), -b) (a max reduction over a negated int row gave wrong totals on
// an H100 and an H200; pytorch/pytorch#190973). In the unsigned form every negation stays
// an instruction of its own.
FUSER_DEVICE unsigned int signed_order(int a) { return (unsigned int)a ^ 0x80000000u; }

// relu keeps NaN (torch's clamp_min(x, 0))
FUSER_DEVICE float relu(float x) { return x != x ? x : (x > 0.0f ? x : 0.0f); }
FUSER_DEVICE double relu(double x) { return x != x ? x : (x > 0.0 ? x : 0.0); }
FUSER_DEVICE int relu(int x) { return signed_order(x) > 0x80000000u ? x : 0; }
FUSER_DEVICE long long relu(long long x) { return x > 0 ? x : 0LL; }

// (0 < x) - (x < 0): sign(NaN) = 0, sign(-0.0) = 0; sign of a bool is itself
FUSER_DEVICE float sign(float x) { return (float)((int)(0.0f < x) - (int)(x < 0.0f)); }
FUSER_DEVICE double sign(double x) { return (double)((int)(0.0 < x) - (int)(x < 0.0)); }
FUSER_DEVICE int sign(int x) { return (int)(0 < x) - (int)(x < 0); }
FUSER_DEVICE long long sign(long long x) { return (long long)((int)(0 < x) - (int)(x < 0)); }
FUSER_DEVICE bool sign(bool x) { return x; }

// integer negation and abs wrap (abs(INT_MIN) == INT_MIN), as two's complement hardware
FUSER_DEVICE int neg(int x) { return (int)(0u - (unsigned int)x); }
FUSER_DEVICE long long neg(long long x) { return (long long)(0ULL - (unsigned long long)x); }
FUSER_DEVICE float neg(float x) { return -x; }
FUSER_DEVICE double neg(double x) { return -x; }
FUSER_DEVICE int abs(int x) { return x < 0 ? neg(x) : x; }
FUSER_DEVICE long long abs(long long x) { return x < 0 ? neg(x) : x; }

FUSER_DEVICE bool bitwise_not(bool x) { return !x; }
FUSER_DEVICE int bitwise_not(int x) { return ~x; }
FUSER_DEVICE long long bitwise_not(long long x) { return ~x; }

template <typename T>
FUSER_DEVICE bool logical_not(const T& x) { return !nonzero(x); }

// real/imag of a real number: itself / (not defined: the frontend rejects imag of reals)
template <typename T>
FUSER_DEVICE T real(T x) { return x; }
template <typename T>
FUSER_DEVICE T real(const complex<T>& x) { return x.re; }
template <typename T>
FUSER_DEVICE T imag(const complex<T>& x) { return x.im; }

template <typename T>
FUSER_DEVICE complex<T> neg(const complex<T>& x) { return -x; }
FUSER_DEVICE float abs(const complex<float>& x) { return ::hypotf(x.re, x.im); }
FUSER_DEVICE double abs(const complex<double>& x) { return ::hypot(x.re, x.im); }
template <typename T>
FUSER_DEVICE complex<T> reciprocal(const complex<T>& x) { return complex<T>(T(1), T(0)) / x; }

// =====================================================================================
// 7. Binary ops
// =====================================================================================
// fmod (nvFuser's mod and torch.fmod): the sign of the dividend. Integer division by zero
// is undefined (torch raises on the CPU); so is INT_MIN % -1.
FUSER_DEVICE int fmod(int a, int b) { return a % b; }
FUSER_DEVICE long long fmod(long long a, long long b) { return a % b; }
FUSER_DEVICE float fmod(float a, float b) { return ::fmodf(a, b); }
FUSER_DEVICE double fmod(double a, double b) { return ::fmod(a, b); }

// remainder (torch.remainder, Python's %): the sign of the divisor
template <typename T>
FUSER_DEVICE T remainder_int(T a, T b) {
  T r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
FUSER_DEVICE int remainder(int a, int b) { return remainder_int(a, b); }
FUSER_DEVICE long long remainder(long long a, long long b) { return remainder_int(a, b); }
FUSER_DEVICE float remainder(float a, float b) {
  float m = ::fmodf(a, b);
  if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) m += b;
  return m;
}
FUSER_DEVICE double remainder(double a, double b) {
  double m = ::fmod(a, b);
  if (m != 0.0 && ((b < 0.0) != (m < 0.0))) m += b;
  return m;
}

// integer power (torch's powi): negative exponents give 0, except for bases 1 and -1;
// products wrap
template <typename T, typename U>
FUSER_DEVICE T powi(T a, T b) {
  if (b < 0) {
    if (a == 1) return 1;
    if (a == -1) return ((-b) % 2) ? T(-1) : T(1);
    return 0;
  }
  U result = 1, base = (U)a;
  while (b) {
    if (b & 1) result *= base;
    b /= 2;
    base *= base;
  }
  return (T)result;
}
FUSER_DEVICE int pow(int a, int b) { return powi<int, unsigned int>(a, b); }
FUSER_DEVICE long long pow(long long a, long long b) { return powi<long long, unsigned long long>(a, b); }
// ATen's products for the exponents 2 and 3 (its pow kernel's, and cheaper than powf's
// ~100 instructions: a literal exponent folds the tests away)
FUSER_DEVICE float pow(float a, float b) {
  if (b == 2.0f) return a * a;
  if (b == 3.0f) return a * a * a;
  return ::powf(a, b);
}
FUSER_DEVICE double pow(double a, double b) {
  if (b == 2.0) return a * a;
  if (b == 3.0) return a * a * a;
  return ::pow(a, b);
}

FUSER_DEVICE float atan2(float a, float b) { return ::atan2f(a, b); }
FUSER_DEVICE double atan2(double a, double b) { return ::atan2(a, b); }

// torch.maximum / minimum: NaN propagates from either side. float: PTX max.NaN / min.NaN
// (sm_80 on), one FMNMX.NAN, where the NaN tests compiled to a branch per element (a max
// over 8 floats: 77 SASS instructions and 9 branches against 28 and 1)
template <bool Max>
FUSER_DEVICE float nan_propagating_extreme(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  if constexpr (Max) {
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  } else {
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  }
  return r;
#else
  return a != a ? a : (b != b ? b : (Max ? ::fmaxf(a, b) : ::fminf(a, b)));
#endif
}
FUSER_DEVICE float maximum(float a, float b) { return nan_propagating_extreme<true>(a, b); }
FUSER_DEVICE double maximum(double a, double b) { return a != a ? a : (b != b ? b : ::fmax(a, b)); }
FUSER_DEVICE float minimum(float a, float b) { return nan_propagating_extreme<false>(a, b); }
FUSER_DEVICE double minimum(double a, double b) { return a != a ? a : (b != b ? b : ::fmin(a, b)); }
// int: compared in the unsigned order (see signed_order)
FUSER_DEVICE int maximum(int a, int b) {
  const unsigned int ua = signed_order(a), ub = signed_order(b);
  return (int)((ua > ub ? ua : ub) ^ 0x80000000u);
}
FUSER_DEVICE long long maximum(long long a, long long b) { return a > b ? a : b; }
FUSER_DEVICE int minimum(int a, int b) {
  const unsigned int ua = signed_order(a), ub = signed_order(b);
  return (int)((ua < ub ? ua : ub) ^ 0x80000000u);
}
FUSER_DEVICE long long minimum(long long a, long long b) { return a < b ? a : b; }
FUSER_DEVICE bool maximum(bool a, bool b) { return a || b; }
FUSER_DEVICE bool minimum(bool a, bool b) { return a && b; }

// torch.bitwise_left_shift: counts outside [0, bits) give 0
FUSER_DEVICE int shl(int a, int b) { return (b < 0 || b >= 32) ? 0 : (int)((unsigned int)a << b); }
FUSER_DEVICE long long shl(long long a, long long b) {
  return (b < 0 || b >= 64) ? 0LL : (long long)((unsigned long long)a << b);
}
// torch.bitwise_right_shift (arithmetic): counts outside [0, bits - 1) shift by bits - 1
FUSER_DEVICE int shr(int a, int b) { return (b < 0 || b >= 31) ? (a >> 31) : (a >> b); }
FUSER_DEVICE long long shr(long long a, long long b) { return (b < 0 || b >= 63) ? (a >> 63) : (a >> b); }
// logical_right_shift (the reference's): zeros shifted in; count <= 0 keeps a, >= bits gives 0
FUSER_DEVICE int shr_logical(int a, int b) {
  return b <= 0 ? a : (b >= 32 ? 0 : (int)((unsigned int)a >> b));
}
FUSER_DEVICE long long shr_logical(long long a, long long b) {
  return b <= 0 ? a : (b >= 64 ? 0LL : (long long)((unsigned long long)a >> b));
}

// torch.gcd: Euclid on the absolute values
template <typename T>
FUSER_DEVICE T gcd_int(T a, T b) {
  a = abs(a);
  b = abs(b);
  while (a != 0) {
    T c = a;
    a = b % a;
    b = c;
  }
  return b;
}
FUSER_DEVICE int gcd(int a, int b) { return gcd_int(a, b); }
FUSER_DEVICE long long gcd(long long a, long long b) { return gcd_int(a, b); }

// nextafter in the operands' own type (half and bfloat16 step by their own ulp, as c10)
FUSER_DEVICE float nextafter(float a, float b) { return ::nextafterf(a, b); }
FUSER_DEVICE double nextafter(double a, double b) { return ::nextafter(a, b); }
namespace detail {
FUSER_DEVICE unsigned short nextafter16(unsigned short from, unsigned short to, float ffrom, float fto, bool& nan) {
  nan = ffrom != ffrom || fto != fto;
  if (from == to) return from;
  const unsigned short sign_mask = 0x8000u;
  unsigned short abs_from = from & (unsigned short)~sign_mask;
  unsigned short abs_to = to & (unsigned short)~sign_mask;
  if (abs_from == 0) {
    if (abs_to == 0) return to;
    return (unsigned short)((to & sign_mask) | 1u);
  }
  if (abs_from > abs_to || ((from ^ to) & sign_mask)) return (unsigned short)(from - 1u);
  return (unsigned short)(from + 1u);
}
}  // namespace detail
FUSER_DEVICE __half nextafter(__half a, __half b) {
  float fa = half_to_float(a), fb = half_to_float(b);
  bool nan;
  unsigned short r = detail::nextafter16(a.bits, b.bits, fa, fb, nan);
  return nan ? float_to_half(fa + fb) : __half{r};
}
FUSER_DEVICE __bfloat nextafter(__bfloat a, __bfloat b) {
  float fa = bfloat_to_float(a), fb = bfloat_to_float(b);
  bool nan;
  unsigned short r = detail::nextafter16(a.bits, b.bits, fa, fb, nan);
  return nan ? float_to_bfloat(fa + fb) : __bfloat{r};
}

// floor division (torch.floor_divide) and ceiling division
template <typename T>
FUSER_DEVICE T div_floor_int(T a, T b) {
  T q = a / b;
  T r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) --q;
  return q;
}
FUSER_DEVICE int div_floor(int a, int b) { return div_floor_int(a, b); }
FUSER_DEVICE long long div_floor(long long a, long long b) { return div_floor_int(a, b); }
template <typename T>
FUSER_DEVICE T div_floor_float(T a, T b) {
  if (b == T(0)) return a / b;
  T mod = fmod(a, b);
  T div = (a - mod) / b;
  if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
  T floordiv;
  if (div != T(0)) {
    floordiv = floor(div);
    if (div - floordiv > T(0.5)) floordiv += T(1);
  } else {
    floordiv = (a / b) < T(0) ? -T(0) : T(0);
  }
  return floordiv;
}
FUSER_DEVICE float div_floor(float a, float b) { return div_floor_float(a, b); }
FUSER_DEVICE double div_floor(double a, double b) { return div_floor_float(a, b); }
// ceilDiv: -floor(-a / b)
template <typename T>
FUSER_DEVICE T ceil_div_int(T a, T b) {
  T q = a / b;
  T r = a % b;
  if (r != 0 && ((r < 0) == (b < 0))) ++q;
  return q;
}
FUSER_DEVICE int ceil_div(int a, int b) { return ceil_div_int(a, b); }
FUSER_DEVICE long long ceil_div(long long a, long long b) { return ceil_div_int(a, b); }
FUSER_DEVICE float ceil_div(float a, float b) { return -div_floor(-a, b); }
FUSER_DEVICE double ceil_div(double a, double b) { return -div_floor(-a, b); }

// =====================================================================================
// 8. Ternary ops
// =====================================================================================
// clamp = minimum(maximum(x, lo), hi), except that a NaN x stays NaN (the reference's)
FUSER_DEVICE float clamp(float x, float lo, float hi) { return x != x ? x : minimum(maximum(x, lo), hi); }
FUSER_DEVICE double clamp(double x, double lo, double hi) { return x != x ? x : minimum(maximum(x, lo), hi); }
FUSER_DEVICE int clamp(int x, int lo, int hi) { return minimum(maximum(x, lo), hi); }
FUSER_DEVICE long long clamp(long long x, long long lo, long long hi) { return minimum(maximum(x, lo), hi); }

// torch.lerp: weight < 0.5 in magnitude from the start, else from the end
FUSER_DEVICE float lerp(float s, float e, float w) {
  return ::fabsf(w) < 0.5f ? s + w * (e - s) : e - (e - s) * (1.0f - w);
}
FUSER_DEVICE double lerp(double s, double e, double w) {
  return ::fabs(w) < 0.5 ? s + w * (e - s) : e - (e - s) * (1.0 - w);
}
template <typename T>
FUSER_DEVICE complex<T> lerp(const complex<T>& s, const complex<T>& e, const complex<T>& w) {
  return abs(w) < T(0.5) ? s + w * (e - s) : e - (e - s) * (complex<T>(T(1), T(0)) - w);
}

// torch.threshold: x > th ? x : value, with the comparison made in Cmp (the promoted type
// of x and the threshold) and x, value already in x's compute type
template <typename Cmp, typename T>
FUSER_DEVICE T threshold(T x, Cmp th, T value) { return (Cmp)x > th ? x : value; }

// =====================================================================================
// 9. Complex math
// =====================================================================================
// Computed in double (complex<float> widens, then rounds once), with formulas that are
// accurate away from overflow: Kahan's for the inverse functions, c10's for log1p/expm1.
// Non-finite operands follow the formulas rather than C99 Annex G (exp excepted, below).
namespace cplx {
typedef complex<double> zd;
FUSER_DEVICE zd exp(zd z) {
  double e = ::exp(z.re);
  if (z.im == 0.0) return zd(e, z.im);
  if (!is_finite(z.im) && is_inf(z.re)) {  // C99 Annex G (as thrust): e^-inf -> 0, e^+inf -> inf + NaN i
    return z.re < 0.0 ? zd(0.0, 0.0) : zd(z.re, z.im - z.im);
  }
  double s, c;
  ::sincos(z.im, &s, &c);
  return zd(e * c, e * s);
}
FUSER_DEVICE zd log(zd z) { return zd(::log(::hypot(z.re, z.im)), ::atan2(z.im, z.re)); }
FUSER_DEVICE zd log1p(zd z) {
  double x = z.re, y = z.im;
  double theta = ::atan2(y, x + 1.0);
  if (::hypot(x, y) < 0.5) {
    double r = x * (2.0 + x) + y * y;
    if (r == 0.0) return zd(x, theta);
    return zd(0.5 * ::log1p(r), theta);
  }
  return zd(::log(::hypot(x + 1.0, y)), theta);
}
FUSER_DEVICE zd expm1(zd z) {
  double a = ::sin(z.im * 0.5);
  return zd(::expm1(z.re) * ::cos(z.im) - 2.0 * a * a, ::exp(z.re) * ::sin(z.im));
}
FUSER_DEVICE zd sqrt(zd z) {
  double x = z.re, y = z.im;
  if (x == 0.0 && y == 0.0) return zd(0.0, y);
  if (::isinf(y)) return zd(__longlong_as_double(0x7ff0000000000000LL), y);
  double t = ::sqrt(0.5 * (::fabs(x) + ::hypot(x, y)));
  if (x >= 0.0) return zd(t, y / (2.0 * t));
  return zd(::fabs(y) / (2.0 * t), ::copysign(t, y));
}
FUSER_DEVICE zd sin(zd z) { return zd(::sin(z.re) * ::cosh(z.im), ::cos(z.re) * ::sinh(z.im)); }
FUSER_DEVICE zd cos(zd z) { return zd(::cos(z.re) * ::cosh(z.im), -::sin(z.re) * ::sinh(z.im)); }
FUSER_DEVICE zd sinh(zd z) { return zd(::sinh(z.re) * ::cos(z.im), ::cosh(z.re) * ::sin(z.im)); }
FUSER_DEVICE zd cosh(zd z) { return zd(::cosh(z.re) * ::cos(z.im), ::sinh(z.re) * ::sin(z.im)); }
FUSER_DEVICE zd tanh(zd z) {
  double x = z.re, y = z.im;
  if (y == 0.0) return zd(::tanh(x), y);
  if (::fabs(x) >= 22.0) {
    double e = ::exp(-::fabs(x));
    return zd(::copysign(1.0, x), 4.0 * ::sin(y) * ::cos(y) * e * e);
  }
  double t = ::tan(y);
  double beta = 1.0 + t * t;
  double s = ::sinh(x);
  double rho = ::sqrt(1.0 + s * s);
  double den = 1.0 + beta * s * s;
  return zd(beta * rho * s / den, t / den);
}
FUSER_DEVICE zd tan(zd z) {  // -i tanh(iz)
  zd w = tanh(zd(-z.im, z.re));
  return zd(w.im, -w.re);
}
FUSER_DEVICE zd asin(zd z) {
  zd a = sqrt(zd(1.0 - z.re, -z.im));  // sqrt(1 - z)
  zd b = sqrt(zd(1.0 + z.re, z.im));   // sqrt(1 + z)
  return zd(::atan2(z.re, a.re * b.re - a.im * b.im), ::asinh(a.re * b.im - a.im * b.re));
}
FUSER_DEVICE zd acos(zd z) {
  zd a = sqrt(zd(1.0 - z.re, -z.im));  // sqrt(1 - z)
  zd b = sqrt(zd(1.0 + z.re, z.im));   // sqrt(1 + z)
  return zd(2.0 * ::atan2(a.re, b.re), ::asinh(b.re * a.im - b.im * a.re));
}
FUSER_DEVICE zd acosh(zd z) {
  zd a = sqrt(zd(z.re - 1.0, z.im));  // sqrt(z - 1)
  zd b = sqrt(zd(z.re + 1.0, z.im));  // sqrt(z + 1)
  return zd(::asinh(a.re * b.re + a.im * b.im), 2.0 * ::atan2(a.im, b.re));
}
FUSER_DEVICE zd asinh(zd z) {  // -i asin(iz)
  zd w = asin(zd(-z.im, z.re));
  return zd(w.im, -w.re);
}
FUSER_DEVICE zd atanh(zd z) {
  zd p = log1p(z), m = log1p(zd(-z.re, -z.im));
  return zd(0.5 * (p.re - m.re), 0.5 * (p.im - m.im));
}
FUSER_DEVICE zd atan(zd z) {  // -i atanh(iz)
  zd w = atanh(zd(-z.im, z.re));
  return zd(w.im, -w.re);
}
FUSER_DEVICE zd scale(zd z, double k) { return zd(z.re * k, z.im * k); }
FUSER_DEVICE zd exp2(zd z) { return exp(scale(z, 0.69314718055994530942)); }
FUSER_DEVICE zd log2(zd z) { return scale(log(z), 1.44269504088896340736); }
FUSER_DEVICE zd log10(zd z) { return scale(log(z), 0.43429448190325182765); }
FUSER_DEVICE zd rsqrt(zd z) { return zd(1.0, 0.0) / sqrt(z); }
FUSER_DEVICE zd sigmoid(zd z) { return zd(1.0, 0.0) / (zd(1.0, 0.0) + exp(-z)); }
FUSER_DEVICE zd silu(zd z) { return z / (zd(1.0, 0.0) + exp(-z)); }
FUSER_DEVICE zd pow(zd a, zd b) { return exp(b * log(a)); }
}  // namespace cplx

#define FUSER_COMPLEX_UNARY(name)                                                                   \
  FUSER_DEVICE complex<double> name(const complex<double>& z) { return cplx::name(z); }           \
  FUSER_DEVICE complex<float> name(const complex<float>& z) {                                      \
    return complex<float>(cplx::name(complex<double>(z)));                                         \
  }
FUSER_COMPLEX_UNARY(exp)
FUSER_COMPLEX_UNARY(exp2)
FUSER_COMPLEX_UNARY(expm1)
FUSER_COMPLEX_UNARY(log)
FUSER_COMPLEX_UNARY(log2)
FUSER_COMPLEX_UNARY(log10)
FUSER_COMPLEX_UNARY(log1p)
FUSER_COMPLEX_UNARY(sqrt)
FUSER_COMPLEX_UNARY(rsqrt)
FUSER_COMPLEX_UNARY(sin)
FUSER_COMPLEX_UNARY(cos)
FUSER_COMPLEX_UNARY(tan)
FUSER_COMPLEX_UNARY(sinh)
FUSER_COMPLEX_UNARY(cosh)
FUSER_COMPLEX_UNARY(tanh)
FUSER_COMPLEX_UNARY(asin)
FUSER_COMPLEX_UNARY(acos)
FUSER_COMPLEX_UNARY(atan)
FUSER_COMPLEX_UNARY(asinh)
FUSER_COMPLEX_UNARY(acosh)
FUSER_COMPLEX_UNARY(atanh)
FUSER_COMPLEX_UNARY(sigmoid)
FUSER_COMPLEX_UNARY(silu)
#undef FUSER_COMPLEX_UNARY

FUSER_DEVICE complex<double> pow(const complex<double>& a, const complex<double>& b) { return cplx::pow(a, b); }
FUSER_DEVICE complex<float> pow(const complex<float>& a, const complex<float>& b) {
  return complex<float>(cplx::pow(complex<double>(a), complex<double>(b)));
}

}  // namespace fuser

#undef FUSER_DEVICE
