"""Analyzer.analysis(func, device): what a specialized prim_func computes and moves, and the
time the roofline cost model (tilecraft.carver.cost) predicts for it on a GPU, under TileLang's
names. `device` is a carver.arch.CUDA, a tilecraft Target or a GPU name ("h100").

- total_flops: floating-point work of all launches, the grid included: tensor-core FLOPs
  (2 M N K per gemm) plus CUDA-core operations (analysis/counts.py says what each counts);
- total_global_bytes: bytes loaded from and stored to global memory (every one passes the L2);
- estimated_time: the model's prediction in seconds (the program the compiler builds for the
  GPU's arch, its waves, overlap and latencies: carver/cost.py);
- tflops: total_flops / estimated_time, in TFLOP/s;
- bandwidth_GBps: the GPU's DRAM bandwidth the model assumes, GB/s.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TileError
from ..ir.stmt import PrimFunc
from ..target import Target, get_target


@dataclass(frozen=True)
class AnalysisResult:
    total_flops: int
    total_global_bytes: int
    estimated_time: float
    tflops: float
    bandwidth_GBps: float


def _target_of(device) -> Target:
    from ..carver.arch import CUDA
    if isinstance(device, CUDA):
        return device.target
    if isinstance(device, Target):
        return device
    try:
        return get_target(device)
    except ValueError as e:
        raise TileError(f"Analyzer: {e}") from None


class Analyzer:
    def __init__(self, fn, device):
        if not isinstance(fn, PrimFunc):
            raise TileError(f"Analyzer takes a specialized @T.prim_func (a jit factory's "
                            f".get_tir(...)), got {type(fn).__name__}")
        self.fn = fn
        self.target = _target_of(device)

    def calculate(self) -> AnalysisResult:
        from ..carver.cost import estimate
        cost = estimate(self.fn, self.target)
        return AnalysisResult(total_flops=int(round(cost.flops)),
                              total_global_bytes=int(round(cost.l2_bytes)),
                              estimated_time=float(cost.time), tflops=float(cost.tflops),
                              bandwidth_GBps=self.target.hbm_bw / 1e9)

    @classmethod
    def analysis(cls, fn, device) -> AnalysisResult:
        return cls(fn, device).calculate()
