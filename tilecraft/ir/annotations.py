"""The keys passes leave on the IR for later passes, and the few statements every layer
recognises. One module, so that a pass that reads a mark need not import the pass that writes
it: the target-neutral passes and every backend depend on the IR, never on each other.

Loop annotations (For.annotations) and kernel attributes (Kernel.attrs):
- PERSISTENT_TILES (ir.stmt): a loop over the tiles of a persistent kernel's grid.
- FRAGMENT_LOOP: the k-step loop a mma gemm lowers to, whose fragment loads a later pass
  may rotate ahead of the math.
- ROTATED: a wgmma loop already rotated (the first k-step issued before the loop).
- WARPGROUP_FRAGMENTS: kernel attr, names of fragments that one warpgroup owns (a kernel split
  into warpgroup branches lays them out over that warpgroup's threads only).
- EPILOGUE_STAGING: kernel attr, names of shared tiles added to carry an accumulator to global
  memory (not the user's: defaults that look at the user's tiles skip them).

The constants below the first group are the other keys one module writes and another reads;
each says who writes it and what its value is.
"""
from __future__ import annotations

from .expr import Call
from .stmt import PERSISTENT_TILES, Evaluate, IfThenElse, call_stmt
from .visitor import walk

__all__ = ["PERSISTENT_TILES", "FRAGMENT_LOOP", "ROTATED", "WARPGROUP_FRAGMENTS",
           "EPILOGUE_STAGING", "LAYOUTS", "SMEM_OFFSETS", "SMEM_BYTES", "SMEM_ARENA",
           "PRODUCER_THREADS", "TMA_TILES", "CLUSTER_DIMS", "PERSISTENT_BLOCKS",
           "WARPGROUP_THREAD", "USE_SWIZZLE", "TENSOR_MAPS", "NUM_STAGES", "PIPELINE_ORDER",
           "PIPELINE_STAGE", "PIPELINE_GUARD", "SOFTWARE_PIPELINED", "WARP_SPECIALIZED", "OPERAND_AHEAD",
           "IM2COL", "IM2COL_ROW", "IM2COL_COL", "im2col_output_size", "INSTRUCTION",
           "TMA_UNFIT", "ASYNC_COPY", "PREFER_ASYNC", "ASYNC_WITHOUT_WAIT", "LOOP_LAYOUT", "UNROLL_FACTOR", "SCHEDULED", "TMA_BARRIER", "TMA_MULTICAST", "TILE_RANK",
           "BLOCK_BARRIER", "WARPGROUP_INDEX", "FUNC_PASS_CONFIGS", "FUNC_COMPILE_FLAGS",
           "sync_stmt", "is_sync", "is_warpgroup_branch", "WS_REGION", "MBARRIER_INIT_CALL",
           "MBARRIER_ARRIVE_CALL", "MBARRIER_WAIT_CALL", "TMA_COPY_BARRIER", "MANUAL_WARPGROUPS",
           "MANUAL_BARRIER_CALLS", "WARPGROUP_THREADS"]

FRAGMENT_LOOP = "mma_fragments"
ROTATED = "wgmma_rotated"
WARPGROUP_FRAGMENTS = "warpgroup_fragments"
EPILOGUE_STAGING = "epilogue_staging"

# The program's own compile options (function attrs), written by the frontend
# (T.annotate_pass_configs / T.annotate_compile_flags) and merged by jit with those it is given:
# {key: value} of pass configs, and a tuple of nvcc flags.
FUNC_PASS_CONFIGS = "pass_configs"
FUNC_COMPILE_FLAGS = "compile_flags"

# Kernel and function attributes, in the order the pipeline writes them.
# infer_layouts: {buffer: Layout} of the kernel, for planning, barriers and lowering.
LAYOUTS = "layouts"
# plan_shared_memory (function attr): {id(buffer): (byte offset, bytes)} of each shared tile.
SMEM_OFFSETS = "smem_offsets"
# plan_shared_memory, raised by the lowering's scratch: the kernel's dynamic shared bytes.
SMEM_BYTES = "smem_bytes"
# lower_tile_ops (function attr): {id(flat shared buffer): byte offset} for codegen/emulator.
SMEM_ARENA = "smem_arena"
# warp_specialize: threads of the producer warpgroup launched beside the kernel's own.
PRODUCER_THREADS = "producer_threads"
# warp_specialize: ids of the shared tiles TMA loads, laid out as the bulk copy writes them.
TMA_TILES = "tma_tiles"
# warp_specialize: the thread-block cluster shape, when TMA multicast shares loads.
CLUSTER_DIMS = "cluster_dims"
# warp_specialize: the number of resident blocks a persistent kernel's grid is launched with.
PERSISTENT_BLOCKS = "persistent_blocks"
# lower_tile_ops: the Var of the thread's index within its warpgroup (split kernels).
WARPGROUP_THREAD = "warpgroup_thread"
# lower_tile_ops: (panel size, order) of T.use_swizzle's block rasterization.
USE_SWIZZLE = "use_swizzle"
# lower_tile_ops: the TMA descriptors the kernel takes as parameters.
TENSOR_MAPS = "tensor_maps"
# the user (T.disable_warp_group_reg_alloc, T.annotate_producer_reg_dealloc,
# T.annotate_consumer_reg_alloc): False for no setmaxnreg between a warp-specialized kernel's
# roles; the register counts its producer and consumers take.
REGISTER_REALLOC = "register_realloc"
PRODUCER_REGISTER_COUNT = "producer_register_count"
CONSUMER_REGISTER_COUNT = "consumer_register_count"
# the user (T.annotate_min_blocks_per_sm): the blocks an SM should hold at once, the second
# argument of __launch_bounds__ (ptxas then caps the registers a thread takes).
MIN_BLOCKS_PER_SM = "min_blocks_per_sm"

# Loop annotations.
# T.Pipelined: the stages the user asked for.
NUM_STAGES = "num_stages"
# infer_pipeline: the issue order and the stage of each statement of a pipelined body.
PIPELINE_ORDER = "pipeline_order"
PIPELINE_STAGE = "pipeline_stage"
# infer_pipeline: a body that was one `if` over its statements, valued with the condition; the
# body is then those statements, each stage of an iteration running only where it holds.
PIPELINE_GUARD = "pipeline_guard"
# pipeline_loops: the steady-state loop of a cp.async pipeline, valued with its depth.
SOFTWARE_PIPELINED = "pipelined"
# warp_specialize: a consumer loop fed by the producer's mbarrier ring, valued with its depth.
WARP_SPECIALIZED = "warp_specialized"
# T.c2d_im2col: the T.Parallel nest that fills a tile of an image's im2col matrix, valued with
# (kernel, stride, dilation, pad); IM2COL_ROW / IM2COL_COL: the matrix row and column of the
# tile's first element (expressions, rewritten with the loop by every pass). warp_specialize
# loads such a tile with TMA's im2col mode.
IM2COL = "im2col"
IM2COL_ROW = "im2col_row"
IM2COL_COL = "im2col_col"


def im2col_output_size(size, kernel, stride, dilation, pad):
    """Output pixels along an image dimension of `size` pixels under an IM2COL nest's
    (kernel, stride, dilation, pad): the rows of its im2col matrix per image line."""
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1

# operand_ahead: a consumer loop that computes its gemm's shared operand for the next
# iteration after issuing the gemm; overlap_wgmma moves the batch's wait below that work.
OPERAND_AHEAD = "operand_ahead"

# Tile-op annotations.
# infer_instructions: the instruction a copy is lowered with ("tma", "stmatrix").
INSTRUCTION = "instruction"
# infer_instructions: why a copy the user asked to do with TMA cannot be (a warning's text).
TMA_UNFIT = "unfit"
# pipeline_loops: a copy issued as cp.async, waited for by the pipeline.
ASYNC_COPY = "async"
# T.Parallel(prefer_async=True): the nest's 16-byte global -> shared runs become cp.async;
# followed by a commit and a wait for them unless ASYNC_WITHOUT_WAIT (TileLang's annotation
# key: the program commits and waits itself, T.ptx_commit_group / T.ptx_wait_group).
PREFER_ASYNC = "prefer_async"
ASYNC_WITHOUT_WAIT = "parallel_async_without_async_commit_wait"
# T.unroll(..., unroll_factor=n): the loop unrolled n iterations at a time (#pragma unroll n).
UNROLL_FACTOR = "unroll_factor"
# T.Parallel(loop_layout=T.Fragment(...)): the nest's iterations over threads, as given.
LOOP_LAYOUT = "parallel_loop_layout"
# pipeline_loops, warp_specialize, seesaw_warpgroups: a copy its schedule orders with its own
# waits, which insert_barriers leaves out of its hazard analysis.
SCHEDULED = "scheduled"
# warp_specialize: the mbarrier a TMA load completes on, the cluster size it is multicast to,
# and the rank of the tile it fills.
TMA_BARRIER = "tma_barrier"
TMA_MULTICAST = "tma_multicast"
TILE_RANK = "tile_rank"

# Warp specialization written by hand (language/warp_specialize.py): the condition of a
# `with T.ws(g)` region, the mbarrier statements, the mbarrier a T.tma_copy signals, and the
# kernel attribute schedule/manual_warpgroups.py sets on a kernel it lowered them in.
WS_REGION = "tl.ws"
MBARRIER_INIT_CALL = "tl.mbarrier_init"
MBARRIER_ARRIVE_CALL = "tl.mbarrier_arrive"
MBARRIER_WAIT_CALL = "tl.mbarrier_wait_parity"
# T.cp_async_barrier_noinc: each thread arrives once its earlier T.ptx_cp_async copies landed.
CP_ASYNC_ARRIVE_CALL = "tl.cp_async_barrier_noinc"
MANUAL_BARRIER_CALLS = (MBARRIER_INIT_CALL, MBARRIER_ARRIVE_CALL, MBARRIER_WAIT_CALL,
                        CP_ASYNC_ARRIVE_CALL)
# T.ptx_cp_async(dst, src, bytes, pred) and its groups: cp.async written by hand.
PTX_CP_ASYNC_CALL, PTX_COMMIT_CALL, PTX_WAIT_CALL = \
    "ptx_cp_async", "ptx_commit_group", "ptx_wait_group"
TMA_COPY_BARRIER = "tma_copy_barrier"
SET_MAX_NREG_CALL = "tl.set_max_nreg"   # T.set_max_nreg(count, is_inc) in a region
MANUAL_WARPGROUPS = "manual_warpgroups"

# T.import_source(text): C source the CUDA module holds ahead of its kernels (functions that
# T.call_extern calls); the statement itself does nothing where it stands.
IMPORT_SOURCE_CALL = "tl.import_source"

# T.fence_proxy_async(): ordinary shared-memory writes before async-proxy (TMA, wgmma) reads of
# them; the fence on sm_90a, nothing before (schedule/manual_warpgroups.py).
FENCE_PROXY_ASYNC = "tl.fence_proxy_async"
BLOCK_BARRIER = "tc::syncthreads"       # every thread of the block waits for every other
WARPGROUP_INDEX = "tc::warpgroup_index"  # which 128-thread warpgroup runs this thread
WARPGROUP_THREADS = 128                  # the threads of a warpgroup (what T.ws(g) names)


def sync_stmt(span=None) -> Evaluate:
    """A block barrier statement."""
    return call_stmt(BLOCK_BARRIER, span=span)


def is_sync(s) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.name == BLOCK_BARRIER


def is_warpgroup_branch(s) -> bool:
    """An `if` on the warpgroup index: each warpgroup runs its own side."""
    return isinstance(s, IfThenElse) and any(
        isinstance(n, Call) and n.name == WARPGROUP_INDEX for n in walk(s.cond))
