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

extern "C" __global__ void __launch_bounds__(128) main_kernel0(half_t* __restrict__ A, half_t* __restrict__ B, half_t* __restrict__ C) {
  extern __shared__ __align__(1024) unsigned char tc_smem[];
  const int tx = threadIdx.x;
  const int bx = blockIdx.x;
  const int by = blockIdx.y;
  // golden_corpus.py:73
  half_t* A_s = reinterpret_cast<half_t*>(tc_smem + 0);
  // golden_corpus.py:74
  half_t* B_s = reinterpret_cast<half_t*>(tc_smem + 4096);
  // golden_corpus.py:75
  half_t A_f[16];
  // golden_corpus.py:76
  float C_f[32];
  // golden_corpus.py:77
  #pragma unroll
  for (int l = 0; l < 32; ++l) {
    C_f[l] = 0.0f;
  }
  // golden_corpus.py:78
  for (int k = 0; k < 2; ++k) {
    tc::syncthreads();
    // golden_corpus.py:79
    #pragma unroll
    for (int l_1 = 0; l_1 < 2; ++l_1) {
      tc::st_shared_128((&A_s[l_1 * 1024 + tx / 4 * 32 + (tx % 4 ^ tx / 4 % 8 / 2) * 8]), tc::ld_global_128((&A[((by * 64 + l_1 * 32 + tx / 4)) * 64 + k * 32 + tx % 4 * 8])));
    }
    // golden_corpus.py:80
    #pragma unroll
    for (int l_2 = 0; l_2 < 2; ++l_2) {
      tc::st_shared_128((&B_s[l_2 * 1024 + tx / 8 * 64 + (tx % 8 ^ tx / 8 % 8) * 8]), tc::ld_global_128((&B[((k * 32 + l_2 * 16 + tx / 8)) * 64 + bx * 64 + tx % 8 * 8])));
    }
    // golden_corpus.py:81
    tc::syncthreads();
    #pragma unroll
    for (int q = 0; q < 8; ++q) {
      tc::st_regs_32((&A_f[q * 2]), tc::ld_shared_32((&A_s[tx / 32 * 512 + tx % 32 / 4 * 32 + q * 2 % 8 / 2 % 2 * 256 + (q * 2 / 8 * 2 + q * 2 % 8 / 2 / 2 ^ tx % 32 / 4 / 2) * 8 + tx % 32 % 4 * 2])));
    }
    unsigned int C_f_a[4];
    unsigned int C_f_b[16];
    // golden_corpus.py:82
    #pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      #pragma unroll
      for (int mi = 0; mi < 1; ++mi) {
        C_f_a[mi * 4] = tc::pack_half2(A_f[kk * 8 + mi * 8], A_f[kk * 8 + mi * 8 + 1]);
        C_f_a[mi * 4 + 1] = tc::pack_half2(A_f[kk * 8 + mi * 8 + 2], A_f[kk * 8 + mi * 8 + 3]);
        C_f_a[mi * 4 + 2] = tc::pack_half2(A_f[kk * 8 + mi * 8 + 4], A_f[kk * 8 + mi * 8 + 5]);
        C_f_a[mi * 4 + 3] = tc::pack_half2(A_f[kk * 8 + mi * 8 + 6], A_f[kk * 8 + mi * 8 + 7]);
      }
      #pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        tc::ldmatrix_x4_trans((&C_f_b[ni * 2 * 2]), (&B_s[kk * 1024 + tx % 32 % 16 * 64 + (ni * 2 + tx % 32 / 16 ^ tx % 32 % 16 % 8) * 8]));
      }
      #pragma unroll
      for (int mi_1 = 0; mi_1 < 1; ++mi_1) {
        #pragma unroll
        for (int ni_1 = 0; ni_1 < 8; ++ni_1) {
          tc::mma_m16n8k16_f16_f32((&C_f[mi_1 * 32 + ni_1 * 4]), (&C_f_a[mi_1 * 4]), (&C_f_b[ni_1 * 2]), (&C_f[mi_1 * 32 + ni_1 * 4]));
        }
      }
    }
  }
  // golden_corpus.py:83
  #pragma unroll
  for (int l_3 = 0; l_3 < 16; ++l_3) {
    tc::st_global_32((&C[((by * 64 + tx / 32 * 16 + tx % 32 / 4 + l_3 * 2 % 4 / 2 * 8)) * 64 + bx * 64 + l_3 * 2 / 4 * 8 + tx % 32 % 4 * 2]), tc::pack_half2(C_f[l_3 * 2], C_f[l_3 * 2 + 1]));
  }
}
