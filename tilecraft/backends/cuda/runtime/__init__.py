"""The only part of tilecraft that touches nvcc, the CUDA driver or torch devices.

toolchain: CUDA C++ -> cubin with nvcc, ptxas facts per kernel.
cache:     content-addressed memory + disk cache of compiled cubins.
driver:    ctypes binding to libcuda (loaded on first use).
launcher:  CudaModule / CudaKernel: load a cubin per context, launch on a stream.
device:    is there a GPU, which arch, what limits.

Importing this package loads nothing: no nvcc run, no libcuda, no torch.
"""
from .cache import KernelCache, cache_key, clear, get_or_compile
from .device import (DeviceProperties, compute_capability, current_arch, device_properties,
                     has_cuda_device)
from .driver import CudaDriverError
from .launcher import CudaKernel, CudaModule, synchronize, tensor_pointer, torch_stream
from .toolchain import (INCLUDE_DIR, CompiledCubin, KernelInfo, compile_cubin, find_nvcc,
                        has_nvcc, nvcc_version, parse_ptxas_info, ptx_of)

__all__ = [
    "KernelCache", "cache_key", "clear", "get_or_compile",
    "DeviceProperties", "compute_capability", "current_arch", "device_properties",
    "has_cuda_device", "CudaDriverError",
    "CudaKernel", "CudaModule", "synchronize", "tensor_pointer", "torch_stream",
    "INCLUDE_DIR", "CompiledCubin", "KernelInfo", "compile_cubin", "find_nvcc", "has_nvcc",
    "nvcc_version", "parse_ptxas_info", "ptx_of",
]
