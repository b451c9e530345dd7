"""TileLang's carver templates: MatmulTemplate(M, N, K, ...).with_arch(arch) and its hints.

`recommend_hints(topk)` ranks tile configurations of a GEMM of that problem with tilecraft's
own recommender (carver/recommend.py: legal configurations ranked by the cost model's time on
the arch) and gives each as TileLang's hint: `block` (block_M, block_N), `warp` (the tile one
warp computes), `rstep` ([block_K]), `pipeline_stage`, `rasterization_plan` (none: the
compiler orders blocks itself) and `config`, the parameters as tilecraft's factories take
them."""

from dataclasses import dataclass, field

import tilecraft
import tilecraft.language as T

from ..errors import TileError
from .arch import CUDA
from .recommend import recommend
from .roller.rasterization import NoRasterization


@tilecraft.jit(out_idx=[-1])
def matmul(M, N, K, in_dtype="float16", out_dtype="float16", accum_dtype="float32",
           block_M=128, block_N=128, block_K=32, num_stages=2, threads=128):
    """C = A @ B, the GEMM a MatmulTemplate stands for."""
    @T.prim_func
    def main(A: T.Tensor((M, K), in_dtype), B: T.Tensor((K, N), in_dtype),
             C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), in_dtype)
            B_s = T.alloc_shared((block_K, block_N), in_dtype)
            C_l = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * block_M, bx * block_N])
    return main


@dataclass
class Hint:
    """One recommended tile configuration, in TileLang's terms."""
    block: list
    warp: list
    rstep: list
    pipeline_stage: int
    rasterization_plan: object = field(default_factory=NoRasterization)
    config: dict = field(default_factory=dict)
    time_us: float = 0.0


class MatmulTemplate:
    def __init__(self, M, N, K, in_dtype="float16", out_dtype="float16",
                 accum_dtype="float32", with_bias=False):
        if with_bias:
            raise TileError("MatmulTemplate(with_bias=True) is not supported yet")
        for name, v in (("M", M), ("N", N), ("K", K)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise TileError(f"MatmulTemplate: {name} must be a positive int, got {v!r}")
        self.args = (M, N, K, str(in_dtype), str(out_dtype), str(accum_dtype))
        self.arch = None

    def with_arch(self, arch) -> "MatmulTemplate":
        if not isinstance(arch, CUDA):
            raise TileError(f"MatmulTemplate.with_arch takes a carver arch such as CUDA('h100'), "
                            f"got {type(arch).__name__}")
        self.arch = arch
        return self

    def equivalent_function(self):
        """The GEMM's prim_func at the factory's default tile."""
        return matmul.get_tir(*self.args)

    def recommend_hints(self, topk: int = 10) -> list:
        if self.arch is None:
            raise TileError("MatmulTemplate.recommend_hints: give the GPU first "
                            "(.with_arch(CUDA('h100')))")
        hints = []
        for row in (c.row() for c in recommend(matmul, self.args, target=self.arch.target,
                                               top=topk)):
            cfg = row["config"]
            _, _, m_split, n_split = row["warp_partitions"][0]
            # a wgmma split counts warpgroups, whose four warps each take 16 of its rows:
            # TileLang's hint counts warps (block / warp tiles * 32 = threads)
            m_warps = cfg["threads"] // (32 * n_split)
            hints.append(Hint([cfg["block_M"], cfg["block_N"]],
                              [cfg["block_M"] // m_warps, cfg["block_N"] // n_split],
                              [cfg["block_K"]], cfg["num_stages"], NoRasterization(), dict(cfg),
                              row["time_us"]))
        return hints
