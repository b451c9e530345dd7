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

extern "C" __global__ void __launch_bounds__(128) main_kernel0(half_t* __restrict__ X, half_t* __restrict__ Y) {
  extern __shared__ __align__(1024) unsigned char tc_smem[];
  const int tx = threadIdx.x;
  const int bx = blockIdx.x;
  // golden_corpus.py:50
  float x[8];
  // golden_corpus.py:51
  float row_max[2];
  // golden_corpus.py:52
  float row_sum[2];
  // golden_corpus.py:53
  #pragma unroll
  for (int l = 0; l < 8; ++l) {
    x[l] = tc::cvt<float>((bx * 16 + l / 4 * 8 + tx * 4 / 64 < 100 ? X[((bx * 16 + l / 4 * 8 + tx * 4 / 64)) * 64 + tx * 4 % 64 + l % 4] : tc::cvt<half_t>(0.0f)));
  }
  float row_max_red[2];
  // golden_corpus.py:54
  row_max_red[0] = tc::max(tc::max(x[0], x[1]), tc::max(x[2], x[3]));
  row_max_red[1] = tc::max(tc::max(x[4], x[5]), tc::max(x[6], x[7]));
  row_max_red[0] = tc::max(row_max_red[0], tc::shfl_xor(row_max_red[0], 1));
  row_max_red[1] = tc::max(row_max_red[1], tc::shfl_xor(row_max_red[1], 1));
  row_max_red[0] = tc::max(row_max_red[0], tc::shfl_xor(row_max_red[0], 2));
  row_max_red[1] = tc::max(row_max_red[1], tc::shfl_xor(row_max_red[1], 2));
  row_max_red[0] = tc::max(row_max_red[0], tc::shfl_xor(row_max_red[0], 4));
  row_max_red[1] = tc::max(row_max_red[1], tc::shfl_xor(row_max_red[1], 4));
  row_max_red[0] = tc::max(row_max_red[0], tc::shfl_xor(row_max_red[0], 8));
  row_max_red[1] = tc::max(row_max_red[1], tc::shfl_xor(row_max_red[1], 8));
  row_max[0] = row_max_red[0];
  row_max[1] = row_max_red[1];
  // golden_corpus.py:55
  #pragma unroll
  for (int l_1 = 0; l_1 < 8; ++l_1) {
    // golden_corpus.py:56
    x[l_1] = expf(x[l_1] - row_max[l_1 / 4]);
  }
  float row_sum_red[2];
  // golden_corpus.py:57
  row_sum_red[0] = x[0] + x[1] + (x[2] + x[3]);
  row_sum_red[1] = x[4] + x[5] + (x[6] + x[7]);
  row_sum_red[0] = row_sum_red[0] + tc::shfl_xor(row_sum_red[0], 1);
  row_sum_red[1] = row_sum_red[1] + tc::shfl_xor(row_sum_red[1], 1);
  row_sum_red[0] = row_sum_red[0] + tc::shfl_xor(row_sum_red[0], 2);
  row_sum_red[1] = row_sum_red[1] + tc::shfl_xor(row_sum_red[1], 2);
  row_sum_red[0] = row_sum_red[0] + tc::shfl_xor(row_sum_red[0], 4);
  row_sum_red[1] = row_sum_red[1] + tc::shfl_xor(row_sum_red[1], 4);
  row_sum_red[0] = row_sum_red[0] + tc::shfl_xor(row_sum_red[0], 8);
  row_sum_red[1] = row_sum_red[1] + tc::shfl_xor(row_sum_red[1], 8);
  row_sum[0] = row_sum_red[0];
  row_sum[1] = row_sum_red[1];
  // golden_corpus.py:58
  #pragma unroll
  for (int l_2 = 0; l_2 < 8; ++l_2) {
    // golden_corpus.py:59
    x[l_2] = x[l_2] / row_sum[l_2 / 4];
  }
  // golden_corpus.py:60
  #pragma unroll
  for (int l_3 = 0; l_3 < 4; ++l_3) {
    if (bx * 16 + (l_3 * 2 / 4 * 8 + (tx * 4 + l_3 * 2 % 4) / 64) < 100) {
      tc::st_global_32((&Y[((bx * 16 + l_3 * 2 / 4 * 8 + (tx * 4 + l_3 * 2 % 4) / 64)) * 64 + (tx * 4 + l_3 * 2 % 4) % 64]), tc::pack_half2(x[l_3 * 2], x[l_3 * 2 + 1]));
    }
  }
}
