"""What GPU this machine has, asked of the driver directly.

Targets are values elsewhere in tilecraft (tilecraft/target.py); this module is the one place
that asks the hardware: to pick the default target, to tell tests whether a GPU is here, and
to build the Target the compiler plans for (`device_target`).
It goes through the driver (ctypes) rather than torch: answering "is there a GPU" must not
import torch, which may be absent or take seconds to import, and must not fail on a machine
with no driver at all.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ....errors import TileError
from . import driver


@functools.lru_cache(maxsize=1)
def has_cuda_device() -> bool:
    """True when a CUDA driver is installed and reports at least one usable device."""
    if not driver.available():
        return False
    try:
        return driver.device_count() > 0
    except TileError:
        return False  # e.g. CUDA_ERROR_NO_DEVICE, or a driver older than the kernel module


def _ordinal(device: int | None) -> int:
    """The device asked about: given, else the current one (current_ordinal)."""
    return device if device is not None else current_ordinal()


def current_ordinal() -> int:
    """The device asked about when none is named: the current context's, else torch's current
    one, else 0."""
    driver.init()
    if driver.current_context():
        return driver.context_device()
    return driver.default_ordinal()


def compute_capability(device: int | None = None) -> tuple:
    """(major, minor) of a device."""
    handle = driver.device(_ordinal(device))
    return (driver.device_attribute(driver.DEVICE_COMPUTE_CAPABILITY_MAJOR, handle),
            driver.device_attribute(driver.DEVICE_COMPUTE_CAPABILITY_MINOR, handle))


def arch_of(major: int, minor: int) -> str:
    """The arch tilecraft compiles for on a compute capability.

    9.0 gets the arch-specific "sm_90a": wgmma and setmaxnreg exist only there. Other parts get
    the plain name, which runs on that exact compute capability.
    """
    name = f"sm_{major}{minor}"
    return name + "a" if (major, minor) == (9, 0) else name


def current_arch(device: int | None = None) -> str:
    """"sm_80", "sm_86", "sm_89", "sm_90a", ... for the current (or given) device."""
    if not has_cuda_device():
        raise TileError("no CUDA device on this machine; use target='interp'")
    return arch_of(*compute_capability(device))


@dataclass(frozen=True)
class DeviceProperties:
    """The limits the compiler and the cost model need from a real device."""
    name: str
    arch: str
    compute_capability: tuple
    sm_count: int
    max_threads_per_block: int
    smem_per_block_optin: int       # bytes a block may use after opting in
    smem_per_sm: int
    registers_per_sm: int
    registers_per_block: int
    l2_bytes: int
    clock_khz: int
    memory_clock_khz: int
    memory_bus_bits: int

    @property
    def dram_bandwidth_bytes_per_s(self) -> float:
        """Theoretical peak: double data rate times bus width (an estimate for the roofline)."""
        return 2.0 * self.memory_clock_khz * 1e3 * self.memory_bus_bits / 8


@functools.lru_cache(maxsize=None)
def _properties(ordinal: int) -> DeviceProperties:
    handle = driver.device(ordinal)

    def attribute(which: int) -> int:
        return driver.device_attribute(which, handle)

    capability = (attribute(driver.DEVICE_COMPUTE_CAPABILITY_MAJOR),
                  attribute(driver.DEVICE_COMPUTE_CAPABILITY_MINOR))
    return DeviceProperties(
        name=driver.device_name(handle),
        arch=arch_of(*capability),
        compute_capability=capability,
        sm_count=attribute(driver.DEVICE_MULTIPROCESSOR_COUNT),
        max_threads_per_block=attribute(driver.DEVICE_MAX_THREADS_PER_BLOCK),
        smem_per_block_optin=attribute(driver.DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        smem_per_sm=attribute(driver.DEVICE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        registers_per_sm=attribute(driver.DEVICE_MAX_REGISTERS_PER_MULTIPROCESSOR),
        registers_per_block=attribute(driver.DEVICE_MAX_REGISTERS_PER_BLOCK),
        l2_bytes=attribute(driver.DEVICE_L2_CACHE_SIZE),
        clock_khz=attribute(driver.DEVICE_CLOCK_RATE),
        memory_clock_khz=attribute(driver.DEVICE_MEMORY_CLOCK_RATE),
        memory_bus_bits=attribute(driver.DEVICE_GLOBAL_MEMORY_BUS_WIDTH),
    )


def device_attribute(which: int, device: int | None = None) -> int:
    """One CUdevice_attribute (cuda.h's numbering, which the runtime's cudaDeviceAttr shares)
    of the current (or given) device."""
    if not has_cuda_device():
        raise TileError("no CUDA device on this machine")
    return driver.device_attribute(which, driver.device(_ordinal(device)))


def device_properties(device: int | None = None) -> DeviceProperties:
    """SM count, shared memory, registers, L2 size and clocks of the current (or given) device."""
    if not has_cuda_device():
        raise TileError("no CUDA device on this machine")
    return _properties(_ordinal(device))


@functools.lru_cache(maxsize=None)
def device_target(arch: str):
    """The Target the compiler plans a launch for when it compiles for `arch` here: the
    table's GPU for the arch (sm_90a: an H100 SXM) with the SM count and L2 size of this
    machine's current device (asked once per arch) when that device is of the arch. An arch
    name for an arch the table has no GPU for."""
    from ....target import model_of, with_device
    model = model_of(arch)
    if model is None:
        return arch
    if not has_cuda_device() or current_arch() != arch:
        return model
    device = device_properties()
    return with_device(model, device.sm_count, device.l2_bytes)
