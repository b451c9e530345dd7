"""register_cuda_postproc_callback: the active callback rewrites the CUDA source nvcc compiles
(the kernel's source shows it), takes part in the program cache's key (a kernel compiled with
another callback, or none, is not the cached one), and a callback that returns no text is an
error naming it."""
import pytest

from tilecraft.backends.cuda.runtime import has_nvcc

if not has_nvcc():
    pytest.skip("nvcc is not installed", allow_module_level=True)

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402
from tilecraft.engine.callback import (clear_cuda_postproc_callback,  # noqa: E402
                                       register_cuda_postproc_callback)
from tilecraft.errors import TileError  # noqa: E402


@T.prim_func
def double(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
    with T.Kernel(1, threads=64):
        for i in T.Parallel(64):
            B[i] = A[i] * 2


@pytest.fixture(autouse=True)
def no_callback_after(tmp_path, monkeypatch):
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path / "cache"))
    yield
    clear_cuda_postproc_callback()


def test_the_callback_rewrites_what_nvcc_compiles_and_keys_the_cache():
    seen = []

    @register_cuda_postproc_callback
    def mark(code, target):
        seen.append(target)
        return "// rewritten by the callback\n" + code

    marked = tilecraft.compile(double, target="sm_80").get_kernel_source()
    assert marked.startswith("// rewritten by the callback") and seen == ["sm_80"]
    clear_cuda_postproc_callback()
    plain = tilecraft.compile(double, target="sm_80").get_kernel_source()
    assert "rewritten by the callback" not in plain


def test_a_callback_that_returns_no_text_is_an_error():
    register_cuda_postproc_callback(lambda code, target: None)
    with pytest.raises(TileError, match="returned a NoneType, not the source text"):
        tilecraft.compile(double, target="sm_80")
