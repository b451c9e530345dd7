"""The CUDA driver API through ctypes: libcuda.so.1 and nothing else.

tilecraft needs a handful of driver calls (load a cubin, find a function, set its shared-memory
limit, launch it on a stream), and binding them with ctypes keeps the package pure Python with
no CUDA Python bindings to install (docs/design.md decision 2). The library is opened on first use,
so importing tilecraft never needs a driver.

Every entry point is declared once in `_PROTOTYPES` with its C argument types: ctypes then
converts Python ints to the right widths (a 64-bit handle passed without a prototype would be
cut to a C int). Every CUresult is checked; a failure becomes a `CudaDriverError` (a TileError)
that names the call and carries the driver's own name and description of the error.

Names are the exported symbols: where cuda.h maps a name to a versioned symbol (for example
cuCtxPopCurrent -> cuCtxPopCurrent_v2) the prototype must use the versioned one. The calls here
have unversioned symbols. Tensor-map encoding (cuTensorMapEncodeTiled and ...Im2col, for TMA)
is in the same table; its wrapper is tensor_map.py. Entry points in `_OPTIONAL` (newer than some drivers in
use) are left off `functions()` when the library lacks them, instead of failing the whole load.
"""
from __future__ import annotations

import ctypes
import sys
import threading
from ctypes import POINTER, c_char_p, c_int, c_uint, c_uint64, c_void_p

from ....errors import TileError

LIBRARY = "libcuda.so.1"

# CUdevice_attribute values (cuda.h).
DEVICE_MAX_THREADS_PER_BLOCK = 1
DEVICE_MAX_SHARED_MEMORY_PER_BLOCK = 8
DEVICE_WARP_SIZE = 10
DEVICE_MAX_REGISTERS_PER_BLOCK = 12
DEVICE_CLOCK_RATE = 13
DEVICE_MULTIPROCESSOR_COUNT = 16
DEVICE_MEMORY_CLOCK_RATE = 36
DEVICE_GLOBAL_MEMORY_BUS_WIDTH = 37
DEVICE_L2_CACHE_SIZE = 38
DEVICE_COMPUTE_CAPABILITY_MAJOR = 75
DEVICE_COMPUTE_CAPABILITY_MINOR = 76
DEVICE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
DEVICE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82
DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97

# CUfunction_attribute values (cuda.h).
FUNC_MAX_THREADS_PER_BLOCK = 0
FUNC_SHARED_SIZE_BYTES = 1
FUNC_LOCAL_SIZE_BYTES = 3
FUNC_NUM_REGS = 4
FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

CUDA_SUCCESS = 0
CUDA_ERROR_NO_DEVICE = 100

_handle = c_void_p
_PROTOTYPES = {
    "cuGetErrorName": (c_int, POINTER(c_char_p)),
    "cuGetErrorString": (c_int, POINTER(c_char_p)),
    "cuInit": (c_uint,),
    "cuDriverGetVersion": (POINTER(c_int),),
    "cuDeviceGetCount": (POINTER(c_int),),
    "cuDeviceGet": (POINTER(c_int), c_int),
    "cuDeviceGetName": (c_char_p, c_int, c_int),
    "cuDeviceGetAttribute": (POINTER(c_int), c_int, c_int),
    "cuDevicePrimaryCtxRetain": (POINTER(_handle), c_int),
    "cuCtxGetCurrent": (POINTER(_handle),),
    "cuCtxSetCurrent": (_handle,),
    "cuCtxGetDevice": (POINTER(c_int),),
    "cuCtxSynchronize": (),
    "cuModuleLoadData": (POINTER(_handle), c_void_p),
    "cuModuleUnload": (_handle,),
    "cuModuleGetFunction": (POINTER(_handle), _handle, c_char_p),
    "cuFuncGetAttribute": (POINTER(c_int), c_int, _handle),
    "cuFuncSetAttribute": (_handle, c_int, c_int),
    "cuLaunchKernel": (_handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, _handle,
                       POINTER(c_void_p), POINTER(c_void_p)),
    "cuStreamSynchronize": (_handle,),
    # (CUtensorMap* out, CUtensorMapDataType, cuuint32_t rank, void* globalAddress,
    #  const cuuint64_t* globalDim, const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
    #  const cuuint32_t* elementStrides, CUtensorMapInterleave, CUtensorMapSwizzle,
    #  CUtensorMapL2promotion, CUtensorMapFloatOOBfill); the enums are C ints.
    "cuTensorMapEncodeTiled": (c_void_p, c_int, c_uint, c_void_p, POINTER(c_uint64),
                               POINTER(c_uint64), POINTER(c_uint), POINTER(c_uint), c_int, c_int,
                               c_int, c_int),
    # cuTensorMapEncodeIm2col(map*, dataType, rank, globalAddress, globalDim, globalStrides,
    #  const int* pixelBoxLowerCorner, const int* pixelBoxUpperCorner, cuuint32_t
    #  channelsPerPixel, cuuint32_t pixelsPerColumn, elementStrides, interleave, swizzle,
    #  l2Promotion, oobFill).
    "cuTensorMapEncodeIm2col": (c_void_p, c_int, c_uint, c_void_p, POINTER(c_uint64),
                                POINTER(c_uint64), POINTER(c_int), POINTER(c_int), c_uint,
                                c_uint, POINTER(c_uint), c_int, c_int, c_int, c_int),
}
# CUDA 12.0 and newer drivers only
_OPTIONAL = frozenset({"cuTensorMapEncodeTiled", "cuTensorMapEncodeIm2col"})


class CudaDriverError(TileError):
    """A CUresult other than CUDA_SUCCESS; `code` and `name` are the driver's."""

    def __init__(self, message: str, code: int = -1, name: str = ""):
        super().__init__(message)
        self.code, self.name = code, name


class _Functions:
    """The prototyped entry points of one loaded libcuda, as attributes."""

    def __init__(self, library: ctypes.CDLL):
        self.library = library
        for name, argtypes in _PROTOTYPES.items():
            if name in _OPTIONAL and not hasattr(library, name):
                continue
            function = getattr(library, name)
            function.argtypes = argtypes
            function.restype = c_int
            setattr(self, name, function)


_functions: _Functions | None = None
_load_error: str | None = None
_initialized = False
_lock = threading.Lock()


def functions() -> _Functions:
    """The driver's entry points (opened on first use); TileError when there is no driver."""
    global _functions, _load_error
    if _functions is None:
        with _lock:
            if _functions is None and _load_error is None:
                try:
                    _functions = _Functions(ctypes.CDLL(LIBRARY))
                except (OSError, AttributeError) as err:
                    _load_error = str(err)
    if _functions is None:
        raise TileError(f"no CUDA driver on this machine ({LIBRARY} could not be loaded: "
                        f"{_load_error})")
    return _functions


def available() -> bool:
    """Whether libcuda can be opened (says nothing about devices)."""
    try:
        functions()
        return True
    except TileError:
        return False


def error_text(code: int) -> tuple:
    """(name, description) of a CUresult, as the driver spells them."""
    lib = functions()
    name, text = c_char_p(), c_char_p()
    if lib.cuGetErrorName(code, ctypes.byref(name)) != CUDA_SUCCESS or not name.value:
        return f"CUresult {code}", "unknown error code"
    lib.cuGetErrorString(code, ctypes.byref(text))
    return name.value.decode(), (text.value or b"").decode()


def check(code: int, what: str) -> None:
    """Raise CudaDriverError unless `code` is CUDA_SUCCESS; `what` names the failed call."""
    if code != CUDA_SUCCESS:
        name, text = error_text(code)
        raise CudaDriverError(f"CUDA driver: {what} failed: {name}: {text}", code, name)


def initialized() -> bool:
    """Whether this process has called cuInit (after which CUDA_VISIBLE_DEVICES is fixed)."""
    return _initialized


def init() -> None:
    """cuInit once per process."""
    global _initialized
    if not _initialized:
        check(functions().cuInit(0), "cuInit")
        _initialized = True


def _out_int(call, *args, what: str) -> int:
    value = c_int()
    check(call(ctypes.byref(value), *args), what)
    return value.value


def driver_version() -> int:
    """The CUDA version the driver supports, as 1000*major + 10*minor (13000 for 13.0)."""
    return _out_int(functions().cuDriverGetVersion, what="cuDriverGetVersion")


def device_count() -> int:
    init()
    return _out_int(functions().cuDeviceGetCount, what="cuDeviceGetCount")


def device(ordinal: int = 0) -> int:
    init()
    return _out_int(functions().cuDeviceGet, ordinal, what=f"cuDeviceGet({ordinal})")


def device_attribute(attribute: int, dev: int) -> int:
    return _out_int(functions().cuDeviceGetAttribute, attribute, dev,
                    what=f"cuDeviceGetAttribute({attribute})")


def device_name(dev: int) -> str:
    buffer = ctypes.create_string_buffer(256)
    check(functions().cuDeviceGetName(buffer, len(buffer), dev), "cuDeviceGetName")
    return buffer.value.decode(errors="replace")


# ---- contexts -------------------------------------------------------------------------------

def current_context() -> int:
    """The calling thread's current context handle, 0 when it has none."""
    ctx = c_void_p()
    check(functions().cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    return ctx.value or 0


def set_current_context(context: int) -> None:
    check(functions().cuCtxSetCurrent(context), "cuCtxSetCurrent")


def context_device() -> int:
    """The device of the calling thread's current context."""
    return _out_int(functions().cuCtxGetDevice, what="cuCtxGetDevice")


def ensure_context(ordinal: int | None = None) -> int:
    """A current context for this thread: the one already current, else the device's primary one.

    torch's CUDA runtime works in each device's primary context, so retaining and binding that
    context here (device `ordinal`, default torch's current device or 0) shares memory with
    torch tensors. The retain is never released: the primary context lives as long as the process.
    """
    init()
    ctx = current_context()
    if ctx:
        return ctx
    context = primary_context(default_ordinal() if ordinal is None else ordinal)
    set_current_context(context)
    return context


_primary: dict = {}  # device ordinal -> its primary context, retained once


def primary_context(ordinal: int) -> int:
    """Device `ordinal`'s primary context, the one torch works in there: where a kernel called
    on that device's tensors is loaded and launched. Retained on first use, never released."""
    context = _primary.get(ordinal)
    if context is None:
        init()
        handle = c_void_p()
        check(functions().cuDevicePrimaryCtxRetain(ctypes.byref(handle), device(ordinal)),
              f"cuDevicePrimaryCtxRetain(device {ordinal})")
        context = _primary[ordinal] = handle.value
    return context


def default_ordinal() -> int:
    """torch's current device when the program already uses torch's CUDA, else device 0."""
    torch = sys.modules.get("torch")  # only if the program uses torch already
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return 0


def synchronize_context() -> None:
    check(functions().cuCtxSynchronize(), "cuCtxSynchronize")


def synchronize_stream(stream: int) -> None:
    check(functions().cuStreamSynchronize(stream), "cuStreamSynchronize")


# ---- modules and functions ------------------------------------------------------------------

def module_load_data(image: bytes) -> int:
    """Load a cubin into the current context; the bytes must stay alive only for the call."""
    handle = c_void_p()
    check(functions().cuModuleLoadData(ctypes.byref(handle), image), "cuModuleLoadData")
    return handle.value


def module_unload(module: int) -> None:
    check(functions().cuModuleUnload(module), "cuModuleUnload")


def module_function(module: int, name: str) -> int:
    handle = c_void_p()
    check(functions().cuModuleGetFunction(ctypes.byref(handle), module, name.encode()),
          f"cuModuleGetFunction('{name}')")
    return handle.value


def function_attribute(function: int, attribute: int) -> int:
    return _out_int(functions().cuFuncGetAttribute, attribute, function,
                    what=f"cuFuncGetAttribute({attribute})")


def set_function_attribute(function: int, attribute: int, value: int) -> None:
    check(functions().cuFuncSetAttribute(function, attribute, value),
          f"cuFuncSetAttribute({attribute}, {value})")


def unprototyped(name: str):
    """A second, argument-type-free handle on an entry point, for the launch path.

    Converting eleven arguments through `argtypes` costs about a microsecond per cuLaunchKernel;
    without a prototype ctypes passes ctypes objects as they are and small Python ints as C int,
    which is what the launcher prepares. Callers must pass handles as c_void_p, never bare ints.
    """
    function = functions().library[name]  # indexing makes a new function object each time
    function.restype = c_int
    return function


def entry_address(name: str) -> int:
    """The address of a driver entry point, for C code that calls it (fastlaunch.c)."""
    return ctypes.cast(functions().library[name], ctypes.c_void_p).value
