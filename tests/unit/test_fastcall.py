"""The C call path (runtime/fastcall.c) without a GPU: a FastCall is given a stand-in tensor
type and ctypes callbacks standing in for cuCtxGetCurrent and cuLaunchKernel, and each call
either launches with the tensors' addresses written into the right argument slots, or declines
(NotImplemented) when anything about the arguments differs from the look it was made for."""
import ctypes
import struct

import pytest

from tilecraft.backends.cuda.runtime import fastlaunch
from driver_stand_ins import GET_CONTEXT, LAUNCH, needs_c_compiler

pytestmark = needs_c_compiler
CONTEXT, FUNCTION, STREAM = 0xC0, 0xF00, 0x5EA


class Tensor:
    """What the C side reads of a torch tensor, and nothing else."""
    next_address = 0x10000

    def __init__(self, shape, dtype="f32", device=0, contiguous=True, requires_grad=False):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        self.contiguous, self.requires_grad = contiguous, requires_grad
        Tensor.next_address += 0x1000
        self.address = Tensor.next_address

    def is_contiguous(self):
        return self.contiguous

    def get_device(self):
        return self.device

    def data_ptr(self):
        return self.address


class Driver:
    """The two entry points, recording each launch's function, dims, stream and the 8-byte
    argument slots it was given."""

    def __init__(self, slots=3, code=0):
        self.launches, self.context, self.code = [], CONTEXT, code

        def launch(function, gx, gy, gz, bx, by, bz, smem, stream, argv, extra):
            self.launches.append((function, (gx, gy, gz, bx, by, bz, smem), stream,
                                  [ctypes.cast(argv[i], ctypes.POINTER(ctypes.c_uint64))[0]
                                   for i in range(slots)]))
            return self.code

        def get_context(slot):
            slot[0] = self.context
            return 0

        self._entries = (LAUNCH(launch), GET_CONTEXT(get_context))
        self.launch, self.get_context = (ctypes.cast(e, ctypes.c_void_p).value
                                         for e in self._entries)


def fastcall(driver, makers=(), specs=None, launches=None):
    """A FastCall for kernel(x, n, out) with out made by `makers`: slot 0 takes x's address,
    slot 1 the scalar n = 7 (packed once), slot 2 the output's address (when there is one)."""
    specs = specs or (("f32", (4, 8)), (int, 7))
    image = struct.pack("<QqQ", 0, 7, 0)
    failures = []

    def fail(code, index):
        failures.append((code, index))
        raise RuntimeError(f"launch {index} failed: {code}")

    call = fastlaunch.module().FastCall(
        Tensor, lambda device: STREAM + device, 0, driver.get_context, driver.launch, CONTEXT,
        specs, makers, launches or ((FUNCTION, 2, 1, 1, 128, 1, 1, 0),), image, (0, 8, 16),
        ((0, 0), (16, -1)) if makers else ((0, 0),), (), fail)
    return call, failures


def test_a_call_of_the_look_launches_with_every_address_in_its_slot():
    driver = Driver()
    made = []
    call, _ = fastcall(driver, makers=((lambda like: made.append(Tensor(like.shape)) or made[-1],
                                        0),))
    x = Tensor((4, 8))
    out = call.run((x, 7))
    assert out is made[0] and call.hits == 1
    assert driver.launches == [(FUNCTION, (2, 1, 1, 128, 1, 1, 0), STREAM,
                                [x.address, 7, made[0].address])]
    y = Tensor((4, 8))   # another tensor of the same look: its address goes in
    assert call.run((y, 7)) is made[1] and driver.launches[1][3] == [y.address, 7,
                                                                     made[1].address]


@pytest.mark.parametrize("args", [
    (Tensor((4, 8), dtype="f16"), 7), (Tensor((4, 9)), 7), (Tensor((4, 8), device=1), 7),
    (Tensor((4, 8), device=-1), 7), (Tensor((4, 8), contiguous=False), 7),
    (Tensor((4, 8), requires_grad=True), 7), (Tensor((4, 8)), 8), (Tensor((4, 8)), 7.0),
    (Tensor((4, 8)), True), (Tensor((4, 8)),), (Tensor((4, 8)), 7, 1), (object(), 7)],
    ids=["dtype", "shape", "device", "cpu", "strided", "grad", "scalar", "float", "bool",
         "fewer", "more", "not-a-tensor"])
def test_any_other_look_is_left_to_the_python_path(args):
    driver = Driver()
    call, _ = fastcall(driver, makers=((lambda like: Tensor(like.shape), 0),))
    assert call.run(args) is NotImplemented
    assert driver.launches == [] and call.hits == 0


def test_another_current_context_is_left_to_the_python_path():
    driver = Driver()
    call, _ = fastcall(driver)
    driver.context = 0xC1
    assert call.run((Tensor((4, 8)), 7)) is NotImplemented and driver.launches == []


def test_tensor_maps_come_from_what_was_learned_for_the_address():
    """Slot 0 takes x's address, slot 1 (at byte 64) a tensor map of x: the map learned for
    x's address at this call; an address with no map learned is declined, until it is taught
    (the Python path does so after running that call)."""
    driver = Driver(slots=2)
    call = fastlaunch.module().FastCall(
        Tensor, lambda device: STREAM, 0, driver.get_context, driver.launch, CONTEXT,
        (("f32", (4, 8)),), (), ((FUNCTION, 1, 1, 1, 32, 1, 1, 0),), bytes(192), (0, 64),
        ((0, 0),), ((64, 0),), lambda *a: None)
    x, y = Tensor((4, 8)), Tensor((4, 8))
    assert call.run((x,)) is NotImplemented and driver.launches == []
    call.learn(0, x.address, struct.pack("<Q", 0xA11) + bytes(120))
    call.learn(0, y.address, struct.pack("<Q", 0xB22) + bytes(120))
    for t, first_word in ((x, 0xA11), (y, 0xB22), (x, 0xA11)):
        assert call.run((t,)) is None
        assert driver.launches[-1][3] == [t.address, first_word]
    for way in range(8):   # eight newer addresses push the oldest out
        call.learn(0, 0x900000 + way, bytes(128))
    assert call.run((x,)) is NotImplemented and call.hits == 3
    with pytest.raises(ValueError):
        call.learn(0, x.address, bytes(64))
    with pytest.raises(ValueError):
        call.learn(1, x.address, bytes(128))


def test_an_error_in_reading_a_tensor_declines_instead_of_raising():
    class Broken(Tensor):
        pass
    driver = Driver()
    call, _ = fastcall(driver)
    # a subclass is not the exact tensor type: declined before anything is read
    assert call.run((Broken((4, 8)), 7)) is NotImplemented
    x = Tensor((4, 8))
    x.data_ptr = None   # calling it raises inside the C code
    assert call.run((x, 7)) is NotImplemented and driver.launches == []


def test_a_failed_launch_raises_through_fail_with_its_code():
    driver = Driver(code=700)
    call, failures = fastcall(driver)
    with pytest.raises(RuntimeError, match="launch 0 failed: 700"):
        call.run((Tensor((4, 8)), 7))
    assert failures == [(700, 0)] and call.hits == 0


def test_every_launch_of_a_program_runs_in_order_and_several_outputs_come_as_a_list():
    driver = Driver()
    launches = ((FUNCTION, 2, 1, 1, 128, 1, 1, 0), (FUNCTION + 1, 1, 3, 1, 64, 1, 1, 4096))
    call, _ = fastcall(driver, launches=launches,
                       makers=((lambda like: Tensor(like.shape), 0),
                               (lambda like: Tensor((1,)), 0)))
    out = call.run((Tensor((4, 8)), 7))
    assert isinstance(out, list) and len(out) == 2 and out[1].shape == (1,)
    assert [(f, dims) for f, dims, _, _ in driver.launches] == [
        (FUNCTION, (2, 1, 1, 128, 1, 1, 0)), (FUNCTION + 1, (1, 3, 1, 64, 1, 1, 4096))]


def test_slots_outside_the_argument_image_are_refused():
    driver = Driver()
    with pytest.raises(ValueError, match="outside"):
        fastlaunch.module().FastCall(Tensor, lambda d: 0, 0, driver.get_context, driver.launch,
                                     CONTEXT, (), (), (), b"\0" * 8, (0,), ((8, 0),), (),
                                     lambda *a: None)


def test_a_float_scalar_matches_by_its_bits():
    driver = Driver()
    call, _ = fastcall(driver, specs=(("f32", (4, 8)), (float, 0.0)))
    assert call.run((Tensor((4, 8)), 0.0)) is None
    assert call.run((Tensor((4, 8)), -0.0)) is NotImplemented and len(driver.launches) == 1


def _made(driver, **changes):
    args = dict(tensor_type=Tensor, stream_fn=lambda d: 0, device=0,
                get_context=driver.get_context, launch=driver.launch, context=CONTEXT,
                specs=(("f32", (4, 8)), (int, 7)), makers=(), launches=(), image=bytes(24),
                slots=(0, 8, 16), patches=((0, 0),), maps=(), fail=lambda *a: None)
    args.update(changes)
    return fastlaunch.module().FastCall(*args.values())


@pytest.mark.parametrize("changes", [
    dict(patches=((0, 1),)),            # the scalar argument has no address
    dict(patches=((0, 2),)),            # no argument 2
    dict(patches=((0, -1),)),           # no output
    dict(patches=((2 ** 62, 0),)),      # far outside the image
    dict(patches=((20, 0),)),           # runs past its end
    dict(slots=(0, 8, 17)),
    dict(makers=((lambda t: t, 1),)),   # made like a scalar
    dict(makers=((lambda t: t, 5),)),
    dict(specs=(("f32",), (int, 7))),
    dict(maps=((0, 0),))],              # a map's 128 bytes do not fit in 24
    ids=["scalar-source", "no-argument", "no-output", "overflow", "past-end", "slot",
         "like-scalar", "like-missing", "spec", "map"])
def test_a_malformed_plan_is_refused_when_made(changes):
    with pytest.raises(ValueError):
        _made(Driver(), **changes)


def test_made_once_and_never_run_unmade():
    driver = Driver()
    call = _made(driver)
    with pytest.raises(RuntimeError, match="already"):
        call.__init__(*([None] * 14))
    bare = fastlaunch.module().FastCall.__new__(fastlaunch.module().FastCall)
    assert bare.run((Tensor((4, 8)), 7)) is NotImplemented
