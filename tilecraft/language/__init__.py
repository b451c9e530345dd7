"""The tilecraft language: TileLang's classic API (`import tilecraft.language as T`)."""
from ..ir.dtypes import DType as dtype  # noqa: F401
from ..ir.dtypes import DType as _DType
from ..ir.dtypes import NAMED_ONLY as _NAMED_ONLY
from ..ir.tileop import GemmWarpPolicy
from .proxy import (Tensor, Buffer_ as Buffer, symbolic, dynamic, prim_func, macro,
                    SharedBuffer, FragmentBuffer, LocalBuffer)
from .loops import Kernel, Parallel, Pipelined, parallel, serial, unroll, vectorized
from .loops import serial as Serial  # noqa: N812  (TileLang's capitalized alias)
from .loops import Persistent
from .allocate import (alloc_shared, alloc_fragment, alloc_local, alloc_var, alloc_global,
                       alloc_buffer, alloc_reducer, finalize_reducer)
from .tileops import (copy, gemm, reduce_max, reduce_min, reduce_sum, reduce_abssum,
                      reduce_absmax, cumsum, fill, clear, atomic_add, atomic_max, atomic_min,
                      atomic_addx2, atomic_addx4, wgmma_gemm, wait_wgmma)
from .math import (exp, exp2, exp10, log, log2, log10, log1p, sqrt, rsqrt, sin, cos, tan, tanh,
                   sigmoid, erf, floor, ceil, round, trunc, isnan, isinf, isfinite, abs, pow,
                   fmod, max, min, clamp, ceildiv,
                   cdiv, floordiv, floormod, truncdiv, infinity, max_value, min_value, cast, Cast,
                   if_then_else, call_extern, address_of, access_ptr, import_source, print,
                   evaluate, shift_left,
                   shift_right)
from .math import reinterpret
from .annotate import annotate_layout, use_swizzle
from .layouts import Layout, Fragment
from .registers import (disable_warp_group_reg_alloc, no_set_max_nreg, set_max_nreg,
                        annotate_producer_reg_dealloc, annotate_consumer_reg_alloc,
                        annotate_min_blocks_per_sm)
from .threads import (get_thread_binding, get_thread_bindings, get_thread_extent,
                      get_thread_extents, get_block_binding, get_block_bindings,
                      get_block_extent, get_block_extents, thread_binding)
from .warp import (sync_threads, sync_warp, shfl_xor, shfl_down, shfl_up, shfl_sync,
                   warp_reduce_sum, warp_reduce_max, warp_reduce_min, get_lane_idx,
                   get_warp_idx, get_warp_idx_sync, get_warp_group_idx, fence_proxy_async)
from .im2col import c2d_im2col, im2col
from .views import reshape, view
from .allreduce import attr, comm_reducer, tvm_thread_allreduce
from .warp_specialize import (alloc_barrier, barrier_arrive, barrier_wait, mbarrier_arrive,
                              mbarrier_wait_parity, tma_copy, ws, ptx_cp_async,
                              cp_async_barrier_noinc, ptx_commit_group, ptx_wait_group)
from .unsupported import not_supported_yet as __getattr__  # TileLang's other names: TileError
from .eager import const, empty, annotate_pass_configs, annotate_compile_flags

_d = _DType._interned
bool = _d["bool"]  # noqa: A001
int8, int16, int32, int64 = _d["int8"], _d["int16"], _d["int32"], _d["int64"]
uint8, uint16, uint32, uint64 = _d["uint8"], _d["uint16"], _d["uint32"], _d["uint64"]
int, uint = int32, uint32  # noqa: A001  (TileLang's T.int / T.uint, TVM's "int" / "uint")
int4, uint4 = _NAMED_ONLY["int4"], _NAMED_ONLY["uint4"]
float16, bfloat16, float32, float64 = _d["float16"], _d["bfloat16"], _d["float32"], _d["float64"]
float8_e4m3, float8_e5m2 = _d["float8_e4m3"], _d["float8_e5m2"]
tfloat32 = _d["tfloat32"]
float8_e4m3fn = float8_e4m3
half, float = float16, float32  # noqa: A001
del _d
