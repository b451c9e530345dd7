"""Targets, as values: the GPUs the compiler knows (what one can hold and how fast it moves and
computes), the architectures it compiles for, and the target names a kernel is asked to run on.
The only place arch strings are parsed and hardware limits are written down; only the runtime
asks the machine what it has (backends/cuda/runtime/device.py builds the Target of the device
from the table entry for its arch) and passes the value down.


Every number is data, with where it comes from beside it:
- "datasheet": the vendor's product datasheet or architecture whitepaper (dense rates; the
  sparsity-doubled figures are never used);
- "programming guide": the CUDA C++ Programming Guide's tables (compute-capability limits and
  per-SM instruction throughputs);
- "measured": measured on an H100 80GB HBM3 (SXM5) beside cuBLAS and a device copy;
- "estimate": not published by the vendor; an order-of-magnitude value for the model, stated as
  such (L2 bandwidth, latencies, launch overhead).

Rates are per second for the whole chip. Tensor-core rates are FLOP/s (a multiply-add is two
FLOPs) keyed by the operand dtype with float32 accumulation. CUDA-core rates are lane
operations per second (one FP32 lane instruction, an FMA included, is one operation), which is
the datasheet's FP32 TFLOPS / 2. SFU rates are special-function operations (exp2, rcp, rsqrt,
...) per second: 16 per SM per clock on sm_80 to sm_90 (programming guide).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from .errors import TileError

KB = 1024
MB = 1024 * 1024

# The architectures the CUDA backend compiles for, and the largest dynamic shared memory one
# block may opt into on each (programming guide, compute-capability table).
SMEM_PER_BLOCK = {"sm_80": 163 * KB, "sm_86": 99 * KB, "sm_87": 163 * KB, "sm_89": 99 * KB,
                  "sm_90": 227 * KB, "sm_90a": 227 * KB}
_ARCH = re.compile(r"^sm_(\d{2,3})([af]?)$")


def parse_arch(arch) -> tuple[int, str]:
    """(compute capability, suffix) of an arch name: "sm_90a" -> (90, "a"). TileError for a
    name that is not one."""
    match = _ARCH.match(arch if isinstance(arch, str) else "")
    if not match:
        raise TileError(f"unknown CUDA arch {arch!r}; expected a name such as 'sm_80', 'sm_89' "
                        "or 'sm_90a'")
    return int(match.group(1)), match.group(2)


def smem_limit(arch: str) -> int | None:
    """Bytes of shared memory one block may use on arch, or None for an arch not in the table."""
    return SMEM_PER_BLOCK.get(arch)


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    arch: str                     # the compile arch tilecraft uses for it
    num_sms: int
    clock_hz: float               # boost clock the rates below assume
    smem_per_sm: int              # bytes of shared memory an SM can give to blocks
    smem_per_block: int           # largest dynamic shared memory one block may opt into
    smem_reserved_per_block: int  # the runtime keeps this much per resident block
    regs_per_sm: int              # 32-bit registers
    max_regs_per_thread: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    l2_bytes: int
    hbm_bw: float                 # bytes/s, reads + writes together
    l2_bw: float                  # bytes/s between L2 and the SMs
    smem_bw: float                # bytes/s, all SMs together
    tensor_flops: dict            # operand dtype -> FLOP/s (dense, fp32 accumulate)
    cuda_ops: dict                # dtype -> lane ops/s
    sfu_ops: float                # special-function ops/s
    dram_latency_s: float         # a global load's round trip while every SM streams
    l2_latency_s: float           # an L2 hit's round trip while every SM streams
    launch_s: float               # launch overhead of one kernel (estimate / measured)
    first_load_s: float           # a wave's first load (and its last store) before the
    #                               memory system is loaded: the part of a block's time no
    #                               pipeline hides, paid twice per wave (estimate)
    mma_sync_fraction: float = 1.0  # mma.sync's tensor rate relative to the rates above
    phase_cycles: int = 40        # fixed latency of one tile op inside a loop body: the
    #                               dependent issue / barrier / pipeline drain between
    #                               phases of an iteration (estimate)
    notes: tuple = field(default=())

    def tensor_rate(self, dtype: str) -> float | None:
        return self.tensor_flops.get(dtype)

    def cuda_rate(self, dtype: str = "float32") -> float:
        return self.cuda_ops.get(dtype, self.cuda_ops["float32"])

    @property
    def smem_bytes_per_clock_per_sm(self) -> float:
        return self.smem_bw / (self.num_sms * self.clock_hz)


def _per_chip(num_sms: int, per_sm_per_clock: float, clock_hz: float) -> float:
    return num_sms * per_sm_per_clock * clock_hz


# --- NVIDIA H100 SXM5 80GB ----------------------------------------------------------------
# datasheet: 132 SMs, 1980 MHz max boost (nvidia-smi on the lent card also reports 1980 MHz),
# 50 MB L2, 80 GB HBM3 at 3.35 TB/s, FP16/BF16 tensor 989.4 TFLOPS dense, FP8 1979 dense,
# TF32 494.7 dense, FP32 67 TFLOPS, FP64 34 TFLOPS.
# programming guide (cc 9.0): 228 KB shared per SM, 227 KB per block, 1 KB reserved per block,
# 64K registers per SM, 255 per thread, 2048 threads and 32 blocks per SM.
# measured: device copy 3.0 TB/s read + write; best dense fp16 GEMM 783 TFLOP/s.
# The other tensor dtypes are the datasheet rates scaled by the same measured fraction
# (783 / 989.4), since nothing better is known.
_H100_CLOCK = 1.98e9
# The tensor rates of sm_90 are those of wgmma (cuBLAS's path, which the measured rate comes
# from). mma.sync still runs on Hopper but is fed one warp at a time through registers:
# estimate, from published Hopper microbenchmarks, about 62% of wgmma's dense rate (our own
# mma.sync GEMM measured below it on the H100: bench/carver_search.md).
_HOPPER_MMA_SYNC = 0.62
_H100_TC_FRACTION = 783.0 / 989.4
H100 = Target(
    name="h100", description="NVIDIA H100 SXM5 80GB", arch="sm_90a",
    num_sms=132, clock_hz=_H100_CLOCK,
    smem_per_sm=228 * KB, smem_per_block=SMEM_PER_BLOCK["sm_90a"], smem_reserved_per_block=1 * KB,
    regs_per_sm=65536, max_regs_per_thread=255, max_threads_per_sm=2048,
    max_threads_per_block=1024, max_blocks_per_sm=32,
    l2_bytes=50 * MB,
    hbm_bw=3.0e12,                                          # measured copy (datasheet 3.35e12)
    l2_bw=_per_chip(132, 64, _H100_CLOCK),                  # estimate, see below
    smem_bw=_per_chip(132, 128, _H100_CLOCK),               # 128 B/clk/SM (32 banks x 4 B)
    tensor_flops={"float16": 783e12,                        # measured
                  "bfloat16": 783e12,                       # same path as fp16
                  "float8_e4m3": 1979e12 * _H100_TC_FRACTION,
                  "float8_e5m2": 1979e12 * _H100_TC_FRACTION,
                  "int8": 1979e12 * _H100_TC_FRACTION,
                  "tfloat32": 494.7e12 * _H100_TC_FRACTION,
                  "float64": 67e12 * _H100_TC_FRACTION},
    cuda_ops={"float32": 67e12 / 2, "float16": 67e12 / 2, "bfloat16": 67e12 / 2,
              "float64": 34e12 / 2},
    sfu_ops=_per_chip(132, 16, _H100_CLOCK),
    # Loaded latencies (a TMA / cp.async stage from issue to landing while every SM streams),
    # which Little's law needs, not the unloaded round trip: calibrated on the lent card's
    # exhaustive GEMM searches, where pipeline depth decides the small-M shapes; these sit in
    # the middle of the range that ranks a config within 2% of the best into the top 5% for
    # every shape (the calibration and the search since: bench/carver_search.md).
    dram_latency_s=1.5e-6, l2_latency_s=1.0e-6, first_load_s=1.5e-6,
    mma_sync_fraction=_HOPPER_MMA_SYNC,
    launch_s=3e-6,  # measured: empty-kernel launch 2.8-5.6 us (tritonbench, TileLang)
    notes=("L2 bandwidth is not published; modelled as 64 B/clk/SM at boost clock "
           "(16.7 TB/s, about 5.6x the measured HBM copy rate)",),
)
# (l2_bw above is 132 * 64 B * 1.98 GHz = 16.7 TB/s: an estimate, since no vendor document
#  states Hopper's L2 bandwidth.)

# --- NVIDIA H200 SXM 141GB ----------------------------------------------------------------
# datasheet: same GH100 compute as the H100 SXM (132 SMs, 989.4 TFLOPS FP16 dense, 1979 FP8,
# 67 TFLOPS FP32), 141 GB HBM3e at 4.8 TB/s, 50 MB L2. No measurement on this card: the
# datasheet rates are used as they are.
H200 = Target(
    name="h200", description="NVIDIA H200 SXM 141GB", arch="sm_90a",
    num_sms=132, clock_hz=_H100_CLOCK,
    smem_per_sm=228 * KB, smem_per_block=SMEM_PER_BLOCK["sm_90a"], smem_reserved_per_block=1 * KB,
    regs_per_sm=65536, max_regs_per_thread=255, max_threads_per_sm=2048,
    max_threads_per_block=1024, max_blocks_per_sm=32,
    l2_bytes=50 * MB,
    hbm_bw=4.8e12,
    l2_bw=_per_chip(132, 64, _H100_CLOCK),                  # estimate, as for the H100
    smem_bw=_per_chip(132, 128, _H100_CLOCK),
    tensor_flops={"float16": 989.4e12, "bfloat16": 989.4e12, "float8_e4m3": 1979e12,
                  "float8_e5m2": 1979e12, "int8": 1979e12, "tfloat32": 494.7e12,
                  "float64": 67e12},
    cuda_ops={"float32": 67e12 / 2, "float16": 67e12 / 2, "bfloat16": 67e12 / 2,
              "float64": 34e12 / 2},
    sfu_ops=_per_chip(132, 16, _H100_CLOCK),
    # The H100's loaded latencies: the same SMs, L2 and TMA (only the HBM differs), and they
    # rank an exhaustive GEMM search measured on an H200 as well as on the H100
    # (bench/carver_search.md).
    dram_latency_s=1.5e-6, l2_latency_s=1.0e-6, first_load_s=0.6e-6, launch_s=3e-6,
    mma_sync_fraction=_HOPPER_MMA_SYNC,
)

# --- NVIDIA A100 SXM4 80GB ----------------------------------------------------------------
# datasheet: 108 SMs, 1410 MHz boost, 40 MB L2, HBM2e 2039 GB/s, FP16/BF16 tensor 312 TFLOPS
# dense, INT8 624 TOPS, TF32 156, FP64 tensor 19.5, FP32 19.5 TFLOPS.
# A100 whitepaper: L2 read bandwidth 5120 B/clk.
# programming guide (cc 8.0): 164 KB shared per SM, 163 KB per block, 1 KB reserved per
# block, 64K registers, 2048 threads and 32 blocks per SM.
_A100_CLOCK = 1.41e9
A100 = Target(
    name="a100", description="NVIDIA A100 SXM4 80GB", arch="sm_80",
    num_sms=108, clock_hz=_A100_CLOCK,
    smem_per_sm=164 * KB, smem_per_block=SMEM_PER_BLOCK["sm_80"], smem_reserved_per_block=1 * KB,
    regs_per_sm=65536, max_regs_per_thread=255, max_threads_per_sm=2048,
    max_threads_per_block=1024, max_blocks_per_sm=32,
    l2_bytes=40 * MB,
    hbm_bw=2.039e12,
    l2_bw=5120 * _A100_CLOCK,
    smem_bw=_per_chip(108, 128, _A100_CLOCK),
    tensor_flops={"float16": 312e12, "bfloat16": 312e12, "int8": 624e12,
                  "tfloat32": 156e12, "float64": 19.5e12},
    cuda_ops={"float32": 19.5e12 / 2, "float16": 19.5e12 / 2, "bfloat16": 19.5e12 / 2,
              "float64": 9.7e12 / 2},
    sfu_ops=_per_chip(108, 16, _A100_CLOCK),
    dram_latency_s=0.7e-6, l2_latency_s=0.35e-6, first_load_s=0.7e-6, launch_s=3e-6,
)

# --- NVIDIA GeForce RTX 4090 --------------------------------------------------------------
# datasheet (Ada whitepaper): 128 SMs, 2520 MHz boost, 72 MB L2, 24 GB GDDR6X at 1008 GB/s,
# FP32 82.6 TFLOPS; tensor FP16/BF16 with FP32 accumulate 165.2 TFLOPS dense, FP8 (FP32
# accumulate) 330.3, INT8 660.6 TOPS, TF32 82.6.
# programming guide (cc 8.9): 100 KB shared per SM, 99 KB per block, 1 KB reserved per block,
# 64K registers, 1536 threads and 24 blocks per SM.
_RTX4090_CLOCK = 2.52e9
RTX4090 = Target(
    name="rtx4090", description="NVIDIA GeForce RTX 4090", arch="sm_89",
    num_sms=128, clock_hz=_RTX4090_CLOCK,
    smem_per_sm=100 * KB, smem_per_block=SMEM_PER_BLOCK["sm_89"], smem_reserved_per_block=1 * KB,
    regs_per_sm=65536, max_regs_per_thread=255, max_threads_per_sm=1536,
    max_threads_per_block=1024, max_blocks_per_sm=24,
    l2_bytes=72 * MB,
    hbm_bw=1.008e12,
    l2_bw=_per_chip(128, 32, _RTX4090_CLOCK),               # estimate
    smem_bw=_per_chip(128, 128, _RTX4090_CLOCK),
    tensor_flops={"float16": 165.2e12, "bfloat16": 165.2e12, "float8_e4m3": 330.3e12,
                  "float8_e5m2": 330.3e12, "int8": 660.6e12, "tfloat32": 82.6e12},
    cuda_ops={"float32": 82.6e12 / 2, "float16": 82.6e12 / 2, "bfloat16": 82.6e12 / 2,
              "float64": 82.6e12 / 2 / 64},
    sfu_ops=_per_chip(128, 16, _RTX4090_CLOCK),
    dram_latency_s=0.6e-6, l2_latency_s=0.3e-6, first_load_s=0.6e-6, launch_s=3e-6,
)

TARGETS = {t.name: t for t in (H100, H200, A100, RTX4090)}
_ALIASES = {"h100-sxm": "h100", "sm_90a": "h100", "sm_90": "h100", "a100-sxm": "a100",
            "sm_80": "a100", "4090": "rtx4090", "sm_89": "rtx4090"}


def get_target(target) -> Target:
    """A Target from a Target or a name ("h100", "h200", "a100", "rtx4090", or an arch)."""
    if isinstance(target, Target):
        return target
    name = str(target).strip().lower()
    name = _ALIASES.get(name, name)
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}") from None


def cost_target_for(device: str | None, arch: str | None) -> str:
    """The cost model's hardware for the machine being tuned on: the GPU by name, else the
    compile arch, else the H100 (on the interpreter the model only orders candidates)."""
    if device:
        lowered = device.lower()
        for marker, target in (("h200", "h200"), ("h100", "h100"), ("a100", "a100"),
                               ("4090", "rtx4090")):
            if marker in lowered:
                return target
    if arch:
        try:
            return get_target(arch).name
        except ValueError:
            return "a100" if parse_arch(arch)[0] < 90 else "h100"
    return "h100"


def model_of(target) -> Target | None:
    """A Target as it is; for an arch name the table's GPU of that arch (no device is asked);
    None for an arch the table has no GPU for."""
    if isinstance(target, Target):
        return target
    try:
        return get_target(target)
    except ValueError:
        return None


def arch_of(target) -> str | None:
    """The compile arch of a Target, or the arch name itself."""
    return target.arch if isinstance(target, Target) else target


def with_device(target: Target, sm_count: int, l2_bytes: int) -> Target:
    """The table's GPU with a device's SM count and L2 size: whether a grid fills one wave and
    what the L2 keeps between blocks depend on them (an H100 PCIe has 114 SMs, an H20 78,
    against the table's 132)."""
    return dataclasses.replace(target, num_sms=sm_count, l2_bytes=l2_bytes)
