"""Where the host time of a jit call goes: each step of the prepared call path of the one-line
element-wise kernel (bench_call_overhead.add_one) timed on its own, beside the whole call and
torch's `x + 1`, each as the median host time over calls made on an idle GPU.

    python3 bench/profile_call_path.py [--calls 3000]
"""
import argparse
import ctypes
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_call_overhead import add_one, host_us  # noqa: E402
from tilecraft import call_cache  # noqa: E402
from tilecraft.runtime import driver, launcher  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    n = 1 << 16
    x = torch.randn(n, device="cuda")
    kernel = add_one(n)
    out = kernel(x)
    torch.testing.assert_close(out, x + 1)
    kernel(x)
    plan = kernel._calls.get(call_cache.signature((x,)))
    prepared = plan.prepared
    cuda_kernel, grid = prepared.grids[0]
    packed = prepared._made[1]
    stream = launcher._default_stream()
    context = ctypes.c_void_p()
    get_context = driver.unprototyped("cuCtxGetCurrent")
    device = x.device
    raw, function = cuda_kernel._launch, cuda_kernel._bound_function()
    block, handle, argv = cuda_kernel.block, ctypes.c_void_p(stream), cuda_kernel._argv
    steps = {
        "torch x + 1": lambda: x + 1,
        "whole call": lambda: kernel(x),
        "signature": lambda: call_cache.signature((x,)),
        "plan lookup": lambda: kernel._calls.get(call_cache.signature((x,))),
        "new_empty": lambda: x.new_empty((n,), dtype=torch.float32),
        "new_empty, no dtype": lambda: x.new_empty((n,)),
        "torch.empty": lambda: torch.empty((n,), dtype=torch.float32, device=device),
        "torch.empty_like": lambda: torch.empty_like(x),
        "data_ptr": lambda: x.data_ptr(),
        "stream": launcher._default_stream,
        "cuCtxGetCurrent": lambda: get_context(ctypes.byref(context)),
        "launch_packed": lambda: cuda_kernel.launch_packed(packed, grid, stream),
        "c_void_p(stream)": lambda: ctypes.c_void_p(stream),
        "cuLaunchKernel alone": lambda: raw(function, grid[0], grid[1], grid[2], *block,
                                            cuda_kernel.dynamic_smem, handle, argv, None),
        "PreparedCall.run": lambda: prepared.run([x, out]),
        "CallPlan.run": lambda: plan.run(kernel.program, (x,)),
    }
    times = {name: host_us(fn, args.calls) for name, fn in steps.items()}
    again = host_us(steps["whole call"], args.calls)
    print("| step | host us |\n|---|---|")
    for name, t in times.items():
        print(f"| {name} | {t:.2f} |")
    print(f"| whole call, again | {again:.2f} |")


if __name__ == "__main__":
    main()
