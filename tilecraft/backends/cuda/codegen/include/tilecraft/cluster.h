// tilecraft/cluster.h -- thread block clusters (sm_90+): rank, cluster barrier, remote mbarrier
// arrivals, TMA loads multicast to every block of the cluster, cluster-aware rasterization.
//
// A kernel declared with __cluster_dims__(X, Y, Z) runs its blocks in groups of X * Y * Z that
// are co-scheduled on one GPC and can reach each other's shared memory (the "shared::cluster"
// window). Used by warp-specialized pipelines whose blocks load the same tile (a GEMM's B tile
// for two vertically adjacent output tiles): each block loads part of the tile once and TMA
// writes it into every block of the cluster, so L2 serves it once.
//
//   cluster_ctarank()                  %cluster_ctarank: this block's rank in its cluster
//   cluster_sync()                     barrier.cluster arrive (release) + wait (acquire): every
//                                      thread of every block of the cluster; after mbarrier
//                                      init (so no block signals a peer's barrier before it
//                                      exists) and before exit (so none signals an exited one)
//   mbarrier_arrive_warp_cluster<N>(bar)  once every lane of the warp is done: lane 0 arrives
//                                      on `bar` in each of the cluster's N blocks (mapa gives
//                                      the peer's address of the same shared variable)
//   tma_load_Nd_multicast(smem, map, mbar, mask, c0, ...)  as tma_load_Nd, but the box is
//                                      written at the same offset into the shared memory of
//                                      every block whose rank bit is set in mask, and each
//                                      destination's mbarrier at `mbar`'s offset counts the bytes
//   rasterize_row_clustered<CX, CY>(panel, grid, bx, by), rasterize_col_clustered<CX, CY>:
//                                      rasterize_row / rasterize_col over the grid of clusters,
//                                      each cluster keeping its blocks' relative positions, so
//                                      blocks of one cluster still get tiles that share rows
//                                      (CX > 1) or columns (CY > 1) of the grid.
// Feature macro: TC_HAS_CLUSTER (sm_90 and newer device passes).
#pragma once

#include "memory.h"
#include "raster.h"

#define TC_HAS_CLUSTER (TC_CUDA_ARCH >= 900)

namespace tc {

template <int CX, int CY>
TC_DEVICE int2 rasterize_row_clustered(int panel, uint3 grid, int bx, int by) {
  const uint3 clusters = make_uint3(grid.x / CX, grid.y / CY, grid.z);
  const int2 t = rasterize_row(panel, clusters, bx / CX, by / CY);
  return make_int2(t.x * CX + bx % CX, t.y * CY + by % CY);
}
template <int CX, int CY>
TC_DEVICE int2 rasterize_col_clustered(int panel, uint3 grid, int bx, int by) {
  const uint3 clusters = make_uint3(grid.x / CX, grid.y / CY, grid.z);
  const int2 t = rasterize_col(panel, clusters, bx / CX, by / CY);
  return make_int2(t.x * CX + bx % CX, t.y * CY + by % CY);
}

#if TC_HAS_CLUSTER

TC_DEVICE uint32_t cluster_ctarank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

TC_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

template <int N> TC_DEVICE void mbarrier_arrive_warp_cluster(uint64_t* bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    const uint32_t local = smem_addr(bar);
#pragma unroll
    for (uint32_t rank = 0; rank < N; ++rank) {
      uint32_t remote;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
      // The default semantics (release, CTA scope) order this warp's reads of its own
      // versions before the arrival. Release at cluster scope would cost a MEMBAR.GPU per
      // arrival (every warp, every k-step), which halves a GEMM's speed; nothing the peer
      // reads after acquiring was written by this warp's generic stores.
      asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
    }
  }
}

#define TC_TMA_MULTICAST(RANK, COORDS, ...)                                                   \
  asm volatile("cp.async.bulk.tensor." #RANK "d.shared::cluster.global.mbarrier::complete_tx"  \
               "::bytes.multicast::cluster [%0], [%1, {" COORDS "}], [%2], %3;\n"              \
               ::"r"(smem_addr(smem_dst)), "l"(map), "r"(smem_addr(mbar)),                     \
               "h"(static_cast<uint16_t>(mask)), __VA_ARGS__ : "memory")

TC_DEVICE void tma_load_2d_multicast(void* smem_dst, const void* map, uint64_t* mbar, int mask,
                                     int c0, int c1) {
  TC_TMA_MULTICAST(2, "%4, %5", "r"(c0), "r"(c1));
}
TC_DEVICE void tma_load_3d_multicast(void* smem_dst, const void* map, uint64_t* mbar, int mask,
                                     int c0, int c1, int c2) {
  TC_TMA_MULTICAST(3, "%4, %5, %6", "r"(c0), "r"(c1), "r"(c2));
}
TC_DEVICE void tma_load_4d_multicast(void* smem_dst, const void* map, uint64_t* mbar, int mask,
                                     int c0, int c1, int c2, int c3) {
  TC_TMA_MULTICAST(4, "%4, %5, %6, %7", "r"(c0), "r"(c1), "r"(c2), "r"(c3));
}
TC_DEVICE void tma_load_5d_multicast(void* smem_dst, const void* map, uint64_t* mbar, int mask,
                                     int c0, int c1, int c2, int c3, int c4) {
  TC_TMA_MULTICAST(5, "%4, %5, %6, %7, %8", "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4));
}
#undef TC_TMA_MULTICAST

#endif  // TC_HAS_CLUSTER

}  // namespace tc
