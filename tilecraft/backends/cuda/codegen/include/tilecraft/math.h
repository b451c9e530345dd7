// tilecraft/math.h -- fast float math, scalar max/min/add, atomics.
//
// Fast approximations (single MUFU instruction, flush denormals to zero):
//   exp2f_fast(x)  2^x          ex2.approx.ftz.f32   (max rel. error ~2^-22)
//   rcp_fast(x)    1/x          rcp.approx.ftz.f32
//   rsqrt(x)       1/sqrt(x)    rsqrt.approx.ftz.f32 (double overload: full precision)
//   tanh_fast(x)   tanh(x)      tanh.approx.f32      (abs. error ~2^-11; sm_75+)
//   sigmoid(x)     1/(1+e^-x)   with __expf and a correctly rounded reciprocal; half_t and
//                               bfloat16_t overloads compute in float
// Scalar helpers for every scalar type (float, double, half_t, bfloat16_t, fp8, integers):
//   max(a, b), min(a, b)   float/double: fmaxf/fmax (a NaN operand yields the other operand)
//   add(a, b)              a + b without relying on the half/bf16 operator overloads
// Atomics (return the old value, like atomicAdd):
//   atomic_add(T* p, T v)   T in float, double, int, unsigned, unsigned long long, half_t,
//                           bfloat16_t, __half2, __nv_bfloat162 (hardware red/atom where the
//                           target has it; CUDA's own CAS fallback otherwise)
//   atomic_add_x2(T* p, uint32_t pair)  T in half_t, bfloat16_t: p[0] += low half of pair and
//                           p[1] += high half, as one f16x2 / bf16x2 atomic (p 4-byte aligned)
//   atomic_add_v2(float* p, float a, float b)  p[0] += a, p[1] += b: one red.global.add.v2.f32
//                           on sm_90 (p 8-byte aligned, in global memory), two atomics before
//   atomic_max / atomic_min(T* p, T v)  T in int, unsigned, long long, unsigned long long,
//                           float, double. float/double use the integer-ordering trick: one
//                           atomicMax/atomicMin on the bit pattern, no CAS loop. NaN values
//                           are not supported.
#pragma once

#include "types.h"

namespace tc {

TC_DEVICE float exp2f_fast(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}
TC_DEVICE float rcp_fast(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}
TC_DEVICE float rsqrt(float x) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}
TC_DEVICE double rsqrt(double x) { return ::rsqrt(x); }
TC_DEVICE float tanh_fast(float x) {
  float r;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

TC_DEVICE float sigmoid(float x) { return __frcp_rn(1.0f + __expf(-x)); }
TC_DEVICE double sigmoid(double x) { return 1.0 / (1.0 + ::exp(-x)); }
TC_DEVICE half_t sigmoid(half_t x) { return __float2half_rn(sigmoid(__half2float(x))); }
TC_DEVICE bfloat16_t sigmoid(bfloat16_t x) {
  return __float2bfloat16_rn(sigmoid(__bfloat162float(x)));
}

// ---------------------------------------------------------------- max / min / add
template <typename T> TC_DEVICE T max(T a, T b) {
  if constexpr (detail::int_traits<T>::is_int) return a < b ? b : a;
  else return cvt<T>(fmaxf(detail::to_float(a), detail::to_float(b)));
}
template <typename T> TC_DEVICE T min(T a, T b) {
  if constexpr (detail::int_traits<T>::is_int) return b < a ? b : a;
  else return cvt<T>(fminf(detail::to_float(a), detail::to_float(b)));
}
template <typename T> TC_DEVICE T add(T a, T b) {
  if constexpr (detail::int_traits<T>::is_int) return static_cast<T>(a + b);
  else return cvt<T>(detail::to_float(a) + detail::to_float(b));
}
TC_DEVICE float max(float a, float b) { return fmaxf(a, b); }
TC_DEVICE float min(float a, float b) { return fminf(a, b); }
TC_DEVICE float add(float a, float b) { return a + b; }
TC_DEVICE double max(double a, double b) { return fmax(a, b); }
TC_DEVICE double min(double a, double b) { return fmin(a, b); }
TC_DEVICE double add(double a, double b) { return a + b; }
TC_DEVICE half_t max(half_t a, half_t b) { return __hmax(a, b); }
TC_DEVICE half_t min(half_t a, half_t b) { return __hmin(a, b); }
TC_DEVICE half_t add(half_t a, half_t b) { return __hadd(a, b); }
TC_DEVICE bfloat16_t max(bfloat16_t a, bfloat16_t b) { return __hmax(a, b); }
TC_DEVICE bfloat16_t min(bfloat16_t a, bfloat16_t b) { return __hmin(a, b); }
TC_DEVICE bfloat16_t add(bfloat16_t a, bfloat16_t b) { return __hadd(a, b); }
TC_DEVICE __half2 max(__half2 a, __half2 b) { return __hmax2(a, b); }
TC_DEVICE __half2 min(__half2 a, __half2 b) { return __hmin2(a, b); }
TC_DEVICE __half2 add(__half2 a, __half2 b) { return __hadd2(a, b); }
TC_DEVICE __nv_bfloat162 max(__nv_bfloat162 a, __nv_bfloat162 b) { return __hmax2(a, b); }
TC_DEVICE __nv_bfloat162 min(__nv_bfloat162 a, __nv_bfloat162 b) { return __hmin2(a, b); }
TC_DEVICE __nv_bfloat162 add(__nv_bfloat162 a, __nv_bfloat162 b) { return __hadd2(a, b); }

// ---------------------------------------------------------------- atomics
TC_DEVICE float atomic_add(float* p, float v) { return atomicAdd(p, v); }
TC_DEVICE double atomic_add(double* p, double v) { return atomicAdd(p, v); }
TC_DEVICE int atomic_add(int* p, int v) { return atomicAdd(p, v); }
TC_DEVICE unsigned atomic_add(unsigned* p, unsigned v) { return atomicAdd(p, v); }
TC_DEVICE unsigned long long atomic_add(unsigned long long* p, unsigned long long v) {
  return atomicAdd(p, v);
}
TC_DEVICE half_t atomic_add(half_t* p, half_t v) { return atomicAdd(p, v); }
TC_DEVICE bfloat16_t atomic_add(bfloat16_t* p, bfloat16_t v) { return atomicAdd(p, v); }
TC_DEVICE __half2 atomic_add(__half2* p, __half2 v) { return atomicAdd(p, v); }
TC_DEVICE __nv_bfloat162 atomic_add(__nv_bfloat162* p, __nv_bfloat162 v) {
  return atomicAdd(p, v);
}

TC_DEVICE void atomic_add_x2(half_t* p, uint32_t pair) {
  __half2 v;
  TC_MEMCPY(&v, &pair, sizeof(v));
  atomicAdd(reinterpret_cast<__half2*>(p), v);
}
TC_DEVICE void atomic_add_x2(bfloat16_t* p, uint32_t pair) {
  __nv_bfloat162 v;
  TC_MEMCPY(&v, &pair, sizeof(v));
  atomicAdd(reinterpret_cast<__nv_bfloat162*>(p), v);
}

TC_DEVICE void atomic_add_v2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

TC_DEVICE int atomic_max(int* p, int v) { return atomicMax(p, v); }
TC_DEVICE int atomic_min(int* p, int v) { return atomicMin(p, v); }
TC_DEVICE unsigned atomic_max(unsigned* p, unsigned v) { return atomicMax(p, v); }
TC_DEVICE unsigned atomic_min(unsigned* p, unsigned v) { return atomicMin(p, v); }
TC_DEVICE long long atomic_max(long long* p, long long v) { return atomicMax(p, v); }
TC_DEVICE long long atomic_min(long long* p, long long v) { return atomicMin(p, v); }
TC_DEVICE unsigned long long atomic_max(unsigned long long* p, unsigned long long v) {
  return atomicMax(p, v);
}
TC_DEVICE unsigned long long atomic_min(unsigned long long* p, unsigned long long v) {
  return atomicMin(p, v);
}

// Non-negative floats order like signed ints; negative floats order reversed like unsigned
// ints (larger bit pattern = more negative). So max with a non-negative v is a signed
// atomicMax, and with a negative v an unsigned atomicMin; min is the mirror image.
TC_DEVICE float atomic_max(float* p, float v) {
  return __int_as_float(
      __float_as_int(v) >= 0
          ? atomicMax(reinterpret_cast<int*>(p), __float_as_int(v))
          : static_cast<int>(atomicMin(reinterpret_cast<unsigned*>(p), __float_as_uint(v))));
}
TC_DEVICE float atomic_min(float* p, float v) {
  return __int_as_float(
      __float_as_int(v) >= 0
          ? atomicMin(reinterpret_cast<int*>(p), __float_as_int(v))
          : static_cast<int>(atomicMax(reinterpret_cast<unsigned*>(p), __float_as_uint(v))));
}
TC_DEVICE double atomic_max(double* p, double v) {
  long long b = __double_as_longlong(v);
  return __longlong_as_double(
      b >= 0 ? atomicMax(reinterpret_cast<long long*>(p), b)
             : static_cast<long long>(atomicMin(reinterpret_cast<unsigned long long*>(p),
                                                static_cast<unsigned long long>(b))));
}
TC_DEVICE double atomic_min(double* p, double v) {
  long long b = __double_as_longlong(v);
  return __longlong_as_double(
      b >= 0 ? atomicMin(reinterpret_cast<long long*>(p), b)
             : static_cast<long long>(atomicMax(reinterpret_cast<unsigned long long*>(p),
                                                static_cast<unsigned long long>(b))));
}

}  // namespace tc
