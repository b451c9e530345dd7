// tilecraft/warp.h -- warp shuffles and butterfly reductions.
//
// Shuffles (all 32 lanes must participate; full mask 0xffffffff), over groups of `width`
// consecutive lanes (a power of two, 32 by default: the whole warp):
//   shfl_xor<T>(v, lane_mask, width)   value of lane (lane ^ lane_mask); a lane whose partner
//                                      is in a later group keeps its own v
//   shfl_down<T>(v, delta, width)      value of lane + delta; the last delta lanes of a group
//                                      keep their own v
//   shfl_up<T>(v, delta, width)        value of lane - delta; the first delta lanes of a group
//                                      keep their own v
//   shfl_idx<T>(v, src_lane, width)    value of lane src_lane % width of the group (broadcast)
//   shfl_{xor,down,up,idx}_group<W>(v, arg)   the same with width W as a template argument
// T: any 1-, 2-, 4- or 8-byte scalar: float, double, half_t, bfloat16_t, fp8_e4_t, fp8_e5_t,
// signed/unsigned integers, plus __half2 / __nv_bfloat162.
//
// Reductions, butterfly over lane_mask = width/2, width/4, ..., stride (each step combines v
// with shfl_xor(v, lane_mask)); every participating lane ends with the result:
//   warp_reduce_sum<T>(v, width = 32, stride = 1)
//   warp_reduce_max<T>(v, width = 32, stride = 1)
//   warp_reduce_min<T>(v, width = 32, stride = 1)
//   warp_reduce<T>(v, op, width = 32, stride = 1)    op: any callable T(T, T)
// With stride 1 the reduction covers the `width` consecutive lanes of each aligned group of
// `width` lanes (width 4: the quad of an mma fragment row; width 32: the whole warp). With
// stride s (a power of two below width) it covers the width/s lanes of that group whose lane
// index is congruent modulo s, e.g. width 32, stride 4 reduces over the 8 lanes with equal
// lane % 4 (the rows of an mma accumulator column). width and stride are powers of two;
// pass them as constants so the loop unrolls.
#pragma once

#include "math.h"

namespace tc {

namespace detail {
// 4/8-byte scalars and half/bf16 have CUDA shuffle overloads; the rest are widened.
template <typename T> struct native_shfl {
  static constexpr bool value = sizeof(T) >= 4 || same_type<T, half_t>::value ||
                                same_type<T, bfloat16_t>::value;
};
}  // namespace detail

#define TC_DEFINE_SHFL(NAME, INTRINSIC)                                                    \
  template <typename T> TC_DEVICE T NAME(T v, int arg, int width = 32) {                   \
    if constexpr (detail::native_shfl<T>::value) {                                         \
      return INTRINSIC(0xffffffffu, v, arg, width);                                        \
    } else if constexpr (detail::same_type<T, fp8_e4_t>::value ||                          \
                         detail::same_type<T, fp8_e5_t>::value) {                          \
      uint32_t w = INTRINSIC(0xffffffffu, static_cast<uint32_t>(to_bits(v)), arg, width);  \
      return from_bits<T>(static_cast<uint8_t>(w));                                        \
    } else {                                                                               \
      return static_cast<T>(INTRINSIC(0xffffffffu, static_cast<int>(v), arg, width));      \
    }                                                                                      \
  }                                                                                        \
  template <int W, typename T> TC_DEVICE T NAME##_group(T v, int arg) {                    \
    static_assert(W >= 1 && W <= 32 && (W & (W - 1)) == 0, "width: a power of two to 32"); \
    return NAME(v, arg, W);                                                                \
  }
TC_DEFINE_SHFL(shfl_xor, __shfl_xor_sync)
TC_DEFINE_SHFL(shfl_down, __shfl_down_sync)
TC_DEFINE_SHFL(shfl_up, __shfl_up_sync)
TC_DEFINE_SHFL(shfl_idx, __shfl_sync)
#undef TC_DEFINE_SHFL

template <typename T, typename Op>
TC_DEVICE T warp_reduce(T v, Op op, int width = 32, int stride = 1) {
#pragma unroll
  for (int m = width / 2; m >= stride; m /= 2) v = op(v, shfl_xor(v, m));
  return v;
}

namespace detail {
struct sum_op {
  template <typename T> TC_DEVICE T operator()(T a, T b) const { return tc::add(a, b); }
};
struct max_op {
  template <typename T> TC_DEVICE T operator()(T a, T b) const { return tc::max(a, b); }
};
struct min_op {
  template <typename T> TC_DEVICE T operator()(T a, T b) const { return tc::min(a, b); }
};
}  // namespace detail

template <typename T> TC_DEVICE T warp_reduce_sum(T v, int width = 32, int stride = 1) {
  return warp_reduce(v, detail::sum_op{}, width, stride);
}
template <typename T> TC_DEVICE T warp_reduce_max(T v, int width = 32, int stride = 1) {
  return warp_reduce(v, detail::max_op{}, width, stride);
}
template <typename T> TC_DEVICE T warp_reduce_min(T v, int width = 32, int stride = 1) {
  return warp_reduce(v, detail::min_op{}, width, stride);
}

}  // namespace tc
