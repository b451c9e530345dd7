"""TileLang names the language does not have yet: using one is a clear error, not a typo.

`T.<name>` for a name of TileLang's language surface that tilecraft does not implement raises
NotSupportedYet, a TileError at the user's line that names it; a name TileLang does not have
either stays an AttributeError (a typo is a typo). NotSupportedYet is an AttributeError too,
so `hasattr(T, name)` and `getattr(T, name, default)` keep their meaning. Implementing a name
needs no change here: the module's own attribute is found before its __getattr__ is asked.
"""
from __future__ import annotations

import sys

from ..errors import TileError


class NotSupportedYet(TileError, AttributeError):
    """A TileLang name tilecraft does not implement yet."""


# name -> what it is in TileLang (the message says it), grouped as the language survey does.
_TILELANG = {
    # program structure and allocation
    "StridedTensor": "a global buffer with explicit strides",
    "ptr": "a raw pointer parameter", "make_tensor": "a buffer made from a pointer",
    "alloc_tmem": "Blackwell tensor memory", "alloc_descriptor": "a wgmma / tcgen05 descriptor",
    "alloc_cluster_barrier": "a cluster-scope mbarrier",
    "CreateListofMBarrierOp": "mbarriers (paper-era)", "GetMBarrierOp": "an mbarrier (paper-era)",
    # tile operators
    "transpose": "a shared-memory transpose", "async_copy": "a non-blocking copy",
    "copy_cluster": "a cluster copy",
    "atomic_load": "an atomic load", "atomic_store": "an atomic store",
    "atomic_or": "an atomic or", "dp4a": "an int8 dot-4 accumulate",
    "any_of": "a logical-or reduction of a tile", "all_of": "a logical-and reduction of a tile",
    "reduce": "a reduction by name", "reduce_bitand": "a bitwise-and reduction",
    "reduce_bitor": "a bitwise-or reduction", "reduce_bitxor": "a bitwise-xor reduction",
    "cummax": "a running maximum",
    "tcgen05_gemm": "a Blackwell tcgen05 gemm",
    "gemm_sr": "a gemm with B in registers (paper-era)",
    # loops
    "grid": "a TVMScript loop nest",
"loop_break": "a loop break",
    # layout and scheduling annotations
    "annotate_l2_hit_ratio": "an L2 persisting-access hint",
    "annotate_safe_value": "the value of out-of-bounds loads",
    "annotate_restrict_buffers": "non-__restrict__ parameters",
    "annotate_ws_schedule": "a user warp-specialization schedule",
    "ws_op": "a user warp-specialization op",
    # scalar and TIR-level operations
    "call_intrin": "a TVM intrinsic call",
    "__exp": "fast-math exp", "__log": "fast-math log", "__log2": "fast-math log2",
    "__sin": "fast-math sin", "__cos": "fast-math cos", "fast_rcp": "a fast reciprocal",
    "ieee_add": "an add with a rounding mode", "ieee_mul": "a multiply with a rounding mode",
    "ieee_fmaf": "an fma with a rounding mode", "ieee_fdiv": "a divide with a rounding mode",
    "add2": "a packed add", "mul2": "a packed multiply", "fma2": "a packed fma",
    "max2": "a packed max", "min2": "a packed min",
    # synchronization, barriers, warp operations, debugging
    "sync_global": "a grid-wide barrier", "sync_grid": "a grid-wide barrier",
    "named_barrier_arrive": "a named-barrier arrival",
    "syncthreads_count": "a counting block barrier", "syncthreads_and": "an and block barrier",
    "syncthreads_or": "an or block barrier",
    "mbarrier_expect_tx": "an mbarrier transaction count",
    "mbarrier_arrive_expect_tx": "an mbarrier arrival with a transaction count", "tma_store_arrive": "a TMA store commit",
    "tma_store_wait": "a TMA store wait", "warpgroup_arrive": "a wgmma fence",
    "warpgroup_commit_batch": "a wgmma commit", "warpgroup_wait": "a wgmma wait",
    "MBarrierWaitParity": "an mbarrier wait (paper-era)",
    "MBarrierExpectTX": "an mbarrier transaction count (paper-era)",
    "TMALoadOp": "a TMA load (paper-era)", "FenceProxyAsyncOp": "an async fence (paper-era)",
    "TMAStoreArrive": "a TMA store commit (paper-era)",
    "TMAStoreWait": "a TMA store wait (paper-era)", "SetMaxNReg": "setmaxnreg (paper-era)",
    "NoSetMaxNReg": "no setmaxnreg (paper-era)", "WaitWgmma": "a wgmma wait (paper-era)",
    "ballot": "a warp ballot", "ballot_sync": "a warp ballot", "any_sync": "a warp vote",
    "all_sync": "a warp vote", "activemask": "the active-lane mask",
    "match_any_sync": "a warp match", "match_all_sync": "a warp match",
    "shuffle_elect": "one elected lane", "warp_reduce_bitand": "a warp bitwise-and",
    "warp_reduce_bitor": "a warp bitwise-or", "device_assert": "a device-side assert",
    "tvm_warp_shuffle": "a TVM warp shuffle intrinsic",
    "rng_init": "a per-thread random-number generator's state",
    "rng_rand": "a random number from the per-thread generator",
    "gemm_sp": "a 2:4 structured-sparse gemm",
    # data types
    "dtypes": "the module of TileLang's dtype objects (T.float16 and T.dtype(...) are here)",
    "float4_e2m1fn": "the FP4 (e2m1) data type",
}


def not_supported_yet(name: str):
    """The module __getattr__ of tilecraft.language (PEP 562)."""
    what = _TILELANG.get(name)
    if what is None:
        # name and obj as Python sets them for a missing module attribute, so callers that
        # inspect the error (hasattr, the compatibility census) see an ordinary miss
        raise AttributeError(f"module 'tilecraft.language' has no attribute {name!r}",
                             name=name, obj=sys.modules[__package__])
    raise NotSupportedYet(f"T.{name} is not supported by tilecraft yet (in TileLang: {what})")


def tilelang_names() -> tuple:
    """The TileLang names this module knows to be missing (tests check each)."""
    return tuple(_TILELANG)
