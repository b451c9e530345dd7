"""Shared-memory layouts: bijective, chunk-preserving, conflict-free for ldmatrix."""
import itertools

import numpy as np
import pytest

from tilecraft.layout import (LayoutError, ldmatrix_conflict_ways, make_linear_layout,
                              make_padded_layout, make_swizzled_layout, make_xor_swizzle,
                              swizzle_mode_for)

CASES = [  # rows, cols, bits, expected mode
    (64, 64, 16, "128B"), (128, 32, 16, "64B"), (32, 16, 16, "32B"), (64, 128, 16, "128B"),
    (32, 128, 8, "128B"), (64, 32, 32, "128B"), (16, 64, 8, "64B"), (64, 8, 32, "32B"),
    (32, 16, 8, "padded"), (12, 64, 16, "padded"), (8, 4, 16, "linear"), (64, 24, 16, "padded"),
]


def byte_offsets(layout, bits):
    return layout.table()[..., 0] * bits // 8


@pytest.mark.parametrize("rows,cols,bits,mode", CASES)
def test_choice_and_inverse(rows, cols, bits, mode):
    lay = make_swizzled_layout(rows, cols, bits)
    assert lay.mode == mode
    assert lay.alignment == {"128B": 1024, "64B": 512, "32B": 256}.get(mode, 16)
    assert lay.check()                          # closed-form inverse agrees everywhere
    assert lay.is_injective()
    if mode == "padded":
        assert lay.size == rows * (cols + 128 // bits) - 128 // bits
    else:
        assert lay.is_bijective()
        inv = lay.inverse()
        assert inv.check()
        round_trip = inv.compose(lay).table()[..., 0]
        assert np.array_equal(round_trip, np.arange(rows * cols))
        back = inv.table()
        flat = lay.table()[..., 0]
        assert np.array_equal(back[flat.reshape(-1)].reshape(rows, cols, 2),
                              np.stack(np.indices((rows, cols)), axis=-1))


def test_no_padding_when_not_allowed():
    assert make_swizzled_layout(32, 16, 8, allow_pad=False).mode == "linear"
    assert make_swizzled_layout(64, 64, 16, allow_pad=False).mode == "128B"


@pytest.mark.parametrize("mode,chunks", [("128B", 8), ("64B", 4), ("32B", 2)])
@pytest.mark.parametrize("bits", [8, 16, 32])
def test_xor_pattern_and_chunks(mode, chunks, bits):
    vec = 128 // bits
    rows, cols = 16, chunks * vec * 2
    lay = make_xor_swizzle(rows, cols, bits, mode)
    off = lay.table()[..., 0]
    width = chunks * vec
    for r, c in itertools.product(range(rows), range(cols)):
        slab, cc = divmod(c, width)
        key = {8: r % 8, 4: (r % 8) // 2, 2: (r % 8) // 4}[chunks]
        want = slab * rows * width + r * width + ((cc // vec) ^ key) * vec + c % vec
        assert off[r, c] == want
    # each 16-byte chunk stays whole and 16-byte aligned: one vector access is legal
    chunk_start = off[:, ::vec]
    for k in range(vec):
        assert np.array_equal(off[:, k::vec], chunk_start + k)
    assert np.all((chunk_start * bits // 8) % 16 == 0)


def bank_groups_of_ldmatrix(lay, bits, start, chunk):
    vec = 128 // bits
    addr = byte_offsets(lay, bits)[start:start + 8, chunk * vec]
    return (addr // 16) % 8   # 32 banks x 4 bytes = 8 groups of 16 bytes


@pytest.mark.parametrize("rows,cols,bits", [(64, 64, 16), (32, 32, 16), (32, 16, 16),
                                            (64, 128, 16), (32, 128, 8), (64, 32, 32),
                                            (32, 64, 16)])
def test_ldmatrix_rows_hit_distinct_bank_groups(rows, cols, bits):
    lay = make_swizzled_layout(rows, cols, bits)
    for start in range(rows - 7):
        for chunk in range(cols * bits // 128):
            groups = bank_groups_of_ldmatrix(lay, bits, start, chunk)
            assert len(set(groups.tolist())) == 8, (lay.mode, start, chunk, groups)
    assert ldmatrix_conflict_ways(lay, bits) == 1


def test_row_major_conflicts_and_padding_cures_them():
    assert ldmatrix_conflict_ways(make_linear_layout(64, 64, 16), 16) == 8
    assert ldmatrix_conflict_ways(make_padded_layout(64, 64, 16), 16) == 1


def test_mode_rules_and_errors():
    assert swizzle_mode_for(8, 64, 16) == "128B"
    assert swizzle_mode_for(4, 64, 16) is None
    with pytest.raises(LayoutError):
        make_xor_swizzle(64, 16, 16, "128B")
    with pytest.raises(LayoutError):
        make_xor_swizzle(64, 64, 16, "16B")


def test_derived_swizzle_is_a_plain_layout():
    lay = make_swizzled_layout(64, 64, 16)
    stacked = lay.repeat(0, 2)
    assert type(stacked).__name__ == "Layout" and stacked.is_bijective() and stacked.check()
    assert stacked.output_shape == (2 * 64 * 64,)
