"""Tensor maps without a GPU: argument validation, the arguments handed to the driver (through a
stand-in for libcuda), and the launcher's by-value 128-byte argument storage."""
import ctypes

import pytest

from tilecraft.errors import TileError
from tilecraft.backends.cuda.runtime import driver, launcher, tensor_map
from tilecraft.backends.cuda.runtime.device import has_cuda_device
from tilecraft.backends.cuda.runtime.tensor_map import check_tiled, encode_tiled

ADDRESS = 0x7F00_0000_0000  # any non-null multiple of 16 will do for validation


def _check(**overrides):
    args = dict(global_address=ADDRESS, dtype="float16", global_shape=(200, 100),
                global_strides_bytes=(400,), box_shape=(64, 64))
    args.update(overrides)
    return check_tiled(**args)


def test_valid_2d_map_in_driver_order():
    spec = _check(swizzle="128B")
    assert spec.global_dims == (200, 100) and spec.global_strides == (400,)
    assert spec.box_dims == (64, 64) and spec.element_strides == (1, 1)
    assert spec.data_type == tensor_map.DATA_TYPE_FLOAT16 and spec.element_bytes == 2
    assert spec.swizzle == tensor_map.SWIZZLE_128B and spec.oob_fill == tensor_map.OOB_FILL_ZERO
    assert spec.box_bytes == 64 * 64 * 2


def test_full_stride_list_and_other_dtypes():
    assert _check(global_strides_bytes=(2, 400)).global_strides == (400,)
    spec = _check(dtype="bfloat16", global_shape=(64, 8, 4), global_strides_bytes=(128, 1024),
                  box_shape=(64, 8, 1), element_strides=(1, 2, 1), oob_fill_zero=False)
    assert spec.data_type == tensor_map.DATA_TYPE_BFLOAT16 and spec.rank == 3
    assert spec.oob_fill == tensor_map.OOB_FILL_NAN
    assert spec.box_bytes == 64 * 4 * 1 * 2  # ceil(8 / 2) rows along dimension 1
    assert _check(dtype="float8_e4m3", box_shape=(128, 8)).data_type == tensor_map.DATA_TYPE_UINT8
    assert _check(dtype="float32", box_shape=(32, 8), swizzle="128B").element_bytes == 4
    assert _check(dtype="int32", box_shape=(4, 1)).data_type == tensor_map.DATA_TYPE_INT32


@pytest.mark.parametrize("overrides, message", [
    (dict(global_strides_bytes=(416,)), ""),  # fine: padded rows
    (dict(global_strides_bytes=(408,)), "multiple of 16"),
    (dict(global_strides_bytes=(2**40,)), "multiple of 16 below 2**40"),
    (dict(global_strides_bytes=()), "takes 1"),
    (dict(global_strides_bytes=(4, 400)), "dimension 0 must be contiguous"),
    (dict(box_shape=(64, 257)), "between 1 and 256"),
    (dict(box_shape=(0, 64)), "between 1 and 256"),
    (dict(box_shape=(12, 64)), "multiple of 16 bytes"),
    (dict(box_shape=(64,)), "has 1 entries"),
    (dict(box_shape=(128, 8), swizzle="128B"), "more than the 128-byte span"),
    (dict(box_shape=(64, 8), swizzle="64B"), "more than the 64-byte span"),
    (dict(box_shape=(32, 8), swizzle="32B"), "more than the 32-byte span"),
    (dict(swizzle="256B"), "is not one of"),
    (dict(global_shape=(0, 100)), "between 1 and 2**32"),
    (dict(global_shape=(2**32 + 1, 100)), "between 1 and 2**32"),
    (dict(global_shape=(8,) * 6, global_strides_bytes=(16,) * 5, box_shape=(8,) * 6),
     "1 to 5 dimensions"),
    (dict(element_strides=(1, 9)), "between 1 and 8"),
    (dict(global_address=ADDRESS + 8), "multiple of 16"),
    (dict(global_address=0), "non-null"),
    (dict(dtype="int32", box_shape=(4, 1), oob_fill_zero=False), "needs a float type"),
    (dict(dtype="complex64"), "unknown dtype"),
    (dict(box_shape=(64.0, 64)), "must hold integers"),
])
def test_validation_errors(overrides, message):
    if not message:
        _check(**overrides)
        return
    with pytest.raises(TileError, match=message.replace("*", r"\*")):
        _check(**overrides)


def test_swizzle_spans_accept_exact_fit():
    for swizzle, elements in (("32B", 16), ("64B", 32), ("128B", 64)):
        assert _check(box_shape=(elements, 8), swizzle=swizzle).box_dims == (elements, 8)


class _FakeDriver:
    """Records the cuTensorMapEncodeTiled call and writes a recognisable map."""

    def __init__(self):
        self.calls = []

    def cuTensorMapEncodeTiled(self, out, data_type, rank, address, dims, strides, box,
                               estrides, interleave, swizzle, l2, oob):
        self.calls.append(dict(out=out, data_type=data_type, rank=rank, address=address,
                               dims=list(dims[:rank]), strides=list(strides[:max(rank - 1, 1)]),
                               box=list(box[:rank]), estrides=list(estrides[:rank]),
                               interleave=interleave, swizzle=swizzle, l2=l2, oob=oob))
        ctypes.memmove(out, bytes(range(128)), 128)
        return 0


def test_encode_passes_driver_order_arguments(monkeypatch):
    fake = _FakeDriver()
    monkeypatch.setattr(driver, "functions", lambda: fake)
    monkeypatch.setattr(driver, "ensure_context", lambda ordinal=None: 1)
    out = encode_tiled(ADDRESS, "float16", (200, 100), (400,), (64, 64), swizzle="128B")
    assert out == bytes(range(128))
    call, = fake.calls
    assert call["out"] % 64 == 0
    assert (call["data_type"], call["rank"], call["address"]) == (6, 2, ADDRESS)
    assert (call["dims"], call["strides"], call["box"], call["estrides"]) == \
        ([200, 100], [400], [64, 64], [1, 1])
    assert (call["interleave"], call["swizzle"], call["oob"]) == (0, 3, 0)


def test_encode_without_the_entry_point(monkeypatch):
    monkeypatch.setattr(driver, "functions", lambda: object())
    with pytest.raises(TileError, match="no cuTensorMapEncodeTiled"):
        encode_tiled(ADDRESS, "float16", (200, 100), (400,), (64, 64))


def test_launcher_stores_tensor_maps_by_value_aligned(monkeypatch):
    monkeypatch.setattr(driver, "unprototyped", lambda name: None)
    kernel = launcher.CudaKernel(None, "k", [("ptr", "float16"), "int32", ("tensormap",),
                                             "float32", ("tensormap",)], block=(128,))
    first, second = bytes(range(128)), bytes(range(128, 256))
    kernel._pack(kernel._buffer, 0, 0x1234, 7, first, 2.5, second)
    slots = [kernel._argv[i] for i in range(5)]
    assert slots[2] % 64 == 0 and slots[4] % 64 == 0
    assert slots[1] - slots[0] == 8 and slots[3] - slots[2] == 128
    assert ctypes.c_uint64.from_address(slots[0]).value == 0x1234
    assert ctypes.c_int32.from_address(slots[1]).value == 7
    assert ctypes.string_at(slots[2], 128) == first
    assert ctypes.c_float.from_address(slots[3]).value == 2.5
    assert ctypes.string_at(slots[4], 128) == second
    buffer = ctypes.addressof(kernel._buffer)
    assert buffer <= slots[0] and slots[4] + 128 <= buffer + ctypes.sizeof(kernel._buffer)
    with pytest.raises(TileError, match="argument 2 is a tensor map"):
        kernel(0, 7, first[:127], 1.0, second)
    with pytest.raises(TileError, match="argument 4 is a tensor map"):
        kernel(0, 7, first, 1.0, None)


def test_launcher_plain_kinds_keep_consecutive_slots(monkeypatch):
    monkeypatch.setattr(driver, "unprototyped", lambda name: None)
    kernel = launcher.CudaKernel(None, "k", [("ptr", ""), "int32", "bfloat16"])
    assert [kernel._argv[i] - kernel._argv[0] for i in range(3)] == [0, 8, 16]
    assert ctypes.sizeof(kernel._buffer) == 24
    assert "launch" not in vars(kernel)  # no extra per-call work without tensor maps


@pytest.mark.skipif(not has_cuda_device(), reason="needs libcuda and a device")
def test_encode_with_the_driver():
    if driver.functions().__dict__.get("cuTensorMapEncodeTiled") is None:
        pytest.skip("driver without cuTensorMapEncodeTiled")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    x = torch.zeros(100, 200, dtype=torch.float16, device="cuda")
    out = tensor_map.encode_tensor(x, (64, 64), swizzle="128B")
    assert isinstance(out, bytes) and len(out) == 128 and any(out)
