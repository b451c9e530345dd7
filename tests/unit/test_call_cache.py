"""The per-signature fast path of calling a compiled kernel (tilecraft/call_cache.py), with the
launch replaced by a recorder and CPU tensors standing in for CUDA ones: the fast path launches
exactly what the checked path launched, only for arguments that look the same, and the checked
path still raises for arguments that do not fit. Tensors that say they are on cuda:1 (the
driver's contexts and torch's streams faked) launch on that device, by either path, and
tensors on two devices are refused with their names."""

import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
import tilecraft.language as T  # noqa: E402
from tilecraft.backends.cuda.runtime import has_nvcc  # noqa: E402

from tilecraft import kernel as kernel_module  # noqa: E402  (where a call checks its arguments)
pytestmark = pytest.mark.skipif(not has_nvcc(), reason="nvcc not found")


class FakeCuda(torch.Tensor):
    """A CPU tensor that says it lives on a GPU (nothing reads its memory here): on cuda:<on>
    when `on` is set, else on the CPU it really is on."""

    @property
    def is_cuda(self):
        return True

    @property
    def device(self):
        on = self.__dict__.get("on")
        return torch.device("cuda", on) if on is not None else super().device


def cuda_like(*shape, dtype=torch.float16, on=None):
    t = torch.zeros(*shape, dtype=dtype).as_subclass(FakeCuda)
    if on is not None:
        t.on = on
    return t


def scale_rows(N):
    M = T.symbolic("M")

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), s: T.float32, B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
            for i, j in T.Parallel(32, N):
                B[bx * 32 + i, j] = A[bx * 32 + i, j] * s
    return main


class RecordingKernel:
    """Stands in for a loaded CudaKernel: records what each launch would pack, and by which
    path (the checked launch or the planned launch_packed); `places` records where: the
    device a checked launch was given, the (stream, context) of a planned one."""

    def __init__(self, launches):
        self.launches, self.places = launches, []
        self._functions = {}   # loaded in no context: no C call plan (runtime/fastcall.py)

    def packable(self, args):
        return [a.data_ptr() if hasattr(a, "data_ptr") else a for a in args]

    def launch(self, args, grid, stream=None, device=None):
        self.launches.append(("checked", tuple(self.packable(args)), grid))
        self.places.append(device)

    def launch_packed(self, values, grid, stream, context=None):
        self.launches.append(("planned", values, grid))
        self.places.append((stream, context))


STREAM, CONTEXT = 0x5000, 0xC000  # torch's stream and the primary context of device i: + i


@pytest.fixture
def kernel(monkeypatch):
    from tilecraft.backends.cuda.runtime import driver, launcher
    k = tilecraft.compile(scale_rows(64), out_idx=[-1], target="sm_80")
    k._arch_checked.update({None, 0, 1})  # "cpu" (index None) and the faked GPUs
    launches = []
    k.program._kernels = [RecordingKernel(launches)]
    monkeypatch.setattr(launcher, "_default_stream", lambda: 0)
    monkeypatch.setattr(launcher, "torch_stream", lambda device=None: STREAM + device)
    monkeypatch.setattr(driver, "primary_context", lambda ordinal: CONTEXT + ordinal)
    checks = []
    real = kernel_module.check_tensor
    monkeypatch.setattr(kernel_module, "check_tensor",
                        lambda *a: (checks.append(a[0].name), real(*a))[1])
    return k, launches, checks


def test_a_second_call_alike_skips_the_checks_and_launches_the_same(kernel):
    k, launches, checks = kernel
    a = cuda_like(100, 64)
    first = k(a, 2.0)
    assert checks == ["A"] and len(launches) == 1
    second = k(a, 2.0)
    assert checks == ["A"] and len(launches) == 2          # no checks the second time
    (path1, v1, g1), (path2, v2, g2) = launches
    assert (path1, path2) == ("checked", "planned")
    assert g1 == g2 == (4, 1, 1)                            # ceildiv(100, 32) blocks
    # the tensors' addresses, then the scalar, then M (bound from A's shape)
    assert v1[0] == v2[0] == a.data_ptr() and float(v1[2]) == float(v2[2]) == 2.0
    assert v1[1] == first.data_ptr() and v2[1] == second.data_ptr()
    assert v1[3:] == v2[3:] == (100,)
    assert second is not first and isinstance(second, FakeCuda)  # a fresh output, like A
    assert second.shape == (100, 64) and second.dtype == torch.float16


def test_a_prepared_call_packs_again_only_when_an_address_changes(kernel):
    k, launches, _ = kernel
    a, out = cuda_like(100, 64), cuda_like(100, 64)
    k(a, 2.0)
    prepared = k.program.prepared([a, 2.0, out], [(100, 64), (), (100, 64)])
    prepared.run([a, 2.0, out])
    prepared.run([a, 2.0, out])
    other = cuda_like(100, 64)
    prepared.run([other, 2.0, out])
    (_, same1, _), (_, same2, _), (_, moved, _) = launches[1:]
    assert same1 is same2                                   # nothing to pack again
    assert moved is not same1 and moved[0] == other.data_ptr() and moved[1:] == same1[1:]


def test_another_shape_or_scalar_takes_the_checked_path(kernel):
    k, launches, checks = kernel
    k(cuda_like(100, 64), 2.0)
    k(cuda_like(70, 64), 2.0)
    k(cuda_like(100, 64), 3.0)
    assert checks == ["A", "A", "A"]
    assert [(path, v[2], v[3], grid) for path, v, grid in launches] == [
        ("checked", 2.0, 100, (4, 1, 1)), ("checked", 2.0, 70, (3, 1, 1)),
        ("checked", 3.0, 100, (4, 1, 1))]
    k(cuda_like(70, 64), 2.0)
    assert len(checks) == 3 and launches[-1][0] == "planned" and launches[-1][1][3] == 70


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


def test_outputs_like_the_first_tensor_come_from_empty_like_and_the_others_from_new_empty():
    from tilecraft.call_cache import CallPlan
    sources = [("in", 0), ("out", 0), ("out", 1)]
    outputs = [((100, 64), torch.float16), ((100,), torch.float32)]
    a = cuda_like(100, 64)
    plan = CallPlan(sources, outputs, [], (a,))
    assert [maker for maker, *_ in plan.makers] == [torch.empty_like, None]
    # a strided first tensor: empty_like would keep its strides, so new_empty for all
    strided = CallPlan(sources, outputs, [], (cuda_like(64, 100).t(),))
    assert [maker for maker, *_ in strided.makers] == [None, None]

    class Prepared:
        device = None   # no device: no C call plan either (runtime/fastcall.py)

        def run(self, values):
            self.values = values
    program = type("Program", (), {"prepared": lambda self, values, dims: Prepared()})()
    same, other = plan.run(program, (a,))
    assert isinstance(same, FakeCuda) and same.shape == (100, 64) and same.is_contiguous()
    assert same.dtype == torch.float16 and same.data_ptr() != a.data_ptr()
    assert other.shape == (100,) and other.dtype == torch.float32
    assert plan.prepared.values == [a, same, other]


def test_calls_on_another_gpu_launch_there_by_either_path(kernel):
    k, launches, checks = kernel
    places = k.program._kernels[0].places
    a1 = cuda_like(100, 64, on=1)
    k(a1, 2.0)
    k(a1, 2.0)
    assert [path for path, _, _ in launches] == ["checked", "planned"]
    assert places == [1, (STREAM + 1, CONTEXT + 1)]       # device 1's stream and context
    a0 = cuda_like(100, 64, on=0)
    k(a0, 2.0)                                             # another device: another look
    k(a0, 2.0)
    assert checks == ["A", "A"]
    assert places[2:] == [0, (STREAM + 0, CONTEXT + 0)]
    k(a1, 2.0)
    assert places[-1] == (STREAM + 1, CONTEXT + 1)         # each look keeps its device


def scale_into(N):
    M = T.symbolic("M")

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
            for i, j in T.Parallel(32, N):
                C[bx * 32 + i, j] = A[bx * 32 + i, j] + B[bx * 32 + i, j]
    return main


def test_tensors_on_two_gpus_are_refused_with_their_names(monkeypatch):
    k = tilecraft.compile(scale_into(64), target="sm_80")
    k._arch_checked.update({0, 1})
    launches = []
    k.program._kernels = [RecordingKernel(launches)]
    a, b, c = cuda_like(64, 64, on=0), cuda_like(64, 64, on=1), cuda_like(64, 64, on=0)
    for _ in range(2):                                     # never planned: refused each time
        with pytest.raises(tilecraft.TileError) as info:
            k(a, b, c)
        assert ("kernel main runs on one GPU, but its tensor arguments are on 2 devices: A, C "
                "on cuda:0; B on cuda:1") in info.value.message
    assert launches == [] and not k._calls.plans


def test_zero_and_negative_zero_are_two_looks():
    """-0.0 == 0.0, but a kernel given one may compute otherwise than given the other
    (1 / s): a plan made for one is not used for the other."""
    from tilecraft.call_cache import signature
    a = cuda_like(4, 4)
    assert signature((a, 0.0)) != signature((a, -0.0))
    assert signature((a, 2.0)) == signature((a, 2.0))
