"""TileLang's `tilelang.contrib.nvcc` queries that example scripts make before building a
kernel: the compute version of the GPU, and whether it has a feature.

The answer is for the GPU the kernels compile for: the arch `target` names (an arch such as
"sm_90a", or a Target), else TILECRAFT_TARGET when it names an arch, else this machine's GPU
(an error naming the way out when there is none)."""
from __future__ import annotations

from .. import placement
from ..errors import TileError
from ..target import arch_of, parse_arch


def _arch(target) -> str:
    if target is not None:
        if isinstance(target, str) and target.startswith("cuda") and "-arch=" in target:
            return target.split("-arch=", 1)[1].split()[0]
        return arch_of(target)
    _, arch = placement.resolve(None)   # TILECRAFT_TARGET, else this machine's GPU
    if arch is None:
        raise TileError("nvcc.get_target_compute_version: there is no CUDA device here; name "
                        "the GPU (get_target_compute_version('sm_90a')) or set "
                        "TILECRAFT_TARGET=sm_90a")
    return arch


def get_target_compute_version(target=None) -> str:
    """The compute capability as TileLang writes it: "9.0" for sm_90a, "8.6" for sm_86."""
    capability, _ = parse_arch(_arch(target))
    return f"{capability // 10}.{capability % 10}"


def parse_compute_version(compute_version: str) -> tuple[int, int]:
    """("9.0") -> (9, 0)."""
    try:
        major, minor = str(compute_version).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise TileError(f"compute version {compute_version!r} is not of the form '9.0'") from None


def have_tensorcore(compute_version: str | None = None, target=None) -> bool:
    major, _ = parse_compute_version(compute_version or get_target_compute_version(target))
    return major >= 7


def have_fp16(compute_version: str) -> bool:
    major, minor = parse_compute_version(compute_version)
    return (major, minor) >= (5, 3)


def have_bf16(compute_version: str) -> bool:
    return parse_compute_version(compute_version)[0] >= 8


def have_tma(target=None) -> bool:
    return parse_compute_version(get_target_compute_version(target))[0] >= 9
