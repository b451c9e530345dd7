"""Every GPU-test kernel and every example compiles with nvcc for sm_80 and sm_90a (no GPU
needed), without register spills, and with wgmma that ptxas lets overlap (it serializes them
when it cannot prove the accumulators safe, which costs the tensor cores most of their rate)."""
import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tilecraft.backends.cuda.runtime import has_nvcc

if not has_nvcc():
    pytest.skip("nvcc is not installed", allow_module_level=True)

import tilecraft  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
import kernels  # noqa: E402

ARCHS = ("sm_80", "sm_90a")


def _compile_all(named):
    jobs = [(name, func, arch) for name, func in named for arch in ARCHS]

    def build(job):
        name, func, arch = job
        return name, arch, tilecraft.compile(func, target=arch)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(build, jobs))


def test_gpu_test_kernels_compile_for_sm80_and_sm90a():
    built = _compile_all(kernels.corpus())
    assert len(built) == 2 * len(kernels.corpus())
    for name, arch, kernel in built:
        assert kernel.n_regs > 0, (name, arch)
        assert kernel.n_spills == 0, f"{name} spills registers on {arch}"
        assert not kernel.wgmma_serialized, (name, arch, kernel.wgmma_serialized)


# Each example's kernels at a GPU-sized configuration: (module, factory, args, kwargs).
EXAMPLES = [
    ("gemm", "matmul", (1024, 1024, 1024), {}),
    ("gemm", "matmul_splitk", (1024, 256, 8192), {"sm_80": dict(block_N=128, num_stages=3)}),
    ("dequant_gemm", "dequant_gemm", (256, 1024, 1024), {}),
    ("dequant_gemm", "dequant_gemv", (1, 1024, 1024), {}),
    ("conv2d", "convolution", (2, 64, 32, 32, 64, 3, 3), {"padding": 1}),
    # The paper's MLA tiles need Hopper's 227 KiB of shared memory; sm_80 gets smaller ones.
    ("mla_decode", "flash_mla_decode", (8, 64, 1, 1024, 512, 64), {"sm_80": dict(
        block_H=32, num_stages=1)}),
    ("chunk_gated_delta_net", "chunk_prepare", (2, 512, 4, 64, 64), {}),
    ("chunk_gated_delta_net", "chunk_state", (2, 512, 4, 64, 64), {}),
    ("chunk_gated_delta_net", "chunk_output", (2, 512, 4, 64, 64), {}),
    ("chunk_gated_delta_net_bwd", "chunk_bwd_dv_local", (2, 512, 4, 64, 64), {}),
    ("chunk_gated_delta_net_bwd", "chunk_bwd_state", (2, 500, 4, 64, 64), {}),
    ("chunk_gated_delta_net_bwd", "chunk_bwd_grads", (2, 500, 4, 64, 64), {}),
    ("flash_attention", "flash_attention", (2, 8, 1024, 128, True), {}),
    ("flash_attention", "flash_attention", (2, 8, 1000, 64, False), {}),
    ("flash_attention", "flash_attention_lse", (2, 8, 1000, 64, True), {}),
    ("flash_attention_bwd", "flash_attention_bwd", (2, 8, 1024, 128, True),
     {"sm_90a": dict(block_N=128, threads=256, num_stages=2)}),
    ("blocksparse_attention", "blocksparse_attention", (2, 8, 1024, 128, False), {}),
    ("vertical_slash_sparse_attention", "vertical_slash_attention", (2, 8, 1024, 64, 64, 8),
     {}),
    ("attention_sink", "attention_sink", (2, 8, 1024, 128), {}),
]


def _example_funcs(arch):
    out = []
    for module_name, factory, args, per_arch in EXAMPLES:
        kwargs = per_arch.get(arch, {})
        path = ROOT / "examples" / f"{module_name}.py"
        spec = importlib.util.spec_from_file_location(f"ex_{module_name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out.append((f"{module_name}.{factory}", getattr(module, factory).__wrapped__(*args, **kwargs)))
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_examples_compile(arch):
    named = _example_funcs(arch)
    assert len({n.split(".")[0] for n, _ in named}) == 11

    def build(item):    # nvcc runs as a process of its own: several at once use every core
        name, func = item
        try:
            return name, tilecraft.compile(func, target=arch), None
        except tilecraft.TileError as e:
            return name, None, f"{name}: {str(e).splitlines()[0]}"
    with ThreadPoolExecutor(max_workers=4) as pool:
        built = list(pool.map(build, named))
    failures = [error for _, _, error in built if error]
    for name, kernel, _ in built:
        if kernel is None:
            continue
        assert kernel.n_regs > 0, name
        if kernel.wgmma_serialized:
            failures.append(f"{name}: wgmma serialized: {kernel.wgmma_serialized}")
    assert not failures, "\n".join(failures)


# The paper's kernels at their benchmarked tiles, persistent (tl.enable_persistent_tiles).
PERSISTENT = [
    ("gemm", "matmul", (8192, 8192, 8192), dict(block_M=128, block_N=256, block_K=64,
                                                threads=256, num_stages=3, swizzle_panel=8)),
    ("flash_attention", "flash_attention", (8, 32, 4096, 128, True),
     dict(block_M=128, block_N=128, threads=256, num_stages=3)),
    ("mla_decode", "flash_mla_decode", (64, 128, 1, 4096, 512, 64), {}),
]


@pytest.mark.parametrize("module_name, factory, args, kwargs", PERSISTENT,
                         ids=[p[0] for p in PERSISTENT])
def test_persistent_kernels_compile_for_sm90a_without_spills(module_name, factory, args,
                                                             kwargs):
    path = ROOT / "examples" / f"{module_name}.py"
    spec = importlib.util.spec_from_file_location(f"ex_{module_name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    func = getattr(module, factory).__wrapped__(*args, **kwargs)
    kernel = tilecraft.compile(func, target="sm_90a", pass_configs={
        tilecraft.PassConfigKey.TL_ENABLE_PERSISTENT_TILES: True})
    source = kernel.get_kernel_source()
    # the producer's and the consumers' tiles
    assert source.count(" * gridDim.x + (tc_tile") == 2
    assert kernel.n_spills == 0 and not kernel.wgmma_serialized


def test_the_short_gemm_compiles_rastered_persistent_or_with_alternating_waves():
    """The paper's GEMM without T.use_swizzle at 8192^3 on sm_90a: choose_rasterization gives it
    a panel; by default it is persistent, staging its epilogue in two column bands, and with
    persistence off alternate_k_direction reverses its odd waves; nvcc builds each."""
    path = ROOT / "examples" / "gemm.py"
    spec = importlib.util.spec_from_file_location("ex_gemm_raster", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    func = module.matmul.__wrapped__(8192, 8192, 8192, block_M=128, block_N=256, block_K=64,
                                     threads=256, num_stages=4)
    persistent = tilecraft.compile(func, target="sm_90a")
    source = persistent.get_kernel_source()
    assert "tc::rasterize_" in source and "_round * gridDim.x" in source
    assert source.count("tc::stmatrix_x4(") == 2 and "tc::launch_wave_parity()" not in source
    plain = tilecraft.compile(func, target="sm_90a",
                              pass_configs={"tl.enable_persistent_tiles": False})
    source = plain.get_kernel_source()
    assert "tc::rasterize_" in source and "tc::launch_wave_parity()" in source
    for kernel in (persistent, plain):
        assert kernel.n_regs > 0 and kernel.n_spills == 0 and not kernel.wgmma_serialized
