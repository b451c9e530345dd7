"""Shared-memory layouts of a 2-d tile: XOR swizzles, padding, plain row-major.

Shared memory has 32 banks of 4 bytes: a warp's access is served in one pass only when its
addresses fall in distinct banks (or the same word). The accesses that matter are 16-byte
vectors (cp.async, ldmatrix, vectorized ld/st.shared): ldmatrix makes 8 threads each fetch one
16-byte row of an 8x8 matrix, i.e. 8 rows of the tile at the same column. In a row-major tile
whose rows are a multiple of 128 bytes those 8 chunks sit in the same 4 banks, an 8-way
conflict. Two cures:

- XOR swizzle: inside each atom of 8 rows, 16-byte chunk c of row r is stored at chunk
  c XOR f(r). 128B: atom rows of 8 chunks, f(r) = r % 8; 64B: 4 chunks, f(r) = (r % 8) // 2;
  32B: 2 chunks, f(r) = (r % 8) // 4. Chunks stay whole (vector accesses stay legal) and the
  8 rows of an ldmatrix land in 8 distinct 16-byte bank groups. A tile wider than one atom row
  is stored as column slabs of atom width, each slab `rows` rows tall and contiguous: the bytes
  of an 8-row atom are then exactly the TMA swizzle pattern of the same name (the chunk address
  bits XOR the row bits), provided the buffer is aligned to the atom (1024/512/256 bytes).
- Padding: each row is one 16-byte chunk longer, so consecutive rows shift by 4 banks. Not
  usable by TMA or WGMMA descriptors, which only know the swizzle modes.

Every layout here maps (row, col) to one flat element offset, so lowering addresses shared
memory directly, and each knows its closed-form inverse.
"""
from __future__ import annotations

import numpy as np

from .layout import Layout, LayoutError

# swizzle mode -> (16-byte chunks per atom row, byte alignment the atom needs)
SWIZZLE_MODES = {"128B": (8, 1024), "64B": (4, 512), "32B": (2, 256)}
CHUNK_BITS = 128  # one 16-byte vector


class SharedLayout(Layout):
    """A (rows, cols) -> [element offset] shared-memory layout that knows its mode
    ("128B", "64B", "32B", "padded", "linear"), element width and required byte alignment."""

    _FIELDS = ("mode", "element_bits", "alignment")

    def __init__(self, rows, cols, bits, mode, forward_fn, inverse_fn):
        self.mode = mode
        self.element_bits = bits
        self.alignment = SWIZZLE_MODES[mode][1] if mode in SWIZZLE_MODES else 16
        super().__init__((rows, cols), forward_fn, inverse_fn)

    def _derived_kind(self) -> type:
        # a reshaped or repeated swizzle no longer has the guarantees its mode names
        return Layout

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def cols(self) -> int:
        return self.shape[1]

    @property
    def vector(self) -> int:
        """Elements per 16-byte chunk."""
        return _vector(self.element_bits)

    @property
    def size(self) -> int:
        """Elements the buffer must hold (padding included)."""
        return self.output_shape[0]

    def describe(self) -> str:
        return f"{self.mode} {super().describe()} ({self.element_bits}-bit elements)"


def _vector(bits: int) -> int:
    if bits <= 0 or CHUNK_BITS % bits:
        raise LayoutError(f"no 16-byte vector of {bits}-bit elements")
    return CHUNK_BITS // bits


def _swizzle_key(row, chunks: int):
    """f(r): which chunk bits of an 8-row atom row r flips."""
    return (row % 8) // (8 // chunks) if chunks < 8 else row % 8


def make_xor_swizzle(rows: int, cols: int, bits: int, mode: str = "128B") -> SharedLayout:
    """The 128B / 64B / 32B XOR swizzle of a (rows, cols) tile of `bits`-bit elements."""
    if mode not in SWIZZLE_MODES:
        raise LayoutError(f"unknown swizzle mode {mode!r}; expected one of {list(SWIZZLE_MODES)}")
    chunks = SWIZZLE_MODES[mode][0]
    vec = _vector(bits)
    width = chunks * vec  # elements in one atom row
    if cols % width:
        raise LayoutError(f"{mode} swizzle needs the row length ({cols} elements of {bits} bits) "
                          f"to be a multiple of {width} elements")
    slab = rows * width  # elements in one column slab

    def forward(r, c):
        chunk = (c % width) // vec if cols > width else c // vec
        slab_index = c // width if cols > width else 0
        return [slab_index * slab + r * width + (chunk ^ _swizzle_key(r, chunks)) * vec + c % vec]

    def inverse(offset):
        slab_index = offset // slab if cols > width else 0
        r = (offset % slab) // width if cols > width else offset // width
        chunk = ((offset % width) // vec) ^ _swizzle_key(r, chunks)
        return [r, slab_index * width + chunk * vec + offset % vec]
    return SharedLayout(rows, cols, bits, mode, forward, inverse)


def make_padded_layout(rows: int, cols: int, bits: int) -> SharedLayout:
    """Row-major with each row one 16-byte chunk longer (row stride cols + vec elements)."""
    stride = cols + _vector(bits)
    return SharedLayout(rows, cols, bits, "padded", lambda r, c: [r * stride + c],
                        lambda o: [o // stride, o % stride])


def make_linear_layout(rows: int, cols: int, bits: int) -> SharedLayout:
    """Plain row-major."""
    return SharedLayout(rows, cols, bits, "linear", lambda r, c: [r * cols + c],
                        lambda o: [o // cols, o % cols])


def atom_row_bytes(mode: str) -> int:
    """Bytes in one row of a swizzle mode's atom: the width of the column slabs a wider tile
    is stored as (and of a TMA box / WGMMA operand slab in that mode)."""
    return SWIZZLE_MODES[mode][0] * CHUNK_BITS // 8


def swizzle_mode_for(rows: int, cols: int, bits: int) -> str | None:
    """The widest XOR swizzle a (rows, cols) tile admits: rows a multiple of 8 and a row of
    1024 / 512 / 256 bits' multiple (128 / 64 / 32 bytes)."""
    if rows % 8:
        return None
    row_bits = cols * bits
    for mode, need in (("128B", 1024), ("64B", 512), ("32B", 256)):
        if row_bits % need == 0:
            return mode
    return None


def swizzled_layout(rows: int, cols: int, bits: int, allow_pad: bool = True) -> SharedLayout:
    """The bank-conflict-free layout for a gemm operand tile: the widest XOR swizzle that fits,
    else (allow_pad) padding when rows are whole 16-byte chunks, else row-major. allow_pad=False
    is for tiles a TMA copy or WGMMA descriptor reads, which cannot describe padding."""
    mode = swizzle_mode_for(rows, cols, bits)
    if mode is not None:
        return make_xor_swizzle(rows, cols, bits, mode)
    if allow_pad and (cols * bits) % CHUNK_BITS == 0:
        return make_padded_layout(rows, cols, bits)
    return make_linear_layout(rows, cols, bits)


def make_swizzled_layout(buffer, *args, **kwargs) -> Layout:
    """TileLang's form, `make_swizzled_layout(buffer, k_major=True, allow_pad=True)`: the
    swizzled_layout of a shared buffer (or a region of one), its leading dimensions taken as
    rows (a 3-d tile is its rows stacked), for T.annotate_layout. Also
    `make_swizzled_layout(rows, cols, bits, allow_pad=True)`, which is swizzled_layout."""
    if isinstance(buffer, int):
        return swizzled_layout(buffer, *args, **kwargs)
    return _buffer_layout(buffer, *args, **kwargs)


def _buffer_layout(buffer, k_major: bool = True, allow_pad: bool = True) -> Layout:
    from ..errors import TileError, current_span
    from ..ir.buffer import Buffer, BufferRegion
    what = "make_swizzled_layout"
    if isinstance(buffer, BufferRegion):
        buffer = buffer.buffer
    if not isinstance(buffer, Buffer):
        raise TileError(f"{what} takes a shared buffer (or rows, cols, bits), got "
                        f"{type(buffer).__name__}", current_span())
    if not k_major:
        raise TileError(f"{what}({buffer.name}, k_major=False) is not supported yet: the "
                        "swizzle here serves tiles whose K dimension is contiguous",
                        current_span())
    shape = buffer.static_shape()
    if shape is None or len(shape) < 2:
        raise TileError(f"{what}({buffer.name}): the buffer must have 2 or more static "
                        f"dimensions, it has shape {tuple(buffer.shape)}", current_span())
    rows = int(np.prod(shape[:-1]))
    tile = swizzled_layout(rows, shape[-1], buffer.dtype.bits, allow_pad)
    if len(shape) == 2:
        return tile
    alignment = tile.alignment
    stacked = tile.reshape(shape)
    stacked.alignment = alignment  # the atom still starts at the tile's start
    return stacked


def make_full_bank_swizzle(rows, cols, bits) -> SharedLayout:
    return make_xor_swizzle(rows, cols, bits, "128B")


def make_half_bank_swizzle(rows, cols, bits) -> SharedLayout:
    return make_xor_swizzle(rows, cols, bits, "64B")


def make_quarter_bank_swizzle(rows, cols, bits) -> SharedLayout:
    return make_xor_swizzle(rows, cols, bits, "32B")


def bank_groups(layout: Layout, bits: int, points) -> np.ndarray:
    """The 16-byte bank group (0..7: which 4 of the 32 banks) each (row, col) point falls in."""
    points = np.asarray(points).reshape(-1, 2)
    offsets = layout.table()[points[:, 0], points[:, 1], 0]
    return (offsets * bits // 8 // 16) % 8


def ldmatrix_conflict_ways(layout: Layout, bits: int) -> int:
    """Worst bank-conflict degree (1 = conflict-free) of the ldmatrix pattern on this layout:
    8 consecutive rows read at the same 16-byte chunk column, over every row start and chunk."""
    rows, cols = layout.shape
    vec = _vector(bits)
    worst = 1
    for start in range(0, max(1, rows - 7)):
        for chunk in range(cols // vec):
            pts = [(start + k, chunk * vec) for k in range(min(8, rows))]
            groups = bank_groups(layout, bits, pts)
            worst = max(worst, int(np.bincount(groups, minlength=8).max()))
    return worst
