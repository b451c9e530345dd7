"""ctypes function types of the driver entry points the C launch module calls (runtime/
fastlaunch.c, fastcall.c), for Python callbacks that stand in for the driver in tests without a
GPU; and the mark that skips such tests where no C compiler can build the module."""
import ctypes
import shutil

import pytest

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint,
                          ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                          ctypes.c_uint, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                          ctypes.c_void_p)
GET_CONTEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))

needs_c_compiler = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                      reason="no C compiler here")
