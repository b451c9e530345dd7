"""The header library's functions (`tc::...`, codegen/include/tilecraft) that the CUDA lowering
writes into the IR or the code generator writes into the source: one table, so that the
lowering, the transforms that look for these calls, the code generator and the emulator agree on
what exists, how many arguments it takes and on which architectures.

A family of functions (one per vector width, tensor rank, tile shape, template argument) is one
entry whose name is a template: `TMA_LOAD.format(rank=2)` is "tc::tma_load_2d", and
`lookup("tc::tma_load_2d")` finds TMA_LOAD again. Names are kept exactly as the IR carries
them, template arguments included (`tc::cp_async_wait<1>`), since the code generator prints an
intrinsic's name as it is.

Architectures: SM80 functions exist in every device pass this backend compiles for (sm_80 and
newer), SM90A ones only in sm_90a passes (TMA, wgmma, mbarrier transactions, register
reallocation, clusters); the header marks them `[sm_90]`/`[sm_90a]` and a call elsewhere does
not compile. `emulated`: the emulator (emulator/intrinsics.py) runs the call; the code
generator's own expression helpers (cvt, min, max, rasterization) are not IR calls and are run
by the emulator as the IR operations they print.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from ...ir.annotations import BLOCK_BARRIER, WARPGROUP_INDEX

NAMESPACE = "tc::"
SM80 = "sm_80+"
SM90A = "sm_90a"

# What each template field of a family's name may be.
_FIELDS = {"bits": r"16|32|64|128", "rank": r"[1-5]", "count": r"[124]", "n": r"\d+",
           "regs": r"\d+", "size": r"\d+", "trans_a": r"[01]", "trans_b": r"[01]",
           "types": r"[a-z0-9]+(?:_[a-z0-9]+)?", "kind": r"add|max|min",
           "policy": r"evict_first|evict_last", "order": r"row|col", "type": r"[\w: ]+",
           "x": r"\d+", "y": r"\d+", "shuffle": r"xor|down|up|idx",
           "width": r"1|2|4|8|16|32", "reduction": r"sum|max|min"}
HINT_SUFFIX = "_hint"   # an L2 cache-hinted form: one more argument, the createpolicy value


@dataclass(frozen=True)
class Intrinsic:
    name: str            # the name, or a template of the names, "tc::tma_load_{rank}d"
    arity: object        # argument count, or a function of the template's fields
    archs: str           # SM80 or SM90A
    meaning: str
    emulated: bool = True
    hinted: bool = False  # also exists as name + HINT_SUFFIX, with the policy argument
    sample: str = ""      # one member of a family (tests, the emulator's coverage check)
    pattern: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        parts = re.split(r"\{(\w+)\}", self.name)
        text = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>{_FIELDS[p]})"
                       for i, p in enumerate(parts))
        object.__setattr__(self, "pattern", re.compile(text))

    def format(self, **fields) -> str:
        return self.name.format(**fields)

    def example(self) -> str:
        return self.sample or self.name

    def arity_of(self, name: str) -> int:
        hinted = self.hinted and name.endswith(HINT_SUFFIX)
        if hinted:
            name = name[:-len(HINT_SUFFIX)]
        fields = self.pattern.fullmatch(name).groupdict()
        n = self.arity(**fields) if callable(self.arity) else self.arity
        return n + 1 if hinted else n


# --- the core's own: block barrier and warpgroup index (ir/annotations.py) ---------------
SYNCTHREADS = Intrinsic(BLOCK_BARRIER, 0, SM80, "__syncthreads(): the block's threads wait")
WARPGROUP = Intrinsic(WARPGROUP_INDEX, 0, SM80, "the calling thread's 128-thread warpgroup")

# --- barriers and roles (sync.h) -----------------------------------------------------------
BARRIER_ALL = Intrinsic("tc::barrier_all", 0, SM80,
                        "every thread of a warp-specialized block, producers included, waits")
NAMED_BARRIER_SYNC = Intrinsic("tc::named_barrier_sync", 2, SM80,
                               "bar.sync id, threads: wait at a barrier of some warps")
NAMED_BARRIER_ARRIVE = Intrinsic("tc::named_barrier_arrive", 2, SM80,
                                 "bar.arrive id, threads: count in without waiting")
IS_PRODUCER_THREAD = Intrinsic("tc::is_producer_thread", 1, SM80,
                               "the thread is in the producer warpgroup (index >= consumers)")
IS_PRODUCER_LEADER = Intrinsic("tc::is_producer_leader", 1, SM80,
                               "the thread is the producer warpgroup's first")
IS_BLOCK_LEADER = Intrinsic("tc::is_block_leader", 0, SM80, "the thread is the block's first")
MBARRIER_INIT = Intrinsic("tc::mbarrier_init", 2, SM80, "an mbarrier expecting n arrivals")
MBARRIER_WAIT_PARITY = Intrinsic("tc::mbarrier_wait_parity", 2, SM80,
                                 "spin until the mbarrier's phase of this parity completes")
MBARRIER_ARRIVE_WARP = Intrinsic("tc::mbarrier_arrive_warp", 1, SM80,
                                 "one arrival for the calling warp")
MBARRIER_ARRIVE_EXPECT_TX = Intrinsic("tc::mbarrier_arrive_expect_tx", 2, SM90A,
                                      "arrive and expect this many bytes of TMA transactions")
MBARRIER_ARRIVE = Intrinsic("tc::mbarrier_arrive", 1, SM80, "one arrival for the calling thread")
MBARRIER_EXPECT_TX = Intrinsic("tc::mbarrier_expect_tx", 2, SM90A,
                               "expect this many more bytes of TMA transactions, no arrival")
FENCE_BARRIER_INIT = Intrinsic("tc::fence_barrier_init", 0, SM90A,
                               "make mbarrier initialisations visible to the cluster")
FENCE_PROXY_ASYNC_SHARED = Intrinsic("tc::fence_proxy_async_shared", 0, SM90A,
                                     "order ordinary shared writes before TMA / wgmma reads")
SETMAXNREG_INC = Intrinsic("tc::setmaxnreg_inc<{regs}>", 0, SM90A,
                           "raise the warpgroup's register count", sample="tc::setmaxnreg_inc<240>")
SETMAXNREG_DEC = Intrinsic("tc::setmaxnreg_dec<{regs}>", 0, SM90A,
                           "lower the warpgroup's register count", sample="tc::setmaxnreg_dec<40>")

# --- thread-block clusters (cluster.h) ----------------------------------------------------
CLUSTER_SYNC = Intrinsic("tc::cluster_sync", 0, SM90A, "every thread of the cluster waits",
                         emulated=False)
CLUSTER_CTARANK = Intrinsic("tc::cluster_ctarank", 0, SM90A, "the block's rank in its cluster",
                            emulated=False)
MBARRIER_ARRIVE_WARP_CLUSTER = Intrinsic(
    "tc::mbarrier_arrive_warp_cluster<{size}>", 1, SM90A,
    "one arrival for the warp on the mbarrier of every block of the cluster", emulated=False,
    sample="tc::mbarrier_arrive_warp_cluster<2>")
TMA_LOAD_MULTICAST = Intrinsic(
    "tc::tma_load_{rank}d_multicast", lambda rank: 4 + int(rank), SM90A,
    "a TMA load written into the shared memory of every block of a cluster mask",
    emulated=False, sample="tc::tma_load_2d_multicast")

# --- cp.async (async.h) ---------------------------------------------------------------------
CP_ASYNC_CG_16 = Intrinsic("tc::cp_async_cg_16", 3, SM80,
                           "16-byte global -> shared async copy, zero-filled when !pred",
                           hinted=True)
CP_ASYNC_CA = Intrinsic("tc::cp_async_ca_{size}", 3, SM80,
                        "4- or 8-byte global -> shared async copy, zero-filled when !pred",
                        sample="tc::cp_async_ca_8")
CP_ASYNC_ARRIVE_NOINC = Intrinsic("tc::cp_async_mbarrier_arrive_noinc", 1, SM80,
                                  "arrive on an mbarrier once this thread's copies landed")
CP_ASYNC_COMMIT = Intrinsic("tc::cp_async_commit", 0, SM80, "close the current copy group")
CP_ASYNC_WAIT = Intrinsic("tc::cp_async_wait<{n}>", 0, SM80,
                          "wait until at most n copy groups are in flight",
                          sample="tc::cp_async_wait<1>")
CP_ASYNC_WAIT_ALL = Intrinsic("tc::cp_async_wait_all", 0, SM80, "wait for every copy issued")

# --- vector accesses (memory.h) -------------------------------------------------------------
LD_GLOBAL = Intrinsic("tc::ld_global_{bits}", 1, SM80, "load 2..16 bytes of global memory",
                      sample="tc::ld_global_128")
LD_GLOBAL_PRED = Intrinsic("tc::ld_global_{bits}_pred", 2, SM80,
                           "load if pred, else zero bits", sample="tc::ld_global_128_pred")
ST_GLOBAL = Intrinsic("tc::st_global_{bits}", 2, SM80, "store 2..16 bytes to global memory",
                      sample="tc::st_global_128")
LD_SHARED = Intrinsic("tc::ld_shared_{bits}", 1, SM80, "load 2..16 bytes of shared memory",
                      sample="tc::ld_shared_128")
ST_SHARED = Intrinsic("tc::st_shared_{bits}", 2, SM80, "store 2..16 bytes to shared memory",
                      sample="tc::st_shared_128")
LD_REGS = Intrinsic("tc::ld_regs_{bits}", 1, SM80, "read a thread's registers as one vector",
                    sample="tc::ld_regs_128")
ST_REGS = Intrinsic("tc::st_regs_{bits}", 2, SM80, "write one vector into a thread's registers",
                    sample="tc::st_regs_128")
L2_POLICY = Intrinsic("tc::l2_{policy}", 0, SM80,
                      "an L2 createpolicy value for hinted copies", sample="tc::l2_evict_first")
PREFETCH_L2 = Intrinsic("tc::prefetch_l2", 2, SM90A, "bring a global range into L2")

# --- mma.sync and warp collectives (mma.h, warp.h, types.h, math.h) -------------------------
LDMATRIX = Intrinsic("tc::ldmatrix_x{count}", 2, SM80, "load 1/2/4 8x8 b16 matrices per warp",
                     sample="tc::ldmatrix_x4")
LDMATRIX_TRANS = Intrinsic("tc::ldmatrix_x{count}_trans", 2, SM80,
                           "ldmatrix, each matrix transposed", sample="tc::ldmatrix_x4_trans")
STMATRIX_X4 = Intrinsic("tc::stmatrix_x4", 5, SM90A, "store four 8x8 b16 matrices per warp")
MMA = Intrinsic("tc::mma_m16n8k16_{types}", 4, SM80,
                "warp mma.sync D = A B + C (f16_f32, bf16_f32, f16_f16)",
                sample="tc::mma_m16n8k16_f16_f32")
MMA_TF32 = Intrinsic("tc::mma_m16n8k8_tf32_f32", 4, SM80,
                     "warp mma.sync D = A B + C on tf32 operands (m16n8k8), float32 C")
TO_TF32 = Intrinsic("tc::to_tf32", 1, SM80, "a float rounded to tf32 (cvt.rna), as its bits")
TF32_OF_BITS = Intrinsic("tc::tf32_of_bits", 1, SM80,
                         "to_tf32 of a float given as its 32 bits")
SHFL_XOR = Intrinsic("tc::shfl_xor", 2, SM80, "the value of lane ^ mask")
SHFL_GROUP = Intrinsic("tc::shfl_{shuffle}_group<{width}>", 2, SM80,
                       "T.shfl_xor / _down / _up / _sync: a lane's value within groups of "
                       "width lanes", sample="tc::shfl_down_group<32>")
WARP_REDUCE = Intrinsic("tc::warp_reduce_{reduction}", 1, SM80,
                        "T.warp_reduce_*: the warp's sum / max / min in every lane",
                        sample="tc::warp_reduce_sum")
SYNCWARP = Intrinsic("tc::syncwarp", 0, SM80, "__syncwarp(): the lanes of the warp wait")
PACK_HALF2 = Intrinsic("tc::pack_half2", 2, SM80, "two floats -> one f16x2 word")
PACK_BF162 = Intrinsic("tc::pack_bf162", 2, SM80, "two floats -> one bf16x2 word")
ATOMIC = Intrinsic("tc::atomic_{kind}", 2, SM80, "element-wise atomic add / max / min",
                   sample="tc::atomic_add")
ATOMIC_ADD_X2 = Intrinsic("tc::atomic_add_x2", 2, SM80,
                          "atomic add of a packed 16-bit pair (one 32-bit word)")
ATOMIC_ADD_V2 = Intrinsic("tc::atomic_add_v2", 3, SM80, "atomic add of two adjacent floats")

# --- TMA (tma.h) ------------------------------------------------------------------------------
TMA_LOAD = Intrinsic("tc::tma_load_{rank}d", lambda rank: 3 + int(rank), SM90A,
                     "bulk tensor load of a box into shared memory, completing on an mbarrier",
                     hinted=True, sample="tc::tma_load_2d")
TMA_LOAD_IM2COL = Intrinsic("tc::tma_load_im2col_4d", 9, SM90A,
                            "bulk tensor load of an NHWC image's im2col tile (im2col mode)")
TMA_STORE = Intrinsic("tc::tma_store_{rank}d", lambda rank: 2 + int(rank), SM90A,
                      "bulk tensor store of a shared box", hinted=True, sample="tc::tma_store_2d")
TMA_STORE_ADD = Intrinsic("tc::tma_store_add_{rank}d", lambda rank: 2 + int(rank), SM90A,
                          "bulk tensor store adding into global memory", hinted=True,
                          sample="tc::tma_store_add_2d")
TMA_STORE_COMMIT = Intrinsic("tc::tma_store_commit", 0, SM90A, "close the bulk store group")
TMA_STORE_WAIT = Intrinsic("tc::tma_store_wait<{n}>", 0, SM90A,
                           "wait until the shared sources of all but n store groups are read",
                           sample="tc::tma_store_wait<0>")

# --- wgmma (wgmma.h, wgmma_fp8.h, wgmma_tf32.h) -------------------------------------------------------------
MAKE_SMEM_DESC = Intrinsic("tc::make_smem_desc", 4, SM90A,
                           "a wgmma shared-memory matrix descriptor")
WGMMA_FENCE = Intrinsic("tc::wgmma_fence", 0, SM90A, "order register writes before wgmma")
WGMMA_COMMIT_GROUP = Intrinsic("tc::wgmma_commit_group", 0, SM90A, "close the wgmma batch")
WGMMA_WAIT_GROUP = Intrinsic("tc::wgmma_wait_group<{n}>", 0, SM90A,
                             "wait until at most n wgmma batches are in flight",
                             sample="tc::wgmma_wait_group<0>")
WGMMA_FENCE_REGISTERS = Intrinsic("tc::wgmma_fence_registers<{regs}>", 1, SM90A,
                                  "pin the accumulator's register accesses after a wait",
                                  sample="tc::wgmma_fence_registers<64>")
WGMMA = Intrinsic("tc::wgmma_m64n{n}k16_f32_{types}<{trans_a}, {trans_b}>", 4, SM90A,
                  "warpgroup D(64xN) += A B, both operands in shared memory",
                  sample="tc::wgmma_m64n64k16_f32_f16<0, 0>")
WGMMA_RS = Intrinsic("tc::wgmma_m64n{n}k16_f32_{types}_rs<{trans_b}>", 4, SM90A,
                     "warpgroup D += A B, A from registers",
                     sample="tc::wgmma_m64n64k16_f32_f16_rs<0>")
WGMMA_FP8 = Intrinsic("tc::wgmma_m64n{n}k32_f32_{types}", 4, SM90A,
                      "warpgroup D += A B of fp8 operands (K-major)",
                      sample="tc::wgmma_m64n64k32_f32_e4m3_e4m3")
WGMMA_TF32 = Intrinsic("tc::wgmma_m64n{n}k8_f32_tf32", 4, SM90A,
                       "warpgroup D += A B of tf32 operands (K-major)",
                       sample="tc::wgmma_m64n64k8_f32_tf32")

# --- persistent kernels, debugging (raster.h, the emulator's index checks) ---------------------
LAUNCH_WAVE_PARITY = Intrinsic("tc::launch_wave_parity", 0, SM80,
                               "whether the block runs in an odd wave of the launch")
CHECKED_INDEX = Intrinsic("tc::checked_index", 4, SM80,
                          "an index, reported when it leaves its extent (emulator checks)")

# --- written by the code generator into expressions (not IR calls) ----------------------------
CVT = Intrinsic("tc::cvt<{type}>", 1, SM80, "convert between scalar types", emulated=False,
                sample="tc::cvt<float>")
BIT_CAST = Intrinsic("tc::bit_cast<{type}>", 1, SM80, "T.reinterpret: the bits of a scalar as "
                     "another type of the same size", emulated=False, sample="tc::bit_cast<float>")
MAX = Intrinsic("tc::max", 2, SM80, "max of any scalar type", emulated=False)
MIN = Intrinsic("tc::min", 2, SM80, "min of any scalar type", emulated=False)
BIASED_INT_TO_FLOAT = Intrinsic("tc::biased_int_to_float", 2, SM80,
                                "a small integer to float32 through its bits (exact)",
                                emulated=False)
BIASED_INT_TO_HALF = Intrinsic("tc::biased_int_to_half", 2, SM80,
                               "a small integer to float16 through its bits (exact)",
                               emulated=False)
LD_PAIR = Intrinsic("tc::ld_pair", 1, SM80, "two consecutive 16-bit float registers as one "
                    "f16x2 / bf16x2 word (codegen/pairs.py)", emulated=False)
ST_PAIR = Intrinsic("tc::st_pair", 2, SM80, "a f16x2 / bf16x2 word into two consecutive "
                    "registers", emulated=False)
MAKE_PAIR = Intrinsic("tc::make_pair", 2, SM80, "two 16-bit floats as one x2 word",
                      emulated=False)
SPLAT = Intrinsic("tc::splat", 1, SM80, "a 16-bit float in both halves of an x2 word",
                  emulated=False)
INT_FIELDS_TO_HALF2 = Intrinsic("tc::int_fields_to_half2", 3, SM80,
                                "two small integers to float16 through their bits (exact)",
                                emulated=False)
BYTE_TWICE = Intrinsic("tc::byte_twice", 2, SM80,
                       "a register array's byte in both halves of a word", emulated=False)
HALFWORD_TWICE = Intrinsic("tc::halfword_twice", 1, SM80,
                           "a 16-bit value in both halves of a word", emulated=False)
RASTERIZE = Intrinsic("tc::rasterize_{order}", 4, SM80,
                      "T.use_swizzle's block order", emulated=False, sample="tc::rasterize_row")
RASTERIZE_CLUSTERED = Intrinsic("tc::rasterize_{order}_clustered<{x}, {y}>", 4, SM80,
                                "T.use_swizzle's block order over clusters", emulated=False,
                                sample="tc::rasterize_row_clustered<2, 1>")

TABLE = tuple(v for v in list(globals().values()) if isinstance(v, Intrinsic))

# Families that start alike, for the passes that look for any of them.
MBARRIER_CALLS = (MBARRIER_INIT, MBARRIER_WAIT_PARITY, MBARRIER_ARRIVE_WARP,
                  MBARRIER_ARRIVE_EXPECT_TX, MBARRIER_ARRIVE_WARP_CLUSTER, MBARRIER_ARRIVE,
                  MBARRIER_EXPECT_TX)
TMA_LOADS = (TMA_LOAD, TMA_LOAD_MULTICAST, TMA_LOAD_IM2COL)
TMA_STORES = (TMA_STORE, TMA_STORE_ADD, TMA_STORE_COMMIT, TMA_STORE_WAIT)
WGMMA_ISSUES = (WGMMA, WGMMA_RS, WGMMA_FP8, WGMMA_TF32)


@lru_cache(maxsize=None)
def lookup(name: str) -> Intrinsic | None:
    """The table's entry for one intrinsic name, or None."""
    for entry in TABLE:
        if entry.pattern.fullmatch(name) or (
                entry.hinted and name.endswith(HINT_SUFFIX) and
                entry.pattern.fullmatch(name[:-len(HINT_SUFFIX)])):
            return entry
    return None


def is_call_to(name: str | None, *entries: Intrinsic) -> bool:
    """Whether name is an intrinsic of one of these entries (a hinted form included)."""
    return name is not None and lookup(name) in entries
