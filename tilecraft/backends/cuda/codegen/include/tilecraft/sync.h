// tilecraft/sync.h -- barriers, fences and mbarriers.
//
//   syncthreads()                        __syncthreads() (barrier 0, all threads of the block)
//   barrier_all()                        the same, in a warp-specialized kernel (its other
//                                        barriers are named ones over the consumer threads)
//   is_producer_thread(n) / is_producer_leader(n) / is_block_leader()   threadIdx.x >= n /
//                                        == n / == 0: the roles of a warp-specialized kernel
//   syncwarp()                           __syncwarp() (all lanes)
//   warpgroup_index()                    threadIdx.x / 128, taken from lane 0 so that the
//                                        compiler knows it is the same in all lanes: ptxas
//                                        serializes every wgmma of a kernel that branches on a
//                                        warpgroup index it cannot prove warp-uniform (C7520)
//   named_barrier_sync(id, nthreads)     bar.sync id, nthreads: wait until nthreads threads
//                                        (a multiple of 32, counted per warp) have arrived at
//                                        hardware barrier id (0..15; 0 is __syncthreads')
//   named_barrier_arrive(id, nthreads)   bar.arrive: count this warp in, do not wait
//   fence_proxy_async_shared()  [sm_90]  fence.proxy.async.shared::cta: order this thread's
//                                        ordinary shared-memory writes before later reads by
//                                        the async proxy (TMA store, wgmma operands)
//   fence_barrier_init()        [sm_90]  fence.mbarrier_init.release.cluster: publish
//                                        mbarrier_init to the async proxy / the cluster
//
// mbarrier (a 64-bit object in shared memory; the pointer is generic, or use the overloads
// taking a 32-bit shared-window address):
//   mbarrier_init(bar, count)                   expected arrivals per phase = count  (sm_80)
//   mbarrier_arrive(bar)                        one arrival                           (sm_80)
//   mbarrier_arrive_warp(bar)                   one arrival for the calling warp (lane 0,
//                                               after __syncwarp)                     (sm_80)
//   mbarrier_try_wait_parity(bar, parity) -> bool  true once the phase with the given parity
//                                               (0 or 1) has completed     (sm_80: test_wait)
//   mbarrier_wait_parity(bar, parity)           spin on try_wait_parity until it returns true
//   mbarrier_arrive_expect_tx(bar, bytes) [sm_90]  one arrival, and expect `bytes` more
//                                               transaction bytes (TMA) in this phase
//   mbarrier_expect_tx(bar, bytes)        [sm_90]  expect transaction bytes, no arrival
//
// Register reallocation between warpgroups [sm_90a only, TC_HAS_SETMAXNREG]:
//   setmaxnreg_inc<N>()  setmaxnreg.inc.sync.aligned.u32 N: raise this warpgroup's per-thread
//                        register limit to N (blocks until enough registers are free)
//   setmaxnreg_dec<N>()  setmaxnreg.dec.sync.aligned.u32 N: lower it to N, releasing the rest
//   N in 24..256, a multiple of 8; all threads of the warpgroup execute it together. Takes
//   effect only in a kernel with a register cap at entry (__launch_bounds__(threads, 1) or
//   -maxrregcount), each role one branch of a single if/else (ptxas warns C7508 otherwise).
// Phase convention: a freshly initialised barrier is in phase 0; waiting on parity 0
// returns when phase 0 completes. Consumers of a ring of stages flip the parity each time
// they wrap around.
#pragma once

#include "memory.h"

#define TC_HAS_SM90_SYNC (TC_CUDA_ARCH >= 900)
// setmaxnreg exists only in sm_90a device passes (and is declared in the host pass).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TC_HAS_SETMAXNREG 0
#else
#define TC_HAS_SETMAXNREG 1
#endif

namespace tc {

TC_DEVICE void syncthreads() { __syncthreads(); }
// Warp-specialized kernels put one producer warpgroup after the `consumers` consumer threads;
// block-wide barriers there are barrier_all (every thread), consumer-only ones named barriers.
TC_DEVICE bool is_producer_thread(int consumers) { return threadIdx.x >= consumers; }
TC_DEVICE bool is_producer_leader(int consumers) { return threadIdx.x == consumers; }
TC_DEVICE bool is_block_leader() { return threadIdx.x == 0; }
TC_DEVICE void barrier_all() { __syncthreads(); }
TC_DEVICE void syncwarp() { __syncwarp(); }
TC_DEVICE int warpgroup_index() { return __shfl_sync(0xffffffffu, int(threadIdx.x) >> 7, 0); }

TC_DEVICE void named_barrier_sync(int id, int nthreads) {
  asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(nthreads) : "memory");
}
TC_DEVICE void named_barrier_arrive(int id, int nthreads) {
  asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(nthreads) : "memory");
}

// ---------------------------------------------------------------- mbarrier (sm_80+)
TC_DEVICE void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
TC_DEVICE void mbarrier_arrive(uint32_t bar) {
  asm volatile(
      "{\n .reg .b64 state;\n mbarrier.arrive.shared.b64 state, [%0];\n}\n"
      :: "r"(bar) : "memory");
}
TC_DEVICE bool mbarrier_try_wait_parity(uint32_t bar, uint32_t parity) {
  uint32_t done;
#if TC_HAS_SM90_SYNC
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#else
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#endif
  return done != 0;
}
TC_DEVICE void mbarrier_wait_parity(uint32_t bar, uint32_t parity) {
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

TC_DEVICE void mbarrier_init(uint64_t* bar, uint32_t count) { mbarrier_init(smem_addr(bar), count); }
TC_DEVICE void mbarrier_arrive(uint64_t* bar) { mbarrier_arrive(smem_addr(bar)); }
// One arrival per warp, once every lane is done with what the barrier guards (__syncwarp
// orders the lanes' earlier accesses before lane 0's arrival): a barrier expecting one
// arrival per warp costs 32 times fewer shared-memory atomics than one per thread.
TC_DEVICE void mbarrier_arrive_warp(uint64_t* bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbarrier_arrive(smem_addr(bar));
}
TC_DEVICE bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
  return mbarrier_try_wait_parity(smem_addr(bar), parity);
}
TC_DEVICE void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  mbarrier_wait_parity(smem_addr(bar), parity);
}

// ---------------------------------------------------------------- sm_90 only
#if TC_HAS_SM90_SYNC
TC_DEVICE void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
TC_DEVICE void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
TC_DEVICE void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
               :: "r"(bar), "r"(bytes) : "memory");
}
TC_DEVICE void mbarrier_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n"
               :: "r"(bar), "r"(bytes) : "memory");
}
TC_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  mbarrier_arrive_expect_tx(smem_addr(bar), bytes);
}
TC_DEVICE void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  mbarrier_expect_tx(smem_addr(bar), bytes);
}
#endif  // TC_HAS_SM90_SYNC

// ---------------------------------------------------------------- sm_90a only
#if TC_HAS_SETMAXNREG
template <int N> TC_DEVICE void setmaxnreg_inc() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24..256, a multiple of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> TC_DEVICE void setmaxnreg_dec() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24..256, a multiple of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif  // TC_HAS_SETMAXNREG

}  // namespace tc
