"""Pass configuration keys, under TileLang's names, for `pass_configs=` of jit and compile.

Every key TileLang documents exists (pass_config_table.py says what each does here): a key
tilecraft honours does what it says, a key naming a pass tilecraft does not have is accepted
only at its default value, and an unknown key is an error.
"""
from __future__ import annotations

from .errors import TileError
from .pass_config_table import ALIASES, DEFAULT_ONLY, HONOURED, SIMPLIFY_OPTIONS, split_flags


class _Key(str):
    """A key: the string TileLang passes, with an Enum member's `.name` and `.value`."""

    __slots__ = ("name",)

    def __new__(cls, name: str, value: str):
        key = super().__new__(cls, value)
        key.name = name
        return key

    @property
    def value(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"<PassConfigKey.{self.name}: {self.value!r}>"


class _Keys(type):
    """Iterating over PassConfigKey gives its keys, as over TileLang's Enum."""

    def __iter__(cls):
        return iter(cls._members)

    def __len__(cls):
        return len(cls._members)

    def __getitem__(cls, name: str):
        return getattr(cls, name)


_NAMES = {
    # tilecraft's own
    "TL_DISABLE_WGMMA_ROTATION": "tl.disable_wgmma_rotation",
    "TL_DISABLE_OPERAND_AHEAD": "tl.disable_operand_ahead",
    "TL_DISABLE_SHARED_LOAD_BATCHING": "tl.disable_shared_load_batching",
    "TL_DISABLE_UNIFORM_MASKS": "tl.disable_uniform_masks",
    "TL_DISABLE_EPILOGUE_STAGING": "tl.disable_epilogue_staging",
    "TL_ENABLE_PERSISTENT_TILES": "tl.enable_persistent_tiles",
    "TL_ENABLE_PRODUCER_PRELOAD": "tl.enable_producer_preload",
    "TL_DISABLE_TMA_STORE": "tl.disable_tma_store",
    "TL_DISABLE_WGMMA_BATCH_MERGE": "tl.disable_wgmma_batch_merge",
    "TL_DISABLE_MMA_ROTATION": "tl.disable_mma_rotation",
    "TL_DISABLE_WARPGROUP_PINGPONG": "tl.disable_warpgroup_pingpong",
    "TL_DISABLE_K_ALTERNATION": "tl.disable_k_alternation",
    "TL_DISABLE_AUTO_RASTERIZATION": "tl.disable_auto_rasterization",
    "TL_DISABLE_SEESAW_WARPGROUPS": "tl.disable_seesaw_warpgroups",
    "TL_DISABLE_L2_PREFETCH": "tl.disable_l2_prefetch",
    "TL_ENABLE_TMA_MULTICAST": "tl.enable_tma_multicast",
    "TL_EXACT_FLOAT32_GEMM": "tl.exact_float32_gemm",
    # TileLang's
    "TL_SIMPLIFY": "tl.Simplify",
    "TL_DYNAMIC_ALIGNMENT": "tl.dynamic_alignment",
    "TL_DISABLE_DYNAMIC_TAIL_SPLIT": "tl.disable_dynamic_tail_split",
    "TL_DISABLE_BUFFER_INIT_CHECK": "tl.disable_buffer_init_check",
    "TL_DISABLE_DATA_RACE_CHECK": "tl.disable_data_race_check",
    "TL_DISABLE_PRELOWER_SEMANTIC_CHECK": "tl.disable_prelower_semantic_check",
    "TL_DISABLE_WARP_SPECIALIZED": "tl.disable_warp_specialized",
    "TL_ENABLE_AUTO_SCHEDULE": "tl.enable_auto_schedule",
    "TL_ENABLE_AUTO_WARP_SPECIALIZATION": "tl.enable_auto_warp_specialization",
    "TL_ENABLE_FAST_MATH": "tl.enable_fast_math",
    "TL_DISABLE_FAST_MATH": "tl.disable_fast_math",
    "TL_PTXAS_REGISTER_USAGE_LEVEL": "tl.ptxas_register_usage_level",
    "TL_ENABLE_PTXAS_VERBOSE_OUTPUT": "tl.enable_ptxas_verbose_output",
    "TL_DEVICE_COMPILE_FLAGS": "tl.device_compile_flags",
    "TL_EMIT_LINE_DIRECTIVES": "tl.emit_line_directives",
    "TL_CONFIG_INDEX_BITWIDTH": "tl.config_index_bitwidth",
    "TL_ENABLE_REDUCER_PLAN_VERBOSE": "tl.enable_reducer_plan_verbose",
    "TL_LAYOUT_COST_MODEL": "tl.layout_cost_model",
    "TL_REDUCER_FORCE_BASELINE": "tl.reducer_force_baseline",
    "TL_DISABLE_TMA_LOWER": "tl.disable_tma_lower",
    "TL_DISABLE_SAFE_MEMORY_ACCESS": "tl.disable_safe_memory_legalize",
    "TL_DISABLE_VECTORIZE_256": "tl.disable_vectorize_256",
    "TL_ENABLE_FP32X2_REDUCTION": "tl.enable_fp32x2_reduction",
    "TL_ENABLE_ASYNC_COPY": "tl.enable_async_copy",
    "TL_ENABLE_LOWER_LDGSTG": "tl.enable_lower_ldgstg",
    "TL_ENABLE_LOWER_LDGSTG_PREDICATED": "tl.enable_lower_ldgstg_predicated",
    "TL_ENABLE_VECTORIZE_PLANNER_VERBOSE": "tl.enable_vectorize_planner_verbose",
    "TL_DISABLE_WGMMA": "tl.disable_wgmma",
    "TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS": "tl.debug_merge_shared_memory_allocations",
    "TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE": "tl.enable_aggressive_shared_memory_merge",
    "TL_DISABLE_SHARED_MEMORY_REUSE": "tl.disable_shared_memory_reuse",
    "TL_DISABLE_SHUFFLE_ELECT": "tl.disable_shuffle_elect",
    "TL_DISABLE_LOOP_UNSWITCHING": "tl.disable_loop_unswitching",
    "TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE": "tl.loop_unswitching_allow_non_trivial_else",
    "TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS": "tl.if_stmt_binding_inline_replayable_binds",
    "TL_DISABLE_THREAD_STORAGE_SYNC": "tl.disable_thread_storage_sync",
    "TL_FORCE_LET_INLINE": "tl.force_let_inline",
    "TL_AST_PRINT_ENABLE": "tl.ast_print_enable",
    "TL_LAYOUT_VISUALIZATION_ENABLE": "tl.layout_visualization_enable",
    "TL_LAYOUT_VISUALIZATION_FORMATS": "tl.layout_visualization_formats",
    "TL_STORAGE_REWRITE_DETECT_INPLACE": "tl.storage_rewrite_detect_inplace",
    "TIR_ENABLE_EQUIV_TERMS_IN_CSE": "tir.enable_equiv_terms_in_cse_tir",
    "TIR_DISABLE_CSE": "tirx.disable_cse_tir",
    "TIR_SIMPLIFY": "tirx.Simplify",
    "TIR_DISABLE_STORAGE_REWRITE": "tirx.disable_storage_rewrite",
    "TIR_DISABLE_VECTORIZE": "tirx.disable_vectorize",
    "TIR_USE_ASYNC_COPY": "tirx.use_async_copy",
    "TIR_ENABLE_DEBUG": "tirx.enable_debug",
    "TIR_MERGE_STATIC_SMEM": "tirx.merge_static_smem",
    "TIR_ADD_LOWER_PASS": "tirx.add_lower_pass",
    "TIR_NOALIAS": "tirx.noalias",
    "CUDA_KERNELS_OUTPUT_DIR": "cuda.kernels_output_dir",
    "TL_DISABLE_OUT_OF_BOUND_WARNING": "tl.disable_out_of_bound_warning",
    "TL_ENABLE_DUMP_IR": "tl.enable_dump_ir",
    "TL_DUMP_IR_DIR": "tl.dump_ir_path",
    "TL_PASS_PROFILE": "tl.pass_profile",
    "TL_PASS_PROFILE_THRESHOLD_MS": "tl.pass_profile_threshold_ms",
    # the options inside TL_SIMPLIFY's dict
    "TL_SIMPLIFY_TRANSITIVELY_PROVE_INEQUALITIES": SIMPLIFY_OPTIONS[0],
    "TL_SIMPLIFY_CONVERT_BOOLEAN_TO_AND_OF_ORS": SIMPLIFY_OPTIONS[1],
    "TL_SIMPLIFY_APPLY_CONSTRAINTS_TO_BOOLEAN_BRANCHES": SIMPLIFY_OPTIONS[2],
    "TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_PROVE_CONDITIONAL": SIMPLIFY_OPTIONS[3],
    "TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_SIMPLIFY_EXPRESSIONS": SIMPLIFY_OPTIONS[4],
    "TL_SIMPLIFY_ENABLE_LET_INLINE": SIMPLIFY_OPTIONS[5],
}


class PassConfigKey(metaclass=_Keys):
    """The keys of `pass_configs=`, as TileLang names them (see pass_config_table.py)."""
    _members = tuple(_Key(n, v) for n, v in _NAMES.items())
    locals().update({k.name: k for k in _members})


_BY_NAME = {k.value: k for k in PassConfigKey}

# What each key tilecraft honours does here.
KNOWN = {key: meaning for key, (_, _, meaning) in HONOURED.items()}


def _label(key: str) -> str:
    key = str.__str__(key)
    known = _BY_NAME.get(key)
    return f"PassConfigKey.{known.name} ({key!r})" if known is not None else repr(key)


def _refuse(key: str, message: str):
    raise TileError(f"pass config {_label(key)} {message}")


def check_pass_configs(configs) -> dict:
    """configs as a dict of plain string keys (TileLang's older "tir.*" spellings resolved,
    keys given None left out);
    a TileError for an unknown key, a value a key does not take, a value of a key tilecraft
    cannot honour other than its default, or keys that contradict each other."""
    if configs is not None and not isinstance(configs, dict):
        raise TileError(f"pass_configs must be a dict {{PassConfigKey: value}}, got "
                        f"{type(configs).__name__}")
    out = {}
    for key, value in (configs or {}).items():
        key = str.__str__(key) if isinstance(key, str) else key
        key = ALIASES.get(key, key)
        if key in HONOURED:
            problem = HONOURED[key][1](value)
            if problem:
                _refuse(key, f"{problem}, got {value!r}")
        elif key in DEFAULT_ONLY:
            defaults, why = DEFAULT_ONLY[key]
            if value not in defaults:
                _refuse(key, f"= {value!r} is not supported: {why}; leave it out (TileLang's "
                             f"default is {defaults[0]!r})")
        elif key in SIMPLIFY_OPTIONS:
            _refuse(key, "is an option inside the dict of PassConfigKey.TL_SIMPLIFY, not a key")
        else:
            raise TileError(f"unknown pass config {key!r}; the keys are PassConfigKey's "
                            "(pass_config_table.py lists what each does)")
        if value is not None:  # None leaves a key unset, as leaving it out does
            out[key] = value
    _check_combinations(out)
    return out


def _check_combinations(configs: dict):
    enable = configs.get(PassConfigKey.TL_ENABLE_FAST_MATH)
    disable = configs.get(PassConfigKey.TL_DISABLE_FAST_MATH)
    if enable is not None and disable is not None and bool(enable) == bool(disable):
        raise TileError(f"pass configs {_label(PassConfigKey.TL_ENABLE_FAST_MATH)} = {enable!r} "
                        f"and {_label(PassConfigKey.TL_DISABLE_FAST_MATH)} = {disable!r} "
                        "contradict each other; give one of them")
    if configs.get(PassConfigKey.TL_DISABLE_SHARED_MEMORY_REUSE) and \
            configs.get(PassConfigKey.TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE):
        raise TileError("pass configs TL_DISABLE_SHARED_MEMORY_REUSE and "
                        "TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE contradict each other: one "
                        "turns the sharing of shared-memory bytes off, the other asks for it")
    blocks = configs.get(PassConfigKey.TL_ENABLE_PERSISTENT_TILES)
    if blocks not in (None, False) and configs.get(PassConfigKey.TL_ENABLE_PRODUCER_PRELOAD):
        raise TileError(f"pass configs {_label(PassConfigKey.TL_ENABLE_PERSISTENT_TILES)} and "
                        f"{_label(PassConfigKey.TL_ENABLE_PRODUCER_PRELOAD)} cannot be combined: "
                        "a persistent kernel's consumers load their own query tiles")


def fast_math(configs) -> bool:
    """Whether nvcc compiles with --use_fast_math."""
    configs = configs or {}
    if configs.get(PassConfigKey.TL_ENABLE_FAST_MATH) is not None:
        return bool(configs[PassConfigKey.TL_ENABLE_FAST_MATH])
    disable = configs.get(PassConfigKey.TL_DISABLE_FAST_MATH)
    return disable is not None and not disable


def device_compile_flags(configs) -> list:
    """The nvcc flags the configs ask for besides fast math: tl.ptxas_register_usage_level,
    then tl.device_compile_flags."""
    configs = configs or {}
    flags = []
    level = configs.get(PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL)
    if level is not None:
        flags += ["-Xptxas", f"--register-usage-level={level}"]
    return flags + split_flags(configs.get(PassConfigKey.TL_DEVICE_COMPILE_FLAGS))


def dump_dir(configs) -> str | None:
    """Where the IR after every pass is written: tl.dump_ir_path when tl.enable_dump_ir is
    set, else TILECRAFT_DUMP_IR (None: nowhere)."""
    from . import knobs
    configs = configs or {}
    if configs.get(PassConfigKey.TL_ENABLE_DUMP_IR):
        return configs.get(PassConfigKey.TL_DUMP_IR_DIR) or \
            HONOURED[PassConfigKey.TL_DUMP_IR_DIR][0]
    return knobs.dump_ir_dir()


def persistent_blocks(configs) -> int | None:
    """None: no persistent tile loop; 0: one block per SM of the device it runs on; n: at most
    n blocks."""
    value = (configs or {}).get(PassConfigKey.TL_ENABLE_PERSISTENT_TILES)
    if value is None or value is False:
        return None
    return 0 if value is True else int(value)


# What tilecraft's nvcc command sets for a target (the GPU and what is produced): a compile
# flag that set them too would build something the runtime does not load.
_TARGET_FLAGS = ("-arch", "--gpu-architecture", "-gencode", "--generate-code", "-code",
                 "--gpu-code", "-o", "--output-file", "-cubin", "--cubin", "-ptx", "--ptx",
                 "-fatbin", "--fatbin", "-c", "--compile", "-E", "--preprocess", "-lib", "--lib")


def check_compile_flags(flags) -> tuple:
    """compile_flags (jit, compile, T.annotate_compile_flags) as a tuple of nvcc arguments: a
    string or a list of strings, each split at spaces as a shell would."""
    import shlex
    if flags is None:
        return ()
    items = [flags] if isinstance(flags, str) else flags
    if not isinstance(items, (list, tuple)) or not all(isinstance(f, str) for f in items):
        raise TileError(f"compile_flags takes a string of flags or a list of strings, got "
                        f"{flags!r}")
    out = []
    for item in items:
        for flag in shlex.split(item):
            if flag.split("=", 1)[0] in _TARGET_FLAGS:
                raise TileError(f"compile_flags: {flag} sets what tilecraft's nvcc command sets "
                                "for the target (the GPU and the output kind); choose the GPU "
                                "with target=")
            out.append(flag)
    return tuple(out)
