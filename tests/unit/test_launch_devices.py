"""Which context a launch runs in (runtime/launcher.py), with the driver faked: a launch told
another device's context makes it current for the launch alone, loads the module there once,
and gives the calling thread its own context back, even when the launch fails; a launch in
the current context touches no context at all; a launch given a device ordinal uses that
device's primary context and torch's current stream there. Each test runs twice: with the
driver calls made through ctypes, and through the C launch module (fastlaunch.c) calling the
fakes as C callbacks."""
import ctypes

import pytest

from tilecraft.backends.cuda.runtime import driver, fastlaunch, launcher
from tilecraft.errors import TileError

HOME, AWAY = 0xA000, 0xB000   # the thread's current context, another device's


class FakeDriver:
    """cuCtxGetCurrent / cuCtxSetCurrent / cuLaunchKernel over one thread's current context."""

    def __init__(self, current):
        self.current = current
        self.switches, self.launches, self.grids = [], [], []
        self.code = 0

    def get_current(self, ref):
        ref.contents.value = self.current
        return 0

    def set_current(self, context):
        self.switches.append(context)
        self.current = context

    def launch(self, function, gx, gy, gz, bx, by, bz, smem, stream, argv, extra):
        self.launches.append((function.value, stream.value, self.current))
        self.grids.append((int(gx), int(gy), int(gz)))
        return self.code


class FakeModule:
    def __init__(self, fail_in=()):
        self.loaded, self.fail_in = [], fail_in

    def function(self, name, context):
        if context in self.fail_in:
            raise TileError(f"cannot load {name} in {context:#x}")
        self.loaded.append(context)
        return 0x100 + context


C_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
C_GET_CONTEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))


def _c_entries(state) -> dict:
    """The fake's two entry points as C function addresses, as the C module calls them."""
    def launch(function, gx, gy, gz, bx, by, bz, smem, stream, argv, extra):
        return state.launch(ctypes.c_void_p(function), gx, gy, gz, bx, by, bz, smem,
                            ctypes.c_void_p(stream), argv, extra)
    state.callbacks = (C_GET_CONTEXT(state.get_current), C_LAUNCH(launch))  # kept alive
    return {name: ctypes.cast(c, ctypes.c_void_p).value
            for name, c in zip(("cuCtxGetCurrent", "cuLaunchKernel"), state.callbacks)}


@pytest.fixture(params=["ctypes", "C module"])
def fake(monkeypatch, request):
    state = FakeDriver(HOME)
    entries = {"cuCtxGetCurrent": state.get_current, "cuLaunchKernel": state.launch}
    monkeypatch.setattr(driver, "unprototyped", lambda name: entries[name])
    if request.param == "ctypes":
        monkeypatch.setattr(fastlaunch, "_state", {"module": None})
    else:
        if fastlaunch.module() is None:
            pytest.skip("the C launch module does not build here")
        addresses = _c_entries(state)
        monkeypatch.setattr(driver, "entry_address", lambda name: addresses[name])
    monkeypatch.setattr(driver, "set_current_context", state.set_current)
    monkeypatch.setattr(driver, "ensure_context", lambda ordinal=None: state.current)
    monkeypatch.setattr(driver, "primary_context", lambda ordinal: {0: HOME, 1: AWAY}[ordinal])
    monkeypatch.setattr(launcher, "torch_stream", lambda device=None: 0x5000 + (device or 0))
    return state


def make_kernel(module=None):
    return launcher.CudaKernel(module or FakeModule(), "k", [("ptr", "float32"), "int32"],
                               block=(128,))


def test_a_launch_in_the_current_context_switches_nothing(fake):
    kernel = make_kernel()
    kernel.launch_packed((0x1000, 7), (4, 1, 1), 0x5000, HOME)
    kernel.launch_packed((0x1000, 7), (4, 1, 1), 0x5000, None)
    assert fake.switches == []
    assert fake.launches == [(0x100 + HOME, 0x5000, HOME)] * 2
    assert kernel.module.loaded == [HOME]                  # loaded once in that context


def test_a_launch_for_another_device_runs_in_its_context_and_gives_the_thread_its_own_back(
        fake):
    kernel = make_kernel()
    for _ in range(2):
        kernel.launch_packed((0x1000, 7), (4, 1, 1), 0x5001, AWAY)
    assert fake.launches == [(0x100 + AWAY, 0x5001, AWAY)] * 2
    assert fake.switches == [AWAY, HOME, AWAY, HOME] and fake.current == HOME
    assert kernel.module.loaded == [AWAY]
    kernel.launch_packed((0x1000, 7), (4, 1, 1), 0x5000, HOME)
    assert fake.launches[-1] == (0x100 + HOME, 0x5000, HOME)
    assert kernel.module.loaded == [AWAY, HOME]            # one module per context


def test_a_thread_without_a_context_gets_none_back(fake):
    fake.current = 0
    make_kernel().launch_packed((0x1000, 7), (1, 1, 1), 0x5001, AWAY)
    assert fake.launches[0][2] == AWAY and fake.switches == [AWAY, 0] and fake.current == 0


def test_a_failed_launch_on_another_device_still_restores_the_context(fake, monkeypatch):
    kernel = make_kernel(FakeModule(fail_in=(AWAY,)))
    with pytest.raises(TileError, match="cannot load k"):
        kernel.launch_packed((0x1000, 7), (1, 1, 1), 0x5001, AWAY)
    assert fake.current == HOME
    monkeypatch.setattr(driver, "check", lambda code, what: (_ for _ in ()).throw(
        TileError(f"{what}: code {code}")))
    fake.code = 700                                         # the launch itself fails
    kernel = make_kernel()
    with pytest.raises(TileError, match="launching 'k'.*code 700"):
        kernel.launch_packed((0x1000, 7), (1, 1, 1), 0x5001, AWAY)
    assert fake.current == HOME and fake.launches[-1][2] == AWAY


def test_a_launch_given_a_device_uses_its_context_and_torch_stream_there(fake):
    kernel = make_kernel()
    kernel.launch([0x2000, 3], (2, 1, 1), device=1)
    kernel.launch([0x2000, 3], (2, 1, 1), device=0)
    assert fake.launches == [(0x100 + AWAY, 0x5001, AWAY), (0x100 + HOME, 0x5000, HOME)]
    assert fake.current == HOME
    kernel.launch([0x2000, 3], (2, 1, 1), stream=0x7777, device=1)   # a stream given wins
    assert fake.launches[-1] == (0x100 + AWAY, 0x7777, AWAY)


def test_a_grid_of_numpy_integers_launches_as_its_values(fake):
    import numpy as np
    kernel = make_kernel()
    kernel.launch_packed((0x1000, 7), (np.int64(6), np.int32(2), 1), 0x5000, HOME)
    assert fake.grids == [(6, 2, 1)] and len(fake.launches) == 1


def test_primary_contexts_are_retained_once_per_device(monkeypatch):
    retained = []

    class Functions:
        def cuDevicePrimaryCtxRetain(self, ref, dev):
            retained.append(dev)
            ctypes.cast(ref, ctypes.POINTER(ctypes.c_void_p)).contents.value = 0xD000 + dev
            return 0

    monkeypatch.setattr(driver, "_primary", {})
    monkeypatch.setattr(driver, "init", lambda: None)
    monkeypatch.setattr(driver, "device", lambda ordinal: 10 + ordinal)
    monkeypatch.setattr(driver, "functions", lambda: Functions())
    assert [driver.primary_context(i) for i in (1, 0, 1, 1)] == [0xD00B, 0xD00A, 0xD00B, 0xD00B]
    assert retained == [11, 10]
