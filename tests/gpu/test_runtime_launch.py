"""Compile with nvcc, load with the driver, launch on torch tensors. Needs a GPU, torch and nvcc.

Run with `-s` to see the measured per-launch host overhead.
"""
import statistics
import threading
import time

import pytest

from gpu_requirements import require_cuda

torch = require_cuda()

from tilecraft.errors import TileError  # noqa: E402
from tilecraft.backends.cuda.runtime import (CudaDriverError, CudaKernel, CudaModule, KernelCache,  # noqa: E402
                               current_arch, device_properties, synchronize, torch_stream)

SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void vadd(const float* __restrict__ a, const float* __restrict__ b,
                                float* __restrict__ c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void axpb(const float* __restrict__ x, float* __restrict__ y, float alpha,
                                int beta, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i] + (float)beta;
}

// Each block reverses one chunk of `chunk` floats through dynamic shared memory.
extern "C" __global__ void reverse_chunks(const float* __restrict__ x, float* __restrict__ y,
                                          int chunk) {
  extern __shared__ float tile[];
  const float* src = x + (size_t)blockIdx.x * chunk;
  float* dst = y + (size_t)blockIdx.x * chunk;
  for (int i = threadIdx.x; i < chunk; i += blockDim.x) tile[i] = src[i];
  __syncthreads();
  for (int i = threadIdx.x; i < chunk; i += blockDim.x) dst[i] = tile[chunk - 1 - i];
}

extern "C" __global__ void wide_scalars(double* out, long long a, unsigned int b, double c,
                                        __half h, __nv_bfloat16 bf, bool flag) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = (double)a;
    out[1] = (double)b;
    out[2] = c;
    out[3] = (double)__half2float(h);
    out[4] = (double)__bfloat162float(bf);
    out[5] = flag ? 1.0 : -1.0;
  }
}

extern "C" __global__ void noop(float* p, int n) {
  if (n < 0) p[0] = 0.0f;
}
"""

F32 = ("ptr", "float32")
BIG_SMEM = 96 * 1024  # over the 48 KiB default limit, within every sm_80+ part's opt-in limit


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    compiled = KernelCache(str(tmp_path_factory.mktemp("kernels"))).get_or_compile(
        SOURCE, current_arch(), (), {"test": "runtime_launch"})
    assert compiled.cubin[:4] == b"\x7fELF"
    module = CudaModule(compiled.cubin)
    module.compiled = compiled
    return module


def ceil_div(a, b):
    return (a + b - 1) // b


def poisoned(n, dtype=torch.float32):
    return torch.full((n,), float("nan"), dtype=dtype, device="cuda")


def test_arch_and_properties_match_torch():
    major, minor = torch.cuda.get_device_capability()
    arch = current_arch()
    assert arch.startswith(f"sm_{major}{minor}")
    assert arch == "sm_90a" if (major, minor) == (9, 0) else arch == f"sm_{major}{minor}"
    props, theirs = device_properties(), torch.cuda.get_device_properties(0)
    assert props.sm_count == theirs.multi_processor_count
    assert props.compute_capability == (major, minor)
    assert props.smem_per_block_optin >= 48 * 1024
    if hasattr(theirs, "L2_cache_size"):
        assert props.l2_bytes == theirs.L2_cache_size
    if hasattr(theirs, "shared_memory_per_block_optin"):
        assert props.smem_per_block_optin == theirs.shared_memory_per_block_optin


@pytest.mark.parametrize("n", [1, 1000, 1 << 20, (1 << 20) + 3])
def test_vector_add(module, n):
    kernel = CudaKernel(module, "vadd", [F32, F32, F32, "int32"], block=(256,),
                        grid_fn=lambda args: (ceil_div(args[3], 256),))
    a = torch.randn(n, device="cuda") + 3.0
    b = torch.randn(n, device="cuda") - 5.0
    c = poisoned(n)
    kernel(a, b, c, n)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


def test_registers_match_ptxas(module):
    kernel = CudaKernel(module, "vadd", [F32, F32, F32, "int32"])
    assert kernel.num_regs() == module.compiled.kernels["vadd"].registers


def test_float32_and_int32_scalars(module):
    n = 4099
    kernel = CudaKernel(module, "axpb", [F32, F32, "float32", "int32", "int32"], block=(128,))
    x, y = torch.randn(n, device="cuda"), poisoned(n)
    kernel.launch([x, y, 1.75, -3, n], (ceil_div(n, 128), 1, 1), torch_stream())
    synchronize()
    torch.testing.assert_close(y, 1.75 * x - 3.0, rtol=1e-6, atol=1e-6)


def test_wider_scalar_kinds(module):
    kernel = CudaKernel(module, "wide_scalars",
                        [("ptr", "float64"), "int64", "uint32", "float64", "float16",
                         "bfloat16", "bool"], block=(32,))
    out = poisoned(6, torch.float64)
    kernel.launch([out, -(2**40) + 3, 3_000_000_000, 1 / 3, 1.5, -2.75, True], (1,))
    torch.cuda.synchronize()
    expected = [-(2**40) + 3, 3_000_000_000, 1 / 3, 1.5, -2.75, 1.0]
    assert out.cpu().tolist() == expected


def test_dynamic_shared_memory_over_48k(module):
    chunk, blocks = BIG_SMEM // 4, 7
    if device_properties().smem_per_block_optin < BIG_SMEM:
        pytest.skip("this GPU allows less shared memory per block")
    kernel = CudaKernel(module, "reverse_chunks", [F32, F32, "int32"], block=(1024,),
                        dynamic_smem=BIG_SMEM)
    x, y = torch.randn(blocks * chunk, device="cuda"), poisoned(blocks * chunk)
    kernel.launch([x, y, chunk], (blocks,))
    torch.cuda.synchronize()
    assert torch.equal(y, x.view(blocks, chunk).flip(1).reshape(-1))


def test_too_much_shared_memory_is_refused_before_launch(module):
    limit = device_properties().smem_per_block_optin
    kernel = CudaKernel(module, "reverse_chunks", [F32, F32, "int32"], block=(1024,),
                        dynamic_smem=limit + 1024)
    x = torch.randn(16, device="cuda")
    with pytest.raises(TileError, match="shared memory"):
        kernel.launch([x, x, 16], (1,))


def test_non_default_stream_orders_after_torch_work(module):
    n = 1 << 22
    kernel = CudaKernel(module, "vadd", [F32, F32, F32, "int32"], block=(256,))
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        doubled, c, d = poisoned(n), poisoned(n), poisoned(n)
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(50_000_000)  # so a launch on the wrong stream would read NaNs
        doubled.copy_(a * 2)
        kernel.launch([doubled, b, c, n], (ceil_div(n, 256),))  # torch's current: `side`
        assert torch_stream() == side.cuda_stream
    kernel.launch([doubled, b, d, n], (ceil_div(n, 256),), stream=side)
    side.synchronize()
    expected = a * 2 + b
    assert torch.equal(c, expected) and torch.equal(d, expected)


def test_launch_from_a_thread_without_a_current_context(module):
    n = 5000
    kernel = CudaKernel(module, "vadd", [F32, F32, F32, "int32"], block=(256,))
    a, b, c = torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), poisoned(n)
    torch.cuda.synchronize()
    errors = []

    def work():
        try:
            kernel.launch([a.data_ptr(), b.data_ptr(), c.data_ptr(), n], (ceil_div(n, 256),), 0)
            synchronize()
        except Exception as err:  # reported below, in the test's thread
            errors.append(err)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert not errors, errors
    assert torch.equal(c, a + b)


def test_bad_launches_raise_clear_errors(module):
    kernel = CudaKernel(module, "vadd", [F32, F32, F32, "int32"], block=(256,))
    x = torch.randn(8, device="cuda")
    with pytest.raises(CudaDriverError, match="CUDA_ERROR_INVALID_VALUE"):
        kernel.launch([x, x, x, 8], (0, 1, 1))
    with pytest.raises(TileError, match="CUDA tensor"):
        kernel.launch([x.cpu(), x, x, 8], (1,))
    with pytest.raises(TileError, match="takes 4 arguments"):
        kernel.launch([x, x, x], (1,))
    with pytest.raises(TileError, match="argument 3"):
        kernel.launch([x, x, x, 2.5], (1,))
    with pytest.raises(CudaDriverError, match="cuModuleGetFunction"):
        CudaKernel(module, "no_such_kernel", []).launch([], (1,))
    kernel.launch([x, x, x, 8], (1,))  # the context is still usable
    torch.cuda.synchronize()


def launch_times_us(kernel, args, stream, count=1000):
    grid = (1, 1, 1)
    for _ in range(50):
        kernel.launch(args, grid, stream)
    times = []
    for _ in range(count):
        start = time.perf_counter_ns()
        kernel.launch(args, grid, stream)
        times.append(time.perf_counter_ns() - start)
    torch.cuda.synchronize()
    return statistics.median(times) / 1000


def test_per_launch_host_overhead(module, capsys):
    kernel = CudaKernel(module, "noop", [F32, "int32"], block=(32,))
    x = torch.zeros(1, device="cuda")
    explicit = launch_times_us(kernel, [x, 1], torch_stream())
    as_int = launch_times_us(kernel, [x.data_ptr(), 1], torch_stream())
    default_stream = launch_times_us(kernel, [x, 1], None)
    with capsys.disabled():
        print(f"\nper-launch host time, median of 1000: tensor args {explicit:.2f} us, "
              f"int pointer {as_int:.2f} us, tensor args + torch current stream "
              f"{default_stream:.2f} us")
    assert explicit < 30.0
