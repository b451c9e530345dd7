"""PassConfigKey has every key TileLang documents; a key tilecraft honours does what it says,
one naming a pass it does not have is accepted at TileLang's default and refused, by name and
with the reason, at any other value; jit / compile options (execution_backend, target_host,
verbose, compile_flags, debug_root_path) are honoured or refused the same way."""
import os

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.errors import TileError
from tilecraft.pass_config import PassConfigKey, check_pass_configs, device_compile_flags, \
    fast_math
from tilecraft.pass_config_table import DEFAULT_ONLY, HONOURED, SIMPLIFY_OPTIONS

# The names TileLang's PassConfigKey has had (the current list and the December 2025 one).
TILELANG_KEYS = """TL_SIMPLIFY TL_DYNAMIC_ALIGNMENT TL_DISABLE_DYNAMIC_TAIL_SPLIT
TL_DISABLE_BUFFER_INIT_CHECK TL_DISABLE_DATA_RACE_CHECK TL_DISABLE_PRELOWER_SEMANTIC_CHECK
TL_DISABLE_WARP_SPECIALIZED TL_ENABLE_AUTO_SCHEDULE TL_ENABLE_AUTO_WARP_SPECIALIZATION
TL_ENABLE_FAST_MATH TL_DISABLE_FAST_MATH TL_PTXAS_REGISTER_USAGE_LEVEL
TL_ENABLE_PTXAS_VERBOSE_OUTPUT TL_DEVICE_COMPILE_FLAGS TL_EMIT_LINE_DIRECTIVES
TL_CONFIG_INDEX_BITWIDTH TL_ENABLE_REDUCER_PLAN_VERBOSE TL_LAYOUT_COST_MODEL
TL_REDUCER_FORCE_BASELINE TL_DISABLE_TMA_LOWER TL_DISABLE_SAFE_MEMORY_ACCESS
TL_DISABLE_VECTORIZE_256 TL_ENABLE_FP32X2_REDUCTION TL_ENABLE_ASYNC_COPY TL_ENABLE_LOWER_LDGSTG
TL_ENABLE_LOWER_LDGSTG_PREDICATED TL_ENABLE_VECTORIZE_PLANNER_VERBOSE TL_DISABLE_WGMMA
TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE
TL_DISABLE_SHARED_MEMORY_REUSE TL_DISABLE_SHUFFLE_ELECT TL_DISABLE_LOOP_UNSWITCHING
TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS
TL_DISABLE_THREAD_STORAGE_SYNC TL_FORCE_LET_INLINE TL_AST_PRINT_ENABLE
TL_LAYOUT_VISUALIZATION_ENABLE TL_LAYOUT_VISUALIZATION_FORMATS TL_STORAGE_REWRITE_DETECT_INPLACE
TIR_ENABLE_EQUIV_TERMS_IN_CSE TIR_DISABLE_CSE TIR_SIMPLIFY TIR_DISABLE_STORAGE_REWRITE
TIR_DISABLE_VECTORIZE TIR_USE_ASYNC_COPY TIR_ENABLE_DEBUG TIR_MERGE_STATIC_SMEM
TIR_ADD_LOWER_PASS TIR_NOALIAS CUDA_KERNELS_OUTPUT_DIR TL_DISABLE_OUT_OF_BOUND_WARNING
TL_ENABLE_DUMP_IR TL_DUMP_IR_DIR TL_PASS_PROFILE TL_PASS_PROFILE_THRESHOLD_MS
TL_SIMPLIFY_TRANSITIVELY_PROVE_INEQUALITIES TL_SIMPLIFY_ENABLE_LET_INLINE""".split()


def test_every_tilelang_key_exists_and_is_its_string():
    for name in TILELANG_KEYS:
        key = getattr(PassConfigKey, name)
        assert isinstance(key, str) and key.name == name and key.value == str.__str__(key)
    assert PassConfigKey.TL_ENABLE_FAST_MATH == "tl.enable_fast_math"
    assert PassConfigKey.TL_DISABLE_SAFE_MEMORY_ACCESS == "tl.disable_safe_memory_legalize"
    assert PassConfigKey["TL_DISABLE_TMA_LOWER"] is PassConfigKey.TL_DISABLE_TMA_LOWER
    assert {PassConfigKey.TL_DISABLE_WGMMA: 1}["tl.disable_wgmma"] == 1
    # every key is classified: honoured, default-only, or an option inside TL_SIMPLIFY
    for key in PassConfigKey:
        assert key.value in HONOURED or key.value in DEFAULT_ONLY or key.value in \
            SIMPLIFY_OPTIONS, key.name


def _other_than(defaults):
    first = defaults[0]
    if isinstance(first, bool):
        return not first
    if isinstance(first, int):
        return first + 8
    return "something else" if first not in (None, "") else "x"


@pytest.mark.parametrize("key", sorted(DEFAULT_ONLY))
def test_keys_without_a_pass_take_only_their_default(key):
    defaults, why = DEFAULT_ONLY[key]
    assert check_pass_configs({key: defaults[0]}) == \
        ({} if defaults[0] is None else {key: defaults[0]})
    value = _other_than(defaults)
    with pytest.raises(TileError) as info:
        check_pass_configs({key: value})
    assert f"({key!r}) = {value!r} is not supported: {why}" in info.value.message
    assert "leave it out" in info.value.message


@pytest.mark.parametrize("configs,message", [
    ({"tl.no_such_key": True}, "unknown pass config 'tl.no_such_key'"),
    ({PassConfigKey.TL_SIMPLIFY_ENABLE_LET_INLINE: True},
     "is an option inside the dict of PassConfigKey.TL_SIMPLIFY"),
    ({PassConfigKey.TL_ENABLE_FAST_MATH: "yes"}, "TL_ENABLE_FAST_MATH ('tl.enable_fast_math') "
                                                "takes True or False"),
    ({PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL: 11}, "takes an int in [0, 10]"),
    ({PassConfigKey.TL_DEVICE_COMPILE_FLAGS: ["-O3", 3]}, "takes a string of flags or a list"),
    ({PassConfigKey.TL_ENABLE_PERSISTENT_TILES: 0}, "a number of blocks >= 1"),
    ({PassConfigKey.TL_ENABLE_FAST_MATH: True, PassConfigKey.TL_DISABLE_FAST_MATH: True},
     "contradict each other"),
    ({PassConfigKey.TL_DISABLE_SHARED_MEMORY_REUSE: True,
      PassConfigKey.TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE: True}, "contradict each other"),
    ([("tl.enable_fast_math", True)], "pass_configs must be a dict"),
])
def test_values_a_key_does_not_take_are_refused(configs, message):
    with pytest.raises(TileError) as info:
        check_pass_configs(configs)
    assert message in info.value.message


def test_none_leaves_a_key_unset():
    K = PassConfigKey
    assert check_pass_configs({K.TL_ENABLE_PRODUCER_PRELOAD: None, K.TL_DISABLE_FAST_MATH: None,
                               K.TL_PTXAS_REGISTER_USAGE_LEVEL: None,
                               K.TL_DISABLE_WGMMA: True}) == {"tl.disable_wgmma": True}


def test_older_tvm_spellings_resolve():
    assert check_pass_configs({"tir.disable_vectorize": False}) == {"tirx.disable_vectorize": False}
    with pytest.raises(TileError, match="TIR_DISABLE_VECTORIZE"):
        check_pass_configs({"tir.disable_vectorize": True})


def test_fast_math_from_either_spelling():
    K = PassConfigKey
    assert not fast_math({}) and fast_math({K.TL_ENABLE_FAST_MATH.value: True})
    assert not fast_math({K.TL_DISABLE_FAST_MATH.value: True})
    assert fast_math({K.TL_DISABLE_FAST_MATH.value: False})   # the older default: fast
    assert not fast_math({K.TL_ENABLE_FAST_MATH.value: False,
                          K.TL_DISABLE_FAST_MATH.value: True})


def test_compiler_flags_from_configs_and_compile_flags():
    K = PassConfigKey
    configs = {K.TL_PTXAS_REGISTER_USAGE_LEVEL.value: 7,
               K.TL_DEVICE_COMPILE_FLAGS.value: "-DA=1 --ptxas-options='-v -O3'"}
    assert device_compile_flags(configs) == ["-Xptxas", "--register-usage-level=7", "-DA=1",
                                             "--ptxas-options=-v -O3"]
    impl = tilecraft.jit(pass_configs={K.TL_DEVICE_COMPILE_FLAGS: ["-DA=1"]},
                         compile_flags="-DB=2 -DC")(lambda: None)
    assert impl.options["pass_configs"][K.TL_DEVICE_COMPILE_FLAGS.value] == \
        ["-DA=1", "-DB=2", "-DC"]


@tilecraft.jit(out_idx=[-1])
def copy_kernel(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(n):
                B[i] = A[i]
    return main


def test_dump_ir_into_the_configured_folder(tmp_path):
    folder = tmp_path / "ir"
    kernel = tilecraft.compile(copy_kernel.get_tir(32), out_idx=[-1], target="emulator",
                               pass_configs={PassConfigKey.TL_ENABLE_DUMP_IR: True,
                                             PassConfigKey.TL_DUMP_IR_DIR: str(folder)})
    names = sorted(os.listdir(folder))
    assert "main.00.input.txt" in names
    assert any(n.endswith(".plan_shared_memory.txt") for n in names)
    a = np.random.rand(32).astype("float32")
    np.testing.assert_array_equal(kernel(a), a)


@pytest.mark.parametrize("options,message", [
    ({"execution_backend": "cython"}, "execution_backend='cython' is not supported: tilecraft "
                                      "launches kernels through the CUDA driver API"),
    ({"execution_backend": "tvm_ffi"}, "execution_backend='tvm_ffi' is not supported"),
    ({"execution_backend": "fast"}, "unknown execution_backend 'fast'"),
    ({"target_host": "llvm"}, "target_host='llvm' is not supported: tilecraft generates no "
                              "host code"),
    ({"verbose": "yes"}, "verbose takes True or False"),
    ({"compile_flags": 7}, "compile_flags takes a string of flags or a list of strings"),
    ({"debug_root_path": 3}, "debug_root_path takes a folder path"),
    ({"pass_configs": {PassConfigKey.TL_DISABLE_DYNAMIC_TAIL_SPLIT: True}},
     "TL_DISABLE_DYNAMIC_TAIL_SPLIT ('tl.disable_dynamic_tail_split') = True is not "
     "supported"),
])
def test_jit_and_compile_refuse_options_they_cannot_honour(options, message):
    with pytest.raises(TileError) as info:
        tilecraft.jit(out_idx=[-1], **options)(lambda n: None)
    assert message in info.value.message
    with pytest.raises(TileError) as info:
        tilecraft.compile(copy_kernel.get_tir(8), out_idx=[-1], target="interp", **options)
    assert message in info.value.message


def test_accepted_launch_options():
    for backend in (None, "auto"):
        kernel = tilecraft.compile(copy_kernel.get_tir(4), out_idx=[-1], target="interp",
                                   execution_backend=backend, target_host=None)
        np.testing.assert_array_equal(kernel(np.arange(4, dtype="float32")),
                                      np.arange(4, dtype="float32"))


def test_verbose_and_debug_root_path(tmp_path, capsys):
    func = copy_kernel.get_tir(16)
    assert isinstance(func, tilecraft.ir.stmt.PrimFunc) and func.params[0].shape == (16,)
    kernel = tilecraft.compile(func, out_idx=[-1], target="interp", verbose=True,
                               debug_root_path=tmp_path / "dbg")
    assert "tilecraft: compiled main for the interpreter in" in capsys.readouterr().err
    with open(tmp_path / "dbg" / "main.tir.py") as f:
        assert f.read() == kernel.get_kernel_source()
    emulated = tilecraft.compile(func, out_idx=[-1], target="emulator",
                                 debug_root_path=str(tmp_path))
    with open(tmp_path / "main.lowered.py") as f:
        assert f.read() == emulated.get_kernel_source() != kernel.get_kernel_source()
    quiet = tilecraft.compile(func, out_idx=[-1], target="interp")
    assert quiet is not None and capsys.readouterr().err == ""


def test_kernel_source_names(capsys):
    kernel = tilecraft.compile(copy_kernel.get_tir(8), out_idx=[-1], target="interp")
    assert kernel.get_kernel_source(kernel_only=False) == kernel.get_kernel_source()
    kernel.show_source()
    kernel.print_source_code()
    assert capsys.readouterr().out == 2 * (kernel.get_kernel_source() + "\n")
    with pytest.raises(TileError, match="has no host source: tilecraft generates no host code"):
        kernel.get_host_source()
    assert tilecraft.Layout is tilecraft.layout.Layout and tilecraft.Fragment is \
        tilecraft.layout.Fragment


@tilecraft.jit
def scale_kernel(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=32):
            frag = T.alloc_fragment((n,), "float32")
            T.copy(A, frag)
            for i in T.Parallel(n):
                frag[i] = frag[i] * 2
            T.copy(frag, B)
    return main


def test_layout_visualization_prints_and_draws_each_fragments_layout(tmp_path, monkeypatch,
                                                                     capsys):
    """tl.layout_visualization_enable prints the layout of each fragment (its owner thread and
    register per element), formats="txt" also writes it under ./tmp; the interpreter, which
    infers no layouts, says so instead of staying silent."""
    monkeypatch.chdir(tmp_path)
    K = PassConfigKey
    configs = {K.TL_LAYOUT_VISUALIZATION_ENABLE: True, K.TL_LAYOUT_VISUALIZATION_FORMATS: "txt"}
    tilecraft.compile(scale_kernel.get_tir(64), target="emulator", pass_configs=configs)
    shown = capsys.readouterr().out
    assert shown.startswith("frag inferenced layout:\nFragment(64,) over 32 threads"), shown
    assert " T0:0" in shown and " T15:1" in shown          # the first 32 columns are printed
    written = (tmp_path / "tmp" / "main_frag.txt").read_text()
    assert written.startswith("Fragment(64,)") and "T31:1" in written  # all 64 are written
    with pytest.warns(UserWarning, match="the interpreter runs the tile program without "
                                         "layouts"):
        tilecraft.compile(scale_kernel.get_tir(64), target="interp", pass_configs=configs)
    with pytest.raises(TileError, match="takes \"\", \"all\" or formats among txt, png"):
        check_pass_configs({K.TL_LAYOUT_VISUALIZATION_FORMATS: "gif"})
