// tilecraft/types.h -- scalar types, conversions, packing, infinities.
//
// Type names used by generated code:
//   tc::half_t      = __half               (IEEE binary16)
//   tc::bfloat16_t  = __nv_bfloat16
//   tc::fp8_e4_t    = __nv_fp8_e4m3        (no infinity; max finite 448)
//   tc::fp8_e5_t    = __nv_fp8_e5m2
//
// tc::cvt<To>(x) converts any of float, double, half_t, bfloat16_t, fp8_e4_t, fp8_e5_t,
// int8_t..int64_t, uint8_t..uint64_t, bool to any other of them:
//   * floating -> floating: round to nearest even. 16-bit and 8-bit floats go through float
//     (exact for the widening step). float/double -> fp8 saturates to the largest finite value
//     (the cuda_fp8 __NV_SATFINITE rule); NaN stays NaN.
//   * floating -> integer: round to nearest even, saturated to the destination's range
//     (NaN -> 0). 8- and 16-bit destinations are clamped explicitly.
//   * integer -> floating: round to nearest even.
//   * integer -> integer: C++ static_cast (two's-complement wrap).
//   * anything -> bool: x != 0.
// None of this relies on the half/bf16 operator overloads, so it also works with
// -D__CUDA_NO_HALF_OPERATORS__ / -D__CUDA_NO_BFLOAT16_OPERATORS__.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#if defined(__CUDACC_RTC__)
// NVRTC has no C library headers: the fixed-width integers the headers use, as nvcc's are.
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#define TC_MEMCPY memcpy
#else
#include <stdint.h>
#define TC_MEMCPY __builtin_memcpy
#endif

#define TC_DEVICE __device__ __forceinline__

// The device architecture of the current compilation pass (e.g. 800, 890, 900). The host
// pass sees a large value so that every declaration exists there; architecture-specific
// functions are only declared in device passes that can assemble them.
#if defined(__CUDA_ARCH__)
#define TC_CUDA_ARCH __CUDA_ARCH__
#else
#define TC_CUDA_ARCH 100000
#endif

namespace tc {

using half_t = __half;
using bfloat16_t = __nv_bfloat16;
using fp8_e4_t = __nv_fp8_e4m3;
using fp8_e5_t = __nv_fp8_e5m2;

namespace detail {

template <typename A, typename B> struct same_type { static constexpr bool value = false; };
template <typename A> struct same_type<A, A> { static constexpr bool value = true; };

template <typename T> struct int_traits { static constexpr bool is_int = false; };
#define TC_INT_TRAITS(T, LO, HI)                                                         \
  template <> struct int_traits<T> {                                                     \
    static constexpr bool is_int = true;                                                 \
    static constexpr long long lo = LO;                                                  \
    static constexpr unsigned long long hi = HI;                                         \
  };
TC_INT_TRAITS(int8_t, -128, 127)
TC_INT_TRAITS(uint8_t, 0, 255)
TC_INT_TRAITS(int16_t, -32768, 32767)
TC_INT_TRAITS(uint16_t, 0, 65535)
TC_INT_TRAITS(int32_t, -2147483647LL - 1, 2147483647ULL)
TC_INT_TRAITS(uint32_t, 0, 4294967295ULL)
TC_INT_TRAITS(long long, -9223372036854775807LL - 1, 9223372036854775807ULL)
TC_INT_TRAITS(unsigned long long, 0, 18446744073709551615ULL)
// int64_t is `long` on LP64 Linux, a type distinct from `long long`.
TC_INT_TRAITS(long, -9223372036854775807LL - 1, 9223372036854775807ULL)
TC_INT_TRAITS(unsigned long, 0, 18446744073709551615ULL)
#undef TC_INT_TRAITS

// ---- anything -> float (the hub for the narrow floating types) ----
TC_DEVICE float to_float(float x) { return x; }
TC_DEVICE float to_float(double x) { return __double2float_rn(x); }
TC_DEVICE float to_float(half_t x) { return __half2float(x); }
TC_DEVICE float to_float(bfloat16_t x) { return __bfloat162float(x); }
TC_DEVICE float to_float(fp8_e4_t x) { return static_cast<float>(x); }
TC_DEVICE float to_float(fp8_e5_t x) { return static_cast<float>(x); }
TC_DEVICE float to_float(bool x) { return x ? 1.0f : 0.0f; }
TC_DEVICE float to_float(int8_t x) { return __int2float_rn(x); }
TC_DEVICE float to_float(uint8_t x) { return __uint2float_rn(x); }
TC_DEVICE float to_float(int16_t x) { return __int2float_rn(x); }
TC_DEVICE float to_float(uint16_t x) { return __uint2float_rn(x); }
TC_DEVICE float to_float(int32_t x) { return __int2float_rn(x); }
TC_DEVICE float to_float(uint32_t x) { return __uint2float_rn(x); }
TC_DEVICE float to_float(long x) { return __ll2float_rn(x); }
TC_DEVICE float to_float(unsigned long x) { return __ull2float_rn(x); }
TC_DEVICE float to_float(long long x) { return __ll2float_rn(x); }
TC_DEVICE float to_float(unsigned long long x) { return __ull2float_rn(x); }

// ---- anything -> double ----
template <typename T> TC_DEVICE double to_double(T x) {
  if constexpr (same_type<T, double>::value) {
    return x;
  } else if constexpr (int_traits<T>::is_int) {
    if constexpr (sizeof(T) == 8) {
      if constexpr (int_traits<T>::lo < 0) return __ll2double_rn(static_cast<long long>(x));
      else return __ull2double_rn(static_cast<unsigned long long>(x));
    } else {
      return static_cast<double>(x);  // exact
    }
  } else {
    return static_cast<double>(to_float(x));  // exact widening
  }
}

// ---- float / double -> integer, round to nearest even, saturating ----
template <typename To> TC_DEVICE To float_to_int(float f) {
  if constexpr (sizeof(To) == 8) {
    if constexpr (int_traits<To>::lo < 0) return static_cast<To>(__float2ll_rn(f));
    else return static_cast<To>(__float2ull_rn(f));
  } else if constexpr (sizeof(To) == 4) {
    if constexpr (int_traits<To>::lo < 0) return static_cast<To>(__float2int_rn(f));
    else return static_cast<To>(__float2uint_rn(f));
  } else {
    int v = __float2int_rn(f);
    v = v < static_cast<int>(int_traits<To>::lo) ? static_cast<int>(int_traits<To>::lo) : v;
    v = v > static_cast<int>(int_traits<To>::hi) ? static_cast<int>(int_traits<To>::hi) : v;
    return static_cast<To>(v);
  }
}
template <typename To> TC_DEVICE To double_to_int(double f) {
  if constexpr (sizeof(To) == 8) {
    if constexpr (int_traits<To>::lo < 0) return static_cast<To>(__double2ll_rn(f));
    else return static_cast<To>(__double2ull_rn(f));
  } else if constexpr (sizeof(To) == 4) {
    if constexpr (int_traits<To>::lo < 0) return static_cast<To>(__double2int_rn(f));
    else return static_cast<To>(__double2uint_rn(f));
  } else {
    int v = __double2int_rn(f);
    v = v < static_cast<int>(int_traits<To>::lo) ? static_cast<int>(int_traits<To>::lo) : v;
    v = v > static_cast<int>(int_traits<To>::hi) ? static_cast<int>(int_traits<To>::hi) : v;
    return static_cast<To>(v);
  }
}

// ---- float -> narrow floating type ----
template <typename To> TC_DEVICE To from_float(float f);
template <> TC_DEVICE float from_float<float>(float f) { return f; }
template <> TC_DEVICE half_t from_float<half_t>(float f) { return __float2half_rn(f); }
template <> TC_DEVICE bfloat16_t from_float<bfloat16_t>(float f) { return __float2bfloat16_rn(f); }
template <> TC_DEVICE fp8_e4_t from_float<fp8_e4_t>(float f) { return fp8_e4_t(f); }
template <> TC_DEVICE fp8_e5_t from_float<fp8_e5_t>(float f) { return fp8_e5_t(f); }

template <typename T> TC_DEVICE bool nonzero(T x) {
  if constexpr (int_traits<T>::is_int || same_type<T, bool>::value) return x != 0;
  else if constexpr (same_type<T, double>::value) return x != 0.0;
  else return to_float(x) != 0.0f;
}

}  // namespace detail

// Convert `x` to `To` with the rules in the file comment.
template <typename To, typename From> TC_DEVICE To cvt(From x) {
  using namespace detail;
  if constexpr (same_type<To, From>::value) {
    return x;
  } else if constexpr (same_type<To, bool>::value) {
    return nonzero(x);
  } else if constexpr (same_type<From, bool>::value) {
    return cvt<To>(static_cast<int32_t>(x));
  } else if constexpr (int_traits<To>::is_int && int_traits<From>::is_int) {
    return static_cast<To>(x);
  } else if constexpr (same_type<To, double>::value) {
    return to_double(x);
  } else if constexpr (same_type<From, double>::value) {
    if constexpr (int_traits<To>::is_int) return double_to_int<To>(x);
    else if constexpr (same_type<To, float>::value) return __double2float_rn(x);
    else if constexpr (same_type<To, half_t>::value) return __double2half(x);
    else if constexpr (same_type<To, bfloat16_t>::value) return __double2bfloat16(x);
    else return To(x);  // fp8: the cuda_fp8 double constructor (round to nearest, satfinite)
  } else if constexpr (int_traits<To>::is_int) {
    return float_to_int<To>(to_float(x));
  } else {
    return from_float<To>(to_float(x));
  }
}

// Exact integer -> float conversions of a value the compiler knows to lie in a small range,
// done with a bitwise OR and one subtraction instead of the conversion unit (which issues at a
// fraction of the rate of ordinary arithmetic, and int -> half takes two conversions):
//   * float: for 0 <= y < 2^23 the float with bits 0x4B000000 | y is 2^23 + y, so
//     biased_int_to_float(y, bias) = 2^23 + y - bias, exact when the result and bias are
//     integers of magnitude below 2^24 (the compiler passes bias = 2^23 - lo, y = x - lo).
//   * half: for 0 <= y < 1024 the half with bits 0x6400 | y is 1024 + y; `bias_bits` is the
//     bit pattern of the half 1024 - lo (|lo| <= 1024, so the bias and the result are exact).
TC_DEVICE float biased_int_to_float(uint32_t y, float bias) {
  return __uint_as_float(0x4B000000u | y) - bias;
}
TC_DEVICE half_t biased_int_to_half(uint32_t y, unsigned short bias_bits) {
  return __hsub(__ushort_as_half(static_cast<unsigned short>(0x6400u | y)),
                __ushort_as_half(bias_bits));
}

// Pairs of 16-bit floats (codegen/pairs.py): two consecutive registers of a fragment in one
// 32-bit word, so that one f16x2 / bf16x2 instruction computes two elements of a T.Parallel
// loop. Register arrays are accessed through a byte copy, which keeps them in registers whatever
// their declared alignment.
template <typename T> struct pair_of;
template <> struct pair_of<half_t> { using type = __half2; };
template <> struct pair_of<bfloat16_t> { using type = __nv_bfloat162; };
template <typename T> TC_DEVICE typename pair_of<T>::type ld_pair(const T* p) {
  typename pair_of<T>::type v;
  TC_MEMCPY(&v, p, 4);
  return v;
}
template <typename T> TC_DEVICE void st_pair(T* p, typename pair_of<T>::type v) {
  TC_MEMCPY(p, &v, 4);
}
TC_DEVICE __half2 make_pair(half_t lo, half_t hi) { return __halves2half2(lo, hi); }
TC_DEVICE __nv_bfloat162 make_pair(bfloat16_t lo, bfloat16_t hi) {
  return __halves2bfloat162(lo, hi);
}
TC_DEVICE __half2 splat(half_t x) { return __half2half2(x); }
TC_DEVICE __nv_bfloat162 splat(bfloat16_t x) { return __bfloat162bfloat162(x); }
// Two small integers to float16 at once, through their bits: `fields` holds y0 in bits 0..9
// and y1 from bit 16 + d (y1 < 2^(10 - d)); `magic` puts the exponent of 1024 in the low half
// and that of 2^(10 - d) in the high one, whose mantissa bit d is then worth 1, so the word is
// the halves (1024 + y0, 2^(10 - d) + y1), and one f16x2 subtraction of `bias` (a pair of
// halves) gives both results exactly. d > 0 lets a field stay where a byte put it: the two
// nibbles of a byte are (x & 0xF, x >> 4 & 0xF), and with x copied into both halves the high
// nibble already lies at bit 16 + 4.
TC_DEVICE __half2 int_fields_to_half2(uint32_t fields, uint32_t magic, uint32_t bias) {
  const uint32_t word = fields | magic;
  __half2 h, b;
  TC_MEMCPY(&h, &word, 4);
  TC_MEMCPY(&b, &bias, 4);
  return __hsub2(h, b);
}

// The byte at regs[i] in bits 0..7 and again in bits 16..23 (one PRMT once i is a constant):
// regs is a register array, read through its 32-bit word.
TC_DEVICE uint32_t byte_twice(const void* regs, int i) {
  uint32_t w;
  TC_MEMCPY(&w, static_cast<const unsigned char*>(regs) + (i & ~3), 4);
  return __byte_perm(w, 0u, 0x4040u | static_cast<uint32_t>((i & 3) * 0x101));
}

// The low 16 bits of x in both halves of a word (one PRMT).
TC_DEVICE uint32_t halfword_twice(uint32_t x) { return __byte_perm(x, 0u, 0x1010u); }

// Two floats -> one 32-bit word holding two halves / bf16s: `lo` in bits 0..15, `hi` in
// bits 16..31 (the element order of a .f16x2 register: lower address = lower half).
TC_DEVICE uint32_t pack_half2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
TC_DEVICE uint32_t pack_bf162(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
TC_DEVICE uint32_t pack_half2(half_t lo, half_t hi) {
  return static_cast<uint32_t>(__half_as_ushort(lo)) |
         (static_cast<uint32_t>(__half_as_ushort(hi)) << 16);
}
TC_DEVICE uint32_t pack_bf162(bfloat16_t lo, bfloat16_t hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}
// Inverse of pack_half2 / pack_bf162: element 0 (bits 0..15) -> lo, element 1 -> hi.
TC_DEVICE void unpack_half2(uint32_t w, float& lo, float& hi) {
  lo = __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
  hi = __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}
TC_DEVICE void unpack_bf162(uint32_t w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}

// Raw bits of any 1/2/4/8-byte scalar as an unsigned integer of the same size, and back.
template <typename T> struct bits_of;
template <> struct bits_of<float> { using type = uint32_t; };
template <> struct bits_of<double> { using type = unsigned long long; };
template <> struct bits_of<half_t> { using type = uint16_t; };
template <> struct bits_of<bfloat16_t> { using type = uint16_t; };
template <> struct bits_of<fp8_e4_t> { using type = uint8_t; };
template <> struct bits_of<fp8_e5_t> { using type = uint8_t; };

template <typename T> TC_DEVICE typename bits_of<T>::type to_bits(T x) {
  typename bits_of<T>::type r;
  TC_MEMCPY(&r, &x, sizeof(T));
  return r;
}
template <typename T> TC_DEVICE T from_bits(typename bits_of<T>::type b) {
  T r;
  TC_MEMCPY(&r, &b, sizeof(T));
  return r;
}

// The bits of x read as a To of the same size (T.reinterpret).
template <typename To, typename From> TC_DEVICE To bit_cast(From x) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast: the sizes must agree");
  To r;
  TC_MEMCPY(&r, &x, sizeof(To));
  return r;
}

// +infinity of T. fp8_e4_t has no infinity: its largest finite value (+448) is returned.
// Integer types return their maximum value.
template <typename T> TC_DEVICE T infinity() {
  if constexpr (detail::int_traits<T>::is_int) return static_cast<T>(detail::int_traits<T>::hi);
  else if constexpr (detail::same_type<T, float>::value) return __uint_as_float(0x7f800000u);
  else if constexpr (detail::same_type<T, double>::value) return __longlong_as_double(0x7ff0000000000000LL);
  else if constexpr (detail::same_type<T, half_t>::value) return __ushort_as_half(0x7c00);
  else if constexpr (detail::same_type<T, bfloat16_t>::value) return __ushort_as_bfloat16(0x7f80);
  else if constexpr (detail::same_type<T, fp8_e4_t>::value) return from_bits<fp8_e4_t>(0x7e);
  else return from_bits<fp8_e5_t>(0x7c);
}
// -infinity of T (fp8_e4_t: -448; integers: their minimum value).
template <typename T> TC_DEVICE T neg_infinity() {
  if constexpr (detail::int_traits<T>::is_int) return static_cast<T>(detail::int_traits<T>::lo);
  else if constexpr (detail::same_type<T, float>::value) return __uint_as_float(0xff800000u);
  else if constexpr (detail::same_type<T, double>::value) return __longlong_as_double(static_cast<long long>(0xfff0000000000000ULL));
  else if constexpr (detail::same_type<T, half_t>::value) return __ushort_as_half(0xfc00);
  else if constexpr (detail::same_type<T, bfloat16_t>::value) return __ushort_as_bfloat16(0xff80);
  else if constexpr (detail::same_type<T, fp8_e4_t>::value) return from_bits<fp8_e4_t>(0xfe);
  else return from_bits<fp8_e5_t>(0xfc);
}

}  // namespace tc
