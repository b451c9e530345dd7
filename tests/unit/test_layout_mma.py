"""MMA, ldmatrix and block-level gemm fragments against the PTX ISA's documented tables."""
import itertools

import numpy as np
import pytest

from tilecraft.ir.expr import Var
from tilecraft.layout import (Fragment, gemm_a_fragment, gemm_b_fragment, gemm_c_fragment,
                              ldmatrix_fragment, ldmatrix_row_providers, mma_a_fragment,
                              mma_b_fragment, mma_c_fragment, mma_shape, reduce_fragment,
                              split_warps, stmatrix_fragment)
from tilecraft.layout.layout import evaluate


def holders(frag: Fragment) -> dict:
    """(logical index) -> (thread, local) for replica 0, read off the enumeration table."""
    tab = frag.table()
    return {idx: tuple(int(x) for x in tab[idx][0]) for idx in np.ndindex(*frag.shape)}


def generated(frag: Fragment, thread, local):
    t, l = Var("t"), Var("l")
    got = evaluate(frag.logical_of(t, l), {t: np.int64(thread), l: np.int64(local)}, ())
    return tuple(int(g) for g in got)


def compare(frag: Fragment, table: dict, shape):
    """table: (lane, element) -> (row, col), straight from the ISA formulas."""
    assert frag.shape == shape
    assert frag.check()
    assert frag.num_threads == 32
    assert len(table) == shape[0] * shape[1]
    held = holders(frag)
    for (lane, i), (row, col) in table.items():
        assert held[(row, col)] == (lane, i), ((lane, i), (row, col))
        assert generated(frag, lane, i) == (row, col)


def gid(lane):
    return lane >> 2


def tig(lane):
    return lane % 4


def test_m16n8k16_f16_a():
    table = {}
    for lane, i in itertools.product(range(32), range(8)):
        row = gid(lane) if (i < 2 or 4 <= i < 6) else gid(lane) + 8
        col = tig(lane) * 2 + (i & 1) + (8 if i >= 4 else 0)
        table[(lane, i)] = (row, col)
    for dtype in ("float16", "bfloat16"):
        compare(mma_a_fragment(dtype), table, (16, 16))
    assert mma_shape("float16") == (16, 8, 16)


def test_m16n8k16_f16_b():
    table = {}
    for lane, i in itertools.product(range(32), range(4)):
        row = tig(lane) * 2 + (i & 1) + (8 if i >= 2 else 0)
        table[(lane, i)] = (row, gid(lane))
    compare(mma_b_fragment("float16"), table, (16, 8))


def test_m16n8_accumulator():
    table = {}
    for lane, i in itertools.product(range(32), range(4)):
        row = gid(lane) if i < 2 else gid(lane) + 8
        table[(lane, i)] = (row, tig(lane) * 2 + (i & 1))
    compare(mma_c_fragment(), table, (16, 8))


def test_m16n8k32_s8():
    a, b = {}, {}
    for lane, i in itertools.product(range(32), range(16)):
        row = gid(lane) if (i < 4 or 8 <= i < 12) else gid(lane) + 8
        col = tig(lane) * 4 + (i & 3) + (16 if i >= 8 else 0)
        a[(lane, i)] = (row, col)
    for lane, i in itertools.product(range(32), range(8)):
        row = tig(lane) * 4 + (i & 3) + (16 if i >= 4 else 0)
        b[(lane, i)] = (row, gid(lane))
    for dtype in ("int8", "uint8", "float8_e4m3"):
        compare(mma_a_fragment(dtype), a, (16, 32))
        compare(mma_b_fragment(dtype), b, (32, 8))
    assert mma_shape("int8") == (16, 8, 32)


def test_m16n8k8_tf32():
    a, b = {}, {}
    for lane, i in itertools.product(range(32), range(4)):
        row = gid(lane) + (8 if i in (1, 3) else 0)
        col = tig(lane) + (4 if i >= 2 else 0)
        a[(lane, i)] = (row, col)
    for lane, i in itertools.product(range(32), range(2)):
        b[(lane, i)] = (tig(lane) + 4 * i, gid(lane))
    compare(mma_a_fragment("tf32"), a, (16, 8))
    compare(mma_b_fragment("tf32"), b, (8, 8))


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix(num, trans):
    frag = ldmatrix_fragment(num, trans)
    assert frag.check() and frag.is_bijective()
    held = holders(frag)
    for lane, m, k in itertools.product(range(32), range(num), range(2)):
        # destination register m of lane holds elements k = 0, 1 of the pair
        if trans:
            r, c = tig(lane) * 2 + k, gid(lane)
        else:
            r, c = gid(lane), tig(lane) * 2 + k
        assert held[(m, r, c)] == (lane, 2 * m + k)
    providers = ldmatrix_row_providers(num)
    assert providers.is_bijective() and providers.check()
    for m, r in itertools.product(range(num), range(8)):
        assert providers.table()[m, r, 0] == 8 * m + r
    assert stmatrix_fragment(num, trans).is_equal(frag)


def test_ldmatrix_x4_feeds_the_a_operand():
    # ldmatrix.x4 of the four 8x8 quadrants in the order (rows 0-7, cols 0-7), (rows 8-15,
    # cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15) yields a0..a7 of m16n8k16.
    ld = holders(ldmatrix_fragment(4))
    a = holders(mma_a_fragment("float16"))
    for m, r, c in itertools.product(range(4), range(8), range(8)):
        row, col = r + 8 * (m % 2), c + 8 * (m // 2)
        assert ld[(m, r, c)] == a[(row, col)]


CONFIGS = [(16, 8, 1, 1), (64, 64, 2, 2), (128, 128, 2, 2), (128, 256, 2, 4), (64, 128, 4, 1),
           (32, 64, 1, 4), (128, 64, 4, 2), (256, 128, 4, 2)]


@pytest.mark.parametrize("bm,bn,wm,wn", CONFIGS)
def test_gemm_c_fragment_covers_tile_once(bm, bn, wm, wn):
    frag = gemm_c_fragment(bm, bn, wm, wn)
    threads = 32 * wm * wn
    assert frag.check() and frag.is_bijective()
    assert frag.replicate == 1
    assert frag.num_threads == threads
    assert frag.locals_per_thread == bm * bn // threads
    held = holders(frag)
    atoms_n = bn // wn // 8
    c_atom = holders(mma_c_fragment())
    for (i, j), (t, l) in held.items():
        w, lane = divmod(t, 32)
        assert (w % wm, w // wm) == (i // (bm // wm), j // (bn // wn))   # warp numbering
        ii, jj = i % (bm // wm), j % (bn // wn)
        assert l // 4 == (ii // 16) * atoms_n + jj // 8                   # N atoms innermost
        assert (lane, l % 4) == c_atom[(ii % 16, jj % 8)]                 # d0..d3 of the atom


@pytest.mark.parametrize("bm,bn,wm,wn", CONFIGS)
def test_row_reduction_of_c(bm, bn, wm, wn):
    frag = gemm_c_fragment(bm, bn, wm, wn)
    rows = reduce_fragment(frag, 1)
    assert rows.shape == (bm,)
    assert rows.check()
    assert rows.replicate == 4 * wn
    tab, full = rows.table(), frag.table()
    for i in range(bm):
        assert set(tab[i, :, 0]) == set(full[i, :, 0, 0])  # exactly the threads of row i
    cols = reduce_fragment(frag, 0)
    assert cols.check() and cols.replicate == 8 * wm


@pytest.mark.parametrize("dtype", ["float16", "int8", "tf32"])
@pytest.mark.parametrize("wm,wn", [(1, 1), (2, 2), (4, 1), (1, 4)])
def test_gemm_operand_fragments(dtype, wm, wn):
    k = mma_shape(dtype)[2] * 2
    a = gemm_a_fragment(64, k, wm, wn, dtype)
    assert a.check() and a.replicate == wn and a.num_threads == 32 * wm * wn
    b = gemm_b_fragment(k, 64, wm, wn, dtype)
    assert b.check() and b.replicate == wm
    # every warp holds the operand slice it multiplies: A rows of its M-slab, B cols of its N-slab
    c = holders(gemm_c_fragment(64, 64, wm, wn))
    a_tab, b_tab = a.table(), b.table()
    warp_of_c = {(i, j): t // 32 for (i, j), (t, _) in c.items()}
    for (i, j), w in list(warp_of_c.items())[::7]:
        assert w in set(a_tab[i, 0, :, 0] // 32)
        assert w in set(b_tab[0, j, :, 0] // 32)
    bt = gemm_b_fragment(k, 64, wm, wn, dtype, transposed=True)
    assert bt.shape == (64, k) and bt.check()
    assert np.array_equal(bt.table(), np.swapaxes(b_tab, 0, 1))


def test_split_warps():
    assert split_warps(128, 128, 4) == (2, 2)
    assert split_warps(128, 128, 4, "full_row") == (4, 1)
    assert split_warps(128, 128, 4, "full_col") == (1, 4)
    assert split_warps(64, 256, 8) == (2, 4)
