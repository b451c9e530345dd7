"""T.im2col / T.c2d_im2col: one tile of the im2col matrix of an NHWC image, for a convolution
written as an implicit GEMM.

The im2col matrix of an image [N, H, W, C] under a square kernel K, stride S, dilation D and
padding P has a row per output pixel, m = (n * OH + oh) * OW + ow, and a column per tap and
channel, k = (kh * K + kw) * C + c, with

    OH = (H + 2P - D (K - 1) - 1) // S + 1,   OW likewise from W,
    row m, column k = image[n, oh S + kh D - P, ow S + kw D - P, c]   (0 in the padding).

`T.c2d_im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad)` fills the shared tile
col [block_M, block_K] with rows nhw_step * block_M .. and columns c_step * block_K .. of it (a
convolution's weight [K, K, C, F] read as [K K C, F] is the GEMM's other operand). Rows past
N OH OW and columns past K K C read as 0, so ragged tiles need no care.

The tile is built as the guarded gather a user would write in T.Parallel
(`col[i, j] = T.if_then_else(valid, img[...], 0)`), so it is everything that form is: inside
T.Pipelined, 16-byte asynchronous copies zero-filled in the padding wherever C keeps runs of
eight channels aligned, pipelined like a T.copy; on the interpreter and the emulator, that nest.
The nest also says what it is (the IM2COL annotations), so on sm_90a, where C is a multiple of
block_K, the warp-specialized producer loads it with TMA's im2col mode instead
(backends/cuda/tileops/tma_im2col.py).
"""
from __future__ import annotations

from ..errors import TileError, current_span, warn_at
from ..frontend import builder as bld
from ..ir.buffer import GLOBAL, Buffer, is_shared
from ..ir.expr import BufferLoad, Var, const, convert, logical, select
from ..ir.annotations import IM2COL, IM2COL_COL, IM2COL_ROW, im2col_output_size
from ..ir.linear import constant_value
from ..ir.stmt import BufferStore, For

EVICTION_POLICIES = (None, "evict_normal", "evict_first", "evict_last")


def _parameter(what: str, name: str, value, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise TileError(f"{what}: {name} must be an int >= {least}, got {value!r}",
                        current_span())
    return value


output_size = im2col_output_size   # output pixels along a dimension of `size` input pixels


def c2d_im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad,
               eviction_policy=None):
    """Fill the shared tile col with the (nhw_step, c_step) tile of img's im2col matrix (module
    docstring): img a global [N, H, W, C] tensor, kernel x kernel taps."""
    what = "T.c2d_im2col"
    b = bld.active(what)
    if b.in_parallel:
        raise TileError(f"{what} cannot be nested inside T.Parallel", current_span())
    if not isinstance(img, Buffer) or img.scope != GLOBAL or len(img.shape) != 4:
        raise TileError(f"{what}: the image must be a global [N, H, W, C] tensor, got "
                        f"{_described(img)}", current_span())
    if not isinstance(col, Buffer) or not is_shared(col.scope) or len(col.shape) != 2:
        raise TileError(f"{what}: the column tile must be a 2-d shared buffer, got "
                        f"{_described(col)}", current_span())
    if col.dtype is not img.dtype:
        raise TileError(f"{what}: the column tile {col.name} is {col.dtype} but the image "
                        f"{img.name} is {img.dtype}", current_span())
    K = _parameter(what, "kernel", kernel, 1)
    S = _parameter(what, "stride", stride, 1)
    D = _parameter(what, "dilation", dilation, 1)
    P = _parameter(what, "pad", pad, 0)
    if eviction_policy not in EVICTION_POLICIES:
        raise TileError(f"{what}: eviction_policy must be evict_normal, evict_first or "
                        f"evict_last, got {eviction_policy!r}", current_span())
    if eviction_policy in ("evict_first", "evict_last"):
        warn_at(current_span(), f"{what}: eviction_policy={eviction_policy!r} is not applied: "
                "the tile is gathered by copies that carry no L2 hint")
    N, H, W, C = img.shape
    for name, size in (("H", H), ("W", W)):
        n = constant_value(convert(size))
        if n is not None and output_size(n, K, S, D, P) < 1:
            raise TileError(f"{what}: a {K}x{K} kernel (dilation {D}, padding {P}) does not fit "
                            f"the image's {name} = {n}", current_span())
    OH, OW = output_size(H, K, S, D, P), output_size(W, K, S, D, P)
    block_M, block_K = col.shape
    span = current_span()
    i, j = Var("i", span=span), Var("j", span=span)
    m = nhw_step * block_M + i
    k = c_step * block_K + j
    h = m % (OH * OW) // OW * S + k // (K * C) * D - P
    w = m % OW * S + k // C % K * D - P
    valid = const(True)
    for cond in (m < N * OH * OW, k < K * K * C, h >= 0, h < H, w >= 0, w < W):
        valid = logical("and", valid, cond)
    pixel = BufferLoad(img, (m // (OH * OW), h, w, k % C), span)
    store = BufferStore(col, (i, j), select(valid, pixel, const(0, img.dtype)), span)
    inner = For(j, const(0), convert(block_K), "parallel", store, {}, span)
    # What the nest is, for a backend that has an instruction for it (TMA's im2col mode).
    notes = {IM2COL: (K, S, D, P), IM2COL_ROW: convert(nhw_step * block_M),
             IM2COL_COL: convert(c_step * block_K)}
    b.emit(For(i, const(0), convert(block_M), "parallel", inner, notes, span))


im2col = c2d_im2col


def _described(x) -> str:
    if isinstance(x, Buffer):
        return f"{x.scope} buffer {x.name} of shape {tuple(x.shape)}"
    return type(x).__name__
