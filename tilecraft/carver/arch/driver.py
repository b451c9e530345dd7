"""TileLang's `carver.arch.driver`: facts of a CUDA device by ordinal, asked of the driver
(through machine.queries()). Each needs a GPU: without one get_cuda_device_properties gives
None and the others raise TileError."""
from __future__ import annotations

from ...errors import TileError
from .machine import queries

# CUdevice_attribute numbers (cuda.h; the runtime's cudaDeviceAttr shares them)
MAX_SHARED_MEMORY_PER_BLOCK = 8
MAX_PERSISTING_L2_CACHE_SIZE = 108

_UNITS = {"bytes": 1, "kb": 1024, "mb": 1024 * 1024}


def _in(value: int, format: str) -> int:  # noqa: A002 - TileLang's argument name
    if format not in _UNITS:
        raise TileError(f"format must be one of {', '.join(_UNITS)}, got {format!r}")
    return value // _UNITS[format]


def get_cuda_device_properties(device_id: int = 0):
    """The device's DeviceProperties (name, SM count, shared memory, registers, L2, clocks),
    or None where there is no CUDA device."""
    if not queries().has_cuda_device():
        return None
    return queries().device_properties(device_id)


def get_device_attribute(attr: int, device_id: int = 0) -> int:
    """A CUdevice_attribute / cudaDeviceAttr value by its number."""
    return queries().device_attribute(attr, device_id)


def get_device_name(device_id: int = 0) -> str:
    return queries().device_properties(device_id).name


def get_num_sms(device_id: int = 0) -> int:
    return queries().device_properties(device_id).sm_count


def get_shared_memory_per_block(device_id: int = 0, format: str = "bytes") -> int:  # noqa: A002
    """Shared memory a block has without opting in to more (48 KiB on sm_80 to sm_90)."""
    return _in(queries().device_attribute(MAX_SHARED_MEMORY_PER_BLOCK, device_id), format)


def get_max_dynamic_shared_size_bytes(device_id: int = 0, format: str = "bytes") -> int:  # noqa: A002
    """Shared memory per SM (what TileLang reports under this name)."""
    return _in(queries().device_properties(device_id).smem_per_sm, format)


def get_persisting_l2_cache_max_size(device_id: int = 0) -> int:
    return queries().device_attribute(MAX_PERSISTING_L2_CACHE_SIZE, device_id)


def get_registers_per_block(device_id: int = 0) -> int:
    return queries().device_properties(device_id).registers_per_block
