// tilecraft/tma.h -- bulk tensor copies (TMA) between global and shared memory, sm_90+.
//
// The tensor map (CUtensorMap, 128 bytes, 64-byte aligned) is encoded on the host by the
// driver's cuTensorMapEncodeTiled and passed BY VALUE as a `const __grid_constant__
// tc::TensorMap` kernel parameter; device code passes its address (a generic pointer into
// the parameter space) to the functions below. Never copy the map into a local variable.
//   struct TensorMap                     alignas(64) opaque 128 bytes (= CUtensorMap; no
//                                        cuda.h needed in kernels)
//   prefetch_tma_descriptor(map)         prefetch.tensormap: pull the map into the cache
//                                        early (one thread, at kernel start)
//   prefetch_l2(gmem, bytes)             cp.async.bulk.prefetch.L2.global: start bringing
//                                        `bytes` (a multiple of 16) of global memory from
//                                        gmem (16-byte aligned) into L2; no completion to wait
//                                        for, nothing written
//
// Loads (one thread issues; completion is counted on an mbarrier in bytes):
//   tma_load_2d(smem_dst, map, mbar, c0, c1)
//   tma_load_3d(smem_dst, map, mbar, c0, c1, c2)
//   tma_load_4d(smem_dst, map, mbar, c0, c1, c2, c3), tma_load_5d(..., c4)
//       cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes:
//       copy the box whose first element has coordinates (c0 = innermost / contiguous
//       dimension, c1, c2) from global memory to smem_dst (128-byte aligned; the box layout
//       and swizzle are those encoded in the map). Out-of-range elements are zero-filled
//       (and still counted). Pair with tc::mbarrier_arrive_expect_tx(mbar, box bytes) in the
//       same phase, then tc::mbarrier_wait_parity(mbar, phase).
// In im2col mode (the map encoded by cuTensorMapEncodeIm2col over an NHWC image):
//   tma_load_im2col_4d(smem_dst, map, mbar, c, w, h, n, off_w, off_h)
//       cp.async.bulk.tensor.4d ... .im2col: the map's pixels-per-column pixels of
//       channels-per-pixel channels each, from channel c: the first pixel's filter base is
//       (n, h, w), the next ones step along W, then H, then N by the map's traversal strides
//       within its bounding box, and each reads the pixel at its base + (off_h, off_w) (the
//       filter tap); pixels outside the image are zero-filled. Completes as tma_load_Nd.
// Stores (shared -> global; smem written by ordinary stores needs
// tc::fence_proxy_async_shared() in every writing thread and a barrier first):
//   tma_store_2d(map, smem_src, c0, c1)
//   tma_store_3d(map, smem_src, c0, c1, c2)
//   tma_store_4d(map, smem_src, c0, c1, c2, c3), tma_store_5d(..., c4)
//       cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group: out-of-range elements are
//       not written.
//   tma_store_commit()                   cp.async.bulk.commit_group: close the group of
//                                        stores issued by this thread
//   tma_store_wait<N>()                  cp.async.bulk.wait_group.read N: wait until at most
//                                        N groups still READ their shared memory (the source
//                                        may then be overwritten)
//   tma_store_wait_all<N>()              cp.async.bulk.wait_group N: wait until at most N
//                                        groups are pending, writes to global complete
// Stores that add (cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add.tile.bulk_group):
//   tma_store_add_Nd(map, smem_src, c0, ...)   N = 2..5: as tma_store_Nd, but each element
//       of the box is added into global memory, atomically per element (the map's element
//       type: f16, bf16, f32, s32, u32, s64, u64); committed and waited for as stores are.
// With an L2 eviction priority (policy: tc::l2_evict_first() / tc::l2_evict_last(), async.h):
//   tma_load_Nd_hint(smem_dst, map, mbar, policy, c0, ...)    N = 2..5, .L2::cache_hint
//   tma_store_Nd_hint(map, smem_src, policy, c0, ...)
// Overloads take 32-bit shared-window addresses (tc::smem_addr) for smem_dst / smem_src /
// mbar. Feature macro: TC_HAS_TMA (device passes for sm_90 and newer, and the host pass).
#pragma once

#include "async.h"
#include "memory.h"

#define TC_HAS_TMA (TC_CUDA_ARCH >= 900)

namespace tc {

// Same size and alignment as the driver's CUtensorMap.
struct alignas(64) TensorMap {
  unsigned long long data[16];
};
static_assert(sizeof(TensorMap) == 128, "CUtensorMap is 128 bytes");

#if TC_HAS_TMA

TC_DEVICE void prefetch_tma_descriptor(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

TC_DEVICE void prefetch_l2(const void* gmem, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(gmem), "r"(bytes)
               : "memory");
}

// ---------------------------------------------------------------- loads
TC_DEVICE void tma_load_2d(uint32_t smem_dst, const void* map, uint32_t mbar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n"
      ::"r"(smem_dst), "l"(map), "r"(mbar), "r"(c0), "r"(c1)
      : "memory");
}
TC_DEVICE void tma_load_3d(uint32_t smem_dst, const void* map, uint32_t mbar, int c0, int c1,
                           int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n"
      ::"r"(smem_dst), "l"(map), "r"(mbar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
TC_DEVICE void tma_load_4d(uint32_t smem_dst, const void* map, uint32_t mbar, int c0, int c1,
                           int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
      ::"r"(smem_dst), "l"(map), "r"(mbar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
TC_DEVICE void tma_load_5d(uint32_t smem_dst, const void* map, uint32_t mbar, int c0, int c1,
                           int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n"
      ::"r"(smem_dst), "l"(map), "r"(mbar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
TC_DEVICE void tma_load_im2col_4d(uint32_t smem_dst, const void* map, uint32_t mbar, int c,
                                  int w, int h, int n, int off_w, int off_h) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};\n"
      ::"r"(smem_dst), "l"(map), "r"(mbar), "r"(c), "r"(w), "r"(h), "r"(n),
        "h"((unsigned short)off_w), "h"((unsigned short)off_h)
      : "memory");
}
TC_DEVICE void tma_load_im2col_4d(void* smem_dst, const void* map, uint64_t* mbar, int c,
                                  int w, int h, int n, int off_w, int off_h) {
  tma_load_im2col_4d(smem_addr(smem_dst), map, smem_addr(mbar), c, w, h, n, off_w, off_h);
}
TC_DEVICE void tma_load_4d(void* smem_dst, const void* map, uint64_t* mbar, int c0, int c1,
                           int c2, int c3) {
  tma_load_4d(smem_addr(smem_dst), map, smem_addr(mbar), c0, c1, c2, c3);
}
TC_DEVICE void tma_load_5d(void* smem_dst, const void* map, uint64_t* mbar, int c0, int c1,
                           int c2, int c3, int c4) {
  tma_load_5d(smem_addr(smem_dst), map, smem_addr(mbar), c0, c1, c2, c3, c4);
}
TC_DEVICE void tma_load_2d(void* smem_dst, const void* map, uint64_t* mbar, int c0, int c1) {
  tma_load_2d(smem_addr(smem_dst), map, smem_addr(mbar), c0, c1);
}
TC_DEVICE void tma_load_3d(void* smem_dst, const void* map, uint64_t* mbar, int c0, int c1,
                           int c2) {
  tma_load_3d(smem_addr(smem_dst), map, smem_addr(mbar), c0, c1, c2);
}

// ---------------------------------------------------------------- stores
TC_DEVICE void tma_store_2d(const void* map, uint32_t smem_src, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
      ::"l"(map), "r"(smem_src), "r"(c0), "r"(c1)
      : "memory");
}
TC_DEVICE void tma_store_3d(const void* map, uint32_t smem_src, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
      ::"l"(map), "r"(smem_src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
TC_DEVICE void tma_store_4d(const void* map, uint32_t smem_src, int c0, int c1, int c2,
                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
      ::"l"(map), "r"(smem_src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
TC_DEVICE void tma_store_5d(const void* map, uint32_t smem_src, int c0, int c1, int c2,
                            int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];"
      "\n"
      ::"l"(map), "r"(smem_src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
TC_DEVICE void tma_store_2d(const void* map, const void* smem_src, int c0, int c1) {
  tma_store_2d(map, smem_addr(smem_src), c0, c1);
}
TC_DEVICE void tma_store_3d(const void* map, const void* smem_src, int c0, int c1, int c2) {
  tma_store_3d(map, smem_addr(smem_src), c0, c1, c2);
}
TC_DEVICE void tma_store_4d(const void* map, const void* smem_src, int c0, int c1, int c2,
                            int c3) {
  tma_store_4d(map, smem_addr(smem_src), c0, c1, c2, c3);
}
TC_DEVICE void tma_store_5d(const void* map, const void* smem_src, int c0, int c1, int c2,
                            int c3, int c4) {
  tma_store_5d(map, smem_addr(smem_src), c0, c1, c2, c3, c4);
}
TC_DEVICE void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N> TC_DEVICE void tma_store_wait() {
  static_assert(N >= 0, "cp.async.bulk.wait_group takes N >= 0");
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N> TC_DEVICE void tma_store_wait_all() {
  static_assert(N >= 0, "cp.async.bulk.wait_group takes N >= 0");
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------- with an L2 cache hint
// The same copies carrying an L2 eviction priority (.L2::cache_hint, a createpolicy value).
// The store's operand %2 is unused, so both forms number their coordinates from %4.
#define TC_COORDS2 "{%4, %5}"
#define TC_COORDS3 "{%4, %5, %6}"
#define TC_COORDS4 "{%4, %5, %6, %7}"
#define TC_COORDS5 "{%4, %5, %6, %7, %8}"
#define TC_TMA_HINTED(N, PARAMS, ...)                                                        \
  TC_DEVICE void tma_load_##N##d_hint(void* smem_dst, const void* map, uint64_t* mbar,      \
                                      uint64_t policy, PARAMS) {                            \
    asm volatile("cp.async.bulk.tensor." #N "d.shared::cluster.global.mbarrier::complete_tx" \
                 "::bytes.L2::cache_hint [%0], [%1, " TC_COORDS##N "], [%2], %3;\n"          \
                 ::"r"(smem_addr(smem_dst)), "l"(map), "r"(smem_addr(mbar)), "l"(policy),   \
                 __VA_ARGS__ : "memory");                                                   \
  }                                                                                         \
  TC_DEVICE void tma_store_##N##d_hint(const void* map, const void* smem_src,               \
                                       uint64_t policy, PARAMS) {                           \
    asm volatile("cp.async.bulk.tensor." #N "d.global.shared::cta.bulk_group.L2::cache_hint" \
                 " [%0, " TC_COORDS##N "], [%1], %3;\n"                                     \
                 ::"l"(map), "r"(smem_addr(smem_src)), "r"(0), "l"(policy), __VA_ARGS__     \
                 : "memory");                                                               \
  }
#define TC_P(...) __VA_ARGS__
TC_TMA_HINTED(2, TC_P(int c0, int c1), "r"(c0), "r"(c1))
TC_TMA_HINTED(3, TC_P(int c0, int c1, int c2), "r"(c0), "r"(c1), "r"(c2))
TC_TMA_HINTED(4, TC_P(int c0, int c1, int c2, int c3), "r"(c0), "r"(c1), "r"(c2), "r"(c3))
TC_TMA_HINTED(5, TC_P(int c0, int c1, int c2, int c3, int c4), "r"(c0), "r"(c1), "r"(c2),
              "r"(c3), "r"(c4))
#undef TC_P
#undef TC_TMA_HINTED
#undef TC_COORDS2
#undef TC_COORDS3
#undef TC_COORDS4
#undef TC_COORDS5

// ---------------------------------------------------------------- stores that add
#define TC_TMA_STORE_ADD(N, PARAMS, COORDS, ...)                                             \
  TC_DEVICE void tma_store_add_##N##d(const void* map, const void* smem_src, PARAMS) {      \
    asm volatile("cp.reduce.async.bulk.tensor." #N "d.global.shared::cta.add.tile.bulk_group" \
                 " [%0, {" COORDS "}], [%1];\n"                                              \
                 ::"l"(map), "r"(smem_addr(smem_src)), __VA_ARGS__ : "memory");             \
  }
#define TC_P(...) __VA_ARGS__
TC_TMA_STORE_ADD(2, TC_P(int c0, int c1), "%2, %3", "r"(c0), "r"(c1))
TC_TMA_STORE_ADD(3, TC_P(int c0, int c1, int c2), "%2, %3, %4", "r"(c0), "r"(c1), "r"(c2))
TC_TMA_STORE_ADD(4, TC_P(int c0, int c1, int c2, int c3), "%2, %3, %4, %5", "r"(c0), "r"(c1),
                 "r"(c2), "r"(c3))
TC_TMA_STORE_ADD(5, TC_P(int c0, int c1, int c2, int c3, int c4), "%2, %3, %4, %5, %6",
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4))
#undef TC_P
#undef TC_TMA_STORE_ADD

#endif  // TC_HAS_TMA

}  // namespace tc
