// tilecraft/raster.h -- threadblock rasterization (T.use_swizzle).
//
// Blocks are launched in linear order L = by * gx + bx. These functions give block L a new
// tile coordinate so that blocks that run at the same time touch a compact patch of the
// output (better L2 reuse). Returned int2: .x = new bx (tile column), .y = new by (tile row).
// Both are bijections of [0, gx) x [0, gy); blockIdx.z is not touched. panel <= 0 returns
// (bx, by) unchanged. gx = grid.x, gy = grid.y (pass gridDim).
//
// rasterize_row(panel, grid, bx, by, serpentine = true): the grid is cut into panels of
// `panel` consecutive tile rows (the last panel may have fewer rows); blocks fill one panel
// column by column, top to bottom inside a column:
//     span = panel * gx
//     p    = L / span,  o = L % span               (panel index, offset inside the panel)
//     h    = min(panel, gy - p * panel)            (rows in this panel)
//     x    = o / h,     y = p * panel + o % h
//     if serpentine and p is odd:  x = gx - 1 - x  (odd panels walk right to left)
//
// rasterize_col(panel, grid, bx, by, serpentine = true): the transpose: panels of `panel`
// consecutive tile columns, filled row by row, left to right inside a row:
//     span = panel * gy
//     p    = L / span,  o = L % span
//     w    = min(panel, gx - p * panel)            (columns in this panel)
//     y    = o / w,     x = p * panel + o % w
//     if serpentine and p is odd:  y = gy - 1 - y  (odd panels walk bottom to top)
//
// launch_wave_parity(): 0 for a block of an even wave, 1 for one of an odd wave, a wave being
// %nsmid blocks in launch order (linear blockIdx, x fastest). That is the GPU's wave only for
// kernels that fit one block per SM; %nsmid counts SM identifiers, which on an H100 SXM are
// the 132 SMs themselves. alternate_k_direction reverses the K order of odd waves with it.
// On sm_90 the count is in clusters (%clusterid in launch order, %nsmid / cluster size of them
// per wave): clusters are launched whole, and every block of one gets the same parity, as the
// blocks that share multicast tiles must walk K in the same order. A launch without clusters
// has clusters of one block, %clusterid = blockIdx, so the two counts agree there.
//
// Python mirror (integer division is floor division on non-negative values):
//   def rasterize_row(panel, gx, gy, bx, by, serpentine=True):
//       if panel <= 0: return bx, by
//       L = by * gx + bx; p, o = divmod(L, panel * gx); h = min(panel, gy - p * panel)
//       x, y = o // h, p * panel + o % h
//       return (gx - 1 - x if serpentine and p % 2 else x), y
#pragma once

#include "types.h"

namespace tc {

TC_DEVICE int2 rasterize_row(int panel, uint3 grid, int bx, int by, bool serpentine = true) {
  if (panel <= 0) return make_int2(bx, by);
  const int gx = static_cast<int>(grid.x), gy = static_cast<int>(grid.y);
  const int linear = by * gx + bx;
  const int span = panel * gx;
  const int p = linear / span, o = linear % span;
  const int left = gy - p * panel, rows = panel < left ? panel : left;
  int x = o / rows;
  const int y = p * panel + o % rows;
  if (serpentine && (p & 1)) x = gx - 1 - x;
  return make_int2(x, y);
}

TC_DEVICE int2 rasterize_col(int panel, uint3 grid, int bx, int by, bool serpentine = true) {
  if (panel <= 0) return make_int2(bx, by);
  const int gx = static_cast<int>(grid.x), gy = static_cast<int>(grid.y);
  const int linear = by * gx + bx;
  const int span = panel * gy;
  const int p = linear / span, o = linear % span;
  const int left = gx - p * panel, cols = panel < left ? panel : left;
  int y = o / cols;
  const int x = p * panel + o % cols;
  if (serpentine && (p & 1)) y = gy - 1 - y;
  return make_int2(x, y);
}

TC_DEVICE int launch_wave_parity() {
  unsigned sms;
  asm("mov.u32 %0, %%nsmid;" : "=r"(sms));
#if TC_CUDA_ARCH >= 900
  unsigned x, y, z, nx, ny, size;
  asm("mov.u32 %0, %%clusterid.x;" : "=r"(x));
  asm("mov.u32 %0, %%clusterid.y;" : "=r"(y));
  asm("mov.u32 %0, %%clusterid.z;" : "=r"(z));
  asm("mov.u32 %0, %%nclusterid.x;" : "=r"(nx));
  asm("mov.u32 %0, %%nclusterid.y;" : "=r"(ny));
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
  const unsigned linear = (z * ny + y) * nx + x;
  const unsigned per_wave = max(sms / size, 1u);   // a cluster wider than the GPU: one per wave
  return static_cast<int>((linear / per_wave) & 1u);
#else
  const unsigned linear = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  return static_cast<int>((linear / sms) & 1u);
#endif
}

}  // namespace tc
