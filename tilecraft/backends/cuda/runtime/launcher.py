"""Loading cubins and launching their kernels on torch tensors, with little Python per call.

A small kernel runs for a few microseconds, so the host work of a launch matters. Everything
that does not change between calls is prepared when a `CudaKernel` is made: the argument
buffer (one 8-byte slot per parameter), the `void**` array pointing at the slots, a compiled
`struct.Struct` that packs all argument values into the buffer in one C call, and the
unprototyped cuLaunchKernel. A call then converts tensors to addresses, packs, and launches; a
call through `launch_packed` (a jit call whose arguments look like an earlier call's) gives the
values ready to pack, and when they are the very tuple packed last, the buffer is left as it is.
The two driver calls of a launch go through a small C module where one can be built here
(fastlaunch.py), else through ctypes.

A TMA tensor map (kind ("tensormap",), the 128 bytes tensor_map.encode_tiled returns) is a
by-value `const __grid_constant__ tc::TensorMap` parameter: its storage in the buffer is 128
bytes on a 64-byte boundary, and the same single pack copies the bytes there.

Modules and functions belong to a CUDA context. Each launch asks the driver for the calling
thread's current context (torch keeps its device's primary context current) and uses the
function loaded in that context, loading the module there on first use: one dictionary lookup
per call. A launch told its tensors' device (a jit call always is) runs in that device's
primary context, on torch's current stream of that device; when that is not the context
current here, it is made current for the launch alone and the caller's is put back (torch reads
the current context as its current device). With one GPU the two contexts are the same, so the
device costs one comparison per launch.
"""
from __future__ import annotations

import ctypes
import struct
import sys
import threading

from ....errors import TileError
from . import driver, fastlaunch

_SMALL_DYNAMIC_SMEM = 48 * 1024   # above this a kernel must opt in through a function attribute
_SLOT = 8                         # bytes per argument slot: every kind but a tensor map fits
_TENSORMAP_BYTES, _TENSORMAP_ALIGN = 128, 64  # CUtensorMap: passed by value, 64-byte aligned

# struct codes of scalar parameter kinds (pointers are 64-bit addresses).
_SCALAR_CODES = {
    "bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i",
    "uint32": "I", "int64": "q", "uint64": "Q", "float16": "e", "float32": "f", "float64": "d",
}
_SLOT_CODES = {**_SCALAR_CODES, "bfloat16": "H", "ptr": "Q"}  # bfloat16 goes in as its bits


def tensor_pointer(obj) -> int:
    """Device address of a torch tensor, a `__cuda_array_interface__` object, an int, or None."""
    if type(obj) is int:
        return obj
    data_ptr = getattr(obj, "data_ptr", None)
    if data_ptr is not None:
        if getattr(obj, "is_cuda", True) is False:
            raise TileError(f"a tensor on {obj.device} was passed where a CUDA tensor is needed")
        return data_ptr()
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is not None:
        return interface["data"][0]
    if obj is None:
        return 0
    raise TileError(f"expected a CUDA tensor, an object with __cuda_array_interface__ or a device "
                    f"address, got {type(obj).__name__}")


_stream_of = _device_now = None  # torch's raw stream of a device index; its current device


def torch_stream(device: int | None = None) -> int:
    """The handle of torch's current CUDA stream on `device` (default: torch's current device).

    `torch.cuda.current_stream()` builds a Stream object (as long as the launch itself on the
    H100's host: bench/overhead.md); torch's own generated code reads the raw handle through
    `torch._C`, and so does this when that entry exists.
    """
    global _stream_of, _device_now
    if _stream_of is None:
        import torch
        raw, now = (getattr(torch._C, "_cuda_getCurrentRawStream", None),
                    getattr(torch._C, "_cuda_getDevice", None))
        if raw is None or now is None:
            raw = lambda index: torch.cuda.current_stream(index).cuda_stream  # noqa: E731
            now = torch.cuda.current_device
        _stream_of, _device_now = raw, now
    return _stream_of(_device_now() if device is None else device)


def _default_stream() -> int:
    # torch's current stream when the program uses torch, else the legacy default stream.
    if _stream_of is not None or "torch" in sys.modules:
        return torch_stream()
    return 0


def _bits_of_bfloat16(value) -> int:
    bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return 0x7FC0  # NaN
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF  # round to nearest even


def _parameter(spec) -> tuple:
    """("ptr", dtype), ("tensormap",) or a scalar dtype name (bare or in a 1-tuple) ->
    (kind, dtype name)."""
    from ....ir.dtypes import dtype
    if isinstance(spec, str):
        spec = (spec,)
    kind = spec[0]
    if kind == "ptr":
        return ("ptr", str(dtype(spec[1])) if len(spec) > 1 and spec[1] else "")
    if kind == "tensormap":
        return ("tensormap", "")
    try:
        name = str(dtype(kind))
    except ValueError as err:
        raise TileError(f"kernel parameter kind {kind!r}: {err}") from None
    if name not in _SLOT_CODES:
        raise TileError(f"kernel parameters of type {name} are not supported; pass a pointer")
    return (name, name)


def _layout(params) -> tuple:
    """(struct fields, each parameter's offset, bytes, alignment) of the argument buffer: an
    8-byte slot each, but 128 bytes on a 64-byte boundary for a tensor map."""
    fields, offsets, offset, align_all = [], [], 0, _SLOT
    for kind, _ in params:
        if kind == "tensormap":
            code, size, align = f"{_TENSORMAP_BYTES}s", _TENSORMAP_BYTES, _TENSORMAP_ALIGN
        else:
            code, size, align = _SLOT_CODES[kind], _SLOT, _SLOT
        pad = (-offset) % align
        offsets.append(offset + pad)
        fields.append(f"{pad}x{code}{size - struct.calcsize(code)}x")
        offset += pad + size
        align_all = max(align_all, align)
    return fields, offsets, max(offset, _SLOT), align_all


def _argument_buffer(params) -> tuple:
    """(pack_into, buffer, argv) for parameter kinds (see _layout). Without tensor maps the
    slots are simply consecutive. With them the buffer is over-allocated so that the slots can
    start 64-byte aligned, and the leading pad is part of the struct, so packing starts at
    offset 0 either way."""
    fields, offsets, size, align_all = _layout(params)
    buffer = (ctypes.c_uint64 * (size // _SLOT + (align_all - _SLOT) // _SLOT))()
    base = ctypes.addressof(buffer)
    lead = (-base) % align_all  # 0 without tensor maps: the array is 8-byte aligned
    pack = struct.Struct(f"<{lead}x" + "".join(fields)).pack_into
    argv = (ctypes.c_void_p * max(len(offsets), 1))(*[base + lead + o for o in offsets])
    return pack, buffer, argv


def argument_image(params, values) -> tuple:
    """(bytes, offsets): `values` (packable) packed as the argument buffer of a kernel with
    parameter kinds `params`, for a copy that starts at a 64-byte boundary (fastcall.c), and
    each parameter's offset in it."""
    fields, offsets, size, _ = _layout(params)
    image = bytearray(size)
    struct.pack_into("<" + "".join(fields), image, 0, *values)
    return bytes(image), tuple(offsets)


class CudaModule:
    """A cubin, loaded into each CUDA context that launches one of its kernels.

    Loaded modules stay until `unload()` or the end of the process: unloading from a garbage
    collector callback could pull code from under a launch still queued on a stream.
    """

    def __init__(self, cubin: bytes):
        self.cubin = bytes(cubin)
        self._handles: dict = {}   # context -> CUmodule
        self._lock = threading.Lock()

    def handle(self, context: int | None = None) -> int:
        """The module in `context` (default: the current one, made current if there is none)."""
        context = context or driver.ensure_context()
        handle = self._handles.get(context)
        if handle is None:
            with self._lock:
                handle = self._handles.get(context)
                if handle is None:
                    handle = self._handles[context] = driver.module_load_data(self.cubin)
        return handle

    def function(self, name: str, context: int | None = None) -> int:
        return driver.module_function(self.handle(context), name)

    def unload(self) -> None:
        """Unload from every context; only call when no launch of its kernels is pending."""
        with self._lock:
            handles, self._handles = self._handles, {}
        for context, handle in handles.items():
            saved = driver.current_context()
            driver.set_current_context(context)
            try:
                driver.module_unload(handle)
            finally:
                driver.set_current_context(saved)


class CudaKernel:
    """One `extern "C"` entry of a module, with its parameter kinds and launch shape."""

    def __init__(self, module: CudaModule, name: str, params, block=(128, 1, 1),
                 dynamic_smem: int = 0, grid_fn=None):
        self.module, self.name = module, name
        self.params = tuple(_parameter(p) for p in params)
        block = tuple(int(b) for b in block) if hasattr(block, "__len__") else (int(block),)
        self.block = block + (1,) * (3 - len(block))
        self.dynamic_smem = int(dynamic_smem)
        self.grid_fn = grid_fn
        count = len(self.params)
        self._pointer_slots = tuple(i for i, (kind, _) in enumerate(self.params) if kind == "ptr")
        self._bfloat16_slots = tuple(i for i, (kind, _) in enumerate(self.params)
                                     if kind == "bfloat16")
        self._tensormap_slots = tuple(i for i, (kind, _) in enumerate(self.params)
                                      if kind == "tensormap")
        self._pack, self._buffer, self._argv = _argument_buffer(self.params)
        self._packed = None  # the values tuple the buffer holds, when a planned call packed it
        self._stream = (None, None)  # (stream handle, its c_void_p) of the last launch
        if self._tensormap_slots:
            self.launch = self._launch_checking_maps  # the length check, only for such kernels
        self._count = count
        self._functions: dict = {}  # context -> CUfunction (as c_void_p), attributes set
        self._lock = threading.Lock()
        self._context = ctypes.c_void_p()
        self._context_ref = ctypes.pointer(self._context)
        self._get_context = driver.unprototyped("cuCtxGetCurrent")
        self._launch = driver.unprototyped("cuLaunchKernel")
        # The same two calls from C where the module builds here (fastlaunch.py), given the
        # entry points' addresses (resolved at the first launch).
        self._fast = fastlaunch.module()
        self._fast_entries = None

    def _launch_checking_maps(self, args, grid=None, stream=None, device=None) -> None:
        for i in self._tensormap_slots:
            if i < len(args) and not (type(args[i]) in (bytes, bytearray)
                                      and len(args[i]) == _TENSORMAP_BYTES):
                raise TileError(f"kernel '{self.name}': argument {i} is a tensor map and takes "
                                f"the {_TENSORMAP_BYTES} bytes of tensor_map.encode_tiled, got "
                                f"{type(args[i]).__name__}"
                                + (f" of {len(args[i])} bytes" if hasattr(args[i], "__len__")
                                   else ""))
        CudaKernel.launch(self, args, grid, stream, device)

    def function(self) -> int:
        """The CUfunction in the current context, loaded and configured on first use."""
        return self._bound_function().value

    def _bound_function(self) -> ctypes.c_void_p:
        context = driver.ensure_context()
        function = self._functions.get(context)
        if function is None:
            handle = self.module.function(self.name, context)
            self._configure(handle)
            function = self._functions[context] = ctypes.c_void_p(handle)
        return function

    def _configure(self, function: int) -> None:
        if self.dynamic_smem <= _SMALL_DYNAMIC_SMEM:
            return
        static = driver.function_attribute(function, driver.FUNC_SHARED_SIZE_BYTES)
        limit = driver.device_attribute(driver.DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                        driver.context_device())
        if static + self.dynamic_smem > limit:
            raise TileError(f"kernel '{self.name}' needs {static} bytes of static and "
                            f"{self.dynamic_smem} bytes of dynamic shared memory; this device "
                            f"allows {limit} bytes per block")
        driver.set_function_attribute(function, driver.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      self.dynamic_smem)

    def num_regs(self) -> int:
        return driver.function_attribute(self.function(), driver.FUNC_NUM_REGS)

    def __call__(self, *args, grid=None, stream=None, device=None) -> None:
        self.launch(args, grid, stream, device)

    def launch(self, args, grid=None, stream=None, device=None) -> None:
        """Launch on `stream` (default: torch's current stream); grid defaults to grid_fn(args).
        With `device` (an ordinal: where the tensors are) the launch runs in that device's
        primary context and the default stream is torch's current one there; without it, in
        the current context."""
        values = self.packable(args)
        if grid is None:
            grid = self.grid_fn(args)
        if type(grid) is not tuple or len(grid) != 3:
            grid = _grid3(grid)
        if stream is None:
            stream = _default_stream() if device is None else torch_stream(device)
        elif type(stream) is not int:
            stream = stream.cuda_stream  # a torch.cuda.Stream
        context = None if device is None else driver.primary_context(device)
        self._submit(values, grid, stream, False, context)

    def packable(self, args) -> list:
        """The arguments as the buffer takes them: tensors as their addresses, bfloat16 scalars
        as their bits (tensor maps and other scalars as they are)."""
        if len(args) != self._count:
            raise TileError(f"kernel '{self.name}' takes {self._count} arguments, got {len(args)}")
        values = list(args)
        for i in self._pointer_slots:
            if type(values[i]) is not int:
                values[i] = tensor_pointer(values[i])
        for i in self._bfloat16_slots:
            values[i] = _bits_of_bfloat16(values[i])
        return values

    def launch_packed(self, values: tuple, grid: tuple, stream: int, context=None) -> None:
        """Launch with `values` already packable (see packable), a 3-tuple grid, a stream
        handle and the context to launch in (None: the current one): the per-call path of a
        call whose look was seen before (call_cache.py). The buffer is packed again only when
        `values` is not the tuple this kernel packed last."""
        self._submit(values, grid, stream, True, context)

    def _submit(self, values, grid, stream, keep, context=None) -> None:
        fast = self._fast
        with self._lock:  # the context slot and the argument buffer are shared by all callers
            if fast is not None:
                if self._fast_entries is None:
                    self._fast_entries = (driver.entry_address("cuCtxGetCurrent"),
                                          driver.entry_address("cuLaunchKernel"),
                                          ctypes.addressof(self._argv))
                current = fast.current_context(self._fast_entries[0])
            else:
                current = 0 if self._get_context(self._context_ref) else self._context.value or 0
            switched = context is not None and context != current
            if switched:  # the tensors' device is not the current one (module docstring)
                driver.set_current_context(context)
            try:
                function = self._functions.get(context if switched else current)
                if function is None:  # a context this kernel has not run in (or none yet)
                    function = self._bound_function()
                if values is not self._packed:
                    try:
                        self._pack(self._buffer, 0, *values)
                    except struct.error as err:
                        self._packed = None
                        raise self._argument_error(values, err) from None
                    # Holding the tuple keeps its identity from being reused by another object.
                    self._packed = values if keep else None
                try:
                    code = self._driver_launch(function, grid, stream)
                except (ctypes.ArgumentError, TypeError, OverflowError):
                    grid = _grid3(grid)   # grid sizes that are not plain ints (numpy, big)
                    code = self._driver_launch(function, grid, stream)
            finally:
                if switched:
                    driver.set_current_context(current)
        if code:
            driver.check(code, f"launching '{self.name}' with grid {grid}, block {self.block}, "
                               f"{self.dynamic_smem} bytes of dynamic shared memory, on stream "
                               f"{stream:#x}")

    def _driver_launch(self, function, grid, stream) -> int:
        """cuLaunchKernel's result, through the C module where there is one, else ctypes."""
        bx, by, bz = self.block
        if self._fast is not None:
            return self._fast.launch(self._fast_entries[1], function.value, grid[0], grid[1],
                                     grid[2], bx, by, bz, self.dynamic_smem, stream,
                                     self._fast_entries[2])
        if self._stream[0] != stream:  # the handle object, made once per stream
            self._stream = (stream, ctypes.c_void_p(stream))
        return self._launch(function, grid[0], grid[1], grid[2], bx, by, bz,
                            self.dynamic_smem, self._stream[1], self._argv, None)

    def _argument_error(self, values, err) -> TileError:
        for index, ((kind, _), value) in enumerate(zip(self.params, values)):
            try:
                struct.pack("<" + _SLOT_CODES.get(kind, f"{_TENSORMAP_BYTES}s"), value)
            except struct.error:
                return TileError(f"kernel '{self.name}': argument {index} ({kind}) cannot take "
                                 f"{value!r}: {err}")
        return TileError(f"kernel '{self.name}': bad arguments: {err}")


def _grid3(grid) -> tuple:
    dims = (grid,) if isinstance(grid, int) else tuple(grid)
    if not 1 <= len(dims) <= 3:
        raise TileError(f"a grid has 1 to 3 dimensions, got {grid!r}")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    if not all(1 <= d < 2**31 for d in dims):
        raise TileError(f"grid {dims}: each dimension must be between 1 and 2**31 - 1")
    return dims


def synchronize(stream: int | None = None) -> None:
    """Wait for `stream` (default: the whole current context) to finish its work."""
    if stream is None:
        driver.ensure_context()
        driver.synchronize_context()
    else:
        driver.synchronize_stream(stream)
