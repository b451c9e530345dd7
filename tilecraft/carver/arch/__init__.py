"""TileLang's `carver.arch`: GPU descriptions for tile recommendation (CUDA), the device
queries of `driver`, and the predicates on them. Only NVIDIA GPUs from sm_80 on are
targets: CDNA, RDNA, CPU and METAL exist as names and refuse to be made."""
from __future__ import annotations

from ...errors import TileError
from . import driver  # noqa: F401
from .cuda import (CUDA, has_mma_support, is_ada_arch, is_ampere_arch, is_cuda_arch,
                   is_hopper_arch, is_tensorcore_supported_precision, is_volta_arch)

__all__ = ["CUDA", "CDNA", "RDNA", "CPU", "METAL", "TileDevice", "get_arch",
           "auto_infer_current_arch", "driver", "is_cuda_arch", "is_volta_arch",
           "is_ampere_arch", "is_ada_arch", "is_hopper_arch", "has_mma_support",
           "is_tensorcore_supported_precision"]

TileDevice = CUDA  # the one kind of device there is here


class _Unsupported:
    platform = ""

    def __init__(self, *args, **kwargs):
        raise TileError(f"carver.arch.{type(self).__name__}: {self.platform} devices are not "
                        "supported; tilecraft targets NVIDIA GPUs (carver.arch.CUDA)")


class CDNA(_Unsupported):
    platform = "AMD CDNA"


class RDNA(_Unsupported):
    platform = "AMD RDNA"


class CPU(_Unsupported):
    platform = "CPU"


class METAL(_Unsupported):
    platform = "Apple Metal"


def get_arch(target="cuda") -> CUDA:
    """A device description for a target name: "cuda" (the current GPU) or a GPU or arch."""
    name = str(target).strip().lower()
    if name.startswith(("hip", "rocm")):
        return CDNA(target)
    if name.startswith(("llvm", "c ", "cpu")) or name == "c":
        return CPU(target)
    if name.startswith("metal"):
        return METAL(target)
    return CUDA(target)


def auto_infer_current_arch() -> CUDA:
    """The current GPU (an error without one)."""
    return CUDA("cuda")
