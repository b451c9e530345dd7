"""The Hopper wrappers of the header library (wgmma.h, tma.h, setmaxnreg in sync.h).

* One translation unit instantiates every new wrapper (every N of both wgmma forms and both
  input types) and is built for sm_90a with `nvcc -cubin -keep`, so ptxas assembles each asm
  statement; the kept PTX must hold the instructions.
* sm_80, sm_89 and plain sm_90 still build with the headers included, and calling a wrapper
  their target lacks is a compile-time error.
* The matrix-descriptor packing, run on the host (make_smem_desc_host is constexpr
  __host__ __device__), matches an independent Python packing of the PTX ISA bit fields.
* wgmma.h is what tilecraft/codegen/gen_wgmma.py writes.
Needs nvcc and a host C++ compiler, not a GPU.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import pathlib
import random
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


def _load_generator():
    path = ROOT / "tilecraft" / "backends" / "cuda" / "codegen" / "gen_wgmma.py"
    spec = importlib.util.spec_from_file_location("tilecraft_gen_wgmma", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _load_generator()
N_VALUES = GEN.N_VALUES
DTYPES = [suffix for suffix, _ in GEN.DTYPES]

TARGETS = {
    "sm_80": ["-gencode=arch=compute_80,code=sm_80"],
    "sm_89": ["-gencode=arch=compute_89,code=sm_89"],
    "sm_90": ["-gencode=arch=compute_90,code=sm_90"],
    "sm_90a": ["-gencode=arch=compute_90a,code=sm_90a"],
}


def test_generated_header_is_current():
    assert GEN.HEADER.read_text() == GEN.generate(), (
        "wgmma.h differs from what tilecraft/codegen/gen_wgmma.py writes; rerun the script")


def test_generated_fp8_header_is_current():
    assert GEN.FP8_HEADER.read_text() == GEN.generate_fp8(), (
        "wgmma_fp8.h differs from what tilecraft/codegen/gen_wgmma.py writes; rerun the script")


def test_generated_tf32_header_is_current():
    assert GEN.TF32_HEADER.read_text() == GEN.generate_tf32(), (
        "wgmma_tf32.h differs from what tilecraft/codegen/gen_wgmma.py writes; rerun the script")


TF32_SOURCE = r"""
#include "tilecraft/tc.h"
#include "tilecraft/wgmma_tf32.h"

// Every tf32 wrapper once.
extern "C" __global__ void __launch_bounds__(128, 1)
k_tf32(float* out, uint64_t da, uint64_t db, int scale_d) {
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  tc::wgmma_fence();
@CALLS@
  tc::wgmma_commit_group();
  tc::wgmma_wait_group<0>();
  tc::wgmma_fence_operand(d);
#pragma unroll
  for (int i = 0; i < 128; ++i) out[i * 128 + threadIdx.x] = d[i];
}
"""


def test_tf32_wrappers_assemble(tmp_path):
    calls = [f"  tc::wgmma_m64n{n}k8_f32_tf32{['', '<1, -1>', '<-1, 1>'][k % 3]}(d, da, db, "
             "scale_d);" for k, n in enumerate(N_VALUES)]
    ptx = _sm90a_ptx(tmp_path, "tf32", TF32_SOURCE.replace("@CALLS@", "\n".join(calls)))
    for n in N_VALUES:
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32" in ptx, n


FP8_SOURCE = r"""
#include "tilecraft/tc.h"
#include "tilecraft/wgmma_fp8.h"

// Every fp8 wrapper once; cluster rank, barrier, remote arrival and multicast loads.
extern "C" __global__ void __launch_bounds__(128, 1) __cluster_dims__(2, 1, 1)
k_fp8(float* out, const __grid_constant__ tc::TensorMap map, uint64_t da, uint64_t db,
      int scale_d) {
  __shared__ __align__(1024) uint8_t tile[2 * 64 * 64];
  __shared__ __align__(8) uint64_t bar[1];
  if (threadIdx.x == 0) {
    tc::mbarrier_init(&bar[0], 2 * 4);
    tc::fence_barrier_init();
  }
  tc::cluster_sync();
  if (threadIdx.x == 0 && tc::cluster_ctarank() == 0) {
    tc::tma_load_2d_multicast(tile, &map, &bar[0], 3, 0, 0);
    tc::tma_load_3d_multicast(tile, &map, &bar[0], 3, 0, 0, 0);
  }
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  tc::wgmma_fence();
@CALLS@
  tc::wgmma_commit_group();
  tc::wgmma_wait_group<0>();
  tc::wgmma_fence_operand(d);
  tc::mbarrier_arrive_warp_cluster<2>(&bar[0]);
#pragma unroll
  for (int i = 0; i < 128; ++i) out[i * 128 + threadIdx.x] = d[i] + tile[i];
  tc::cluster_sync();
}
"""


def test_fp8_and_cluster_wrappers_assemble(tmp_path):
    calls = []
    for i, a in enumerate(GEN.FP8_TYPES):
        for j, b in enumerate(GEN.FP8_TYPES):
            for k, n in enumerate(N_VALUES):
                imm = ["", "<1, -1>", "<-1, 1>"][(i + j + k) % 3]
                calls.append(f"  tc::wgmma_m64n{n}k32_f32_{a}_{b}{imm}(d, da, db, scale_d);")
    ptx = _sm90a_ptx(tmp_path, "fp8", FP8_SOURCE.replace("@CALLS@", "\n".join(calls)))
    for a in GEN.FP8_TYPES:
        for b in GEN.FP8_TYPES:
            for n in N_VALUES:
                assert f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.{a}.{b}" in ptx, (a, b, n)
    for op in ["multicast::cluster", "mapa.shared::cluster", "barrier.cluster.arrive",
               "barrier.cluster.wait", "%cluster_ctarank"]:
        assert op in ptx, f"PTX lacks {op}"


def test_generator_covers_the_required_shapes():
    assert {64, 128, 256} <= set(N_VALUES)
    assert all(n % 8 == 0 and 8 <= n <= 256 for n in N_VALUES)


# ---------------------------------------------------------------- the sm_90a translation unit

def _wgmma_calls() -> str:
    """Every wrapper once, on one 128-float accumulator array, with varied immediates."""
    lines = []
    immediates_ss = ["", "<0, 1>", "<1, 0, -1, 1>", "<1, 1, 1, -1>"]
    immediates_rs = ["", "<1>", "<0, -1, 1>", "<1, 1, -1>"]
    for j, suffix in enumerate(DTYPES):
        for i, n in enumerate(N_VALUES):
            ss = immediates_ss[(i + j) % len(immediates_ss)]
            rs = immediates_rs[(i + j) % len(immediates_rs)]
            lines.append(f"  tc::wgmma_m64n{n}k16_f32_{suffix}{ss}(d, da, db, scale_d);")
            lines.append(f"  tc::wgmma_m64n{n}k16_f32_{suffix}_rs{rs}(d, a, db, 1);")
    return "\n".join(lines)


SM90A_SOURCE = r"""
#include "tilecraft/tc.h"

static_assert(tc::make_smem_desc_host(0x400, TC_SWIZZLE_128B, 16, 1024) ==
                  ((0x400ull >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62)),
              "make_smem_desc_host is usable in constant expressions");

extern "C" __global__ void __launch_bounds__(128, 1)
k_wgmma(float* out, const uint32_t* in, int scale_d) {
  __shared__ __align__(1024) uint16_t s[64 * 16 + 256 * 64];
  for (int i = threadIdx.x; i < (64 * 16 + 256 * 64) / 2; i += blockDim.x)
    reinterpret_cast<uint32_t*>(s)[i] = in[i];
  tc::fence_proxy_async_shared();
  __syncthreads();
  const uint64_t da = tc::make_smem_desc(s, TC_SWIZZLE_NONE, 128, 256);
  const uint64_t db = tc::smem_desc_advance(
      tc::make_smem_desc(tc::smem_addr(s + 64 * 16), TC_SWIZZLE_128B, 16, 1024), 32);
  uint32_t a[4] = {in[threadIdx.x], in[threadIdx.x + 128], in[threadIdx.x + 256],
                   in[threadIdx.x + 384]};
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  tc::wgmma_fence_operand(d);
  tc::wgmma_fence_operand(a);
  tc::wgmma_fence();
@CALLS@
  tc::wgmma_commit_group();
  tc::wgmma_wait_group<1>();
  tc::wgmma_wait_group<0>();
  tc::wgmma_fence_operand(d);
#pragma unroll
  for (int i = 0; i < 128; ++i) out[i * 128 + threadIdx.x] = d[i];
}

extern "C" __global__ void k_tma(const __grid_constant__ tc::TensorMap map2,
                                 const __grid_constant__ tc::TensorMap map3, int x, int y,
                                 int z, const uint16_t* next) {
  __shared__ __align__(1024) uint16_t tile[4 * 64 * 64];
  __shared__ __align__(8) uint64_t bar[2];
  if (threadIdx.x == 0) {
    tc::prefetch_tma_descriptor(&map2);
    tc::prefetch_tma_descriptor(&map3);
    tc::mbarrier_init(&bar[0], 1);
    tc::mbarrier_init(&bar[1], 1);
    tc::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tc::mbarrier_arrive_expect_tx(&bar[0], 2 * 64 * 64 * 2);
    tc::tma_load_2d(tile, &map2, &bar[0], x, y);
    tc::tma_load_3d(tc::smem_addr(tile + 64 * 64), &map3, tc::smem_addr(&bar[0]), x, y, z);
    tc::mbarrier_arrive_expect_tx(&bar[1], 2 * 64 * 64 * 2);
    tc::tma_load_2d(tc::smem_addr(tile + 2 * 64 * 64), &map2, tc::smem_addr(&bar[1]), y, x);
    tc::tma_load_3d(tile + 3 * 64 * 64, &map3, &bar[1], z, y, x);
    tc::prefetch_l2(next + 64 * 64, 64 * 64 * 2);
  }
  tc::mbarrier_wait_parity(&bar[0], 0);
  tc::mbarrier_wait_parity(&bar[1], 0);
  tile[threadIdx.x] += 1;
  tc::fence_proxy_async_shared();
  __syncthreads();
  if (threadIdx.x == 0) {
    tc::tma_store_2d(&map2, tile, x, y);
    tc::tma_store_3d(&map3, tc::smem_addr(tile + 64 * 64), x, y, z);
    tc::tma_store_commit();
    tc::tma_store_2d(&map2, tc::smem_addr(tile + 2 * 64 * 64), y, x);
    tc::tma_store_3d(&map3, tile + 3 * 64 * 64, z, y, x);
    tc::tma_store_commit();
    tc::tma_store_add_2d(&map2, tile, x, y);
    tc::tma_store_add_3d(&map3, tile + 64 * 64, x, y, z);
    tc::tma_store_commit();
    tc::tma_store_wait<1>();
    tc::tma_store_wait<0>();
    tc::tma_store_wait_all<0>();
  }
}

// Two warpgroups, one branch each: the shape setmaxnreg needs to take effect.
extern "C" __global__ void __launch_bounds__(256, 1) k_setmaxnreg(float* out, const float* in) {
  if (threadIdx.x < 128) {
    tc::setmaxnreg_dec<40>();
    out[threadIdx.x] = in[threadIdx.x] + 1.0f;
  } else {
    tc::setmaxnreg_inc<232>();
    out[threadIdx.x] = in[threadIdx.x] * 2.0f;
  }
}
"""

# Every target: the whole library included, the wrappers that target has called.
PORTABLE_SOURCE = r"""
#include "tilecraft/tc.h"

static_assert(tc::make_smem_desc_host(0x1230, TC_SWIZZLE_NONE, 128, 256) ==
                  (0x123ull | (8ull << 16) | (16ull << 32)), "host/device constexpr packing");

extern "C" __global__ void k_portable(float* out) {
  __shared__ __align__(16) float s[128];
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[127 - threadIdx.x] +
                     static_cast<float>(tc::make_smem_desc_host(tc::smem_addr(s), 0, 16, 16) & 1);
#if TC_HAS_TMA
  if (threadIdx.x == 0) {
    tc::tma_store_commit();
    tc::tma_store_wait<0>();
  }
#endif
}
"""


def _nvcc(args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([NVCC, "-std=c++17", f"-I{INCLUDE}", *args], capture_output=True,
                          text=True, timeout=timeout)


def _sm90a_ptx(tmp_path, name: str, source: str) -> str:
    """The PTX nvcc writes for `source` built for sm_90a (which must build)."""
    src = tmp_path / f"{name}.cu"
    src.write_text(source)
    proc = _nvcc(["-cubin", "-O3", *TARGETS["sm_90a"], "-keep", f"-keep-dir={tmp_path}",
                  "-o", str(tmp_path / f"{name}.cubin"), str(src)])
    assert proc.returncode == 0, proc.stderr[-6000:]
    return "".join(p.read_text() for p in tmp_path.glob("*.ptx"))


@pytest.fixture(scope="module")
def sm90a_build(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tc_hopper")
    src = workdir / "hopper.cu"
    src.write_text(SM90A_SOURCE.replace("@CALLS@", _wgmma_calls()))
    cubin = workdir / "hopper.cubin"
    proc = _nvcc(["-cubin", "-O3", "-Xptxas", "-v", *TARGETS["sm_90a"], "-keep",
                  f"-keep-dir={workdir}", "-o", str(cubin), str(src)])
    ptx = "".join(p.read_text() for p in workdir.glob("*.ptx"))
    sass = ""
    if proc.returncode == 0 and CUOBJDUMP:
        sass = subprocess.run([CUOBJDUMP, "-sass", str(cubin)], capture_output=True, text=True,
                              timeout=300).stdout
    return {"proc": proc, "ptx": ptx, "sass": sass}


def test_sm90a_wrappers_assemble(sm90a_build):
    proc = sm90a_build["proc"]
    assert proc.returncode == 0, proc.stderr[-6000:]
    # setmaxnreg is ignored (C7508) unless the kernel is shaped for it; k_setmaxnreg is.
    assert "C7508" not in proc.stderr, proc.stderr[-6000:]
    spills = re.findall(r"(\d+) bytes spill stores", proc.stderr)
    assert spills and all(s == "0" for s in spills), proc.stderr[-6000:]


def test_sm90a_ptx_holds_every_instruction(sm90a_build):
    assert sm90a_build["proc"].returncode == 0, sm90a_build["proc"].stderr[-6000:]
    ptx = sm90a_build["ptx"]
    for suffix, ptx_type in GEN.DTYPES:
        for n in N_VALUES:
            op = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type}"
            # once with a shared-memory A descriptor, once with A in four registers
            assert ptx.count(op) == 2, f"{op}: {ptx.count(op)} times in the PTX"
    for op in ["wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
               "wgmma.wait_group.sync.aligned 0", "wgmma.wait_group.sync.aligned 1",
               "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
               "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes",
               "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
               "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group",
               "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group",
               "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group",
               "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read 1",
               "cp.async.bulk.wait_group.read 0", "cp.async.bulk.wait_group 0",
               "prefetch.tensormap", "cp.async.bulk.prefetch.L2.global",
               "setmaxnreg.inc.sync.aligned.u32 232",
               "setmaxnreg.dec.sync.aligned.u32 40"]:
        assert op in ptx, f"PTX lacks {op}"
    sass = sm90a_build["sass"]
    if sass:
        for op in ["HGMMA", "UTMALDG", "UTMASTG", "UTMAREDG", "USETMAXREG"]:
            assert op in sass, f"SASS lacks {op}"


@pytest.mark.parametrize("target", ["sm_80", "sm_89", "sm_90"])
def test_other_targets_still_build(tmp_path, target):
    src = tmp_path / "portable.cu"
    src.write_text(PORTABLE_SOURCE)
    proc = _nvcc(["-cubin", "-O3", *TARGETS[target], "-keep", f"-keep-dir={tmp_path}", "-o",
                  str(tmp_path / "k.cubin"), str(src)])
    assert proc.returncode == 0, proc.stderr[-6000:]
    ptx = "".join(p.read_text() for p in tmp_path.glob("*.ptx"))
    assert "wgmma" not in ptx and "setmaxnreg" not in ptx
    assert ("cp.async.bulk.commit_group" in ptx) == (target == "sm_90")


@pytest.mark.parametrize("target,missing", [
    ("sm_80", ["wgmma_fence", "wgmma_m64n64k16_f32_f16", "setmaxnreg_inc", "tma_load_2d",
               "make_smem_desc"]),
    ("sm_90", ["wgmma_fence", "wgmma_m64n64k16_f32_f16", "setmaxnreg_inc", "make_smem_desc"]),
])
def test_sm90a_only_wrappers_are_compile_errors_elsewhere(tmp_path, target, missing):
    src = tmp_path / "hopper_elsewhere.cu"
    src.write_text('#include "tilecraft/tc.h"\n'
                   'extern "C" __global__ void k(float* d, uint64_t* bar, const void* map) {\n'
                   '  __shared__ uint16_t s[64];\n'
                   '  tc::wgmma_fence();\n'
                   '  tc::wgmma_m64n64k16_f32_f16(d, tc::make_smem_desc(s, 0, 16, 16), 0, 0);\n'
                   '  tc::setmaxnreg_inc<64>();\n'
                   '  tc::tma_load_2d(s, map, bar, 0, 0);\n'
                   '}\n')
    proc = _nvcc(["-cubin", *TARGETS[target], "-o", str(tmp_path / "k.cubin"), str(src)])
    assert proc.returncode != 0
    for name in missing:
        assert name in proc.stderr, f"{target}: no error for {name}:\n{proc.stderr[-3000:]}"
    if target == "sm_90":
        assert "tma_load_2d" not in proc.stderr, proc.stderr[-3000:]


# ---------------------------------------------------------------- descriptor bits on the host

def _descriptor(address: int, swizzle: int, lbo: int, sbo: int, base: int) -> int:
    """PTX ISA 9.7.15.5.1.2.2: 14-bit fields of (x & 0x3FFFF) >> 4 at bits 0, 16 and 32,
    the base offset at bits 49-51, the swizzle mode at bits 62-63."""
    def encode(x):
        return (x & 0x3FFFF) >> 4
    bits = [0] * 64

    def put(value, low, width):
        for b in range(width):
            bits[low + b] = (value >> b) & 1

    put(encode(address), 0, 14)
    put(encode(lbo), 16, 14)
    put(encode(sbo), 32, 14)
    put(base & 7, 49, 3)
    put(swizzle & 3, 62, 2)
    return sum(bit << i for i, bit in enumerate(bits))


def _descriptor_cases():
    rng = random.Random(1234)
    cases = [(0, 0, 0, 0, 0), (0x3FFF0, 3, 0x3FFF0, 0x3FFF0, 7), (0x400, 1, 16, 1024, 0),
             (0x1230, 0, 128, 256, 0), (0x40000 + 0x80, 2, 512, 64, 1), (227 * 1024, 1, 16, 1024, 0)]
    for _ in range(200):
        cases.append((rng.randrange(1 << 20) & ~15, rng.randrange(4), rng.randrange(1 << 18) & ~15,
                      rng.randrange(1 << 18) & ~15, rng.randrange(8)))
    return cases


HOST_SOURCE = r"""
#include "tilecraft/tc.h"
#include <cstdio>

int main() {
  unsigned addr, lbo, sbo, base;
  int swizzle;
  while (std::scanf("%u %d %u %u %u", &addr, &swizzle, &lbo, &sbo, &base) == 5) {
    std::printf("%llu %llu\n",
                (unsigned long long)tc::make_smem_desc_host(addr, swizzle, lbo, sbo, base),
                (unsigned long long)tc::smem_desc_advance(
                    tc::make_smem_desc_host(addr, swizzle, lbo, sbo, base), 32));
  }
  return 0;
}
"""


def test_descriptor_packing_on_the_host(tmp_path):
    src = tmp_path / "desc_host.cu"
    src.write_text(HOST_SOURCE)
    exe = tmp_path / "desc_host"
    proc = _nvcc(["-O2", "-o", str(exe), str(src)])
    assert proc.returncode == 0, proc.stderr[-6000:]
    cases = _descriptor_cases()
    stdin = "".join(" ".join(str(v) for v in case) + "\n" for case in cases)
    run = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = [tuple(int(v) for v in line.split()) for line in run.stdout.splitlines()]
    assert len(got) == len(cases)
    for case, (desc, advanced) in zip(cases, got):
        want = _descriptor(*case)
        assert desc == want, f"{case}: {desc:#018x} != {want:#018x}"
        # advancing by 32 bytes adds 2 to the start-address field (no carry out of it for
        # addresses inside the 256 KiB shared window)
        if (case[0] & 0x3FFFF) + 32 < (1 << 18):
            assert advanced == _descriptor(case[0] + 32, *case[1:]), case


def test_descriptor_field_positions():
    # Single fields, to read the positions off directly.
    assert _descriptor(0x10, 0, 0, 0, 0) == 1
    assert _descriptor(0, 0, 0x10, 0, 0) == 1 << 16
    assert _descriptor(0, 0, 0, 0x10, 0) == 1 << 32
    assert _descriptor(0, 0, 0, 0, 1) == 1 << 49
    assert _descriptor(0, 1, 0, 0, 0) == 1 << 62   # 128B swizzle
    assert _descriptor(0, 3, 0, 0, 0) == 3 << 62   # 32B swizzle
