"""Register layouts fixed by the hardware: mma.sync operands, ldmatrix / stmatrix, and the
block-level fragments T.gemm lowering builds from them.

The warp-level tables are the PTX ISA's ("Matrix Fragments for mma.m16n8k*", "ldmatrix"). For
every mma.sync shape used here, with groupID = lane >> 2 and tig = lane % 4 and e = elements
per 32-bit register (2 for f16/bf16, 4 for 8-bit types, 1 for tf32; k = 8 * e):
  A (16 x k), 4 registers, element i in register i // e, position p = i % e:
      row = groupID + 8 * (reg % 2),  col = tig * e + p + 4e * (reg // 2)
  B (k x 8), 2 registers:  row = tig * e + p + 4e * reg,  col = groupID
  C/D (16 x 8), c0..c3:    row = groupID + 8 * (i // 2),  col = tig * 2 + i % 2
This is m16n8k16 for f16/bf16, m16n8k32 for s8/u8/e4m3/e5m2 and m16n8k8 for tf32.

Block level: a (block_m x block_n) tile is computed by warps_m x warps_n warps. Warp w has
coordinates wm = w % warps_m, wn = w // warps_m (M-warps numbered fastest); thread = 32 * w +
lane. Each warp owns the (block_m / warps_m) x (block_n / warps_n) sub-tile at (wm, wn), made of
mma atoms; the local index is atom_index * (elements per atom) + the element's mma index, with
atom_index running over N atoms innermost for C and over M (for A) / N (for B) atoms innermost
with K atoms outermost for the operands, so one K step's operands are contiguous.
"""
from __future__ import annotations

from types import SimpleNamespace

from ..ir import dtypes as dt
from .fragment import Fragment
from .layout import Layout, LayoutError

WARP = 32


def elements_per_register(dtype) -> int:
    """How many operand elements one 32-bit mma register holds (tf32: float32 operands)."""
    if dtype in ("tf32", "tfloat32"):
        return 1
    bits = dt.dtype(dtype).bits
    if bits not in (8, 16, 32):
        raise LayoutError(f"mma.sync has no operand layout for {dtype}")
    return 32 // bits


def mma_shape(dtype) -> tuple[int, int, int]:
    """(m, n, k) of the mma.sync instruction used for this operand type."""
    return (16, 8, 8 * elements_per_register(dtype))


# ----------------------------------------------------------------------------
# warp-level atoms: (row, col) <-> (lane, element index within the thread's registers)

def _digit(x, stride: int, count: int, extent: int):
    """(x // stride) % count for x in [0, extent), written without the parts that range makes
    moot (0 when count is 1), so the layouts print and lower to short index arithmetic."""
    if count == 1:
        return 0
    q = x // stride if stride > 1 else x
    return q % count if extent > stride * count else q


def _a_atom(e: int):
    def fwd(r, c, rows, cols):
        reg = _digit(c, 4 * e, 2, cols) * 2 + _digit(r, 8, 2, rows)
        return _digit(r, 1, 8, rows) * 4 + _digit(c, e, 4, cols), reg * e + _digit(c, 1, e, cols)

    def inv(lane, i):
        reg = i // e
        return lane // 4 + (reg % 2) * 8, (lane % 4) * e + i % e + (reg // 2) * (4 * e)
    return SimpleNamespace(shape=(16, 8 * e), per_thread=4 * e, fwd=fwd, inv=inv)


def _b_atom(e: int):
    def fwd(r, c, rows, cols):
        return (_digit(c, 1, 8, cols) * 4 + _digit(r, e, 4, rows),
                _digit(r, 4 * e, 2, rows) * e + _digit(r, 1, e, rows))

    def inv(lane, i):
        return (lane % 4) * e + i % e + (i // e) * (4 * e), lane // 4
    return SimpleNamespace(shape=(8 * e, 8), per_thread=2 * e, fwd=fwd, inv=inv)


def _c_atom():
    def fwd(r, c, rows, cols):
        return (_digit(r, 1, 8, rows) * 4 + _digit(c, 2, 4, cols),
                _digit(r, 8, 2, rows) * 2 + _digit(c, 1, 2, cols))

    def inv(lane, i):
        return lane // 4 + (i // 2) * 8, (lane % 4) * 2 + i % 2
    return SimpleNamespace(shape=(16, 8), per_thread=4, fwd=fwd, inv=inv)


def _warp_tiled(shape, atom, warps_m, warps_n, split_rows, split_cols, rows_outer):
    """A (rows, cols) tile over warps_m x warps_n warps built from a warp-level atom. Rows are
    split over the M-warps when split_rows (else every M-warp holds all rows: replication),
    columns over the N-warps when split_cols; atoms tile each warp's sub-tile, with local
    atom index ai * atoms_c + aj (rows_outer) or aj * atoms_r + ai."""
    rows, cols = shape
    ar, ac = atom.shape
    wr_n = warps_m if split_rows else 1
    wc_n = warps_n if split_cols else 1
    if rows % (wr_n * ar) or cols % (wc_n * ac):
        raise LayoutError(f"a {rows}x{cols} tile does not split into {wr_n}x{wc_n} warps of "
                          f"{ar}x{ac} mma atoms")
    wr, wc = rows // wr_n, cols // wc_n
    na_r, na_c = wr // ar, wc // ac
    rep_m = 1 if split_rows else warps_m
    rep_n = 1 if split_cols else warps_n
    pt = atom.per_thread
    threads, slots = warps_m * warps_n * WARP, pt * na_r * na_c

    def forward(i, j, *rep):
        rep = rep[0] if rep else 0
        m = _digit(i, wr, wr_n, rows) if split_rows else _digit(rep, 1, rep_m, rep_m * rep_n)
        n = _digit(j, wc, wc_n, cols) if split_cols else _digit(rep, rep_m, rep_n, rep_m * rep_n)
        ai, aj = _digit(i, ar, na_r, rows), _digit(j, ac, na_c, cols)
        lane, idx = atom.fwd(i, j, rows, cols)
        atom_index = ai * na_c + aj if rows_outer else aj * na_r + ai
        return (m + n * warps_m) * WARP + lane, atom_index * pt + idx

    def logical(t, l):
        m, n = _digit(t, WARP, warps_m, threads), _digit(t, WARP * warps_m, warps_n, threads)
        if rows_outer:
            aj, ai = _digit(l, pt, na_c, slots), _digit(l, pt * na_c, na_r, slots)
        else:
            ai, aj = _digit(l, pt, na_r, slots), _digit(l, pt * na_r, na_c, slots)
        r, c = atom.inv(_digit(t, 1, WARP, threads), _digit(l, 1, pt, slots))
        i = (m * wr if split_rows else 0) + ai * ar + r
        j = (n * wc if split_cols else 0) + aj * ac + c
        rep = (0 if split_rows else m) + (0 if split_cols else n * rep_m)
        return [i, j, rep] if rep_m * rep_n > 1 else [i, j]
    return Fragment(shape, forward, replicate=rep_m * rep_n, threads=threads,
                    logical_fn=logical)


# ----------------------------------------------------------------------------
# mma.sync operands of one warp

def mma_a_fragment(dtype="float16") -> Fragment:
    """A operand of mma.sync (16 x k, row-major) over one warp's 32 lanes; local = a_i."""
    atom = _a_atom(elements_per_register(dtype))
    return _warp_tiled(atom.shape, atom, 1, 1, True, True, True)


def mma_b_fragment(dtype="float16") -> Fragment:
    """B operand of mma.sync (k x 8, the .col operand) over one warp; local = b_i."""
    atom = _b_atom(elements_per_register(dtype))
    return _warp_tiled(atom.shape, atom, 1, 1, True, True, True)


def mma_c_fragment() -> Fragment:
    """C/D accumulator of mma.sync m16n8 (16 x 8, f32/s32/f16) over one warp; local = c_i."""
    return _warp_tiled((16, 8), _c_atom(), 1, 1, True, True, True)


# ----------------------------------------------------------------------------
# ldmatrix / stmatrix (m8n8, 16-bit elements)

def ldmatrix_fragment(num: int = 4, trans: bool = False) -> Fragment:
    """What ldmatrix.x{num} delivers: over (matrix, row, col) of `num` 8x8 matrices as stored
    (row = the 16-byte row one thread addressed). Matrix m lands in destination register m,
    two elements per thread: without .trans thread 4*row + col // 2 gets (row, col) at local
    2*m + col % 2; with .trans thread 4*col + row // 2 gets it at local 2*m + row % 2."""
    if num not in (1, 2, 4):
        raise LayoutError(f"ldmatrix loads 1, 2 or 4 matrices, not {num}")
    if trans:
        def forward(m, r, c):
            return c * 4 + r // 2, m * 2 + r % 2

        def logical(t, l):
            return [l // 2, (t % 4) * 2 + l % 2, t // 4]
    else:
        def forward(m, r, c):
            return r * 4 + c // 2, m * 2 + c % 2

        def logical(t, l):
            return [l // 2, t // 4, (t % 4) * 2 + l % 2]
    return Fragment((num, 8, 8), forward, threads=WARP, logical_fn=logical)


def ldmatrix_row_providers(num: int = 4) -> Layout:
    """(matrix, row) -> the lane whose address names that 16-byte row: lanes 8m..8m+7 address
    matrix m; lanes from 8 * num on are ignored (.x1 uses lanes 0-7, .x2 lanes 0-15)."""
    if num not in (1, 2, 4):
        raise LayoutError(f"ldmatrix addresses 1, 2 or 4 matrices, not {num}")
    return Layout((num, 8), lambda m, r: [m * 8 + r], inverse_fn=lambda lane: [lane // 8, lane % 8])


def stmatrix_fragment(num: int = 4, trans: bool = False) -> Fragment:
    """stmatrix (sm_90) is ldmatrix's mirror: the same register fragment is what each thread
    supplies, and it is written to the rows named by the same lanes."""
    return ldmatrix_fragment(num, trans)


def stmatrix_row_providers(num: int = 4) -> Layout:
    return ldmatrix_row_providers(num)


# ----------------------------------------------------------------------------
# block-level fragments of T.gemm

def gemm_c_fragment(block_m: int, block_n: int, warps_m: int, warps_n: int) -> Fragment:
    """Accumulator of a block_m x block_n tile over warps_m x warps_n warps (thread = 32 * (wm +
    warps_m * wn) + lane). Each warp's sub-tile is (block_m/warps_m/16) x (block_n/warps_n/8)
    C atoms; local = (atom_m * atoms_n + atom_n) * 4 + c_i, c_i the mma register d0..d3."""
    return _warp_tiled((block_m, block_n), _c_atom(), warps_m, warps_n, True, True, True)


def gemm_a_fragment(block_m: int, block_k: int, warps_m: int, warps_n: int, dtype="float16",
                    transposed: bool = False) -> Fragment:
    """A held in registers (gemm with a fragment A): rows split over the M-warps, replicated
    over the N-warps (rep = wn). local = (atom_k * atoms_m + atom_m) * 4e + a_i. With
    `transposed` the buffer is stored (block_k, block_m)."""
    frag = _warp_tiled((block_m, block_k), _a_atom(elements_per_register(dtype)), warps_m,
                       warps_n, True, False, False)
    return frag.permute((1, 0)) if transposed else frag


def gemm_b_fragment(block_k: int, block_n: int, warps_m: int, warps_n: int, dtype="float16",
                    transposed: bool = False) -> Fragment:
    """B held in registers: columns split over the N-warps, replicated over the M-warps
    (rep = wm). local = (atom_k * atoms_n + atom_n) * 2e + b_i. With `transposed` the buffer
    is stored (block_n, block_k) (T.gemm's transpose_B)."""
    frag = _warp_tiled((block_k, block_n), _b_atom(elements_per_register(dtype)), warps_m,
                       warps_n, False, True, True)
    return frag.permute((1, 0)) if transposed else frag


def wgmma_c_fragment(block_m: int, block_n: int, groups_m: int, groups_n: int) -> Fragment:
    """Accumulator of a block_m x block_n tile computed by groups_m x groups_n warpgroups with
    wgmma.m64nNk16 (thread = 128 * (gm + groups_m * gn) + 32 * warp + lane). Warpgroup (gm, gn)
    owns rows [gm * Mg, (gm + 1) * Mg) and columns [gn * Ng, ...), issuing Mg / 64 instructions
    of N = Ng. In instruction i, warp w of the group holds rows i * 64 + 16 * w + (0..15) as
    mma.m16n8 C atoms along N (PTX's wgmma D fragment): local = i * Ng / 2 + 4 * (col / 8) +
    c_i. With Mg = 64 this is gemm_c_fragment over 4 * groups_m x groups_n warps."""
    if block_m % (64 * groups_m) or block_n % (8 * groups_n):
        raise LayoutError(f"a {block_m}x{block_n} tile does not split into {groups_m}x{groups_n} "
                          "warpgroups of m64nNk16 instructions")
    mg, ng = block_m // groups_m, block_n // groups_n
    insts, atoms_n = mg // 64, ng // 8
    per_inst = ng // 2
    threads = 128 * groups_m * groups_n
    slots = insts * per_inst
    atom = _c_atom()

    def forward(i, j):
        gm, gn = _digit(i, mg, groups_m, block_m), _digit(j, ng, groups_n, block_n)
        inst, warp = _digit(i, 64, insts, block_m), _digit(i, 16, 4, block_m)
        lane, idx = atom.fwd(i, j, block_m, block_n)
        local = inst * per_inst + _digit(j, 8, atoms_n, block_n) * 4 + idx
        return (gm + gn * groups_m) * 128 + warp * WARP + lane, local

    def logical(t, l):
        group = _digit(t, 128, groups_m * groups_n, threads)
        gm, gn = group % groups_m, group // groups_m
        warp, lane = _digit(t, WARP, 4, threads), _digit(t, 1, WARP, threads)
        inst, nb = _digit(l, per_inst, insts, slots), _digit(l, 4, atoms_n, slots)
        r, c = atom.inv(lane, _digit(l, 1, 4, slots))
        return [gm * mg + inst * 64 + warp * 16 + r, gn * ng + nb * 8 + c]
    return Fragment((block_m, block_n), forward, threads=threads, logical_fn=logical)


def split_warps(block_m: int, block_n: int, num_warps: int, policy: str = "square"):
    """(warps_m, warps_n) for a block's warps: "square" balances the per-warp sub-tile,
    "full_row" puts all warps on M, "full_col" all on N; every choice must divide the tile
    into whole 16x8 atoms."""
    candidates = [(m, num_warps // m) for m in range(1, num_warps + 1) if num_warps % m == 0
                  and block_m % (16 * m) == 0 and block_n % (8 * (num_warps // m)) == 0]
    if not candidates:
        raise LayoutError(f"{num_warps} warps cannot split a {block_m}x{block_n} tile into "
                          f"16x8 mma atoms")
    if policy == "full_row":
        return max(candidates)
    if policy == "full_col":
        return min(candidates)
    return min(candidates, key=lambda mn: (abs(block_m / mn[0] - block_n / mn[1]), -mn[0]))


__all__ = [
    "WARP", "elements_per_register", "mma_shape", "mma_a_fragment", "mma_b_fragment",
    "mma_c_fragment", "wgmma_c_fragment", "ldmatrix_fragment", "ldmatrix_row_providers", "stmatrix_fragment",
    "stmatrix_row_providers", "gemm_c_fragment", "gemm_a_fragment", "gemm_b_fragment",
    "split_warps"]
