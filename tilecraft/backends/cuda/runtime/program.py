"""A PrimFunc compiled for one GPU architecture: CUDA source, cubin and launch plan.

Compiling needs only nvcc (so CI can build for sm_80 / sm_90a without a GPU); running needs
the GPU of that architecture. Whole programs are cached on disk keyed by the tile IR text,
the target and the flags, so a kernel compiled once loads in a new process without lowering
or nvcc. Every launch gets the same arguments: the tensor pointers, then the scalar
parameters, then the symbolic sizes bound from tensor shapes.
"""
from __future__ import annotations

import os
import pickle
import threading
import warnings

import numpy as np

from .... import __version__, knobs
from ....interp.values import evaluate
from ....engine.callback import identity as postproc_identity, postprocess
from ....errors import TileError
from ....target import smem_limit
from ....ir.buffer import Buffer
from . import cache, driver, launcher
from .toolchain import compile_cubin
from ....grid_limits import folded, folded_extents
from ....ir.annotations import PERSISTENT_BLOCKS, SMEM_BYTES

_memory: dict = {}
_lock = threading.Lock()


_fingerprint: list = []


def compiler_fingerprint() -> str:
    """Identifies the compiler's own code (every module and header of the package, by size and
    modification time), so an edited compiler never reuses programs the old one cached."""
    if not _fingerprint:
        import hashlib
        root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
        h = hashlib.sha256()
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".h")):
                    st = os.stat(os.path.join(folder, name))
                    h.update(f"{os.path.relpath(os.path.join(folder, name), root)}:"
                             f"{st.st_size}:{st.st_mtime_ns};".encode())
        _fingerprint.append(h.hexdigest()[:16])
    return _fingerprint[0]


def _nvcc_identity() -> str:
    """Which compiler would build the program: nvcc's path, size and time stamp (a stat, where
    asking nvcc for its version would start a process on every cache lookup), or NVRTC's
    release and library."""
    from .toolchain import compiler, find_nvcc
    if compiler() == "nvrtc":
        from . import nvrtc
        return nvrtc.identity()
    path = find_nvcc()
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def _positions(func, signature) -> list:
    """Where each kernel argument comes from: ("tensor"|"scalar", param index) or
    ("size", (param index, dim)); the workspaces (T.alloc_global) come after the parameters
    in a call's values (CudaProgram.with_workspaces)."""
    index = {id(p): i for i, p in enumerate(func.params)}
    for obj in (o for kind, o in signature if kind == "workspace"):
        index[id(obj)] = len(index)
    dims = {}
    for i, p in enumerate(func.params):
        for d, s in enumerate(p.shape if isinstance(p, Buffer) else ()):
            dims.setdefault(id(s), (i, d))
    out = []
    for kind, obj in signature:
        if kind == "size":
            out.append((kind, dims[id(obj)]))
        elif kind == "tensormap":  # encoded at each call from the tensor it describes
            out.append((kind, (index[id(obj.buffer)], tuple(obj.box), obj.swizzle,
                               obj.im2col)))
        else:
            out.append(("tensor" if kind == "workspace" else kind, index[id(obj)]))
    return out


def warn_serialized_wgmma(kernel_info: dict):
    """Say so when ptxas issues a kernel's wgmma one at a time: the kernel still computes the
    right thing, but its tensor cores wait for every instruction before the next."""
    for name, info in kernel_info.items():
        if info.wgmma_serialized:
            warnings.warn(f"tilecraft: ptxas issues the wgmma of {name} one at a time "
                          f"({info.wgmma_serialized}), so its tensor cores run far below their "
                          "rate", stacklevel=3)


class CudaProgram:
    def __init__(self, func, arch: str, *, fast_math: bool = False, debug: bool = False,
                 configs: dict | None = None, flags=()):
        """`configs`: checked pass configs (fast math, ptxas options and compiler flags among
        them); `flags`: more nvcc flags (jit's compile_flags)."""
        from ....pass_config import PassConfigKey, device_compile_flags, dump_dir
        from ....pass_config import fast_math as configs_fast_math
        self.arch = arch
        fast = fast_math or configs_fast_math(configs)
        flags = (("--use_fast_math",) if fast else ()) + (("-G",) if debug else ()) + \
            tuple(device_compile_flags(configs)) + tuple(flags)
        dumping = dump_dir(configs)
        key = cache.cache_key(func.script(), arch, flags,
                              {"tilecraft": __version__, "compiler": compiler_fingerprint(),
                               "nvcc": _nvcc_identity(), "kind": "program",
                               "planned_for": _planned_for(arch),
                               "postproc": postproc_identity(),
                               "configs": sorted((str(k), repr(v)) for k, v in
                                                 (configs or {}).items())})
        plan = None if dumping or knobs.cache_disabled() else _load(key)
        if plan is None:
            plan = self._build(func, arch, flags, dumping, configs)
            if not dumping and not knobs.cache_disabled():
                _store(key, plan)
        self.__dict__.update(plan)
        self._kernels = None
        self._maps: dict = {}
        self._sms: dict = {}  # device ordinal (None: the current one) -> its SM count
        # What the compiler warned about while lowering, every time the program is made: a
        # program loaded from the cache would otherwise say nothing of it.
        for message, category, filename, line in plan.get("lowering_warnings", ()):
            warnings.warn_explicit(message, category, filename, line)
        warn_serialized_wgmma(self.kernel_info)
        if (configs or {}).get(PassConfigKey.TL_ENABLE_PTXAS_VERBOSE_OUTPUT):
            print(plan.get("ptxas_log", ""))

    @staticmethod
    def _build(func, arch, flags, dumping, configs=None) -> dict:
        # The compiler proper is imported here, so a process that only loads cached
        # programs never pays for importing it.
        from ..codegen.cuda import emit_cuda, kernel_signature, launch_threads
        from .. import pipeline as pipelines
        from .device import device_target
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lowered = pipelines.lower(func, device_target(arch), configs)
        limit = smem_limit(arch)
        for k in lowered.kernels():
            if limit is not None and k.attrs[SMEM_BYTES] > limit:
                raise TileError(f"kernel needs {k.attrs[SMEM_BYTES]} bytes of shared memory "
                                f"with its scratch space; {arch} allows {limit} per block (use "
                                "smaller tiles or fewer stages)", k.span)
        source, names = emit_cuda(lowered)
        source = postprocess(source, arch)
        pipelines.dump_source(func, source, dumping)
        compiled = cache.get_or_compile(
            source, arch, flags, compile_fn=lambda src, a, f: compile_cubin(src, a, flags=f),
            bypass=bool(dumping))
        signature = kernel_signature(lowered)
        positions = _positions(lowered, signature)
        binds = [(obj, pos) for (kind, obj), pos in zip(signature, positions)
                 if kind in ("scalar", "size")]
        launches = [(name, _launch_grid(k), launch_threads(k), k.attrs[SMEM_BYTES])
                    for name, k in zip(names, lowered.kernels())]
        return {"source": source, "cubin": compiled.cubin, "kernel_info": dict(compiled.kernels),
                "ptxas_log": compiled.log,
                "lowering_warnings": [(str(w.message), w.category, w.filename, w.lineno)
                                      for w in caught],
                "positions": positions, "binds": binds, "launches": launches,
                "param_names": [p.name for p in lowered.params] +
                               [obj.name for kind, obj in signature if kind == "workspace"],
                "workspaces": [(tuple(_int_or_expr(d) for d in obj.shape), obj.dtype.name)
                               for kind, obj in signature if kind == "workspace"],
                "param_kinds": [("ptr", obj.dtype.name) if kind in ("tensor", "workspace") else
                                ("tensormap",) if kind == "tensormap" else obj.dtype.name
                                for kind, obj in signature]}

    # --- facts ------------------------------------------------------------------
    @property
    def registers(self) -> int:
        """Registers per thread of the launch that uses most: ptxas's report, or where it
        named no kernel (NVRTC can return an empty log) and the kernels were loaded on a GPU,
        the driver's count of the loaded functions."""
        reported = max((k.registers for k in self.kernel_info.values()), default=0)
        if reported or self._kernels is None:
            return reported
        return max((k.num_regs() for k in self._kernels), default=0)

    @property
    def spills(self) -> int:
        return max((k.spill_bytes for k in self.kernel_info.values()), default=0)

    @property
    def wgmma_serialized(self) -> dict:
        """Kernel name -> ptxas's reason, for the kernels whose wgmma it serialized."""
        return {name: k.wgmma_serialized for name, k in self.kernel_info.items()
                if k.wgmma_serialized}

    @property
    def shared_memory(self) -> int:
        return max((smem for *_, smem in self.launches), default=0)

    # --- running ----------------------------------------------------------------
    def _load(self):
        module = launcher.CudaModule(self.cubin)
        self._kernels = [launcher.CudaKernel(module, name, self.param_kinds, block=threads,
                                             dynamic_smem=smem)
                         for name, _, threads, smem in self.launches]

    def _tensor_map(self, tensor, box, swizzle, im2col=None) -> bytes:
        """The TMA tensor map of a tensor argument, encoded once per (address, shape); with
        im2col (lower, upper, stride), a map in im2col mode whose box is (pixels, channels)."""
        key = (tensor.data_ptr(), tuple(tensor.shape), box, swizzle, im2col)
        found = self._maps.get(key)
        if found is None:
            from .tensor_map import encode_tensor, encode_tensor_im2col
            if len(self._maps) >= 64:
                self._maps.clear()
            found = self._maps[key] = encode_tensor(tensor, box, swizzle) if im2col is None \
                else encode_tensor_im2col(tensor, *box, swizzle, *im2col)
        return found

    def run(self, values: list, shapes: list, stream=None, device: int | None = None):
        """values[i]: the tensor or scalar for parameter i; shapes[i]: tensor i's shape;
        device: the ordinal of the GPU the tensors are on (None: the current context's)."""
        if self._kernels is None:
            self._load()
        values = self.with_workspaces(values, self.workspace_specs(values, shapes))
        args = self._arguments(values, shapes)
        for kernel, grid in self._grids(values, shapes, device):
            kernel.launch(args, grid, stream, device)

    def prepared(self, values: list, shapes: list) -> "PreparedCall":
        """run's work for arguments that look like these, done once (call_cache.py)."""
        if self._kernels is None:
            self._load()
        return PreparedCall(self, values, shapes)

    def _arguments(self, values: list, shapes: list) -> list:
        args = []
        for kind, pos in self.positions:
            if kind == "size":
                args.append(int(shapes[pos[0]][pos[1]]))
            elif kind == "tensormap":
                try:
                    args.append(self._tensor_map(values[pos[0]], *pos[1:]))
                except TileError as e:
                    # Say which argument, and the way out: the copies of a kernel compiled
                    # with TMA move whole boxes from 16-byte aligned addresses.
                    raise TileError(f"argument {self.param_names[pos[0]]} cannot be "
                                    f"copied by TMA: "
                                    f"{e.message}; pass a tensor whose data starts at a "
                                    "16-byte boundary (a fresh or .clone()d one), or compile "
                                    "with pass_configs={'tl.disable_tma_lower': True}") from None
            else:
                args.append(values[pos])
        return args

    def _env(self, values: list, shapes: list) -> dict:
        """The symbolic sizes and scalars of a call, for evaluating grids and workspaces."""
        env = {}
        for var, (kind, pos) in zip((b[0] for b in self.binds), (b[1] for b in self.binds)):
            env[id(var)] = np.int64(shapes[pos[0]][pos[1]] if kind == "size" else values[pos])
        return env

    def _sm_count(self, device: int | None) -> int:
        """The SMs of the device (a persistent grid's size): asked once per device."""
        sms = self._sms.get(device)
        if sms is None:
            from .device import device_properties
            sms = self._sms[device] = device_properties(device).sm_count
        return sms

    def workspace_specs(self, values: list, shapes: list) -> list:
        """[(shape, torch dtype, device)] of the program's workspaces for a call, on the
        device of its first tensor argument."""
        specs = getattr(self, "workspaces", ())
        if not specs:
            return []
        import torch
        from ....arrays import torch_dtype
        from ....ir.dtypes import dtype as ir_dtype
        env = self._env(values, shapes)
        device = next((v.device for v in values if hasattr(v, "data_ptr")), None)
        return [(tuple(d if isinstance(d, int) else int(evaluate(d, env)) for d in shape),
                 torch_dtype(ir_dtype(name)), device or torch.device("cuda"))
                for shape, name in specs]

    @staticmethod
    def with_workspaces(values: list, specs: list) -> list:
        """values and a fresh tensor for each workspace (torch's allocator keeps it ordered
        on the stream, so concurrent calls never share one)."""
        if not specs:
            return values
        import torch
        return list(values) + [torch.empty(shape, dtype=dtype, device=device)
                               for shape, dtype, device in specs]

    def _grids(self, values: list, shapes: list, device: int | None = None) -> list:
        """[(kernel, 3-tuple grid)] of the launches with a non-empty grid on `device`."""
        env = self._env(values, shapes)
        out = []
        for kernel, (_, grid, _, _) in zip(self._kernels, self.launches):
            if isinstance(grid, PersistentGrid):
                dims = [grid.blocks(env, self._sm_count(device))]
            else:
                dims = [g if isinstance(g, int) else int(evaluate(g, env)) for g in grid]
            if any(d <= 0 for d in dims):
                continue  # an empty grid launches nothing
            out.append((kernel, tuple(dims) + (1,) * (3 - len(dims))))
        return out


class PreparedCall:
    """A program's launches for arguments of one look (the same dtypes, shapes and scalars):
    the grids and every argument but the tensors' addresses are fixed, so a call reads the
    addresses and builds the packed arguments (tensor maps included) again only when one of
    them changed. Two threads may share one: each call works on the (addresses, arguments)
    pair it read or made, never on another call's half."""

    def __init__(self, program: CudaProgram, values: list, shapes: list):
        self.program, self.shapes = program, shapes
        # The device of the tensors (a call's look includes it): its primary context and
        # torch's stream there are where every call of this look launches.
        first = next((v for v in values if hasattr(v, "data_ptr")), None)
        self.device = getattr(getattr(first, "device", None), "index", None)
        self.context = None if self.device is None else driver.primary_context(self.device)
        self.grids = program._grids(values, shapes, self.device)
        self.workspaces = program.workspace_specs(values, shapes)
        self.tensors = tuple(i for i, v in enumerate(values) if hasattr(v, "data_ptr")) + \
            tuple(range(len(values), len(values) + len(self.workspaces)))
        self._made = None  # (addresses, packable arguments) of the last call

    def run(self, values: list) -> None:
        values = self.program.with_workspaces(values, self.workspaces)
        addresses = tuple([values[i].data_ptr() for i in self.tensors])
        made = self._made
        if made is None or made[0] != addresses:
            args = self.program._arguments(values, self.shapes)
            packable = tuple(self.program._kernels[0].packable(args)) if self.grids else ()
            made = self._made = (addresses, packable)
        if self.grids:
            stream = launcher.torch_stream(self.device) if self.device is not None else \
                launcher._default_stream()
            for kernel, grid in self.grids:
                kernel.launch_packed(made[1], grid, stream, self.context)


class PersistentGrid:
    """The launch grid of a persistent kernel: one block per SM of the device (or at most
    `limit`), never more blocks than the kernel has tiles."""

    def __init__(self, tiles: tuple, limit: int):
        self.tiles, self.limit = tiles, limit

    def blocks(self, env: dict, sms: int | None) -> int:
        tiles = 1
        for g in self.tiles:
            tiles *= g if isinstance(g, int) else int(evaluate(g, env))
        return min(tiles, self.limit or sms)


def _planned_for(arch: str):
    """The SM count and L2 size the passes plan with (device.device_target): a program planned
    for another GPU of the same arch is correct here, but not what the passes would choose, so
    it is not reused."""
    from .device import device_target
    target = device_target(arch)
    return None if isinstance(target, str) else (target.num_sms, target.l2_bytes)


def _launch_grid(k):
    # Constant grid extents are stored as ints: a launch then evaluates nothing. A grid over
    # 65535 along y or z is launched along x alone (grid_limits.folded), unless the kernel is
    # persistent: its blocks walk the tiles by a linear index of their own.
    tiles = tuple(_int_or_expr(g) for g in k.grid)
    blocks = k.attrs.get(PERSISTENT_BLOCKS)
    if blocks is not None:
        return PersistentGrid(tiles, blocks)
    if folded(k.grid):
        return (int(np.prod(folded_extents(k.grid), dtype=np.int64)),)
    return tiles


def _int_or_expr(e):
    from ....ir.linear import constant_value
    value = constant_value(e) if not isinstance(e, int) else e
    return int(value) if value is not None else e


def _path(key: str) -> str:
    return os.path.join(knobs.cache_dir(), "programs", key[:2], key + ".pkl")


def _load(key: str) -> dict | None:
    with _lock:
        if key in _memory:
            return _memory[key]
    try:
        with open(_path(key), "rb") as f:
            plan = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None
    with _lock:
        _memory[key] = plan
    return plan


def _store(key: str, plan: dict):
    with _lock:
        _memory[key] = plan
    path = _path(key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        cache.write_atomically(path, pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError:
        pass  # the plan is kept in memory; the next process compiles again
