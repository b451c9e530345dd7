"""Layouts: where each element of a tile lives, in shared memory or in threads' registers.

`Layout` maps a logical index to physical indices; `Fragment` maps it to (thread, local) for
tiles held in registers; `swizzle` holds the shared-memory layouts and `mma` the register
layouts the tensor-core instructions impose. Layout inference picks among these and lowering
applies them (see docs/design.md and layout/).
"""
from .layout import (Layout, LayoutError, identity_layout, linear_layout, flatten_index,
                     unflatten_index)
from .fragment import (Fragment, fully_replicated, grid_partition, make_partition,
                       reduce_fragment, slot_elements, vector_runs)
from .swizzle import (SWIZZLE_MODES, SharedLayout, bank_groups, ldmatrix_conflict_ways,
                      make_full_bank_swizzle, make_half_bank_swizzle, make_linear_layout,
                      make_padded_layout, make_quarter_bank_swizzle, make_swizzled_layout,
                      make_xor_swizzle, swizzle_mode_for, swizzled_layout)

# TileLang's names of the three XOR swizzles (rows, cols, element bits).
make_full_bank_swizzled_layout = make_full_bank_swizzle
make_half_bank_swizzled_layout = make_half_bank_swizzle
make_quarter_bank_swizzled_layout = make_quarter_bank_swizzle
from .mma import (WARP, elements_per_register, gemm_a_fragment, gemm_b_fragment,
                  gemm_c_fragment, wgmma_c_fragment, ldmatrix_fragment, ldmatrix_row_providers, mma_a_fragment,
                  mma_b_fragment, mma_c_fragment, mma_shape, split_warps, stmatrix_fragment,
                  stmatrix_row_providers)
from .plot import render_fragment

__all__ = [
    "Layout", "LayoutError", "identity_layout", "linear_layout", "flatten_index",
    "unflatten_index", "Fragment", "fully_replicated", "grid_partition", "make_partition", "reduce_fragment",
    "slot_elements", "vector_runs",
    "SWIZZLE_MODES", "SharedLayout", "bank_groups", "ldmatrix_conflict_ways",
    "make_full_bank_swizzle", "make_half_bank_swizzle", "make_linear_layout",
    "make_padded_layout", "make_quarter_bank_swizzle", "make_swizzled_layout",
    "make_full_bank_swizzled_layout", "make_half_bank_swizzled_layout",
    "make_quarter_bank_swizzled_layout",
    "make_xor_swizzle", "swizzle_mode_for", "swizzled_layout", "WARP", "elements_per_register", "gemm_a_fragment",
    "gemm_b_fragment", "gemm_c_fragment", "wgmma_c_fragment", "ldmatrix_fragment", "ldmatrix_row_providers",
    "mma_a_fragment", "mma_b_fragment", "mma_c_fragment", "mma_shape", "split_warps",
    "stmatrix_fragment", "stmatrix_row_providers", "render_fragment",
]
