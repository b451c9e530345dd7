"""The per-signature fast path of calling a compiled kernel (tilecraft/call_cache.py), with the
launch replaced by a recorder and CPU tensors standing in for CUDA ones: the fast path launches
exactly what the checked path launched, only for arguments that look the same, and the checked
path still raises for arguments that do not fit."""
import sys

import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402
from tilecraft.runtime import has_nvcc  # noqa: E402

jit_module = sys.modules["tilecraft.jit"]  # the module (tilecraft.jit is the decorator)
pytestmark = pytest.mark.skipif(not has_nvcc(), reason="nvcc not found")


class FakeCuda(torch.Tensor):
    """A CPU tensor that says it lives on a GPU (nothing reads its memory here)."""

    @property
    def is_cuda(self):
        return True


def cuda_like(*shape, dtype=torch.float16):
    return torch.zeros(*shape, dtype=dtype).as_subclass(FakeCuda)


def scale_rows(N):
    M = T.symbolic("M")

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), s: T.float32, B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
            for i, j in T.Parallel(32, N):
                B[bx * 32 + i, j] = A[bx * 32 + i, j] * s
    return main


@pytest.fixture
def kernel(monkeypatch):
    k = tilecraft.compile(scale_rows(64), out_idx=[-1], target="sm_80")
    k._arch_checked.add(None)  # the stand-in tensors are on "cpu", whose index is None
    launches = []
    monkeypatch.setattr(k.program, "run", lambda values, dims: launches.append((values, dims)))
    checks = []
    real = jit_module._check_tensor
    monkeypatch.setattr(jit_module, "_check_tensor",
                        lambda *a: (checks.append(a[0].name), real(*a))[1])
    return k, launches, checks


def test_a_second_call_alike_skips_the_checks_and_launches_the_same(kernel):
    k, launches, checks = kernel
    a = cuda_like(100, 64)
    first = k(a, 2.0)
    assert checks == ["A"] and len(launches) == 1
    second = k(a, 2.0)
    assert checks == ["A"] and len(launches) == 2          # no checks the second time
    (v1, d1), (v2, d2) = launches
    assert d1 == d2 == [(100, 64), (), (100, 64)]
    assert v1[0] is a and v2[0] is a and float(v1[1]) == float(v2[1]) == 2.0
    assert v1[2] is first and v2[2] is second and second is not first  # a fresh output
    assert second.shape == (100, 64) and second.dtype == torch.float16


def test_another_shape_or_scalar_takes_the_checked_path(kernel):
    k, launches, checks = kernel
    k(cuda_like(100, 64), 2.0)
    k(cuda_like(70, 64), 2.0)
    k(cuda_like(100, 64), 3.0)
    assert checks == ["A", "A", "A"]
    assert [d for _, d in launches] == [[(100, 64), (), (100, 64)], [(70, 64), (), (70, 64)],
                                        [(100, 64), (), (100, 64)]]
    k(cuda_like(70, 64), 2.0)
    assert len(checks) == 3 and len(launches) == 4


def test_arguments_that_do_not_fit_still_raise_after_a_fast_call(kernel):
    k, _, _ = kernel
    k(cuda_like(100, 64), 2.0)
    with pytest.raises(tilecraft.TileError, match="expected dtype float16"):
        k(cuda_like(100, 64, dtype=torch.float32), 2.0)
    with pytest.raises(tilecraft.TileError, match="not contiguous"):
        k(cuda_like(64, 100).t(), 2.0)


def test_only_scalars_or_host_arrays_take_the_checked_path():
    from tilecraft.call_cache import signature
    import numpy as np
    assert signature((1, 2.0)) is None
    assert signature((np.zeros(3), 1)) is None
    assert signature((torch.zeros(3), 1)) is None          # a CPU tensor: copied over
    key = signature((cuda_like(3), 1))
    assert key is not None and key == signature((cuda_like(3), 1)) != signature((cuda_like(3), 2))
