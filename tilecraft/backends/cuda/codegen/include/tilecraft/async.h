// tilecraft/async.h -- cp.async (sm_80+): asynchronous global -> shared copies.
//
//   cp_async_cg_16(smem, gmem, pred)  16 bytes, caches in L2 only (.cg)
//   cp_async_ca_8 (smem, gmem, pred)   8 bytes, caches in L1 and L2 (.ca)
//   cp_async_ca_4 (smem, gmem, pred)   4 bytes, .ca
//   (cp_async_ca_16 also exists, for 16-byte copies that should stay in L1.)
// When pred is false nothing is read from global memory and the destination bytes are
// written with zeros (the src-size operand is 0), so the copy still completes with its
// group; gmem may be any pointer in that case (conventionally the tensor base).
// `smem` is a generic pointer into shared memory, or a 32-bit shared-window address.
// Both addresses must be aligned to the copy size.
//
// L2 eviction priorities (sm_80+; createpolicy, an opaque 64-bit value for .L2::cache_hint):
//   l2_evict_first()   lines the first to go when L2 needs room (data read once)
//   l2_evict_last()    lines the last to go
//   cp_async_cg_16_hint(smem, gmem, pred, policy)   cp_async_cg_16 carrying the priority
//
// Completion: copies issued since the previous commit form one group at
//   cp_async_commit();
//   cp_async_wait<N>();   // wait until at most N most recent groups are still in flight
//   cp_async_wait_all();  // commit the open group and wait for every group
//   cp_async_mbarrier_arrive_noinc(bar);  // arrive on bar once this thread's copies landed
// A cp_async_wait* makes the data visible to the issuing thread only; follow it with a
// barrier (tc::syncthreads) before other threads read the tile.
#pragma once

#include "memory.h"

namespace tc {

TC_DEVICE void cp_async_cg_16(uint32_t smem, const void* gmem, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(smem), "l"(gmem), "r"(pred ? 16 : 0) : "memory");
}
TC_DEVICE void cp_async_ca_16(uint32_t smem, const void* gmem, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(smem), "l"(gmem), "r"(pred ? 16 : 0) : "memory");
}
TC_DEVICE void cp_async_ca_8(uint32_t smem, const void* gmem, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n"
               :: "r"(smem), "l"(gmem), "r"(pred ? 8 : 0) : "memory");
}
TC_DEVICE void cp_async_ca_4(uint32_t smem, const void* gmem, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
               :: "r"(smem), "l"(gmem), "r"(pred ? 4 : 0) : "memory");
}

TC_DEVICE void cp_async_cg_16(void* smem, const void* gmem, bool pred) {
  cp_async_cg_16(smem_addr(smem), gmem, pred);
}
TC_DEVICE void cp_async_ca_16(void* smem, const void* gmem, bool pred) {
  cp_async_ca_16(smem_addr(smem), gmem, pred);
}
TC_DEVICE void cp_async_ca_8(void* smem, const void* gmem, bool pred) {
  cp_async_ca_8(smem_addr(smem), gmem, pred);
}
TC_DEVICE void cp_async_ca_4(void* smem, const void* gmem, bool pred) {
  cp_async_ca_4(smem_addr(smem), gmem, pred);
}

TC_DEVICE uint64_t l2_evict_first() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
TC_DEVICE uint64_t l2_evict_last() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
TC_DEVICE void cp_async_cg_16_hint(void* smem, const void* gmem, bool pred, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n"
               :: "r"(smem_addr(smem)), "l"(gmem), "r"(pred ? 16 : 0), "l"(policy) : "memory");
}

TC_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N> TC_DEVICE void cp_async_wait() {
  static_assert(N >= 0, "cp_async_wait<N>: N must be a non-negative constant");
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

TC_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// An arrival on the mbarrier made when every cp.async this thread issued before it has landed;
// .noinc: the arrival counts toward the barrier's expected count (it is not added to it).
TC_DEVICE void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n"
               :: "r"(smem_addr(bar)) : "memory");
}

}  // namespace tc
