"""CUDA(target): TileLang's description of an NVIDIA GPU for tile recommendation, made from
tilecraft's GPU table (tilecraft/target.py) or the device itself.

`CUDA("cuda")` is the current GPU (its SM count and L2 size over the table's entry for its
arch; an error without one); `CUDA("h100")`, `CUDA("nvidia/nvidia-h100")`,
`CUDA("nvidia/geforce-rtx-4090")`, `CUDA("sm_90a")` or `CUDA("cuda -arch=sm_80")` name a GPU
and need none. `.target` is tilecraft's Target, which `tilecraft.carver.recommend(...,
target=arch.target)` and the cost model take.
"""
from __future__ import annotations

import re

from ...errors import TileError
from ...target import TARGETS, Target, get_target, model_of, parse_arch, with_device
from .machine import queries

# TileLang's (TVM's) target tags name GPUs "nvidia/<vendor>-<model>".
_TAG = re.compile(r"^nvidia/(?:nvidia-|geforce-|tesla-)?")
_ARCH_OPTION = re.compile(r"-arch=(sm_\w+)")

# operand dtype -> accumulator dtypes the tensor cores of each generation take (TileLang's)
_AMPERE_MMA = {("bfloat16", "float32"), ("float16", "float32"), ("float16", "float16"),
               ("int8", "int32")}
_ADA_MMA = _AMPERE_MMA | {("float8_e5m2", "float32"), ("float8_e4m3", "float32")}


def _model(name: str) -> Target:
    text = name.strip().lower()
    option = _ARCH_OPTION.search(text)
    if option:
        found = model_of(option.group(1))
        if found is None:
            raise TileError(f"CUDA({name!r}): tilecraft's table has no GPU of "
                            f"{option.group(1)}; known: {', '.join(TARGETS)}")
        return found
    if text == "cuda":
        if not queries().has_cuda_device():
            raise TileError("CUDA('cuda') describes the current GPU, and there is none here; "
                            f"name one instead ({', '.join(TARGETS)}, e.g. CUDA('h100'))")
        props = queries().device_properties()
        table = model_of(props.arch)
        if table is None:
            raise TileError(f"CUDA('cuda'): the current GPU ({props.name}, {props.arch}) is "
                            f"of an arch tilecraft's table has no GPU for")
        return with_device(table, props.sm_count, props.l2_bytes)
    try:
        return get_target(_TAG.sub("", text).replace("rtx-", "rtx"))
    except ValueError:
        raise TileError(f"CUDA({name!r}): unknown GPU; give 'cuda' (the current one), an arch "
                        f"or one of {', '.join(TARGETS)}") from None


class CUDA:
    """An NVIDIA GPU, with TileLang's attribute names (see the module's text)."""

    platform = "CUDA"

    def __init__(self, target="cuda"):
        self.target = target if isinstance(target, Target) else _model(str(target))
        t = self.target
        number, _ = parse_arch(t.arch)
        self.name = t.description
        self.sm_version = number
        self.compute_capability = str(number)
        self.smem_cap = t.smem_per_block              # the most a block may use (opted in)
        self.max_smem_usage = t.smem_per_sm
        self.compute_max_core = t.num_sms
        self.warp_size = 32
        self.reg_cap = t.regs_per_sm
        self.sm_partition = 4
        self.l2_cache_size_bytes = t.l2_bytes
        self.transaction_size = [32, 128]             # bytes: a sector, a cache line
        self.bandwidth = [t.hbm_bw / 1e9, t.smem_bw / 1e9]   # GB/s: global, shared memory

    def get_avaliable_tensorintrin_shapes(self) -> list:
        """[M, N] of the mma instruction tiles (TileLang's spelling of the name)."""
        return [[16, 16]]

    def __repr__(self) -> str:
        return f"CUDA({self.target.name})"


def is_cuda_arch(arch) -> bool:
    return isinstance(arch, CUDA)


def is_volta_arch(arch) -> bool:
    return is_cuda_arch(arch) and 70 <= arch.sm_version < 80


def is_ampere_arch(arch) -> bool:
    return is_cuda_arch(arch) and 80 <= arch.sm_version < 89


def is_ada_arch(arch) -> bool:
    return is_cuda_arch(arch) and arch.sm_version == 89


def is_hopper_arch(arch) -> bool:
    return is_cuda_arch(arch) and arch.sm_version == 90


def has_mma_support(arch) -> bool:
    return is_cuda_arch(arch) and arch.sm_version >= 80


def is_tensorcore_supported_precision(in_dtype, accum_dtype, arch) -> bool:
    """Whether the arch's tensor cores multiply in_dtype accumulating in accum_dtype."""
    if not has_mma_support(arch):
        raise TileError(f"{arch!r}: tilecraft targets sm_80 and newer")
    pairs = _ADA_MMA if arch.sm_version >= 89 else _AMPERE_MMA
    return (str(in_dtype), str(accum_dtype)) in pairs
