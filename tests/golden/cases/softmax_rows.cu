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
  float row_max[8];
  // golden_corpus.py:52
  float row_sum[8];
  // golden_corpus.py:53
  #pragma unroll
  for (int l = 0; l < 8; ++l) {
    x[l] = tc::cvt<float>((bx * 16 + l * 2 + tx / 64 < 100 ? X[((bx * 16 + l * 2 + tx / 64)) * 64 + tx % 64] : tc::cvt<half_t>(0.0f)));
  }
  float row_max_red[8];
  // golden_corpus.py:54
  row_max_red[0] = tc::max(__int_as_float(0xff800000), x[0]);
  row_max_red[1] = tc::max(__int_as_float(0xff800000), x[1]);
  row_max_red[2] = tc::max(__int_as_float(0xff800000), x[2]);
  row_max_red[3] = tc::max(__int_as_float(0xff800000), x[3]);
  row_max_red[4] = tc::max(__int_as_float(0xff800000), x[4]);
  row_max_red[5] = tc::max(__int_as_float(0xff800000), x[5]);
  row_max_red[6] = tc::max(__int_as_float(0xff800000), x[6]);
  row_max_red[7] = tc::max(__int_as_float(0xff800000), x[7]);
  row_max_red[0] = tc::max(row_max_red[0], tc::shfl_xor(row_max_red[0], 1));
  row_max_red[1] = tc::max(row_max_red[1], tc::shfl_xor(row_max_red[1], 1));
  row_max_red[2] = tc::max(row_max_red[2], tc::shfl_xor(row_max_red[2], 1));
  row_max_red[3] = tc::max(row_max_red[3], tc::shfl_xor(row_max_red[3], 1));
  row_max_red[4] = tc::max(row_max_red[4], tc::shfl_xor(row_max_red[4], 1));
  row_max_red[5] = tc::max(row_max_red[5], tc::shfl_xor(row_max_red[5], 1));
  row_max_red[6] = tc::max(row_max_red[6], tc::shfl_xor(row_max_red[6], 1));
  row_max_red[7] = tc::max(row_max_red[7], tc::shfl_xor(row_max_red[7], 1));
  row_max_red[0] = tc::max(row_max_red[0], tc::shfl_xor(row_max_red[0], 2));
  row_max_red[1] = tc::max(row_max_red[1], tc::shfl_xor(row_max_red[1], 2));
  row_max_red[2] = tc::max(row_max_red[2], tc::shfl_xor(row_max_red[2], 2));
  row_max_red[3] = tc::max(row_max_red[3], tc::shfl_xor(row_max_red[3], 2));
  row_max_red[4] = tc::max(row_max_red[4], tc::shfl_xor(row_max_red[4], 2));
  row_max_red[5] = tc::max(row_max_red[5], tc::shfl_xor(row_max_red[5], 2));
  row_max_red[6] = tc::max(row_max_red[6], tc::shfl_xor(row_max_red[6], 2));
  row_max_red[7] = tc::max(row_max_red[7], tc::shfl_xor(row_max_red[7], 2));
  row_max_red[0] = tc::max(row_max_red[0], tc::shfl_xor(row_max_red[0], 4));
  row_max_red[1] = tc::max(row_max_red[1], tc::shfl_xor(row_max_red[1], 4));
  row_max_red[2] = tc::max(row_max_red[2], tc::shfl_xor(row_max_red[2], 4));
  row_max_red[3] = tc::max(row_max_red[3], tc::shfl_xor(row_max_red[3], 4));
  row_max_red[4] = tc::max(row_max_red[4], tc::shfl_xor(row_max_red[4], 4));
  row_max_red[5] = tc::max(row_max_red[5], tc::shfl_xor(row_max_red[5], 4));
  row_max_red[6] = tc::max(row_max_red[6], tc::shfl_xor(row_max_red[6], 4));
  row_max_red[7] = tc::max(row_max_red[7], tc::shfl_xor(row_max_red[7], 4));
  row_max_red[0] = tc::max(row_max_red[0], tc::shfl_xor(row_max_red[0], 8));
  row_max_red[1] = tc::max(row_max_red[1], tc::shfl_xor(row_max_red[1], 8));
  row_max_red[2] = tc::max(row_max_red[2], tc::shfl_xor(row_max_red[2], 8));
  row_max_red[3] = tc::max(row_max_red[3], tc::shfl_xor(row_max_red[3], 8));
  row_max_red[4] = tc::max(row_max_red[4], tc::shfl_xor(row_max_red[4], 8));
  row_max_red[5] = tc::max(row_max_red[5], tc::shfl_xor(row_max_red[5], 8));
  row_max_red[6] = tc::max(row_max_red[6], tc::shfl_xor(row_max_red[6], 8));
  row_max_red[7] = tc::max(row_max_red[7], tc::shfl_xor(row_max_red[7], 8));
  row_max_red[0] = tc::max(row_max_red[0], tc::shfl_xor(row_max_red[0], 16));
  row_max_red[1] = tc::max(row_max_red[1], tc::shfl_xor(row_max_red[1], 16));
  row_max_red[2] = tc::max(row_max_red[2], tc::shfl_xor(row_max_red[2], 16));
  row_max_red[3] = tc::max(row_max_red[3], tc::shfl_xor(row_max_red[3], 16));
  row_max_red[4] = tc::max(row_max_red[4], tc::shfl_xor(row_max_red[4], 16));
  row_max_red[5] = tc::max(row_max_red[5], tc::shfl_xor(row_max_red[5], 16));
  row_max_red[6] = tc::max(row_max_red[6], tc::shfl_xor(row_max_red[6], 16));
  row_max_red[7] = tc::max(row_max_red[7], tc::shfl_xor(row_max_red[7], 16));
  float* row_max_ws = reinterpret_cast<float*>(tc_smem + 0);
  row_max_ws[tx * 8] = row_max_red[0];
  row_max_ws[tx * 8 + 1] = row_max_red[1];
  row_max_ws[tx * 8 + 2] = row_max_red[2];
  row_max_ws[tx * 8 + 3] = row_max_red[3];
  row_max_ws[tx * 8 + 4] = row_max_red[4];
  row_max_ws[tx * 8 + 5] = row_max_red[5];
  row_max_ws[tx * 8 + 6] = row_max_red[6];
  row_max_ws[tx * 8 + 7] = row_max_red[7];
  tc::syncthreads();
  row_max_red[0] = tc::max(row_max_red[0], row_max_ws[(tx ^ 32) * 8]);
  row_max_red[1] = tc::max(row_max_red[1], row_max_ws[(tx ^ 32) * 8 + 1]);
  row_max_red[2] = tc::max(row_max_red[2], row_max_ws[(tx ^ 32) * 8 + 2]);
  row_max_red[3] = tc::max(row_max_red[3], row_max_ws[(tx ^ 32) * 8 + 3]);
  row_max_red[4] = tc::max(row_max_red[4], row_max_ws[(tx ^ 32) * 8 + 4]);
  row_max_red[5] = tc::max(row_max_red[5], row_max_ws[(tx ^ 32) * 8 + 5]);
  row_max_red[6] = tc::max(row_max_red[6], row_max_ws[(tx ^ 32) * 8 + 6]);
  row_max_red[7] = tc::max(row_max_red[7], row_max_ws[(tx ^ 32) * 8 + 7]);
  tc::syncthreads();
  row_max[0] = row_max_red[0];
  row_max[1] = row_max_red[1];
  row_max[2] = row_max_red[2];
  row_max[3] = row_max_red[3];
  row_max[4] = row_max_red[4];
  row_max[5] = row_max_red[5];
  row_max[6] = row_max_red[6];
  row_max[7] = row_max_red[7];
  // golden_corpus.py:55
  #pragma unroll
  for (int l_1 = 0; l_1 < 8; ++l_1) {
    // golden_corpus.py:56
    x[l_1] = expf(x[l_1] - row_max[l_1]);
  }
  float row_sum_red[8];
  // golden_corpus.py:57
  row_sum_red[0] = 0.0f + x[0];
  row_sum_red[1] = 0.0f + x[1];
  row_sum_red[2] = 0.0f + x[2];
  row_sum_red[3] = 0.0f + x[3];
  row_sum_red[4] = 0.0f + x[4];
  row_sum_red[5] = 0.0f + x[5];
  row_sum_red[6] = 0.0f + x[6];
  row_sum_red[7] = 0.0f + x[7];
  row_sum_red[0] = row_sum_red[0] + tc::shfl_xor(row_sum_red[0], 1);
  row_sum_red[1] = row_sum_red[1] + tc::shfl_xor(row_sum_red[1], 1);
  row_sum_red[2] = row_sum_red[2] + tc::shfl_xor(row_sum_red[2], 1);
  row_sum_red[3] = row_sum_red[3] + tc::shfl_xor(row_sum_red[3], 1);
  row_sum_red[4] = row_sum_red[4] + tc::shfl_xor(row_sum_red[4], 1);
  row_sum_red[5] = row_sum_red[5] + tc::shfl_xor(row_sum_red[5], 1);
  row_sum_red[6] = row_sum_red[6] + tc::shfl_xor(row_sum_red[6], 1);
  row_sum_red[7] = row_sum_red[7] + tc::shfl_xor(row_sum_red[7], 1);
  row_sum_red[0] = row_sum_red[0] + tc::shfl_xor(row_sum_red[0], 2);
  row_sum_red[1] = row_sum_red[1] + tc::shfl_xor(row_sum_red[1], 2);
  row_sum_red[2] = row_sum_red[2] + tc::shfl_xor(row_sum_red[2], 2);
  row_sum_red[3] = row_sum_red[3] + tc::shfl_xor(row_sum_red[3], 2);
  row_sum_red[4] = row_sum_red[4] + tc::shfl_xor(row_sum_red[4], 2);
  row_sum_red[5] = row_sum_red[5] + tc::shfl_xor(row_sum_red[5], 2);
  row_sum_red[6] = row_sum_red[6] + tc::shfl_xor(row_sum_red[6], 2);
  row_sum_red[7] = row_sum_red[7] + tc::shfl_xor(row_sum_red[7], 2);
  row_sum_red[0] = row_sum_red[0] + tc::shfl_xor(row_sum_red[0], 4);
  row_sum_red[1] = row_sum_red[1] + tc::shfl_xor(row_sum_red[1], 4);
  row_sum_red[2] = row_sum_red[2] + tc::shfl_xor(row_sum_red[2], 4);
  row_sum_red[3] = row_sum_red[3] + tc::shfl_xor(row_sum_red[3], 4);
  row_sum_red[4] = row_sum_red[4] + tc::shfl_xor(row_sum_red[4], 4);
  row_sum_red[5] = row_sum_red[5] + tc::shfl_xor(row_sum_red[5], 4);
  row_sum_red[6] = row_sum_red[6] + tc::shfl_xor(row_sum_red[6], 4);
  row_sum_red[7] = row_sum_red[7] + tc::shfl_xor(row_sum_red[7], 4);
  row_sum_red[0] = row_sum_red[0] + tc::shfl_xor(row_sum_red[0], 8);
  row_sum_red[1] = row_sum_red[1] + tc::shfl_xor(row_sum_red[1], 8);
  row_sum_red[2] = row_sum_red[2] + tc::shfl_xor(row_sum_red[2], 8);
  row_sum_red[3] = row_sum_red[3] + tc::shfl_xor(row_sum_red[3], 8);
  row_sum_red[4] = row_sum_red[4] + tc::shfl_xor(row_sum_red[4], 8);
  row_sum_red[5] = row_sum_red[5] + tc::shfl_xor(row_sum_red[5], 8);
  row_sum_red[6] = row_sum_red[6] + tc::shfl_xor(row_sum_red[6], 8);
  row_sum_red[7] = row_sum_red[7] + tc::shfl_xor(row_sum_red[7], 8);
  row_sum_red[0] = row_sum_red[0] + tc::shfl_xor(row_sum_red[0], 16);
  row_sum_red[1] = row_sum_red[1] + tc::shfl_xor(row_sum_red[1], 16);
  row_sum_red[2] = row_sum_red[2] + tc::shfl_xor(row_sum_red[2], 16);
  row_sum_red[3] = row_sum_red[3] + tc::shfl_xor(row_sum_red[3], 16);
  row_sum_red[4] = row_sum_red[4] + tc::shfl_xor(row_sum_red[4], 16);
  row_sum_red[5] = row_sum_red[5] + tc::shfl_xor(row_sum_red[5], 16);
  row_sum_red[6] = row_sum_red[6] + tc::shfl_xor(row_sum_red[6], 16);
  row_sum_red[7] = row_sum_red[7] + tc::shfl_xor(row_sum_red[7], 16);
  float* row_sum_ws = reinterpret_cast<float*>(tc_smem + 4096);
  row_sum_ws[tx * 8] = row_sum_red[0];
  row_sum_ws[tx * 8 + 1] = row_sum_red[1];
  row_sum_ws[tx * 8 + 2] = row_sum_red[2];
  row_sum_ws[tx * 8 + 3] = row_sum_red[3];
  row_sum_ws[tx * 8 + 4] = row_sum_red[4];
  row_sum_ws[tx * 8 + 5] = row_sum_red[5];
  row_sum_ws[tx * 8 + 6] = row_sum_red[6];
  row_sum_ws[tx * 8 + 7] = row_sum_red[7];
  tc::syncthreads();
  row_sum_red[0] = row_sum_red[0] + row_sum_ws[(tx ^ 32) * 8];
  row_sum_red[1] = row_sum_red[1] + row_sum_ws[(tx ^ 32) * 8 + 1];
  row_sum_red[2] = row_sum_red[2] + row_sum_ws[(tx ^ 32) * 8 + 2];
  row_sum_red[3] = row_sum_red[3] + row_sum_ws[(tx ^ 32) * 8 + 3];
  row_sum_red[4] = row_sum_red[4] + row_sum_ws[(tx ^ 32) * 8 + 4];
  row_sum_red[5] = row_sum_red[5] + row_sum_ws[(tx ^ 32) * 8 + 5];
  row_sum_red[6] = row_sum_red[6] + row_sum_ws[(tx ^ 32) * 8 + 6];
  row_sum_red[7] = row_sum_red[7] + row_sum_ws[(tx ^ 32) * 8 + 7];
  tc::syncthreads();
  row_sum[0] = row_sum_red[0];
  row_sum[1] = row_sum_red[1];
  row_sum[2] = row_sum_red[2];
  row_sum[3] = row_sum_red[3];
  row_sum[4] = row_sum_red[4];
  row_sum[5] = row_sum_red[5];
  row_sum[6] = row_sum_red[6];
  row_sum[7] = row_sum_red[7];
  // golden_corpus.py:58
  #pragma unroll
  for (int l_2 = 0; l_2 < 8; ++l_2) {
    // golden_corpus.py:59
    x[l_2] = x[l_2] / row_sum[l_2];
  }
  // golden_corpus.py:60
  #pragma unroll
  for (int l_3 = 0; l_3 < 8; ++l_3) {
    if (bx * 16 + l_3 * 2 + tx / 64 < 100) {
      Y[((bx * 16 + l_3 * 2 + tx / 64)) * 64 + tx % 64] = tc::cvt<half_t>(x[l_3]);
    }
  }
}
