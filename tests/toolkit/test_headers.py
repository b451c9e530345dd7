"""The tilecraft/tc.h header library compiles for every target and assembles to the
instructions it wraps.

One translation unit instantiates every wrapper (templates included) inside extern "C"
kernels; it is built once per target with `nvcc -cubin`, keeping the PTX. The PTX (and the
SASS, when cuobjdump is installed) must contain the instructions each wrapper exists for.
Needs nvcc, not a GPU.
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "tilecraft" / "backends" / "cuda" / "codegen" / "include"
NVCC = shutil.which("nvcc") or (
    "/usr/local/bin/nvcc" if pathlib.Path("/usr/local/bin/nvcc").exists() else None
)
CUOBJDUMP = shutil.which("cuobjdump")

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found")

TARGETS = {
    "sm_80": ["-gencode=arch=compute_80,code=sm_80"],
    "sm_89": ["-gencode=arch=compute_89,code=sm_89"],
    "sm_90a": ["-gencode=arch=compute_90a,code=sm_90a"],
}

# Every type tc::cvt converts between.
CVT_TYPES = [
    "float", "double", "tc::half_t", "tc::bfloat16_t", "tc::fp8_e4_t", "tc::fp8_e5_t",
    "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t",
    "bool",
]
SHFL_TYPES = [
    "float", "double", "tc::half_t", "tc::bfloat16_t", "tc::fp8_e4_t", "tc::fp8_e5_t",
    "int8_t", "int16_t", "int", "unsigned", "long long", "__half2", "__nv_bfloat162",
]
REDUCE_TYPES = ["float", "double", "tc::half_t", "tc::bfloat16_t", "int", "unsigned"]
MAXMIN_TYPES = [
    "float", "double", "tc::half_t", "tc::bfloat16_t", "tc::fp8_e4_t", "tc::fp8_e5_t",
    "int8_t", "int", "unsigned", "long long", "__half2", "__nv_bfloat162",
]
INF_TYPES = ["float", "double", "tc::half_t", "tc::bfloat16_t", "tc::fp8_e4_t", "tc::fp8_e5_t",
             "int", "int8_t", "uint64_t"]


def _cvt_source() -> str:
    lines = []
    for i, to in enumerate(CVT_TYPES):
        for j, frm in enumerate(CVT_TYPES):
            lines.append(f"  put(out, {i * len(CVT_TYPES) + j}, "
                         f"tc::cvt<{to}>(get<{frm}>(in, {j})));")
    return "\n".join(lines)


def _per_type(types, body) -> str:
    return "\n".join(body(i, t) for i, t in enumerate(types))


SOURCE = r"""
#include "tilecraft/tc.h"

// Values travel through 8-byte slots of 8-byte aligned arrays.
template <typename T> __device__ __forceinline__ T get(const uint64_t* in, int slot) {
  const uint64_t w = in[slot];
  T v;
  __builtin_memcpy(&v, &w, sizeof(T));
  return v;
}
template <typename T> __device__ __forceinline__ void put(uint64_t* out, int slot, T v) {
  uint64_t w = 0;
  __builtin_memcpy(&w, &v, sizeof(T));
  out[slot] = w;
}

extern "C" __global__ void k_types(uint64_t* out, const uint64_t* in, float x, float y) {
  out += 256 * threadIdx.x;
@CVT@
  put(out, 240, tc::pack_half2(x, y));
  put(out, 241, tc::pack_bf162(x, y));
  put(out, 242, tc::pack_half2(get<tc::half_t>(in, 2), get<tc::half_t>(in, 3)));
  put(out, 243, tc::pack_bf162(get<tc::bfloat16_t>(in, 2), get<tc::bfloat16_t>(in, 3)));
  float a, b, c, d;
  tc::unpack_half2(get<uint32_t>(in, 4), a, b);
  tc::unpack_bf162(get<uint32_t>(in, 5), c, d);
  put(out, 244, a + b + c + d);
  put(out, 245, tc::to_bits(get<tc::half_t>(in, 6)) + tc::bit_cast<uint16_t>(get<tc::half_t>(in, 5)));
  put(out, 246, tc::from_bits<tc::fp8_e4_t>(get<uint8_t>(in, 7)));
@INF@
}

extern "C" __global__ void k_memory(char* g, int n) {
  __shared__ __align__(16) char s[4096];
  const int t = threadIdx.x;
  char* gp = g + 16 * t;
  char* sp = s + 16 * t;
  const bool pred = t < n;
  uint4 v4 = tc::ld_global_128(gp);
  uint2 v2 = tc::ld_global_64(gp + 4096);
  uint32_t v1 = tc::ld_global_32(gp + 8192);
  uint16_t v0 = tc::ld_global_16(gp + 12288);
  uint4 p4 = tc::ld_global_128_pred(gp + 16384, pred);
  uint2 p2 = tc::ld_global_64_pred(gp + 20480, pred);
  uint32_t p1 = tc::ld_global_32_pred(gp + 24576, pred);
  uint16_t p0 = tc::ld_global_16_pred(gp + 28672, pred);
  tc::st_shared_128(sp, v4);
  tc::st_shared_64(sp + 2048, v2);
  tc::st_shared_32(tc::smem_addr(sp + 1024), v1);
  tc::st_shared_16(tc::smem_addr(sp + 3072), v0);
  tc::st_shared_128(tc::smem_addr(sp + 512), p4);
  tc::st_shared_64(tc::smem_addr(sp + 1536), p2);
  tc::st_shared_32(sp + 2560, p1);
  tc::st_shared_16(sp + 3584, p0);
  tc::st_shared_128_pred(sp + 16, p4, pred);
  tc::st_shared_64_pred(sp + 24, p2, pred);
  tc::st_shared_32_pred(sp + 28, p1, pred);
  tc::st_shared_16_pred(sp + 30, p0, pred);
  __syncthreads();
  const char* rp = s + 16 * (t ^ 1);
  uint4 r4 = tc::ld_shared_128(rp);
  uint2 r2 = tc::ld_shared_64(tc::smem_addr(rp + 2048));
  uint32_t r1 = tc::ld_shared_32(rp + 1024);
  uint16_t r0 = tc::ld_shared_16(tc::smem_addr(rp + 3072));
  uint4 q4 = tc::ld_shared_128_pred(rp + 512, pred);
  uint2 q2 = tc::ld_shared_64_pred(rp + 1536, pred);
  uint32_t q1 = tc::ld_shared_32_pred(rp + 2560, pred);
  uint16_t q0 = tc::ld_shared_16_pred(rp + 3584, pred);
  uint4 l4 = tc::ld_shared_128(tc::smem_addr(rp + 16));
  uint2 l2 = tc::ld_shared_64(rp + 24);
  uint32_t l1 = tc::ld_shared_32(tc::smem_addr(rp + 28));
  uint16_t l0 = tc::ld_shared_16(rp + 30);
  tc::st_global_128(gp, r4);
  tc::st_global_64(gp + 4096, r2);
  tc::st_global_32(gp + 8192, r1);
  tc::st_global_16(gp + 12288, r0);
  tc::st_global_128_pred(gp + 16384, q4, pred);
  tc::st_global_64_pred(gp + 20480, q2, pred);
  tc::st_global_32_pred(gp + 24576, q1, pred);
  tc::st_global_16_pred(gp + 28672, q0, pred);
  tc::st_global_128(gp + 32768, make_uint4(l4.x, l4.y + l2.x, l4.z + l2.y, l4.w + l1 + l0));
}

extern "C" __global__ void k_async(const char* g, char* out, int n) {
  __shared__ __align__(16) char s[4 * 1024];
  const int t = threadIdx.x;
  const bool pred = t < n;
  tc::cp_async_cg_16(s + 16 * t, g + 16 * t, pred);
  tc::cp_async_cg_16(tc::smem_addr(s + 1024 + 16 * t), g + 1024 + 16 * t, pred);
  tc::cp_async_commit();
  tc::cp_async_ca_16(s + 2048 + 16 * t, g + 2048 + 16 * t, pred);
  tc::cp_async_ca_8(s + 3072 + 8 * t, g + 3072 + 8 * t, pred);
  tc::cp_async_commit();
  tc::cp_async_ca_4(s + 3584 + 4 * t, g + 3584 + 4 * t, pred);
  tc::cp_async_ca_4(tc::smem_addr(s + 3840 + 4 * t), g + 3840 + 4 * t, pred);
  tc::cp_async_ca_8(tc::smem_addr(s + 3328 + 8 * t), g + 3328 + 8 * t, pred);
  tc::cp_async_ca_16(tc::smem_addr(s + 2560 + 16 * t), g + 2560 + 16 * t, pred);
  tc::cp_async_commit();
  tc::cp_async_wait<2>();
  tc::cp_async_wait<1>();
  tc::cp_async_wait<0>();
  tc::cp_async_wait_all();
  __syncthreads();
  tc::st_global_128(out + 16 * t, tc::ld_shared_128(s + 16 * ((t + 1) % 256)));
}

extern "C" __global__ void k_mma(float* out, const char* g) {
  __shared__ __align__(16) uint16_t s[64 * 64];
  const int lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 64 * 64 / 8; i += blockDim.x)
    tc::st_shared_128(s + 8 * i, tc::ld_global_128(g + 16 * i));
  __syncthreads();
  const uint16_t* row = s + 64 * lane;
  uint32_t a[4], b[4], x1[1], x2[2], t1[1], t2[2];
  tc::ldmatrix_x4(a, row);
  tc::ldmatrix_x4_trans(b, tc::smem_addr(row + 8));
  tc::ldmatrix_x2(x2, tc::smem_addr(row + 16));
  tc::ldmatrix_x1(x1, row + 24);
  tc::ldmatrix_x2_trans(t2, row + 32);
  tc::ldmatrix_x1_trans(t1, tc::smem_addr(row + 40));
  uint32_t a2[4], b2[4], x4[4], y2[2], y1[1], z2[2], z1[1];
  tc::ldmatrix_x4(a2, tc::smem_addr(row + 48));
  tc::ldmatrix_x4_trans(b2, row + 56);
  tc::ldmatrix_x2(y2, row);
  tc::ldmatrix_x1(y1, tc::smem_addr(row + 8));
  tc::ldmatrix_x2_trans(z2, tc::smem_addr(row + 16));
  tc::ldmatrix_x1_trans(z1, row + 24);
  x4[0] = x1[0] ^ y1[0] ^ z1[0]; x4[1] = t1[0]; x4[2] = x2[0] ^ y2[0]; x4[3] = t2[1] ^ z2[1];
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  tc::mma_m16n8k16_f16_f32(c, a, b, c);
  tc::mma_m16n8k16_bf16_f32(c, a2, b2, c);
  tc::mma_m16n8k16_f16_f32(c, x4, x2, c);
  uint32_t h[2] = {t2[0], z2[0]};
  tc::mma_m16n8k16_f16_f16(h, a, b + 2, h);
  int ci[4] = {0, 0, 0, 0};
  tc::mma_m16n8k32_s8_s32(ci, a, b, ci);
  tc::mma_m16n8k32_u8_s32(ci, a2, b2, ci);
  uint32_t ta[4] = {tc::to_tf32(c[0]), tc::to_tf32(c[1]), tc::to_tf32(c[2]), tc::to_tf32(c[3])};
  tc::mma_m16n8k8_tf32_f32(c, ta, b2 + 2, c);
  double da[1] = {c[0]}, db[1] = {c[1]}, dc[2] = {c[2], c[3]};
  tc::mma_m8n8k4_f64(dc, da, db, dc);
#if TC_HAS_FP8_MMA
  tc::mma_m16n8k32_e4m3_f32(c, a, b, c);
  tc::mma_m16n8k32_e5m2_f32(c, a2, b2, c);
#endif
#if TC_HAS_STMATRIX
  __syncthreads();
  uint16_t* srow = s + 64 * lane;
  tc::stmatrix_x4(srow, a);
  tc::stmatrix_x4_trans(tc::smem_addr(srow + 8), b);
  tc::stmatrix_x2(tc::smem_addr(srow + 16), h);
  tc::stmatrix_x2_trans(srow + 24, x2);
  tc::stmatrix_x1(srow + 32, x1);
  tc::stmatrix_x1_trans(tc::smem_addr(srow + 40), t1);
  uint32_t u4[4] = {ta[0], ta[1], ta[2], ta[3]};
  tc::stmatrix_x4(tc::smem_addr(srow + 48), u4);
  tc::stmatrix_x4_trans(srow + 56, a2);
  tc::stmatrix_x2(srow, y2);
  tc::stmatrix_x2_trans(tc::smem_addr(srow + 8), z2);
  tc::stmatrix_x1(tc::smem_addr(srow + 16), y1);
  tc::stmatrix_x1_trans(srow + 24, z1);
  __syncthreads();
  c[0] += tc::cvt<float>(*reinterpret_cast<const tc::half_t*>(s + threadIdx.x * 3));
#endif
  float* o = out + 8 * threadIdx.x;
  o[0] = c[0]; o[1] = c[1]; o[2] = c[2]; o[3] = c[3];
  o[4] = __int_as_float(ci[0] + ci[1] + ci[2] + ci[3]);
  o[5] = __uint_as_float(h[0] ^ h[1]);
  o[6] = static_cast<float>(dc[0] + dc[1]);
}

extern "C" __global__ void k_warp(uint64_t* out, const uint64_t* in, int mask) {
  out += 256 * threadIdx.x;
  in += 64 * threadIdx.x;
@SHFL@
@REDUCE@
  float f = get<float>(in, 60);
  put(out, 250, tc::warp_reduce(f, [](float p, float q) { return p * q; }, 8, 2));
}

extern "C" __global__ void k_math(uint64_t* out, const uint64_t* in, float x) {
  out += 256 * threadIdx.x;
  in += 64 * threadIdx.x;
  put(out, 0, tc::exp2f_fast(x));
  put(out, 1, tc::rcp_fast(x));
  put(out, 2, tc::rsqrt(x));
  put(out, 3, tc::rsqrt(get<double>(in, 0)));
  put(out, 4, tc::tanh_fast(x));
  put(out, 5, tc::sigmoid(x));
  put(out, 6, tc::sigmoid(get<double>(in, 1)));
  put(out, 7, tc::sigmoid(get<tc::half_t>(in, 2)));
  put(out, 8, tc::sigmoid(get<tc::bfloat16_t>(in, 3)));
@MAXMIN@
}

extern "C" __global__ void k_atomic(char* g, uint64_t* out, const uint64_t* in) {
  out += 64 * threadIdx.x;
  put(out, 0, tc::atomic_add(reinterpret_cast<float*>(g), get<float>(in, 0)));
  put(out, 1, tc::atomic_add(reinterpret_cast<double*>(g + 8), get<double>(in, 1)));
  put(out, 2, tc::atomic_add(reinterpret_cast<int*>(g + 16), get<int>(in, 2)));
  put(out, 3, tc::atomic_add(reinterpret_cast<unsigned*>(g + 24), get<unsigned>(in, 3)));
  put(out, 4, tc::atomic_add(reinterpret_cast<unsigned long long*>(g + 32),
                             get<unsigned long long>(in, 4)));
  put(out, 5, tc::atomic_add(reinterpret_cast<tc::half_t*>(g + 40), get<tc::half_t>(in, 5)));
  put(out, 6, tc::atomic_add(reinterpret_cast<tc::bfloat16_t*>(g + 48),
                             get<tc::bfloat16_t>(in, 6)));
  put(out, 7, tc::atomic_add(reinterpret_cast<__half2*>(g + 56), get<__half2>(in, 7)));
  put(out, 8, tc::atomic_add(reinterpret_cast<__nv_bfloat162*>(g + 64),
                             get<__nv_bfloat162>(in, 8)));
  put(out, 9, tc::atomic_max(reinterpret_cast<float*>(g + 72), get<float>(in, 9)));
  put(out, 10, tc::atomic_min(reinterpret_cast<float*>(g + 80), get<float>(in, 10)));
  put(out, 11, tc::atomic_max(reinterpret_cast<double*>(g + 88), get<double>(in, 11)));
  put(out, 12, tc::atomic_min(reinterpret_cast<double*>(g + 96), get<double>(in, 12)));
  put(out, 13, tc::atomic_max(reinterpret_cast<int*>(g + 104), get<int>(in, 13)));
  put(out, 14, tc::atomic_min(reinterpret_cast<int*>(g + 112), get<int>(in, 14)));
  put(out, 15, tc::atomic_max(reinterpret_cast<unsigned*>(g + 120), get<unsigned>(in, 15)));
  put(out, 16, tc::atomic_min(reinterpret_cast<unsigned*>(g + 128), get<unsigned>(in, 16)));
  put(out, 17, tc::atomic_max(reinterpret_cast<long long*>(g + 136), get<long long>(in, 17)));
  put(out, 18, tc::atomic_min(reinterpret_cast<long long*>(g + 144), get<long long>(in, 18)));
  put(out, 19, tc::atomic_max(reinterpret_cast<unsigned long long*>(g + 152),
                              get<unsigned long long>(in, 19)));
  put(out, 20, tc::atomic_min(reinterpret_cast<unsigned long long*>(g + 160),
                              get<unsigned long long>(in, 20)));
}

extern "C" __global__ void k_sync(int* out, int rounds) {
  __shared__ __align__(8) uint64_t bar[2];
  __shared__ int s[256];
  const int t = threadIdx.x;
  if (t == 0) {
    tc::mbarrier_init(&bar[0], blockDim.x);
    tc::mbarrier_init(tc::smem_addr(&bar[1]), 1);
#if TC_HAS_SM90_SYNC
    tc::fence_barrier_init();
#endif
  }
  tc::syncthreads();
  s[t] = t;
#if TC_HAS_SM90_SYNC
  tc::fence_proxy_async_shared();
#endif
  tc::syncwarp();
  if (t < 128) {
    tc::named_barrier_sync(1, 128);
  } else {
    tc::named_barrier_arrive(1, 128);
  }
  uint32_t parity = 0;
  for (int r = 0; r < rounds; ++r) {
    tc::mbarrier_arrive(&bar[0]);
    tc::mbarrier_wait_parity(&bar[0], parity);
    if (t == 0) {
#if TC_HAS_SM90_SYNC
      tc::mbarrier_expect_tx(&bar[1], 0);
      tc::mbarrier_arrive_expect_tx(tc::smem_addr(&bar[1]), 0);
      tc::mbarrier_expect_tx(tc::smem_addr(&bar[1]), 0);
      tc::mbarrier_arrive_expect_tx(&bar[1], 0);
#else
      tc::mbarrier_arrive(tc::smem_addr(&bar[1]));
#endif
    }
    tc::mbarrier_wait_parity(tc::smem_addr(&bar[1]), parity);
    parity ^= 1;
  }
  out[t] = s[(t + 1) % blockDim.x] + (tc::mbarrier_try_wait_parity(&bar[0], parity) ? 1 : 0) +
           (tc::mbarrier_try_wait_parity(tc::smem_addr(&bar[1]), parity) ? 2 : 0);
}

extern "C" __global__ void k_raster(int2* out, int panel) {
  const int i = blockIdx.x + blockIdx.y * gridDim.x;
  out[4 * i + 0] = tc::rasterize_row(panel, gridDim, blockIdx.x, blockIdx.y);
  out[4 * i + 1] = tc::rasterize_row(panel, gridDim, blockIdx.x, blockIdx.y, false);
  out[4 * i + 2] = tc::rasterize_col(panel, gridDim, blockIdx.x, blockIdx.y);
  out[4 * i + 3] = tc::rasterize_col(panel, gridDim, blockIdx.x, blockIdx.y, false);
}
"""


def translation_unit() -> str:
    shfl = _per_type(SHFL_TYPES, lambda i, t: (
        f"  put(out, {3 * i}, tc::shfl_xor(get<{t}>(in, {i}), mask));\n"
        f"  put(out, {3 * i + 1}, tc::shfl_down(get<{t}>(in, {i}), 1));\n"
        f"  put(out, {3 * i + 2}, tc::shfl_idx(get<{t}>(in, {i}), mask & 31));\n"
        f"  put(out, {3 * i}, tc::shfl_up(get<{t}>(in, {i}), 2, 16));\n"
        f"  put(out, {3 * i + 1}, tc::shfl_xor_group<8>(get<{t}>(in, {i}), 3));"))
    reduce = _per_type(REDUCE_TYPES, lambda i, t: (
        f"  put(out, {100 + 6 * i}, tc::warp_reduce_sum(get<{t}>(in, {20 + i})));\n"
        f"  put(out, {101 + 6 * i}, tc::warp_reduce_max(get<{t}>(in, {20 + i}), 4));\n"
        f"  put(out, {102 + 6 * i}, tc::warp_reduce_min(get<{t}>(in, {20 + i}), 32, 4));\n"
        f"  put(out, {103 + 6 * i}, tc::warp_reduce_sum(get<{t}>(in, {30 + i}), 4));\n"
        f"  put(out, {104 + 6 * i}, tc::warp_reduce_max(get<{t}>(in, {30 + i})));\n"
        f"  put(out, {105 + 6 * i}, tc::warp_reduce_min(get<{t}>(in, {30 + i}), 8, 2));"))
    maxmin = _per_type(MAXMIN_TYPES, lambda i, t: (
        f"  put(out, {10 + 3 * i}, tc::max(get<{t}>(in, {4 + i}), get<{t}>(in, {20 + i})));\n"
        f"  put(out, {11 + 3 * i}, tc::min(get<{t}>(in, {4 + i}), get<{t}>(in, {20 + i})));\n"
        f"  put(out, {12 + 3 * i}, tc::add(get<{t}>(in, {4 + i}), get<{t}>(in, {20 + i})));"))
    inf = _per_type(INF_TYPES, lambda i, t: (
        f"  put(out, {247 + i}, tc::infinity<{t}>());\n"
        f"  put(out, {230 + i}, tc::neg_infinity<{t}>());"))
    # k_types writes slots 0..255 and the cvt grid ends at slot 224 (15 x 15).
    assert len(CVT_TYPES) ** 2 <= 230 and 247 + len(INF_TYPES) <= 256
    return (SOURCE.replace("@CVT@", _cvt_source()).replace("@SHFL@", shfl)
            .replace("@REDUCE@", reduce).replace("@MAXMIN@", maxmin).replace("@INF@", inf))


def _nvcc(flags, src: pathlib.Path, out: pathlib.Path, *extra) -> subprocess.CompletedProcess:
    cmd = [NVCC, "-cubin", "-std=c++17", "-O3", "-Xptxas", "-v", *flags,
           f"-I{INCLUDE}", "-o", str(out), *extra, str(src)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _build(target: str, workdir: pathlib.Path) -> dict:
    tdir = workdir / target
    tdir.mkdir()
    src = tdir / "all_headers.cu"
    src.write_text(translation_unit())
    cubin = tdir / "all_headers.cubin"
    proc = _nvcc(TARGETS[target], src, cubin, "-keep", f"-keep-dir={tdir}")
    ptx = "".join(p.read_text() for p in tdir.glob("*.ptx"))
    sass = ""
    if proc.returncode == 0 and CUOBJDUMP:
        sass = subprocess.run([CUOBJDUMP, "-sass", str(cubin)], capture_output=True,
                              text=True, timeout=120).stdout
    return {"proc": proc, "ptx": ptx, "sass": sass}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tc_headers")
    with concurrent.futures.ThreadPoolExecutor(len(TARGETS)) as pool:
        futures = {t: pool.submit(_build, t, workdir) for t in TARGETS}
        return {t: f.result() for t, f in futures.items()}


# PTX opcode -> SASS opcode prefix (checked in SASS only when cuobjdump is installed).
COMMON = {
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32": "HMMA",
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32": None,
    "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16": None,
    "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32": "IMMA",
    "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32": None,
    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32": None,
    "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64": "DMMA",
    "ldmatrix.sync.aligned.m8n8.x4.shared.b16": "LDSM",
    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16": None,
    "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16": None,
    "cp.async.cg.shared.global": "LDGSTS",
    "cp.async.ca.shared.global": None,
    "cp.async.wait_group": "LDGDEPBAR",
    "shfl.sync.bfly.b32": "SHFL",
    "shfl.sync.down.b32": None,
    "shfl.sync.idx.b32": None,
    "shfl.sync.up.b32": None,
    "ex2.approx.ftz.f32": "MUFU",
    "tanh.approx.f32": None,
    "cvt.rn.f16x2.f32": None,
    "cvt.rn.bf16x2.f32": None,
    "cvt.rna.tf32.f32": None,
    "mbarrier.init.shared.b64": None,
    "bar.arrive": None,
    "atom.global.add.f32": None,
}
SM89 = {"mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32": None,
        "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32": None}
SM90 = {
    "stmatrix.sync.aligned.m8n8.x4.shared.b16": "STSM",
    "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16": None,
    "fence.proxy.async.shared::cta": None,
    "mbarrier.try_wait.parity.shared.b64": None,
    "mbarrier.arrive.expect_tx.shared::cta.b64": None,
}


def _expected(target: str) -> dict:
    exp = dict(COMMON)
    if target in ("sm_89", "sm_90a"):
        exp.update(SM89)
    if target == "sm_90a":
        exp.update(SM90)
    return exp


@pytest.mark.parametrize("target", list(TARGETS))
def test_headers_compile(builds, target):
    proc = builds[target]["proc"]
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "warning" not in proc.stderr.lower(), proc.stderr[-6000:]
    spills = re.findall(r"(\d+) bytes spill stores", proc.stderr)
    assert spills and all(s == "0" for s in spills), proc.stderr[-6000:]


@pytest.mark.parametrize("target", list(TARGETS))
def test_headers_emit_instructions(builds, target):
    build = builds[target]
    assert build["proc"].returncode == 0, build["proc"].stderr[-6000:]
    ptx, sass = build["ptx"], build["sass"]
    missing = [op for op in _expected(target) if op not in ptx]
    assert not missing, f"{target}: PTX lacks {missing}"
    if target != "sm_90a":
        assert "stmatrix" not in ptx and "fence.proxy.async" not in ptx
    if sass:
        missing = [s for s in _expected(target).values() if s and s not in sass]
        assert not missing, f"{target}: SASS lacks {missing}"
        if target != "sm_90a":
            assert "STSM" not in sass


def test_sm90_only_wrappers_are_absent_on_sm80(tmp_path):
    # A call to an sm_90 wrapper in an sm_80 build must fail at compile time, not at run time.
    src = tmp_path / "stmatrix_sm80.cu"
    src.write_text('#include "tilecraft/tc.h"\n'
                   'extern "C" __global__ void k(uint32_t* r) {\n'
                   '  __shared__ uint16_t s[64];\n'
                   '  tc::stmatrix_x1(s, r);\n'
                   '  tc::fence_proxy_async_shared();\n'
                   '}\n')
    proc = _nvcc(TARGETS["sm_80"], src, tmp_path / "k.cubin")
    assert proc.returncode != 0
    assert "stmatrix_x1" in proc.stderr and "fence_proxy_async_shared" in proc.stderr
