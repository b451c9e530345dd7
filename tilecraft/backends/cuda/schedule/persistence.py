"""Which warp-specialized kernels loop over their tiles (persistent kernels, pass config
tl.enable_persistent_tiles) and which load their query by the producer instead
(tl.enable_producer_preload), where the configs leave it to the compiler: the defaults and
the measurements behind them. warp_specialize builds what these decide; stage_epilogue sizes
the staging tile by them."""
from __future__ import annotations

from ....ir.linear import constant_value
from ....ir.buffer import GLOBAL, is_shared
from ....ir.stmt import Allocate, For, Kernel, stmts_of
from ....ir.tileop import Copy, Gemm
from ....ir.annotations import EPILOGUE_STAGING, IM2COL
from ....ir.visitor import walk
from ....pass_config import PassConfigKey, persistent_blocks
from ....passes.parallel_nests import gather_targets
from ....target import model_of
from ..tileops.wgmma import WARPGROUP


def pipelined_loops(kernel: Kernel) -> list:
    """The kernel's top-level T.Pipelined loops, in order."""
    return [s for s in stmts_of(kernel.body) if isinstance(s, For) and s.kind == "pipelined"]


def ring_tiles(loop: For) -> dict:
    """{id: tile} of the shared tiles the pipelined loop copies into (its ring): T.copy
    destinations and the tiles T.c2d_im2col fills."""
    tiles = [n.dst.buffer for n in walk(loop.body) if isinstance(n, Copy)]
    tiles += [b for n in walk(loop.body) if isinstance(n, For) and IM2COL in n.annotations
              for b in gather_targets(n) or ()]
    return {id(b): b for b in tiles if is_shared(b.scope)}


def attention_like(kernel: Kernel) -> bool:
    """One pipelined loop holding two or more gemms (attention and its kin)."""
    loops = pipelined_loops(kernel)
    return len(loops) == 1 and sum(isinstance(n, Gemm) for n in walk(loops[0].body)) >= 2




def _gemm_like(kernel: Kernel) -> bool:
    """One pipelined loop holding one gemm, whose accumulator the kernel stores to global
    memory (straight, or through stage_epilogue's staging tile), and no shared tiles but the
    loop's ring: a GEMM, which a persistent launch can give room for a staged epilogue."""
    loops = pipelined_loops(kernel)
    if len(loops) != 1:
        return False
    gemms = [n for n in walk(loops[0].body) if isinstance(n, Gemm)]
    if len(gemms) != 1:
        return False
    staging = set(kernel.attrs.get(EPILOGUE_STAGING, ()))
    ring = ring_tiles(loops[0])
    if any(isinstance(n, Allocate) and is_shared(n.buffer.scope) and
           id(n.buffer) not in ring and n.buffer.name not in staging for n in walk(kernel.body)):
        return False
    accumulator = gemms[0].C.buffer
    return any(isinstance(n, Copy) and n.src.buffer is accumulator and
               (n.dst.buffer.scope == GLOBAL or n.dst.buffer.name in staging)
               for n in walk(kernel.body))


def one_wave(kernel: Kernel, target) -> bool:
    """The grid is static and has no more blocks than the GPU planned for (the Target the
    runtime passed down, or the table's GPU for an arch) has SMs: every block has an SM of its
    own from the start."""
    model = model_of(target or "sm_90a")
    if model is None:
        return False
    sms = model.num_sms
    blocks = 1
    for g in kernel.grid:
        n = constant_value(g)
        if n is None:
            return False
        blocks *= n
    return blocks <= sms


def persistent_for(kernel: Kernel, configs: dict | None, target=None) -> int | None:
    """tl.enable_persistent_tiles for this kernel (pass_config.persistent_blocks): as configured;
    unset, persistent with one block per SM where the pipelined loop holds two or more gemms
    (attention and its kin) or is a GEMM's (_gemm_like) and the grid spans more than one wave,
    unless the producer preload is asked for or the kernel is not warp-specialized. There the
    next tile's first stages load during this one's softmax tail and epilogue, which made
    attention faster on the H100, causal and not (bench/mha_fwd.md). A GEMM measured level to
    slower while its 4-stage epilogue went from registers, and faster than without persistence
    once that epilogue is staged in column bands (stage_epilogue; bench/gemm.md).
    A GEMM of one consumer warpgroup is not made persistent: its blocks are small enough for
    two or three on an SM, whose warpgroups issue wgmma in turn, where a persistent launch
    leaves one (measured slower at 128 x 64 convolution tiles: bench/conv2d.md).
    A grid of one wave (MLA decode at batch 64: 128 blocks) has no next tile to load early, and
    its loop over tiles only costs: MLA ran faster without it, and faster still with the
    producer preload in its place (producer_preload_for; bench/mla_decode.md)."""
    configs = configs or {}
    if PassConfigKey.TL_ENABLE_PERSISTENT_TILES in configs or \
            configs.get(PassConfigKey.TL_ENABLE_PRODUCER_PRELOAD) or \
            configs.get(PassConfigKey.TL_DISABLE_WARP_SPECIALIZED) or \
            configs.get(PassConfigKey.TL_DISABLE_TMA_LOWER):
        return persistent_blocks(configs)
    if (attention_like(kernel) or (_gemm_like(kernel) and kernel.num_threads > WARPGROUP)) and \
            not one_wave(kernel, target):
        return 0
    return None


def producer_preload_for(kernel: Kernel, configs: dict | None, target) -> bool:
    """tl.enable_producer_preload for this kernel: as configured; unset, on for an
    attention-like loop whose grid is one wave and that is not asked to be persistent (where
    persistent_for leaves it, the producer loads the query by TMA instead)."""
    configs = configs or {}
    if PassConfigKey.TL_ENABLE_PRODUCER_PRELOAD in configs:
        return bool(configs[PassConfigKey.TL_ENABLE_PRODUCER_PRELOAD])
    return PassConfigKey.TL_ENABLE_PERSISTENT_TILES not in configs and \
        attention_like(kernel) and one_wave(kernel, target)
