"""The compiled kernel that tilecraft.jit and tilecraft.compile return: the program compiled for
its target, and the call that checks arguments, allocates outputs and runs it."""
from __future__ import annotations

import sys
import time

import numpy as np

from . import arrays, call_cache, placement
from .errors import TileError, raise_clean
from .grid_limits import check_launch_grids, symbolic_extents
from .ir.buffer import Buffer
from .ir.expr import Var
from .ir.stmt import PrimFunc
from .ir.verify import verify
from .kernel_args import check_tensor, normalize_out_idx, output_shape, scalar_value
from .jit_options import Reporting, checked_configs, report, with_program_options
from .passes.exact_float32_gemm import exact_float32_gemm


class JITKernel:
    """A compiled kernel: call it with the input tensors; outputs (out_idx) are allocated."""

    def __init__(self, func: PrimFunc, out_idx=None, target=None, out_idx_span=None,
                 pass_configs=None, reporting: Reporting | None = None):
        """pass_configs: checked by jit_options.checked_configs (compile_flags among them);
        reporting: what to tell about the compiled kernel (verbose, debug_root_path)."""
        if not isinstance(func, PrimFunc):
            raise TileError(f"expected a @T.prim_func, got {type(func).__name__}")
        started = time.perf_counter()
        verify(func)
        self.func = func
        self.params = func.params
        self.out_idx = normalize_out_idx(out_idx, func, out_idx_span)
        self.inputs = [i for i in range(len(self.params)) if i not in self.out_idx]
        # the program's own options (T.annotate_pass_configs / _compile_flags) under the
        # caller's; nvcc flags act where nvcc runs, the CUDA targets
        configs = self.pass_configs = with_program_options(func, checked_configs(pass_configs))
        self.backend, self.arch = placement.resolve(target)
        self.program = None
        self._arch_checked: set = set()  # devices whose architecture matches self.arch
        if self.backend == "cuda":
            from .backends.cuda.runtime.program import CudaProgram
            self.program = CudaProgram(func, self.arch, configs=configs)
        elif self.backend == "emulator":
            from .backends.cuda.emulator import lower
            self.lowered = lower(func, self.arch, configs)
        else:
            _dump_tile_ir(func, configs)   # the interpreter runs the tile IR as it is
            _no_layouts_to_show(configs)
        # what the interpreter runs: the tile IR, with the gemms a pass config pins
        self._interp_func = exact_float32_gemm(func, configs)
        self.reports = []  # the emulator checker's findings of the last call
        self._grid_extents = symbolic_extents(func)  # checked at each call
        self._calls = call_cache.CallCache()
        self._fast = None   # the FastCall of the plan that ran last (runtime/fastcall.py)
        # the kernel as a torch operator, for torch.compile (torch_op.py)
        self._torch_op = self._is_compiling = None
        self._op_tried = False
        if "torch" in sys.modules:
            self._attach_torch_op()
        report(self, reporting or Reporting(), configs, time.perf_counter() - started)

    # --- calling --------------------------------------------------------------
    def __call__(self, *args):
        if self._is_compiling is not None and self._is_compiling():
            return self._torch_op(*args)     # traced by torch.compile: one graph node
        fast = self._fast
        if fast is not None:   # the last plan in C: NotImplemented where it does not apply
            out = fast.run(args)
            if out is not NotImplemented:
                return out
        if self._torch_op is None and not self._op_tried and "torch" in sys.modules:
            self._attach_torch_op()
        return self.call_eager(args)

    def call_eager(self, args, from_op=False):
        """The call itself: arguments checked, outputs allocated, the program run. from_op:
        called as the torch operator's implementation (torch_op.py), below autograd."""
        try:
            return self._call(args, from_op)
        except TileError as e:
            raise_clean(e)

    def _attach_torch_op(self):
        from . import torch_op
        self._op_tried = True      # once: a torch without torch.library gets no operator
        self._torch_op = torch_op.register(self)
        if self._torch_op is not None:
            self._is_compiling = sys.modules["torch"].compiler.is_dynamo_compiling

    def _call(self, args, from_op=False):
        key = call_cache.signature(args) if self.backend == "cuda" else None
        plan = self._calls.get(key)
        if plan is not None:  # seen before, checked then (call_cache.py)
            outputs = plan.run(self.program, args)
            self._fast = plan.fast
            return (outputs[0] if len(outputs) == 1 else outputs) if outputs else None
        names = [self.params[i].name for i in self.inputs]
        if len(args) != len(self.inputs):
            raise TileError(f"kernel {self.func.name} takes {len(self.inputs)} argument(s) "
                            f"({', '.join(names)}), got {len(args)}")
        sizes: dict[int, int] = {}
        tensors, scalars = {}, {}
        for i, arg in zip(self.inputs, args):
            p = self.params[i]
            if isinstance(p, Buffer):
                if not (isinstance(arg, np.ndarray) or arrays.is_torch(arg)):
                    raise TileError(f"argument {p.name} must be a numpy array or a torch tensor, "
                                    f"got {type(arg).__name__}")
                check_tensor(p, arg, sizes)
                tensors[id(p)] = arg
            else:
                scalars[id(p)] = scalar_value(p, arg)
                sizes[id(p)] = scalars[id(p)]
        if not from_op and self._torch_op is not None and (
                arrays.needs_grad(tensors.values()) or arrays.traced(tensors.values())):
            # through the operator, whose autograd says what a backward needs (torch_op.py)
            return self._torch_op(*args)
        shapes = [output_shape(self.params[i], sizes) for i in self.out_idx]
        if self._grid_extents:
            check_launch_grids(self.func, self._grid_extents, sizes)
        if self.backend == "cuda":
            outputs, launch = self._run_cuda(tensors, scalars, sizes, shapes)
            if launch is not None:
                self._calls.record(key, args, *launch, outputs)
        elif self.backend == "emulator":
            outputs = self._run_interp(tensors, scalars, sizes, shapes, emulate=True)
        else:
            outputs = self._run_interp(tensors, scalars, sizes, shapes)
        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else outputs

    def _run_interp(self, tensors, scalars, sizes, shapes, emulate=False):
        from .interp import Machine
        from .interp.machine import poison
        use_torch = any(arrays.is_torch(t) for t in tensors.values())
        arrays_in = {k: arrays.to_numpy(t, _name_of(self.params, k)) for k, t in tensors.items()}
        outputs = []
        for i, shape in zip(self.out_idx, shapes):
            p = self.params[i]
            arrays_in[id(p)] = poison(shape, p.dtype)
            outputs.append(arrays_in[id(p)])
        bindings = dict(scalars)
        for p in self.params:
            for d in (p.shape if isinstance(p, Buffer) else ()):
                if isinstance(d, Var) and id(d) in sizes:
                    bindings[id(d)] = np.int64(sizes[id(d)])
        if emulate:
            from .backends.cuda.emulator import EmulatorError, run_lowered
            self.reports = list(run_lowered(self.lowered, arrays_in, bindings))
            if self.reports:
                raise EmulatorError(self.reports)
        else:
            Machine(self._interp_func).run(bindings, arrays_in)
        return [arrays.from_numpy(a, use_torch) for a in outputs]

    def _run_cuda(self, tensors, scalars, sizes, shapes):
        """(outputs, (values, dims) the program was launched with); no launch plan when the
        arguments made a round trip from the host."""
        host = {k: t for k, t in tensors.items() if not (arrays.is_torch(t) and t.is_cuda)}
        if host:
            return self._run_cuda_from_host(tensors, scalars, sizes, shapes, host), None
        import torch
        for k, t in tensors.items():
            if not t.is_contiguous():
                raise TileError(f"argument {_name_of(self.params, k)} is not contiguous; pass "
                                "tensor.contiguous()")
        like = self._on_one_device(tensors)
        device = like.device if like is not None else \
            torch.device("cuda", torch.cuda.current_device())
        if device.index not in self._arch_checked:
            # Asked of the driver once per device, not on every call.
            from .backends.cuda.runtime.device import current_arch
            here = current_arch(device.index)
            if here != self.arch:
                raise TileError(f"kernel {self.func.name} was compiled for {self.arch}, but "
                                f"{device} is {here}")
            self._arch_checked.add(device.index)
        outputs = []
        for i, shape in zip(self.out_idx, shapes):
            p = self.params[i]
            dtype = arrays.torch_dtype(p.dtype)
            # On the inputs' device, as the planned calls make them (call_cache.py).
            t = like.new_empty(shape, dtype=dtype) if like is not None else \
                torch.empty(shape, dtype=dtype, device=device)
            tensors[id(p)] = t
            outputs.append(t)
        values = [tensors.get(id(p), scalars.get(id(p))) for p in self.params]
        dims = [tuple(values[i].shape) if isinstance(p, Buffer) else () for i, p in
                enumerate(self.params)]
        self.program.run(values, dims, device=device.index)
        return outputs, (values, dims)

    def _on_one_device(self, tensors: dict):
        """The first CUDA tensor of `tensors` (None without one); a TileError naming each
        argument's device when they are on several GPUs (a kernel reads one GPU's memory)."""
        where: dict = {}
        for k, t in tensors.items():
            if arrays.is_torch(t) and t.is_cuda:
                where.setdefault(str(t.device), []).append(_name_of(self.params, k))
        if len(where) > 1:
            listed = "; ".join(f"{', '.join(names)} on {device}"
                               for device, names in where.items())
            raise TileError(f"kernel {self.func.name} runs on one GPU, but its tensor arguments "
                            f"are on {len(where)} devices: {listed}; move them to one device "
                            "(tensor.to(device)) before the call")
        return next((t for t in tensors.values() if arrays.is_torch(t) and t.is_cuda), None)

    def _run_cuda_from_host(self, tensors, scalars, sizes, shapes, host):
        """numpy arrays or CPU tensors given to a GPU kernel: copied to the GPU and back, so
        the same script runs on either target (outputs come back as the inputs' kind). They go
        to the device of the CUDA tensors passed with them, else to torch's current one."""
        try:
            import torch
        except ImportError:
            raise TileError(f"kernel {self.func.name} runs on the GPU ({self.arch}); passing it "
                            "host arrays needs torch with CUDA") from None
        if not torch.cuda.is_available():
            raise TileError(f"kernel {self.func.name} was compiled for {self.arch}, but no CUDA "
                            "GPU is usable here; compile it with target='interp' to run on "
                            "the CPU")
        like = self._on_one_device(tensors)
        device = like.device if like is not None else torch.device("cuda")
        use_torch = any(arrays.is_torch(t) for t in host.values())
        on_gpu = {}
        for k, t in tensors.items():
            if k in host:
                data = t if arrays.is_torch(t) else arrays.from_numpy(
                    np.ascontiguousarray(t), True)
                on_gpu[k] = data.contiguous().to(device)
            else:
                on_gpu[k] = t
        outputs, _ = self._run_cuda(on_gpu, scalars, sizes, shapes)
        for k, t in host.items():  # parameters the kernel may have written (atomics, stores)
            back = on_gpu[k].cpu()
            if arrays.is_torch(t):
                t.copy_(back)
            else:
                np.copyto(t, arrays.to_numpy(back, _name_of(self.params, k)))
        results = [o.cpu() for o in outputs]
        if not use_torch:
            results = [arrays.to_numpy(r, "output") for r in results]
        return results

    # --- inspection -----------------------------------------------------------
    def get_kernel_source(self, kernel_only: bool = True) -> str:
        """The CUDA source of a compiled kernel; the tile IR text on the interpreter; the
        lowered (thread-level) IR on the emulator. There is no host source to add to it
        (kernels launch through the driver API), so kernel_only=False gives the same text."""
        if not isinstance(kernel_only, bool):
            raise TileError(f"get_kernel_source: kernel_only takes True or False, got "
                            f"{kernel_only!r}")
        if self.program is not None:
            return self.program.source
        if self.backend == "emulator":
            return self.lowered.script()
        return self.func.script()

    @property
    def kernel_source(self) -> str:
        return self.get_kernel_source()

    def get_host_source(self) -> str:
        raise TileError(f"kernel {self.func.name} has no host source: tilecraft generates no "
                        "host code (kernels launch through the CUDA driver API from Python)")

    def show_source(self) -> None:
        """Print the kernel's source (TileLang's show_source / print_source_code)."""
        print(self.get_kernel_source())

    print_source_code = show_source

    @property
    def n_regs(self) -> int:
        return self.program.registers if self.program is not None else 0

    @property
    def n_spills(self) -> int:
        return self.program.spills if self.program is not None else 0

    @property
    def wgmma_serialized(self) -> dict:
        """Kernel name -> why ptxas issues its wgmma one at a time (empty when it does not)."""
        return self.program.wgmma_serialized if self.program is not None else {}

    @property
    def shared_memory(self) -> int:
        return self.program.shared_memory if self.program is not None else 0

    def get_profiler(self, tensor_supply_type=None):
        from .profiler import Profiler
        return Profiler(self, tensor_supply_type)

    def __repr__(self) -> str:
        where = self.arch or self.backend
        return f"<JITKernel {self.func.name} on {where}>"


def _name_of(params, key) -> str:
    return next(p.name for p in params if id(p) == key)


def _no_layouts_to_show(configs) -> None:
    """tl.layout_visualization_enable on the interpreter, which infers no layouts: said once
    per kernel rather than ignored."""
    from .pass_config import PassConfigKey
    if (configs or {}).get(PassConfigKey.TL_LAYOUT_VISUALIZATION_ENABLE):
        import warnings
        warnings.warn("tilecraft: tl.layout_visualization_enable shows the layouts inferred when "
                      "compiling for a GPU target (sm_80, sm_90a or the emulator); the "
                      "interpreter runs the tile program without layouts, so there are none to "
                      "show", stacklevel=3)


def _dump_tile_ir(func, configs) -> None:
    """With an IR dump asked for (TILECRAFT_DUMP_IR, tl.enable_dump_ir), the interpreter's
    program: the tile IR it runs, no pass having run (`<name>.00.tile_ir.txt`)."""
    import os
    from .pass_config import dump_dir
    directory = dump_dir(configs)
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{func.name}.00.tile_ir.txt"), "w") as f:
        f.write(func.script())
