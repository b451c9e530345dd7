"""tc::wgmma_* wrappers on a Hopper GPU: one warpgroup, one tile, compared with torch.

Each kernel stages A (64 x K) and B (K x N, passed transposed as Bt = B^T, N x K, so that both
operands are K-major) from global into shared memory in a layout the PTX ISA defines, builds
the matrix descriptors with tc::make_smem_desc, runs the wgmma wrapper(s) and writes D through
the documented accumulator layout. Outputs start as NaN.

* wgmma_{ss,rs}_{f16,bf16}_n{64,128}: K = 16, no swizzle. D = 2 * A @ B: the first wgmma runs
  with scale_d = 0 on accumulators poisoned with NaN (so it must ignore them), the second with
  scale_d = 1 accumulates the same product again. `rs` takes A from registers.
* wgmma_sw128_f16_n{64,128}: K = 64, 128-byte swizzle, four k16 steps that advance both
  descriptors' start addresses by 32 bytes; D = A @ B.
Needs an sm_90 GPU, torch and nvcc; skipped elsewhere.
"""
import pytest

from gpu_requirements import require_hopper

torch = require_hopper("wgmma needs")

from tilecraft.backends.cuda.runtime import CudaKernel, CudaModule, compile_cubin  # noqa: E402

SOURCE = r"""
#include "tilecraft/tc.h"

// ---- shared-memory layouts (PTX ISA 9.7.15.5.1.2.1.3 "Canonical Layouts", with
// T = 16 bytes / 2 bytes = 8 elements; LBO / SBO as defined in 9.7.15.5.1.2.1.1 and
// 9.7.15.5.1.2.1.2, packed per 9.7.15.5.1.2.2 "Matrix Descriptor Format").
//
// K-major, no swizzle: ((8,m),(T,2k)):((1T,SBO),(1,LBO)) in elements. A core matrix is 8 rows
// (M for A, N for B) x 8 elements of K = 16 contiguous bytes per row, 128 contiguous bytes in
// all. For a (rows x 16) tile we put the two core matrices of an 8-row group side by side
// (LBO = 128 bytes, the K direction) and 8-row groups one after the other (SBO = 256 bytes):
__device__ __forceinline__ int kmajor_offset(int r, int k) {
  return (r / 8) * 256 + (k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2;
}
constexpr uint32_t LBO_NOSWIZZLE = 128, SBO_NOSWIZZLE = 256;

// K-major, 128-byte swizzle: ((8,m),(T,2k)):((8T,SBO),(1,T)) with Swizzle<3,4,3>: each row
// holds 64 elements (128 bytes) of K, 8 rows form a 1024-byte atom, atoms follow each other
// (SBO = 1024; LBO unused, encoded as 1 = 16 bytes). Within an atom, the 16-byte chunk c of
// row r is stored at chunk position c ^ r (the XOR of address bits 4-6 with bits 7-9).
// Tiles start on 1024-byte boundaries, so the base offset is 0.
__device__ __forceinline__ int sw128_offset(int r, int k) {
  return (r / 8) * 1024 + (r % 8) * 128 + (((k / 8) ^ (r % 8)) * 16) + (k % 8) * 2;
}

// Accumulator register i of this thread -> (row, col) of D (documented in wgmma.h).
__device__ __forceinline__ void store_d(float* D, int n, const float* d, int count) {
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  for (int i = 0; i < count; ++i) {
    const int row = 16 * warp + 8 * ((i / 2) % 2) + lane / 4;
    const int col = 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
    D[row * n + col] = d[i];
  }
}

template <int N, class Ops, bool RS>
__device__ __forceinline__ void k16_body(const uint16_t* A, const uint16_t* Bt, float* D) {
  __shared__ __align__(128) unsigned char sA[64 * 16 * 2];
  __shared__ __align__(128) unsigned char sB[N * 16 * 2];
  const int t = threadIdx.x;
  for (int i = t; i < 64 * 16; i += blockDim.x)
    *reinterpret_cast<uint16_t*>(sA + kmajor_offset(i / 16, i % 16)) = A[i];
  for (int i = t; i < N * 16; i += blockDim.x)
    *reinterpret_cast<uint16_t*>(sB + kmajor_offset(i / 16, i % 16)) = Bt[i];
  tc::fence_proxy_async_shared();
  __syncthreads();
  const uint64_t da = tc::make_smem_desc(sA, TC_SWIZZLE_NONE, LBO_NOSWIZZLE, SBO_NOSWIZZLE);
  const uint64_t db = tc::make_smem_desc(sB, TC_SWIZZLE_NONE, LBO_NOSWIZZLE, SBO_NOSWIZZLE);

  // Register A (wgmma.h, PTX ISA Figure 148): the m16n8k16 A fragment of the warp's rows.
  const int warp = (t / 32) % 4, g = (t % 32) / 4, q = t % 4;
  auto pair = [&](int r, int c) {
    return static_cast<uint32_t>(A[r * 16 + c]) | (static_cast<uint32_t>(A[r * 16 + c + 1]) << 16);
  };
  uint32_t a[4] = {pair(16 * warp + g, 2 * q), pair(16 * warp + g + 8, 2 * q),
                   pair(16 * warp + g, 2 * q + 8), pair(16 * warp + g + 8, 2 * q + 8)};

  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = __int_as_float(0x7fc00000);  // NaN: scale_d = 0 drops it
  tc::wgmma_fence_operand(d);
  tc::wgmma_fence_operand(a);
  tc::wgmma_fence();
  if (RS) Ops::rs(d, a, db, 0); else Ops::ss(d, da, db, 0);
  tc::wgmma_commit_group();
  tc::wgmma_wait_group<0>();
  tc::wgmma_fence_operand(d);
  tc::wgmma_fence();
  if (RS) Ops::rs(d, a, db, 1); else Ops::ss(d, da, db, 1);
  tc::wgmma_commit_group();
  tc::wgmma_wait_group<0>();
  tc::wgmma_fence_operand(d);
  store_d(D, N, d, N / 2);
}

template <int N, class Ops>
__device__ __forceinline__ void sw128_body(const uint16_t* A, const uint16_t* Bt, float* D) {
  __shared__ __align__(1024) unsigned char sA[64 * 64 * 2];
  __shared__ __align__(1024) unsigned char sB[N * 64 * 2];
  if ((tc::smem_addr(sA) | tc::smem_addr(sB)) % 1024 != 0) return;  // D stays NaN
  const int t = threadIdx.x;
  for (int i = t; i < 64 * 64; i += blockDim.x)
    *reinterpret_cast<uint16_t*>(sA + sw128_offset(i / 64, i % 64)) = A[i];
  for (int i = t; i < N * 64; i += blockDim.x)
    *reinterpret_cast<uint16_t*>(sB + sw128_offset(i / 64, i % 64)) = Bt[i];
  tc::fence_proxy_async_shared();
  __syncthreads();
  const uint64_t da = tc::make_smem_desc(sA, TC_SWIZZLE_128B, 16, 1024);
  const uint64_t db = tc::make_smem_desc(sB, TC_SWIZZLE_128B, 16, 1024);
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  tc::wgmma_fence_operand(d);
  tc::wgmma_fence();
#pragma unroll
  for (int s = 0; s < 4; ++s)  // k16 step s starts 16 elements = 32 bytes into each row
    Ops::ss(d, tc::smem_desc_advance(da, 32 * s), tc::smem_desc_advance(db, 32 * s), s > 0);
  tc::wgmma_commit_group();
  tc::wgmma_wait_group<0>();
  tc::wgmma_fence_operand(d);
  store_d(D, N, d, N / 2);
}

#define TC_TEST_OPS(N, T)                                                                    \
  struct ops_##T##_n##N {                                                                    \
    static __device__ __forceinline__ void ss(float* d, uint64_t da, uint64_t db, int s) {   \
      tc::wgmma_m64n##N##k16_f32_##T(d, da, db, s);                                          \
    }                                                                                        \
    static __device__ __forceinline__ void rs(float* d, const uint32_t* a, uint64_t db,      \
                                              int s) {                                       \
      tc::wgmma_m64n##N##k16_f32_##T##_rs(d, a, db, s);                                      \
    }                                                                                        \
  };                                                                                         \
  extern "C" __global__ void __launch_bounds__(128, 1)                                       \
      wgmma_ss_##T##_n##N(const uint16_t* A, const uint16_t* Bt, float* D) {                 \
    k16_body<N, ops_##T##_n##N, false>(A, Bt, D);                                            \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(128, 1)                                       \
      wgmma_rs_##T##_n##N(const uint16_t* A, const uint16_t* Bt, float* D) {                 \
    k16_body<N, ops_##T##_n##N, true>(A, Bt, D);                                             \
  }

TC_TEST_OPS(64, f16)
TC_TEST_OPS(128, f16)
TC_TEST_OPS(64, bf16)
TC_TEST_OPS(128, bf16)

extern "C" __global__ void __launch_bounds__(128, 1)
    wgmma_sw128_f16_n64(const uint16_t* A, const uint16_t* Bt, float* D) {
  sw128_body<64, ops_f16_n64>(A, Bt, D);
}
extern "C" __global__ void __launch_bounds__(128, 1)
    wgmma_sw128_f16_n128(const uint16_t* A, const uint16_t* Bt, float* D) {
  sw128_body<128, ops_f16_n128>(A, Bt, D);
}
"""

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(scope="module")
def module():
    compiled = compile_cubin(SOURCE, "sm_90a")
    return CudaModule(compiled.cubin)


def _run(module, name, a, b, n):
    bt = b.t().contiguous()
    out = torch.full((64, n), float("nan"), dtype=torch.float32, device="cuda")
    kernel = CudaKernel(module, name, [("ptr", ""), ("ptr", ""), ("ptr", "float32")],
                        block=(128,), grid_fn=lambda args: (1,))
    kernel(a, bt, out)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("form", ["ss", "rs"])
@pytest.mark.parametrize("n", [64, 128])
def test_wgmma_k16_no_swizzle(module, dtype, form, n):
    torch.manual_seed(n + (1 if form == "rs" else 0))
    a = torch.randn(64, 16, device="cuda").to(DTYPES[dtype])
    b = torch.randn(16, n, device="cuda").to(DTYPES[dtype])
    out = _run(module, f"wgmma_{form}_{dtype}_n{n}", a, b, n)
    want = 2.0 * (a.double() @ b.double())
    assert not out.isnan().any(), f"{out.isnan().sum().item()} outputs not written (or NaN kept)"
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n", [64, 128])
def test_wgmma_k64_swizzle128(module, n):
    torch.manual_seed(100 + n)
    a = torch.randn(64, 64, device="cuda").to(torch.float16)
    b = torch.randn(64, n, device="cuda").to(torch.float16)
    out = _run(module, f"wgmma_sw128_f16_n{n}", a, b, n)
    want = a.double() @ b.double()
    assert not out.isnan().any(), "outputs not written (shared tiles not 1024-byte aligned?)"
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-4)
