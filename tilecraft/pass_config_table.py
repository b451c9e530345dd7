"""What each pass config key does here: every key TileLang documents, and tilecraft's own.

HONOURED keys do what their name says (the text says how); DEFAULT_ONLY keys name passes or
switches tilecraft does not have: they are accepted at TileLang's default value (leaving them
out means the same) and any other value is refused with the reason, never ignored.
"""
from __future__ import annotations

import shlex


def boolean(value) -> str | None:
    ok = value is None or isinstance(value, bool) or value in (0, 1)   # None: unset
    return None if ok else "takes True or False"


def persistent(value) -> str | None:
    ok = value is None or isinstance(value, bool) or isinstance(value, int) and value >= 1
    return None if ok else "takes True, False or a number of blocks >= 1"


def compiler_flags(value) -> str | None:
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(f, str) for f in value):
        return None
    return "takes a string of flags or a list of strings"


def split_flags(value) -> list:
    """Compiler flags given as one string (split as a shell would) or a list."""
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else list(value)


def register_level(value) -> str | None:
    ok = value is None or isinstance(value, int) and not isinstance(value, bool) and \
        0 <= value <= 10
    return None if ok else "takes an int in [0, 10] (ptxas --register-usage-level)"


def visual_formats(value) -> str | None:
    """tl.layout_visualization_formats: "", "all", or comma-separated txt / png / pdf / svg."""
    if value is None or value == "":
        return None
    names = [f.strip().lower() for f in value.split(",")] if isinstance(value, str) else None
    ok = names is not None and (names == ["all"] or
                                all(n in ("txt", "png", "pdf", "svg") for n in names))
    return None if ok else 'takes "", "all" or formats among txt, png, pdf, svg (e.g. "svg,txt")'


def directory(value) -> str | None:
    return None if value is None or isinstance(value, str) else "takes a directory path"


# key -> (TileLang's default, check of a value, what tilecraft does with it). Most keys matter
# on sm_90a, the only target with TMA, WGMMA and warp specialization.
HONOURED = {
    "tl.enable_fast_math": (False, boolean, "compile with --use_fast_math"),
    "tl.disable_fast_math": (None, boolean, "TileLang's older spelling: True compiles without "
                             "--use_fast_math (the default), False with it"),
    "tl.device_compile_flags": (None, compiler_flags, "flags added to nvcc's command line (a "
                                "string, split as a shell would, or a list)"),
    "tl.ptxas_register_usage_level": (None, register_level, "ptxas --register-usage-level"),
    "tl.enable_ptxas_verbose_output": (False, boolean, "print ptxas's report (registers, "
                                       "shared memory, spills per kernel) when the kernel "
                                       "is made"),
    "tl.disable_thread_storage_sync": (False, boolean, "no block barriers are added where "
                                       "threads share shared memory (insert_barriers): the "
                                       "program's own T.sync_threads are the only ones"),
    "tl.disable_shared_memory_reuse": (False, boolean, "every shared tile gets bytes of its "
                                       "own; by default tiles whose live ranges do not meet "
                                       "share bytes (plan_shared_memory)"),
    "tl.enable_aggressive_shared_memory_merge": (False, boolean, "tiles whose live ranges do "
                                                 "not meet share bytes: always so here"),
    "tl.disable_vectorize_256": (False, boolean, "no 256-bit loads or stores: the targets "
                                 "(sm_80 to sm_90a) have none, so never any"),
    "tl.enable_fp32x2_reduction": (True, boolean, "packed float32 pairs in reductions exist "
                                   "from sm_100 on: never used on the targets here"),
    "tl.enable_dump_ir": (False, boolean, "write the IR after every compiler pass and the "
                          "generated CUDA into tl.dump_ir_path (as TILECRAFT_DUMP_IR does)"),
    "tl.dump_ir_path": ("./dump_ir/", directory, "where tl.enable_dump_ir writes"),
    "tl.layout_visualization_enable": (False, boolean, "print the layout inference chose for "
                                       "each fragment when the kernel is compiled for a GPU "
                                       "target (passes/show_layouts.py)"),
    "tl.layout_visualization_formats": ("", visual_formats, "also draw each to ./tmp in these "
                                        "formats (tilecraft.tools.plot_layout; images need "
                                        "matplotlib)"),
    "cuda.kernels_output_dir": ("", directory, "write each compiled program's CUDA source "
                                "there (<kernel name>.cu)"),
    "tl.disable_warp_specialized": (False, boolean, "pipelined loops on cp.async, no "
                                    "producer warpgroup"),
    "tl.disable_tma_lower": (False, boolean, "no TMA copies (so no warp specialization)"),
    "tl.disable_wgmma": (False, boolean, "gemms on mma.sync, not wgmma (sm_90a)"),
    "tl.exact_float32_gemm": (False, boolean, "a T.gemm of float32 operands multiplies in "
                              "float32 with scalar FMAs on the CUDA cores, instead of on the "
                              "TF32 tensor cores as TileLang's does"),
    "tl.enable_tma_multicast": (False, boolean, "warp-specialized blocks that load the same "
                                "tiles run as clusters of two sharing them by TMA multicast"),
    "tl.disable_wgmma_rotation": (False, boolean, "attention-like consumer loops keep each "
                                  "wgmma batch's softmax between its waits instead of "
                                  "overlapping it with the next batch (rotate_wgmma_loop)"),
    "tl.disable_operand_ahead": (False, boolean, "a consumer loop that computes a gemm's "
                                 "shared operand (a dequantized weight tile) computes it in "
                                 "the same iteration as the gemm instead of one ahead, "
                                 "overlapped with the previous batch (operand_ahead)"),
    "tl.disable_shared_load_batching": (False, boolean, "an unrolled loop that writes a "
                                        "shared tile from other shared tiles keeps each "
                                        "step's loads next to its store instead of issuing "
                                        "them all first (batch_shared_loads)"),
    "tl.disable_uniform_masks": (False, boolean, "element-wise selects are evaluated per "
                                 "element even where a whole tile agrees "
                                 "(tileops/uniform_select)"),
    "tl.disable_epilogue_staging": (False, boolean, "gemm accumulators are stored to global "
                                    "memory from registers, not through a shared tile "
                                    "(stage_epilogue)"),
    "tl.enable_producer_preload": (None, boolean, "the producer warpgroup loads the tiles "
                                   "copied in front of a warp-specialized loop (a query "
                                   "tile) by TMA, instead of the consumers; unset: on for "
                                   "loops with two or more gemms whose grid is one wave"),
    "tl.disable_tma_store": (False, boolean, "shared -> global copies are stored by all "
                             "threads, 16 bytes each, not by TMA"),
    "tl.disable_wgmma_batch_merge": (False, boolean, "back-to-back gemms into one accumulator "
                                     "each wait for their own batch (merge_wgmma_batches)"),
    "tl.disable_mma_rotation": (False, boolean, "a cp.async gemm loop loads each k step's "
                                "fragments in that step, after the barrier, not one step "
                                "ahead (rotate_mma_loop)"),
    "tl.disable_warpgroup_pingpong": (False, boolean, "the consumer warpgroups of a rotated "
                                      "attention loop issue their wgmma batches whenever "
                                      "ready instead of taking turns (pingpong_warpgroups)"),
    "tl.disable_k_alternation": (False, boolean, "every block of a warp-specialized GEMM "
                                 "loop walks K upwards; by default blocks of odd waves walk "
                                 "it downwards, starting on tiles still in L2 "
                                 "(alternate_k_direction)"),
    "tl.disable_auto_rasterization": (False, boolean, "a kernel without T.use_swizzle runs "
                                      "its blocks in launch order; by default it gets the "
                                      "panel the L2 model prefers where that saves HBM "
                                      "traffic (choose_rasterization)"),
    "tl.disable_seesaw_warpgroups": (False, boolean, "a decode loop whose two consumer "
                                     "warpgroups share each 64-row score tile keeps it so, "
                                     "instead of each taking whole blocks in turn "
                                     "(seesaw_warpgroups)"),
    "tl.disable_l2_prefetch": (False, boolean, "the producer of a warp-specialized loop does "
                               "not prefetch into L2 the next iteration's tiles that at most "
                               "two blocks read (tileops/prefetch.py)"),
    "tl.enable_persistent_tiles": (None, persistent, "a warp-specialized kernel launches one "
                                   "block per SM (or at most the int given), each looping "
                                   "over the grid's tiles while its producer loads the next "
                                   "tile's data; unset: on for loops with two or more gemms "
                                   "(attention) whose grid spans more than one wave, False "
                                   "turns it off"),
}

_NO_TVM = "tilecraft has no TVM lowering passes"
_NO_CHECK_SWITCH = "tilecraft's checks of a program cannot be turned off"

# key -> (the values that mean TileLang's default, why no other value can be honoured)
DEFAULT_ONLY = {
    "tl.Simplify": ((True, None, {}), "tilecraft's simplifier has no options"),
    "tl.dynamic_alignment": ((16, None), "tilecraft assumes no alignment of symbolic sizes: "
                             "it checks them where a vector access needs it"),
    "tl.disable_dynamic_tail_split": ((False, None), "tilecraft does not split loops over "
                                      "symbolic sizes into a body and a tail"),
    "tl.disable_data_race_check": ((True, None), "tilecraft has no compile-time race check; "
                                   "target='emulator' checks every run for races"),
    "tl.disable_buffer_init_check": ((False, None), _NO_CHECK_SWITCH),
    "tl.disable_prelower_semantic_check": ((False, None), _NO_CHECK_SWITCH),
    "tl.disable_out_of_bound_warning": ((True, None), "out-of-bounds accesses tilecraft can "
                                        "prove are errors; the others are checked by the "
                                        "interpreter and the emulator"),
    "tl.enable_auto_schedule": ((True, None), "Ascend scheduling: tilecraft has no Ascend "
                                "target"),
    "tl.enable_auto_warp_specialization": ((None, ""), "tilecraft specializes warps itself on "
                                           "sm_90a (tl.disable_warp_specialized turns it off)"),
    "tl.emit_line_directives": ((False, None), "the generated CUDA carries `// file.py:line` "
                                "comments, not #line directives"),
    "tl.config_index_bitwidth": ((32, None), "tilecraft indexes with 64-bit offsets exactly "
                                 "where a tensor has 2^31 elements or more"),
    "tl.enable_reducer_plan_verbose": ((False, None), "tilecraft has no reducer planner"),
    "tl.layout_cost_model": ((None, "register-count"), "tilecraft ranks free layouts with its "
                             "own cost (passes/free_layout_cost.py)"),
    "tl.reducer_force_baseline": ((False, None), "tilecraft has no reducer planner"),
    "tl.disable_safe_memory_legalize": ((False, None), "tilecraft keeps the bounds checks of "
                                        "accesses it cannot prove in range"),
    "tl.enable_async_copy": ((True, None), "pipelined copies into shared memory are always "
                             "asynchronous (cp.async or TMA)"),
    "tl.enable_lower_ldgstg": ((False, None), "tilecraft emits its own loads and stores"),
    "tl.enable_lower_ldgstg_predicated": ((False, None), "tilecraft emits its own loads and "
                                          "stores"),
    "tl.enable_vectorize_planner_verbose": ((False, None), "tilecraft has no vectorize "
                                            "planner to report on"),
    "tl.debug_merge_shared_memory_allocations": ((False, None), "tilecraft's shared-memory "
                                                 "plan prints nothing"),
    "tl.disable_shuffle_elect": ((False, None), "tilecraft chooses its electing threads "
                                 "itself"),
    "tl.disable_loop_unswitching": ((False, None), _NO_TVM),
    "tl.loop_unswitching_allow_non_trivial_else": ((False, None), _NO_TVM),
    "tl.if_stmt_binding_inline_replayable_binds": ((True, None), _NO_TVM),
    "tl.force_let_inline": ((False, None), _NO_TVM),
    "tl.ast_print_enable": ((False, None), "print kernel.func.script() for the tile IR"),
    "tl.storage_rewrite_detect_inplace": ((False, None), _NO_TVM),
    "tl.pass_profile": ((False, None), "tilecraft does not time its passes"),
    "tl.pass_profile_threshold_ms": ((0, None), "tilecraft does not time its passes"),
    "tir.enable_equiv_terms_in_cse_tir": ((True, None), _NO_TVM),
    "tirx.disable_cse_tir": ((False, None), _NO_TVM),
    "tirx.Simplify": ((True, None, {}), _NO_TVM),
    "tirx.disable_storage_rewrite": ((False, None), _NO_TVM),
    "tirx.disable_vectorize": ((False, None), "tilecraft vectorizes every access it can"),
    "tirx.use_async_copy": ((True, None), "pipelined copies into shared memory are always "
                            "asynchronous (cp.async or TMA)"),
    "tirx.enable_debug": ((False, None), _NO_TVM),
    "tirx.merge_static_smem": ((True, None), "tilecraft places every shared tile in one "
                               "dynamic arena"),
    "tirx.add_lower_pass": ((None, [], ()), "tilecraft's pipelines take no added passes"),
    "tirx.noalias": ((True, None), "tilecraft's pointers are never aliased"),
}

# Older TVM spells its keys "tir.*" where newer spells them "tirx.*".
ALIASES = {"tir." + k[len("tirx."):]: k for k in DEFAULT_ONLY if k.startswith("tirx.")}

# The sub-options of tl.Simplify, which PassConfigKey also names.
SIMPLIFY_OPTIONS = ("transitively_prove_inequalities", "convert_boolean_to_and_of_ors",
                    "apply_constraints_to_boolean_branches",
                    "propagate_knowns_to_prove_conditional",
                    "propagate_knowns_to_simplify_expressions", "enable_simplify_let_inline")
