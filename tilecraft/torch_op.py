"""A compiled kernel as a torch custom operator, so that torch.compile traces a call to it.

torch.compile (dynamo) runs a function's Python symbolically and records the torch operations
it meets into a graph; the checks and launch code of a kernel call (numpy, ctypes) are not
such operations, so without help a call breaks the graph in several places and every call
recompiles. Registered as an operator of the `tilecraft` namespace (torch.library), the call is
one node of the graph instead:

- its schema follows the prim_func: a `Tensor` per tensor parameter the caller passes, an
  `int` / `float` / `bool` per scalar, the outputs (out_idx) returned; tensors the kernel
  writes (stores, copies, atomics into a parameter) are declared mutated (`Tensor(a!)`), so
  the compiler neither reorders nor drops the in-place calls;
- its fake implementation gives torch the outputs' shapes and dtypes without running
  anything, from the parameters' shapes: a symbolic size (T.symbolic / T.dynamic) follows the
  input dimension it is bound to, so a new size does not force a new graph of its own beyond
  what torch decides;
- its real implementation is the kernel's ordinary call, on CUDA tensors (launched on their
  device's current stream, which CUDA graphs capture) or on CPU tensors for the interpreter
  and emulator targets.

JITKernel.__call__ takes the operator while dynamo traces (torch.compiler.is_dynamo_compiling),
and for tensors autograd records or that torch.compile's later tracing made (fake tensors);
an eager call keeps its own fast path. The operator is made when the kernel is built if torch
is already imported (importing torch is not the interpreter's business), else at the first
eager call. (A kernel built before torch was imported and first called inside a compiled
function is registered in the middle of the trace, which dynamo cannot follow: call it once
eagerly, or build it after importing torch.)
"""
from __future__ import annotations

import itertools
import sys

from .ir.buffer import GLOBAL, Buffer
from .ir.expr import Const, Var
from .ir.stmt import BufferStore, Evaluate
from .ir.tileop import TileOp
from .ir.visitor import buffers_used, walk
from .kernel_args import bound_shape

NAMESPACE = "tilecraft"
_numbers = itertools.count()
_library = None     # the torch.library.Library of the namespace, made once


def written_parameters(func) -> set:
    """ids of the tensor parameters the kernel may write. A global buffer written that is not
    a parameter (a view not resolved to one) makes every tensor parameter count as written."""
    params = {id(p) for p in func.params if isinstance(p, Buffer)}
    out: set = set()
    for node in walk(func.body):
        if isinstance(node, BufferStore):
            written = [node.buffer]
        elif isinstance(node, TileOp):
            written = list(node.writes())
        elif isinstance(node, Evaluate):   # an intrinsic given a tensor's address may write it
            written = buffers_used(node)
        else:
            continue
        for b in written:
            if b.scope != GLOBAL:
                continue
            if id(b) not in params:
                return set(params)
            out.add(id(b))
    return out


def writes_an_argument(kernel) -> bool:
    """Whether the kernel writes a tensor the caller passes (not only its out_idx outputs)."""
    return bool(written_parameters(kernel.func) &
                {id(kernel.params[i]) for i in kernel.inputs})


def _scalar_type(p: Var) -> str:
    if p.dtype.name == "bool":
        return "bool"
    return "float" if p.dtype.is_float else "int"


def schema(kernel) -> str:
    """The operator's schema: `(Tensor A, Tensor(a0!) B, int n) -> Tensor`."""
    mutated = written_parameters(kernel.func)
    args = []
    for i in kernel.inputs:
        p = kernel.params[i]
        if isinstance(p, Buffer):
            alias = f"(a{len([a for a in args if '!' in a])}!)" if id(p) in mutated else ""
            args.append(f"Tensor{alias} {_identifier(p.name)}_{i}")
        else:
            args.append(f"{_scalar_type(p)} {_identifier(p.name)}_{i}")
    n = len(kernel.out_idx)
    result = "()" if n == 0 else "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
    return f"({', '.join(args)}) -> {result}"


def _identifier(name: str) -> str:
    """name made a plain identifier (schema argument and operator names)."""
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return clean if clean[:1].isalpha() else "k" + clean


def _fake_outputs(kernel, args):
    """Empty tensors of the outputs' shapes and dtypes on the first tensor argument's device,
    sizes bound from the arguments' (possibly symbolic) dimensions."""
    import torch
    sizes, like = {}, None
    for i, arg in zip(kernel.inputs, args):
        p = kernel.params[i]
        if isinstance(p, Buffer):
            like = arg if like is None else like
            for want, have in zip(p.shape, arg.shape):
                if isinstance(want, Var):
                    sizes.setdefault(id(want), have)
        else:
            sizes[id(p)] = arg
    outputs = []
    for i in kernel.out_idx:
        p = kernel.params[i]
        shape = [d if isinstance(d, int) else int(d.value) if isinstance(d, Const)
                 else sizes[id(d)] if isinstance(d, Var) and id(d) in sizes else None
                 for d in p.shape]
        if any(d is None for d in shape):   # a size computed from others: concrete values
            shape = list(bound_shape(p, {k: int(v) for k, v in sizes.items()})[0])
        device = like.device if like is not None else \
            "cuda" if kernel.backend == "cuda" else "cpu"
        outputs.append(torch.empty(shape, dtype=p.dtype.as_torch(), device=device))
    return _result(outputs)


def _result(outputs):
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def register(kernel, with_backward=False):
    """The kernel's operator (an OpOverload), registered now; None without torch.
    with_backward: its autograd formula is the caller's to register (differentiable)."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "library"):
        return None
    global _library
    if _library is None:
        _library = torch.library.Library(NAMESPACE, "FRAGMENT")
    name = f"{_identifier(kernel.func.name)}_{next(_numbers)}"
    _library.define(name + schema(kernel))
    qualified = f"{NAMESPACE}::{name}"

    def run(*args):
        return _result(_as_list(kernel.call_eager(args, from_op=True)))

    for key in ("CPU", "CUDA"):
        _library.impl(name, run, key)
    torch.library.register_fake(qualified, lambda *args: _fake_outputs(kernel, args),
                                lib=_library)
    if not with_backward and not writes_an_argument(kernel):
        # (torch takes autograd formulas for functional operators only; an in-place kernel
        # gets torch's own warning when a gradient flows through it)
        torch.library.register_autograd(qualified, _no_backward(kernel), lib=_library)
    return getattr(getattr(torch.ops, NAMESPACE), name).default


def _no_backward(kernel):
    """The backward of a kernel nobody gave one: an error naming the kernel, where torch
    would otherwise pass no gradient on without a word."""
    def backward(ctx, *grads):
        raise RuntimeError(
            f"tilecraft kernel {kernel.func.name} has no backward, and a gradient flows "
            "through its outputs; pair it with a backward kernel (tilecraft.differentiable), "
            "or call it on detached tensors (tensor.detach()) or under torch.no_grad()")
    return backward


def _as_list(result) -> list:
    if result is None:
        return []
    return list(result) if isinstance(result, (tuple, list)) else [result]


def differentiable(forward, backward, save=None):
    """A differentiable torch function made of a forward kernel and a backward.

    forward: a compiled kernel (tilecraft.compile / tilecraft.jit) whose outputs are out_idx.
    backward: called as backward(*saved, *grad_outputs) when a gradient flows back, with one
    gradient per forward output (None for an output the loss does not depend on); it returns
    one gradient per forward argument the caller passes, None where there is none (scalars,
    indices), and may call compiled kernels and torch operations alike.
    save: the forward parameters, by name, whose tensors backward receives (inputs and
    outputs alike), in that order; by default every tensor argument, then every output.

    The result takes the forward's arguments and returns its outputs, with autograd recording
    the call; it is a torch operator, so torch.compile traces it (its backward too) as one
    node of the graph.
    """
    if not all(hasattr(forward, a) for a in ("func", "out_idx", "inputs", "call_eager")):
        raise TypeError(f"tilecraft.differentiable: forward must be a compiled kernel, got "
                        f"{type(forward).__name__}")
    if not callable(backward):
        raise TypeError("tilecraft.differentiable: backward must be callable (a kernel or a "
                        "function of the saved tensors and the output gradients)")
    import torch
    names = [p.name for p in forward.params]
    outputs = {i: n for n, i in enumerate(forward.out_idx)}
    if save is None:
        picked = [i for i in forward.inputs if isinstance(forward.params[i], Buffer)] + \
            list(forward.out_idx)
    else:
        unknown = [n for n in save if n not in names or
                   not isinstance(forward.params[names.index(n)], Buffer)]
        if unknown:
            raise TypeError(f"tilecraft.differentiable: save names {unknown}, not tensor "
                            f"parameters of {forward.func.name} ({', '.join(names)})")
        picked = [names.index(n) for n in save]
    if writes_an_argument(forward):
        raise TypeError(f"tilecraft.differentiable: {forward.func.name} writes one of its "
                        "arguments in place; a differentiable forward returns new tensors "
                        "(out_idx) only")
    op = register(forward, with_backward=True)
    position = {i: k for k, i in enumerate(forward.inputs)}

    def setup_context(ctx, inputs, output):
        results = [output] if len(forward.out_idx) == 1 else list(output or ())
        ctx.save_for_backward(*[results[outputs[i]] if i in outputs else inputs[position[i]]
                                for i in picked])

    def backward_of_op(ctx, *grads):
        got = backward(*ctx.saved_tensors, *grads)
        got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
        if len(got) != len(forward.inputs):
            raise RuntimeError(
                f"the backward of {forward.func.name} returned {len(got)} gradient(s); it "
                f"takes {len(forward.inputs)} argument(s) "
                f"({', '.join(names[i] for i in forward.inputs)}): return one for each, None "
                "where there is none")
        return got

    torch.library.register_autograd(op._schema.name, backward_of_op,
                                    setup_context=setup_context, lib=_library)

    def call(*args):
        return op(*args)
    call.__name__ = call.__qualname__ = forward.func.name
    call.__doc__ = f"{forward.func.name}, differentiable (tilecraft.differentiable)"
    return call
