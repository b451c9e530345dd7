"""Pass configuration keys, under TileLang's names, for `pass_configs=` of jit and compile."""
from __future__ import annotations

from .errors import TileError


class PassConfigKey:
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    TL_DISABLE_WGMMA = "tl.disable_wgmma"
    TL_ENABLE_TMA_MULTICAST = "tl.enable_tma_multicast"
    TL_DISABLE_WGMMA_ROTATION = "tl.disable_wgmma_rotation"
    TL_DISABLE_UNIFORM_MASKS = "tl.disable_uniform_masks"
    TL_DISABLE_EPILOGUE_STAGING = "tl.disable_epilogue_staging"
    TL_ENABLE_PERSISTENT_TILES = "tl.enable_persistent_tiles"
    TL_ENABLE_PRODUCER_PRELOAD = "tl.enable_producer_preload"
    TL_DISABLE_TMA_STORE = "tl.disable_tma_store"
    TL_DISABLE_WGMMA_BATCH_MERGE = "tl.disable_wgmma_batch_merge"
    TL_DISABLE_MMA_ROTATION = "tl.disable_mma_rotation"
    TL_DISABLE_WARPGROUP_PINGPONG = "tl.disable_warpgroup_pingpong"
    TL_DISABLE_K_ALTERNATION = "tl.disable_k_alternation"
    TL_DISABLE_AUTO_RASTERIZATION = "tl.disable_auto_rasterization"
    TL_DISABLE_SEESAW_WARPGROUPS = "tl.disable_seesaw_warpgroups"
    TL_DISABLE_L2_PREFETCH = "tl.disable_l2_prefetch"


# What each key does here (all but the first matter on sm_90a, the only target with TMA, WGMMA
# and warp specialization).
KNOWN = {PassConfigKey.TL_ENABLE_FAST_MATH: "compile with --use_fast_math",
         PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: "pipelined loops on cp.async, no producer "
                                                   "warpgroup",
         PassConfigKey.TL_DISABLE_TMA_LOWER: "no TMA copies (so no warp specialization)",
         PassConfigKey.TL_DISABLE_WGMMA: "gemms on mma.sync, not wgmma (sm_90a)",
         PassConfigKey.TL_ENABLE_TMA_MULTICAST: "warp-specialized blocks that load the same "
                                                "tiles run as clusters of two sharing them by "
                                                "TMA multicast",
         PassConfigKey.TL_DISABLE_WGMMA_ROTATION: "attention-like consumer loops keep each "
                                                  "wgmma batch's softmax between its waits "
                                                  "instead of overlapping it with the next "
                                                  "batch (rotate_wgmma_loop)",
         PassConfigKey.TL_DISABLE_UNIFORM_MASKS: "element-wise selects are evaluated per "
                                                 "element even where a whole tile agrees "
                                                 "(tileops/uniform_select)",
         PassConfigKey.TL_DISABLE_EPILOGUE_STAGING: "gemm accumulators are stored to global "
                                                    "memory from registers, not through a "
                                                    "shared tile (stage_epilogue)",
         PassConfigKey.TL_ENABLE_PRODUCER_PRELOAD: "the producer warpgroup loads the tiles "
                                                   "copied in front of a warp-specialized "
                                                   "loop (a query tile) by TMA, instead of "
                                                   "the consumers; unset: on for loops "
                                                   "with two or more gemms whose grid is one "
                                                   "wave",
         PassConfigKey.TL_DISABLE_TMA_STORE: "shared -> global copies are stored by all "
                                             "threads, 16 bytes each, not by TMA",
         PassConfigKey.TL_DISABLE_WGMMA_BATCH_MERGE: "back-to-back gemms into one accumulator "
                                                     "each wait for their own batch "
                                                     "(merge_wgmma_batches)",
         PassConfigKey.TL_DISABLE_MMA_ROTATION: "a cp.async gemm loop loads each k step's "
                                                "fragments in that step, after the barrier, "
                                                "not one step ahead (rotate_mma_loop)",
         PassConfigKey.TL_DISABLE_WARPGROUP_PINGPONG: "the consumer warpgroups of a rotated "
                                                      "attention loop issue their wgmma "
                                                      "batches whenever ready instead of "
                                                      "taking turns (pingpong_warpgroups)",
         PassConfigKey.TL_DISABLE_K_ALTERNATION: "every block of a warp-specialized GEMM "
                                                 "loop walks K upwards; by default blocks of "
                                                 "odd waves walk it downwards, starting on "
                                                 "tiles still in L2 (alternate_k_direction)",
         PassConfigKey.TL_DISABLE_AUTO_RASTERIZATION: "a kernel without T.use_swizzle runs "
                                                      "its blocks in launch order; by default "
                                                      "it gets the panel the L2 model prefers "
                                                      "where that saves HBM traffic "
                                                      "(choose_rasterization)",
         PassConfigKey.TL_DISABLE_SEESAW_WARPGROUPS: "a decode loop whose two consumer "
                                                     "warpgroups share each 64-row score tile "
                                                     "keeps it so, instead of each taking "
                                                     "whole blocks in turn "
                                                     "(seesaw_warpgroups)",
         PassConfigKey.TL_DISABLE_L2_PREFETCH: "the producer of a warp-specialized loop "
                                               "does not prefetch into L2 the next "
                                               "iteration's tiles that at most two blocks "
                                               "read (tileops/prefetch.py)",
         PassConfigKey.TL_ENABLE_PERSISTENT_TILES: "a warp-specialized kernel launches one "
                                                   "block per SM (or at most the int given), "
                                                   "each looping over the grid's tiles while "
                                                   "its producer loads the next tile's data; "
                                                   "unset: on for loops with two or more gemms "
                                                   "(attention) whose grid spans more than one "
                                                   "wave, False turns it off"}


def check_pass_configs(configs) -> dict:
    configs = dict(configs or {})
    for key in configs:
        if key not in KNOWN:
            raise TileError(f"unknown pass config {key!r}; known: {', '.join(sorted(KNOWN))}")
    blocks = configs.get(PassConfigKey.TL_ENABLE_PERSISTENT_TILES)
    if blocks is not None and not isinstance(blocks, bool) and \
            not (isinstance(blocks, int) and blocks >= 1):
        raise TileError(f"pass config {PassConfigKey.TL_ENABLE_PERSISTENT_TILES!r} takes True, "
                        f"False or a number of blocks >= 1, got {blocks!r}")
    if blocks not in (None, False) and configs.get(PassConfigKey.TL_ENABLE_PRODUCER_PRELOAD):
        raise TileError(f"pass configs {PassConfigKey.TL_ENABLE_PERSISTENT_TILES!r} and "
                        f"{PassConfigKey.TL_ENABLE_PRODUCER_PRELOAD!r} cannot be combined: a "
                        "persistent kernel's consumers load their own query tiles")
    return configs


def persistent_blocks(configs) -> int | None:
    """None: no persistent tile loop; 0: one block per SM of the device it runs on; n: at most
    n blocks."""
    value = (configs or {}).get(PassConfigKey.TL_ENABLE_PERSISTENT_TILES)
    if value is None or value is False:
        return None
    return 0 if value is True else int(value)


# What tilecraft's nvcc command sets for a target (the GPU and what is produced): a compile
# flag that set them too would build something the runtime does not load.
_TARGET_FLAGS = ("-arch", "--gpu-architecture", "-gencode", "--generate-code", "-code",
                 "--gpu-code", "-o", "--output-file", "-cubin", "--cubin", "-ptx", "--ptx",
                 "-fatbin", "--fatbin", "-c", "--compile", "-E", "--preprocess", "-lib", "--lib")


def check_compile_flags(flags) -> tuple:
    """compile_flags (jit, compile, T.annotate_compile_flags) as a tuple of nvcc arguments: a
    string or a list of strings, each split at spaces as a shell would."""
    import shlex
    if flags is None:
        return ()
    items = [flags] if isinstance(flags, str) else flags
    if not isinstance(items, (list, tuple)) or not all(isinstance(f, str) for f in items):
        raise TileError("compile_flags takes an nvcc flag or a list of them (strings), got "
                        f"{flags!r}")
    out = []
    for item in items:
        for flag in shlex.split(item):
            if flag.split("=", 1)[0] in _TARGET_FLAGS:
                raise TileError(f"compile_flags: {flag} sets what tilecraft's nvcc command sets "
                                "for the target (the GPU and the output kind); choose the GPU "
                                "with target=")
            out.append(flag)
    return tuple(out)
