"""T.c2d_im2col's tile loaded by TMA in im2col mode (sm_90a).

T.c2d_im2col builds a T.Parallel nest that gathers a [block_M, block_K] tile of an NHWC
image's im2col matrix (language/im2col.py) and notes on it what the nest is (IM2COL: kernel,
stride, dilation, pad; IM2COL_ROW / IM2COL_COL: the matrix row and column of the tile's first
element). Hopper's TMA has a mode for exactly this gather: a tensor map encoded with
cuTensorMapEncodeIm2col describes the image, a bounding box of filter positions (-pad ..
pad - dilation (kernel - 1) past the image's last pixel, stepped by the stride) and the box
(pixels x channels); one instruction names the first pixel's filter position (n, h, w), the
channel it starts at and the filter tap (kw dilation, kh dilation), and the hardware walks
block_M positions along W, then H, then N, reading the tap's pixel of each, zero outside the
image. Row m of the tile is output pixel m0 + m whatever image row or image it falls in, and
rows past the last image read zeros: what the nest computes, element for element.

A nest qualifies (`im2col_plan`) when one load can fill a tile's columns, i.e. the block's
channels lie in one filter tap (C a multiple of block_K), the image's pixels are 16-byte rows
(C x element bytes), the corners and taps fit the instruction's 8-bit fields, and the tile's
shared layout is TMA boxes (a swizzled tile is column slabs, one load each, as for a tiled
TMA copy). warp_specialize then gives the nest to the producer like a TMA copy; elsewhere it
stays the gather (16-byte cp.async copies in a pipeline).
"""
from __future__ import annotations

from dataclasses import dataclass

from ....ir import dtypes as dt
from ....ir.annotations import (IM2COL, IM2COL_COL, IM2COL_ROW, TMA_BARRIER,
                                im2col_output_size)
from ....ir.buffer import GLOBAL, Buffer, is_shared
from ....ir.expr import BufferLoad, Call, address_of, const
from ....ir.linear import constant_value
from ....ir.stmt import BufferStore, For, call_stmt, seq
from ....ir.visitor import walk
from ..intrinsics import TMA_LOAD_IM2COL
from .tma import MAX_BOX, column_slabs, tensor_map

CORNER = (-128, 127)   # a 4-d map's bounding-box corners are signed 8-bit
MAX_TAP = 255          # an im2col offset (the filter tap's dilated position) is unsigned 8-bit
MAX_STRIDE = 8         # a traversal stride


@dataclass
class Im2colPlan:
    image: Buffer
    rows: int           # pixels a load brings (block_M)
    cols: int           # channels of the tile (block_K)
    swizzle: str
    slab: int           # channels one load brings
    slabs: int
    bytes: int          # bytes of all the tile's loads
    kernel: int
    stride: int
    dilation: int
    pad: int
    out_h: int
    out_w: int
    store: BufferStore  # the nest's store into the tile (its indices name the ring version)

    @property
    def lower(self) -> int:
        """The bounding box's first filter position along H and W."""
        return -self.pad

    @property
    def upper(self) -> int:
        """Its last one, counted from the image's last pixel."""
        return self.pad - self.dilation * (self.kernel - 1)


def _nest(loop: For):
    """(rows, cols, the store into the tile, the image load) of an im2col nest, or None."""
    inner = loop.body
    if not isinstance(inner, For) or inner.kind != "parallel":
        return None
    rows, cols = constant_value(loop.extent), constant_value(inner.extent)
    stores = [n for n in walk(inner.body) if isinstance(n, BufferStore)]
    loads = [n for n in walk(inner.body) if isinstance(n, BufferLoad) and
             n.buffer.scope == GLOBAL]
    if rows is None or cols is None or len(stores) != 1 or len(loads) != 1:
        return None
    return rows, cols, stores[0], loads[0]


def im2col_plan(stmt) -> Im2colPlan | None:
    """How T.c2d_im2col's nest `stmt` runs as TMA im2col loads, or None when it cannot."""
    if not isinstance(stmt, For) or IM2COL not in stmt.annotations:
        return None
    nest = _nest(stmt)
    if nest is None:
        return None
    rows, cols, store, load = nest
    image, tile = load.buffer, store.buffer
    if not is_shared(tile.scope) or image.dtype is not tile.dtype or image.dtype.bits < 8:
        return None
    shape = [constant_value(s) for s in image.shape]
    if len(shape) != 4 or any(s is None for s in shape) or max(shape) > 2**31 - 1:
        return None
    N, H, W, C = shape
    K, S, D, P = stmt.annotations[IM2COL]
    esize = image.dtype.bits // 8
    if C % cols or C * esize % 16 or S > MAX_STRIDE or (K - 1) * D > MAX_TAP:
        return None
    if not (CORNER[0] <= -P <= CORNER[1] and CORNER[0] <= P - D * (K - 1) <= CORNER[1]):
        return None
    if rows > MAX_BOX:
        return None
    slabs = column_slabs(rows, cols, image.dtype.bits)
    if slabs is None or slabs[0] > MAX_BOX:
        return None
    slab, swizzle = slabs
    return Im2colPlan(image, rows, cols, swizzle, slab, cols // slab, rows * cols * esize, K,
                      S, D, P, im2col_output_size(H, K, S, D, P),
                      im2col_output_size(W, K, S, D, P), store)


def lower_tma_im2col(loop: For, ctx):
    """The TMA im2col loads of one nest (issued by the one thread that runs it), completing
    on the mbarrier warp_specialize noted on it."""
    plan = im2col_plan(loop)
    store = plan.store
    barrier = loop.annotations[TMA_BARRIER]
    mbar = address_of(ctx.flat(barrier.buffer),
                      ctx.shared_offset(barrier.buffer, list(barrier.indices)))
    the_map = Call("address_of", (tensor_map(ctx, plan.image, plan, im2col=(
        plan.lower, plan.upper, plan.stride)),), dt.handle)
    m0, k0 = loop.annotations[IM2COL_ROW], loop.annotations[IM2COL_COL]
    C, K, S, D, P = (int(plan.image.shape[3]), plan.kernel, plan.stride, plan.dilation,
                     plan.pad)
    pixels = plan.out_h * plan.out_w
    image_n, oh, ow = m0 // pixels, m0 % pixels // plan.out_w, m0 % plan.out_w
    kh, kw, c0 = k0 // (K * C), k0 // C % K, k0 % C
    lead = list(store.indices[:-2])   # the ring version the nest writes
    loads = []
    for j in range(plan.slabs):
        offset = ctx.shared_offset(store.buffer, lead + [const(0), const(j * plan.slab)])
        coords = [c0 + j * plan.slab, ow * S - P, oh * S - P, image_n, kw * D, kh * D]
        loads.append(call_stmt(TMA_LOAD_IM2COL.name,
                               address_of(ctx.flat(store.buffer), offset), the_map, mbar,
                               *[ctx.simplify(c) for c in coords], span=loop.span))
    return seq(loads)
