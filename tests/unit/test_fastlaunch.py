"""The launch path's C module (runtime/fastlaunch.c), without a GPU: it is built with the
system C compiler into the cache folder, and its two functions call the entry points they are
given, here ctypes callbacks standing in for cuCtxGetCurrent and cuLaunchKernel, with every
argument passed through unchanged."""
import ctypes
import os

import numpy as np
import pytest

from tilecraft.backends.cuda.runtime import fastlaunch
from driver_stand_ins import GET_CONTEXT, LAUNCH, needs_c_compiler

pytestmark = needs_c_compiler


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """module() as in a new process, building into an empty cache folder."""
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(fastlaunch, "_state", {})
    return tmp_path


def test_the_module_is_built_into_the_cache_once(fresh):
    mod = fastlaunch.module()
    assert mod is not None and fastlaunch.module() is mod
    built = os.listdir(fresh / "fastlaunch")
    assert len(built) == 1 and built[0].startswith(fastlaunch.NAME)


def test_launch_passes_every_argument_to_the_entry_point(fresh):
    seen = []

    def fake(function, gx, gy, gz, bx, by, bz, smem, stream, argv, extra):
        seen.append((function, gx, gy, gz, bx, by, bz, smem, stream, argv[0], argv[1], extra))
        return 7

    entry = LAUNCH(fake)
    slots = (ctypes.c_void_p * 2)(0x1111, 0x2222)
    code = fastlaunch.module().launch(
        ctypes.cast(entry, ctypes.c_void_p).value, 0xDEAD0000BEEF, 2**31 - 1, 3, 5, 128, 2, 1,
        232448, 0x7F00000000AB, ctypes.addressof(slots))
    assert code == 7
    assert seen == [(0xDEAD0000BEEF, 2**31 - 1, 3, 5, 128, 2, 1, 232448, 0x7F00000000AB,
                     0x1111, 0x2222, None)]


def test_current_context_reads_what_the_driver_writes(fresh):
    def ok(slot):
        slot[0] = 0xC0FFEE
        return 0

    def failing(slot):
        slot[0] = 0xBAD
        return 201   # CUDA_ERROR_INVALID_CONTEXT: no context, as ctypes' path reads it

    mod = fastlaunch.module()
    for fn, want in ((ok, 0xC0FFEE), (failing, 0)):
        entry = GET_CONTEXT(fn)
        assert mod.current_context(ctypes.cast(entry, ctypes.c_void_p).value) == want


def test_a_grid_that_is_not_plain_ints_is_a_type_error(fresh):
    """The launcher then converts the grid (numpy ints) and launches again."""
    entry = LAUNCH(lambda *a: 0)
    address = ctypes.cast(entry, ctypes.c_void_p).value
    with pytest.raises(TypeError):
        fastlaunch.module().launch(address, 1, np.int64(4), 1, 1, 128, 1, 1, 0, 0, 0)
    with pytest.raises(OverflowError):
        fastlaunch.module().launch(address, 1, 2**32, 1, 1, 128, 1, 1, 0, 0, 0)


def test_switched_off_and_unbuildable(fresh, monkeypatch, caplog):
    monkeypatch.setenv("TILECRAFT_FAST_LAUNCH", "0")
    assert fastlaunch.module() is None
    monkeypatch.setattr(fastlaunch, "_state", {})
    monkeypatch.delenv("TILECRAFT_FAST_LAUNCH")
    monkeypatch.setenv("CC", str(fresh / "no-such-compiler"))
    monkeypatch.setattr(fastlaunch.shutil, "which", lambda name: None)
    with caplog.at_level("INFO", logger="tilecraft.launch"):
        assert fastlaunch.module() is None
    assert "kernels launch through ctypes" in caplog.text
