"""TMA tensor maps: the 128-byte CUtensorMap that a bulk tensor copy reads its tile geometry from.

A tensor map describes a tensor in global memory (address, element type, sizes, byte strides)
and the box one `cp.async.bulk.tensor` copies (its extent per dimension, the traversal stride,
the shared-memory swizzle, what out-of-range elements read as). The driver's
cuTensorMapEncodeTiled encodes it on the host; a kernel takes it BY VALUE as a
`const __grid_constant__ tc::TensorMap` parameter (launcher kind ("tensormap",)).

Dimension order is the driver's: dimension 0 is the innermost (contiguous) one. A row-major
[rows, cols] tensor is global_shape=(cols, rows), global_strides_bytes=(cols * element bytes,),
and a [box_rows, box_cols] tile is box_shape=(box_cols, box_rows); in device code the load is
tc::tma_load_2d(dst, &map, bar, col, row). `encode_tensor` does this reversal for a torch tensor.

`check_tiled` validates everything the driver documents without asking it (pure Python, no GPU),
so mistakes are reported as TileError with the rule broken rather than as a bare
CUDA_ERROR_INVALID_VALUE. Only non-interleaved layouts and the four classic swizzle modes
(16-byte chunks within a 32 / 64 / 128-byte span) are offered; L2 promotion is 128 bytes.
"""
from __future__ import annotations

import ctypes
import operator
from dataclasses import dataclass

from ....errors import TileError
from . import driver

TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGNMENT = 64
MAX_RANK = 5

# CUtensorMapDataType (cuda.h).
DATA_TYPE_UINT8 = 0
DATA_TYPE_UINT16 = 1
DATA_TYPE_UINT32 = 2
DATA_TYPE_INT32 = 3
DATA_TYPE_UINT64 = 4
DATA_TYPE_INT64 = 5
DATA_TYPE_FLOAT16 = 6
DATA_TYPE_FLOAT32 = 7
DATA_TYPE_FLOAT64 = 8
DATA_TYPE_BFLOAT16 = 9
# CUtensorMapInterleave.
INTERLEAVE_NONE = 0
# CUtensorMapSwizzle.
SWIZZLE_NONE = 0
SWIZZLE_32B = 1
SWIZZLE_64B = 2
SWIZZLE_128B = 3
# CUtensorMapL2promotion.
L2_PROMOTION_NONE = 0
L2_PROMOTION_64B = 1
L2_PROMOTION_128B = 2
L2_PROMOTION_256B = 3
# CUtensorMapFloatOOBfill: NONE reads out-of-range elements as zero, the other as a NaN.
OOB_FILL_ZERO = 0
OOB_FILL_NAN = 1

# tilecraft dtype -> (CUtensorMapDataType, is a float type the NaN fill applies to). Types the
# driver has no name for travel as unsigned integers of their width: a copy moves bits.
_DATA_TYPES = {
    "bool": (DATA_TYPE_UINT8, False), "int8": (DATA_TYPE_UINT8, False),
    "uint8": (DATA_TYPE_UINT8, False), "float8_e4m3": (DATA_TYPE_UINT8, False),
    "float8_e5m2": (DATA_TYPE_UINT8, False),
    "int16": (DATA_TYPE_UINT16, False), "uint16": (DATA_TYPE_UINT16, False),
    "int32": (DATA_TYPE_INT32, False), "uint32": (DATA_TYPE_UINT32, False),
    "int64": (DATA_TYPE_INT64, False), "uint64": (DATA_TYPE_UINT64, False),
    "float16": (DATA_TYPE_FLOAT16, True), "bfloat16": (DATA_TYPE_BFLOAT16, True),
    "float32": (DATA_TYPE_FLOAT32, True), "float64": (DATA_TYPE_FLOAT64, True),
}
_ELEMENT_BYTES = {DATA_TYPE_UINT8: 1, DATA_TYPE_UINT16: 2, DATA_TYPE_UINT32: 4,
                  DATA_TYPE_INT32: 4, DATA_TYPE_UINT64: 8, DATA_TYPE_INT64: 8,
                  DATA_TYPE_FLOAT16: 2, DATA_TYPE_FLOAT32: 4, DATA_TYPE_FLOAT64: 8,
                  DATA_TYPE_BFLOAT16: 2}
# swizzle name -> (CUtensorMapSwizzle, span in bytes the box's inner extent must fit in).
SWIZZLES = {"none": (SWIZZLE_NONE, None), "32B": (SWIZZLE_32B, 32), "64B": (SWIZZLE_64B, 64),
            "128B": (SWIZZLE_128B, 128)}


@dataclass(frozen=True)
class TiledMap:
    """Validated arguments of cuTensorMapEncodeTiled, every sequence innermost dimension first."""
    global_address: int
    data_type: int
    element_bytes: int
    global_dims: tuple
    global_strides: tuple   # bytes, dimensions 1 .. rank-1
    box_dims: tuple
    element_strides: tuple
    swizzle: int
    oob_fill: int

    @property
    def rank(self) -> int:
        return len(self.global_dims)

    @property
    def box_bytes(self) -> int:
        """Bytes one load of a box writes to shared memory (and counts on its mbarrier)."""
        count = self.element_bytes
        for extent, stride in zip(self.box_dims, self.element_strides):
            count *= -(-extent // stride)
        return count


def _ints(name: str, values, rank=None) -> tuple:
    try:
        items = tuple(values)
    except TypeError:
        raise TileError(f"tensor map: {name} must be a sequence of integers, got {values!r}") \
            from None
    out = []
    for item in items:
        if isinstance(item, bool):
            raise TileError(f"tensor map: {name} must hold integers, got {item!r}")
        try:
            out.append(operator.index(item))
        except TypeError:
            raise TileError(f"tensor map: {name} must hold integers, got {item!r}") from None
    if rank is not None and len(out) != rank:
        raise TileError(f"tensor map: {name} has {len(out)} entries; the tensor has rank {rank}")
    return tuple(out)


def check_tiled(global_address, dtype, global_shape, global_strides_bytes, box_shape,
                swizzle="none", element_strides=None, oob_fill_zero=True) -> TiledMap:
    """Validate the arguments of `encode_tiled` against the driver's documented rules."""
    from ....ir.dtypes import dtype as to_dtype
    try:
        name = str(to_dtype(dtype))
    except ValueError as err:
        raise TileError(f"tensor map: {err}") from None
    if name not in _DATA_TYPES:
        raise TileError(f"tensor map: no TMA element type for {name}")
    data_type, is_float = _DATA_TYPES[name]
    esize = _ELEMENT_BYTES[data_type]
    if swizzle not in SWIZZLES:
        raise TileError(f"tensor map: swizzle {swizzle!r} is not one of "
                        f"{', '.join(repr(s) for s in SWIZZLES)}")
    swizzle_mode, span = SWIZZLES[swizzle]

    dims = _ints("global_shape", global_shape)
    rank = len(dims)
    if not 1 <= rank <= MAX_RANK:
        raise TileError(f"tensor map: rank {rank}; TMA handles 1 to {MAX_RANK} dimensions")
    for i, d in enumerate(dims):
        if not 1 <= d <= 2**32:
            raise TileError(f"tensor map: global_shape[{i}] = {d} must be between 1 and 2**32")

    strides = _ints("global_strides_bytes", global_strides_bytes)
    if len(strides) == rank:
        if strides[0] != esize:  # a full stride list: dimension 0 must be contiguous
            raise TileError(f"tensor map: dimension 0 must be contiguous (stride {esize} bytes "
                            f"for {name}), got a stride of {strides[0]} bytes")
        strides = strides[1:]
    if len(strides) != rank - 1:
        raise TileError(f"tensor map: global_strides_bytes has {len(strides)} entries; a rank-"
                        f"{rank} tensor takes {rank - 1} (dimensions 1..{rank - 1}, in bytes)")
    for i, s in enumerate(strides, start=1):
        if s <= 0 or s % 16 or s >= 2**40:
            raise TileError(f"tensor map: the stride of dimension {i} is {s} bytes; TMA needs "
                            f"a positive multiple of 16 below 2**40")

    box = _ints("box_shape", box_shape, rank)
    for i, b in enumerate(box):
        if not 1 <= b <= 256:
            raise TileError(f"tensor map: box_shape[{i}] = {b} must be between 1 and 256")
    inner_bytes = box[0] * esize
    if inner_bytes % 16:
        raise TileError(f"tensor map: the box's inner extent is {box[0]} x {esize} = "
                        f"{inner_bytes} bytes; TMA needs a multiple of 16 bytes")
    if span is not None and inner_bytes > span:
        raise TileError(f"tensor map: the box's inner extent is {inner_bytes} bytes, more than "
                        f"the {span}-byte span of the {swizzle} swizzle")

    estrides = (1,) * rank if element_strides is None else \
        _ints("element_strides", element_strides, rank)
    for i, e in enumerate(estrides):
        if not 1 <= e <= 8:
            raise TileError(f"tensor map: element_strides[{i}] = {e} must be between 1 and 8")

    address = _ints("global_address", (global_address,))[0]
    if address <= 0 or address % 16:
        raise TileError(f"tensor map: global address {address:#x} must be a non-null multiple "
                        f"of 16")
    if not oob_fill_zero and not is_float:
        raise TileError(f"tensor map: the NaN out-of-range fill needs a float type, not {name}")
    return TiledMap(address, data_type, esize, dims, strides, box, estrides, swizzle_mode,
                    OOB_FILL_ZERO if oob_fill_zero else OOB_FILL_NAN)


def encode(spec: TiledMap) -> bytes:
    """cuTensorMapEncodeTiled on validated arguments: the 128-byte CUtensorMap."""
    encode_tiled_fn = getattr(driver.functions(), "cuTensorMapEncodeTiled", None)
    if encode_tiled_fn is None:
        raise TileError("this CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 "
                        "driver or newer)")
    box = (ctypes.c_uint * spec.rank)(*spec.box_dims)
    return _encoded(f"cuTensorMapEncodeTiled({spec})", lambda out, dims, strides, estrides:
                    encode_tiled_fn(out, spec.data_type, spec.rank, spec.global_address, dims,
                                    strides, box, estrides, INTERLEAVE_NONE, spec.swizzle,
                                    L2_PROMOTION_128B, spec.oob_fill), spec)


def _encoded(what: str, call, spec: TiledMap) -> bytes:
    """The 128 bytes a driver encoder writes, called as call(map address, global dims, global
    strides, element strides) with the tensor's arrays of `spec`."""
    driver.ensure_context()
    rank = spec.rank
    storage = (ctypes.c_uint8 * (TENSOR_MAP_BYTES + TENSOR_MAP_ALIGNMENT))()
    base = ctypes.addressof(storage)
    out = base + (-base) % TENSOR_MAP_ALIGNMENT  # the driver wants the map 64-byte aligned
    dims = (ctypes.c_uint64 * rank)(*spec.global_dims)
    strides = (ctypes.c_uint64 * max(rank - 1, 1))(*spec.global_strides)
    estrides = (ctypes.c_uint * rank)(*spec.element_strides)
    driver.check(call(out, dims, strides, estrides), what)
    return ctypes.string_at(out, TENSOR_MAP_BYTES)


def encode_tiled(global_address, dtype, global_shape, global_strides_bytes, box_shape,
                 swizzle="none", element_strides=None, oob_fill_zero=True) -> bytes:
    """The 128-byte CUtensorMap of a tiled view of global memory.

    global_shape / box_shape / element_strides: innermost dimension first. global_strides_bytes:
    the byte strides of dimensions 1..rank-1 (a full list whose first entry is the element size
    is accepted too). swizzle: "none", "32B", "64B" or "128B" (the box's inner extent in bytes
    must fit in the span). oob_fill_zero: out-of-range elements read as zero, else as NaN.
    """
    return encode(check_tiled(global_address, dtype, global_shape, global_strides_bytes,
                              box_shape, swizzle, element_strides, oob_fill_zero))


def encode_tensor(tensor, box_shape, swizzle="none", oob_fill_zero=True) -> bytes:
    """The tensor map of a torch CUDA tensor; box_shape in the tensor's own (outermost first)
    order, e.g. (64, 64) rows x cols. The last dimension must be contiguous."""
    shape, strides = tuple(tensor.shape), tuple(tensor.stride())
    box = _ints("box_shape", box_shape, len(shape))
    if shape and strides[-1] != 1:
        raise TileError(f"tensor map: the last dimension must be contiguous, strides {strides}")
    return encode_tiled(tensor.data_ptr(), tensor.dtype, *_driver_order(tensor), box[::-1],
                        swizzle, oob_fill_zero=oob_fill_zero)


def _driver_order(tensor) -> tuple:
    """(sizes innermost first, byte strides of dimensions 1 ..) of a torch tensor whose last
    dimension is contiguous: the driver's order."""
    esize = tensor.element_size()
    return (tuple(tensor.shape)[::-1],
            tuple(s * esize for s in tuple(tensor.stride())[::-1][1:]))


# im2col mode: the bounding box's corners are signed integers of this many bits by tensor rank.
_CORNER_BITS = {3: 16, 4: 8, 5: 5}
MAX_PIXELS = 256


@dataclass(frozen=True)
class Im2colMap:
    """Validated arguments of cuTensorMapEncodeIm2col (sequences innermost dimension first:
    channels, then the spatial dimensions W (H (D)), then images)."""
    tiled: TiledMap          # the tensor, element type, swizzle and traversal strides
    lower: tuple             # the bounding box's corners, one per spatial dimension
    upper: tuple
    channels: int            # channels per pixel: the box's inner extent
    pixels: int              # pixels per column: the box's rows

    @property
    def box_bytes(self) -> int:
        return self.channels * self.pixels * self.tiled.element_bytes


def check_im2col(global_address, dtype, global_shape, global_strides_bytes, channels, pixels,
                 lower, upper, swizzle="none", element_strides=None) -> Im2colMap:
    """Validate the arguments of cuTensorMapEncodeIm2col (`encode_im2col_map`) against the
    driver's documented rules (the tensor's own as for a tiled map, with a box of `channels`
    x 1 ... to check them)."""
    rank = len(_ints("global_shape", global_shape))
    if rank not in _CORNER_BITS:
        raise TileError(f"tensor map: im2col mode takes tensors of rank 3 to 5, not {rank}")
    tiled = check_tiled(global_address, dtype, global_shape, global_strides_bytes,
                        (channels,) + (1,) * (rank - 1), swizzle, element_strides)
    lo, hi = _ints("lower", lower, rank - 2), _ints("upper", upper, rank - 2)
    bits = _CORNER_BITS[rank]
    for name, corner in (("lower", lo), ("upper", hi)):
        if any(not -2**(bits - 1) <= c < 2**(bits - 1) for c in corner):
            raise TileError(f"tensor map: im2col {name} corner {corner} out of the signed "
                            f"{bits}-bit range of a rank-{rank} map")
    if not 1 <= pixels <= MAX_PIXELS:
        raise TileError(f"tensor map: {pixels} pixels per column; im2col loads 1 to "
                        f"{MAX_PIXELS}")
    return Im2colMap(tiled, lo, hi, channels, pixels)


def encode_im2col_map(spec: Im2colMap) -> bytes:
    """cuTensorMapEncodeIm2col on validated arguments: the 128-byte CUtensorMap."""
    fn = getattr(driver.functions(), "cuTensorMapEncodeIm2col", None)
    if fn is None:
        raise TileError("this CUDA driver has no cuTensorMapEncodeIm2col (TMA needs a CUDA 12 "
                        "driver or newer)")
    t = spec.tiled
    lower = (ctypes.c_int * len(spec.lower))(*spec.lower)
    upper = (ctypes.c_int * len(spec.upper))(*spec.upper)
    return _encoded(f"cuTensorMapEncodeIm2col({spec})", lambda out, dims, strides, estrides:
                    fn(out, t.data_type, t.rank, t.global_address, dims, strides, lower, upper,
                       spec.channels, spec.pixels, estrides, INTERLEAVE_NONE, t.swizzle,
                       L2_PROMOTION_128B, t.oob_fill), t)


def encode_tensor_im2col(tensor, pixels: int, channels: int, swizzle: str, lower: int,
                         upper: int, stride: int) -> bytes:
    """The im2col-mode tensor map of a torch NHWC image (tileops/tma_im2col.py): boxes of
    `pixels` x `channels`, filter positions from `lower` to `upper` past the last pixel along
    H and W, stepped by `stride`."""
    shape, strides = tuple(tensor.shape), tuple(tensor.stride())
    if len(shape) != 4 or strides[-1] != 1:
        raise TileError(f"tensor map: an im2col map takes an NHWC image with contiguous "
                        f"channels, got shape {shape}, strides {strides}")
    return encode_im2col_map(check_im2col(
        tensor.data_ptr(), tensor.dtype, *_driver_order(tensor), channels, pixels,
        (lower, lower), (upper, upper), swizzle, (1, stride, stride, 1)))
