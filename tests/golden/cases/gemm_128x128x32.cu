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
  // gemm.py:26
  half_t* A_shared = reinterpret_cast<half_t*>(tc_smem + 0);
  // gemm.py:27
  half_t* B_shared = reinterpret_cast<half_t*>(tc_smem + 16384);
  // gemm.py:28
  float C_local[128];
  // gemm.py:32
  #pragma unroll
  for (int l = 0; l < 128; ++l) {
    C_local[l] = 0.0f;
  }
  // gemm.py:33
  if (true) {
    // gemm.py:34
    #pragma unroll
    for (int l_1 = 0; l_1 < 4; ++l_1) {
      tc::cp_async_cg_16((&A_shared[l_1 * 1024 + tx / 4 * 32 + (tx % 4 ^ tx / 4 % 8 / 2) * 8]), (&A[((by * 128 + l_1 * 32 + tx / 4)) * 32 + tx % 4 * 8]), true);
    }
    // gemm.py:35
    #pragma unroll
    for (int l_2 = 0; l_2 < 4; ++l_2) {
      tc::cp_async_cg_16((&B_shared[tx % 16 * 8 / 64 * 2048 + l_2 * 512 + tx / 16 * 64 + (tx % 16 * 8 % 64 / 8 ^ tx / 16) * 8]), (&B[((l_2 * 8 + tx / 16)) * 128 + bx * 128 + tx % 16 * 8]), true);
    }
  }
  // gemm.py:33
  tc::cp_async_commit();
  unsigned int C_local_a[32];
  unsigned int C_local_b[32];
  tc::cp_async_wait<0>();
  tc::syncthreads();
  // gemm.py:36
  #pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
    tc::ldmatrix_x4((&C_local_a[mi * 4]), (&A_shared[tx / 32 % 2 * 2048 + mi * 512 + tx % 32 % 16 * 32 + (tx % 32 / 16 ^ tx % 32 % 16 % 8 / 2) * 8]));
  }
  #pragma unroll
  for (int ni = 0; ni < 4; ++ni) {
    tc::ldmatrix_x4_trans((&C_local_b[ni * 4]), (&B_shared[tx / 32 / 2 * 2048 + tx % 32 % 16 * 64 + (ni * 2 + tx % 32 / 16 ^ tx % 32 % 16 % 8) * 8]));
  }
  // gemm.py:33
  for (int k = 0; k < 1; ++k) {
    // gemm.py:36
    #pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      // gemm.py:33
      if (kk == 1) {
        tc::cp_async_wait<0>();
        tc::syncthreads();
      }
      if (kk < 1) {
        // gemm.py:36
        #pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          tc::ldmatrix_x4((&C_local_a[(kk + 1) % 2 * 16 + mi * 4]), (&A_shared[k * 4096 + tx / 32 % 2 * 2048 + mi * 512 + tx % 32 % 16 * 32 + ((kk + 1) * 2 + tx % 32 / 16 ^ tx % 32 % 16 % 8 / 2) * 8]));
        }
        #pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          tc::ldmatrix_x4_trans((&C_local_b[(kk + 1) % 2 * 16 + ni * 4]), (&B_shared[k * 4096 + tx / 32 / 2 * 2048 + kk * 1024 + tx % 32 % 16 * 64 + (ni * 2 + tx % 32 / 16 ^ tx % 32 % 16 % 8) * 8 + 1024]));
        }
      } else {
        // gemm.py:33
        if (k + 1 < 1) {
          // gemm.py:36
          #pragma unroll
          for (int mi = 0; mi < 4; ++mi) {
            tc::ldmatrix_x4((&C_local_a[mi * 4]), (&A_shared[k * 4096 + tx / 32 % 2 * 2048 + mi * 512 + tx % 32 % 16 * 32 + (tx % 32 / 16 ^ tx % 32 % 16 % 8 / 2) * 8 + 4096]));
          }
          #pragma unroll
          for (int ni = 0; ni < 4; ++ni) {
            tc::ldmatrix_x4_trans((&C_local_b[ni * 4]), (&B_shared[k * 4096 + tx / 32 / 2 * 2048 + tx % 32 % 16 * 64 + (ni * 2 + tx % 32 / 16 ^ tx % 32 % 16 % 8) * 8 + 4096]));
          }
        }
      }
      // gemm.py:33
      if (kk == 0) {
        if (k + 1 < 1) {
          // gemm.py:34
          #pragma unroll
          for (int l_3 = 0; l_3 < 4; ++l_3) {
            tc::cp_async_cg_16((&A_shared[k * 4096 + l_3 * 1024 + tx / 4 * 32 + (tx % 4 ^ tx / 4 % 8 / 2) * 8 + 4096]), (&A[((by * 128 + l_3 * 32 + tx / 4)) * 32 + k * 32 + tx % 4 * 8 + 32]), (k + 1) * 32 + tx % 4 * 8 < 32);
          }
          // gemm.py:35
          #pragma unroll
          for (int l_4 = 0; l_4 < 4; ++l_4) {
            tc::cp_async_cg_16((&B_shared[k * 4096 + tx % 16 * 8 / 64 * 2048 + l_4 * 512 + tx / 16 * 64 + (tx % 16 * 8 % 64 / 8 ^ tx / 16) * 8 + 4096]), (&B[((k * 32 + l_4 * 8 + tx / 16 + 32)) * 128 + bx * 128 + tx % 16 * 8]), (k + 1) * 32 + (l_4 * 8 + tx / 16) < 32);
          }
        }
        // gemm.py:33
        tc::cp_async_commit();
      }
      // gemm.py:36
      #pragma unroll
      for (int mi_1 = 0; mi_1 < 4; ++mi_1) {
        #pragma unroll
        for (int ni_1 = 0; ni_1 < 8; ++ni_1) {
          tc::mma_m16n8k16_f16_f32((&C_local[mi_1 * 32 + ni_1 * 4]), (&C_local_a[kk % 2 * 16 + mi_1 * 4]), (&C_local_b[kk % 2 * 16 + ni_1 * 2]), (&C_local[mi_1 * 32 + ni_1 * 4]));
        }
      }
    }
  }
  // gemm.py:33
  tc::cp_async_wait_all();
  // gemm.py:37
  #pragma unroll
  for (int l_5 = 0; l_5 < 64; ++l_5) {
    tc::st_global_32((&C[((by * 128 + tx / 32 % 2 * 64 + l_5 * 2 / 32 * 16 + tx % 32 / 4 + l_5 * 2 % 4 / 2 * 8)) * 128 + bx * 128 + tx / 64 * 64 + l_5 * 2 / 4 % 8 * 8 + tx % 32 % 4 * 2]), tc::pack_half2(C_local[l_5 * 2], C_local[l_5 * 2 + 1]));
  }
}
