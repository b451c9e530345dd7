"""Inputs for a kernel's parameters: random values of each one's shape and dtype, drawn on the
host by numpy or on the GPU by torch, per TensorSupplyType (TileLang's kinds of input)."""
from __future__ import annotations

from enum import IntEnum

import numpy as np

from .. import arrays
from ..errors import TileError
from ..ir.buffer import Buffer


class TensorSupplyType(IntEnum):
    """Integer: -2..2 (unsigned 0..2); Uniform: in [-1, 1); Normal: mean -1, deviation 1 (as
    TileLang draws it); Randn: mean 0, deviation 1; Zero, One; Auto: the profiler's choice.
    Integer and boolean parameters are -2..2 (0..2 unsigned, 0..1 bool) but for Zero / One."""
    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


class _NumpyRandom:
    """Values for host arrays, from a numpy Generator."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def full(self, shape, value, d):
        return np.full(shape, value, d.numpy)

    def integers(self, low, high, shape):
        return self.rng.integers(low, high, shape)

    def normal(self, shape):
        return self.rng.standard_normal(shape)

    def uniform(self, shape):
        return self.rng.uniform(-1.0, 1.0, shape)

    def cast(self, values, d):
        # through float32: numpy cannot convert float64 to every ml_dtypes type directly
        return values.astype(np.float32).astype(d.numpy) if d.is_float else values.astype(d.numpy)


class TorchRandom:
    """Values drawn on the GPU by torch, seeded: an 8192 x 8192 input drawn by numpy and copied
    over costs about a second. The same distributions as on the host, not the same numbers."""

    def __init__(self, seed: int, device: str = "cuda"):
        import torch
        self.torch, self.device = torch, device
        self.gen = torch.Generator(device=device).manual_seed(seed)

    def full(self, shape, value, d):
        return self.torch.full(shape, value, dtype=arrays.torch_dtype(d), device=self.device)

    def integers(self, low, high, shape):
        return self.torch.randint(low, high, shape, generator=self.gen, device=self.device)

    def normal(self, shape):
        return self.torch.randn(shape, generator=self.gen, device=self.device)

    def uniform(self, shape):
        return self.torch.rand(shape, generator=self.gen, device=self.device) * 2 - 1

    def cast(self, values, d):
        return (values.float() if d.is_float else values).to(arrays.torch_dtype(d))


def make_input(p: Buffer, supply: TensorSupplyType, rng, shape: tuple | None = None):
    """Random values for input p: rng is a numpy Generator (a host array) or a TorchRandom (a
    tensor on its device). `shape`: p's shape with its symbolic sizes bound (default: p's
    static shape)."""
    draw = rng if isinstance(rng, TorchRandom) else _NumpyRandom(rng)
    shape = shape if shape is not None else p.static_shape()
    if shape is None:
        raise TileError(f"cannot make an input for {p.name}: its shape is symbolic; pass "
                        "input_tensors, or dynamic_symbolic_constraints={name: size}")
    d = p.dtype
    if supply in (TensorSupplyType.Zero, TensorSupplyType.One):
        return draw.full(shape, int(supply == TensorSupplyType.One), d)
    if d.is_bool:
        return draw.cast(draw.integers(0, 2, shape), d)
    if d.is_int:
        return draw.cast(draw.integers(0 if d.is_unsigned else -2, 3, shape), d)
    if supply == TensorSupplyType.Normal:
        values = draw.normal(shape) - 1.0   # TileLang's: mean -1, deviation 1
    elif supply == TensorSupplyType.Randn:
        values = draw.normal(shape)
    elif supply == TensorSupplyType.Integer:
        values = draw.integers(-2, 3, shape)
    else:
        values = draw.uniform(shape)
    return draw.cast(values, d)
