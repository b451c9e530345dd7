#include "tilecraft/tc.h"
using tc::half_t;
using tc::bfloat16_t;
using tc::fp8_e4_t;
using tc::fp8_e5_t;
// Floor division and modulo for index arithmetic that may be negative.
__device__ __forceinline__ long long tc_floordiv(long long a, long long b) {
  long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ long long tc_floormod(long long a, long long b) {
  long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

extern "C" __global__ void __launch_bounds__(128) main_kernel0(float* __restrict__ X, float* __restrict__ Y) {
  extern __shared__ __align__(1024) unsigned char tc_smem[];
  const int tx = threadIdx.x;
  const int bx = blockIdx.x;
  // golden_corpus.py:95
  float x[12];
  // golden_corpus.py:96
  #pragma unroll
  for (int q = 0; q < 3; ++q) {
    tc::st_regs_128((&x[q * 4]), tc::ld_global_128((&X[((q * 512 + tx * 4) / 48) * 48 + (q * 512 + tx * 4) % 48])));
  }
  // golden_corpus.py:97
  float* x_scan = reinterpret_cast<float*>(tc_smem + 0);
  #pragma unroll
  for (int q_1 = 0; q_1 < 3; ++q_1) {
    tc::st_shared_128((&x_scan[(q_1 * 512 + tx * 4) / 48 * 48 + (q_1 * 512 + tx * 4) % 48]), tc::ld_regs_128((&x[q_1 * 4])));
  }
  tc::syncthreads();
  for (int r = 0; r < 1; ++r) {
    float scan_run[12];
    float scan_total[3];
    scan_run[0] = (tx % 4 * 12 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 47] : 0.0f);
    scan_run[1] = scan_run[0] + (tx % 4 * 12 + 1 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 46] : 0.0f);
    scan_run[2] = scan_run[1] + (tx % 4 * 12 + 2 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 45] : 0.0f);
    scan_run[3] = scan_run[2] + (tx % 4 * 12 + 3 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 44] : 0.0f);
    scan_run[4] = scan_run[3] + (tx % 4 * 12 + 4 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 43] : 0.0f);
    scan_run[5] = scan_run[4] + (tx % 4 * 12 + 5 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 42] : 0.0f);
    scan_run[6] = scan_run[5] + (tx % 4 * 12 + 6 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 41] : 0.0f);
    scan_run[7] = scan_run[6] + (tx % 4 * 12 + 7 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 40] : 0.0f);
    scan_run[8] = scan_run[7] + (tx % 4 * 12 + 8 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 39] : 0.0f);
    scan_run[9] = scan_run[8] + (tx % 4 * 12 + 9 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 38] : 0.0f);
    scan_run[10] = scan_run[9] + (tx % 4 * 12 + 10 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 37] : 0.0f);
    scan_run[11] = scan_run[10] + (tx % 4 * 12 + 11 < 48 ? x_scan[tx / 4 * 48 - tx % 4 * 12 + 36] : 0.0f);
    scan_total[0] = scan_run[11];
    scan_total[1] = scan_run[11];
    scan_total[2] = tc::shfl_xor(scan_total[1], 1);
    scan_total[0] = scan_total[0] + ((tx % 4 & 1) != 0 ? scan_total[2] : 0.0f);
    scan_total[1] = scan_total[1] + scan_total[2];
    scan_total[2] = tc::shfl_xor(scan_total[1], 2);
    scan_total[0] = scan_total[0] + ((tx % 4 & 2) != 0 ? scan_total[2] : 0.0f);
    scan_total[1] = scan_total[1] + scan_total[2];
    if (tx % 4 * 12 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 47] = scan_run[0] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 1 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 46] = scan_run[1] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 2 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 45] = scan_run[2] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 3 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 44] = scan_run[3] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 4 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 43] = scan_run[4] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 5 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 42] = scan_run[5] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 6 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 41] = scan_run[6] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 7 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 40] = scan_run[7] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 8 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 39] = scan_run[8] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 9 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 38] = scan_run[9] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 10 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 37] = scan_run[10] + (scan_total[0] - scan_run[11]);
    }
    if (tx % 4 * 12 + 11 < 48) {
      x_scan[tx / 4 * 48 - tx % 4 * 12 + 36] = scan_run[11] + (scan_total[0] - scan_run[11]);
    }
  }
  tc::syncthreads();
  #pragma unroll
  for (int q_2 = 0; q_2 < 3; ++q_2) {
    tc::st_regs_128((&x[q_2 * 4]), tc::ld_shared_128((&x_scan[(q_2 * 512 + tx * 4) / 48 * 48 + (q_2 * 512 + tx * 4) % 48])));
  }
  tc::syncthreads();
  // golden_corpus.py:98
  #pragma unroll
  for (int q_3 = 0; q_3 < 3; ++q_3) {
    tc::st_global_128((&Y[((q_3 * 512 + tx * 4) / 48) * 48 + (q_3 * 512 + tx * 4) % 48]), tc::ld_regs_128((&x[q_3 * 4])));
  }
}
