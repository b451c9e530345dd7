"""TileLang's `tilelang.utils.tensor`: input supplies, torch dtypes by name, and
torch_assert_close (equal up to a tolerance on all but a fraction of the elements)."""
from __future__ import annotations

import numpy as np

from .. import arrays
from ..errors import TileError
from ..ir import dtypes as dt
from ..profiler.compare import mismatch
from ..profiler.supply import TensorSupplyType, TorchRandom, make_input

__all__ = ["TensorSupplyType", "map_torch_type", "get_tensor_supply", "torch_assert_close"]


_torch = arrays.import_torch


def map_torch_type(intype):
    """The torch dtype of a dtype name: tilecraft's and TileLang's names ("float16", "half",
    "e4m3_float8", "float8_e4m3fn") and any name torch itself has ("float8_e4m3fnuz")."""
    torch = _torch()
    try:
        return dt.dtype(intype).as_torch()
    except (ValueError, TypeError):
        pass
    found = getattr(torch, str(intype), None) if isinstance(intype, str) else None
    if isinstance(found, torch.dtype):
        return found
    raise TileError(f"map_torch_type: {intype!r} names no torch dtype")


def get_tensor_supply(supply_type: TensorSupplyType = TensorSupplyType.Integer):
    """A function of a kernel parameter (kernel.params[i]) returning a torch tensor of its
    shape and dtype, values per supply_type; on the current GPU when torch has one."""
    supply = TensorSupplyType(supply_type)
    draws = []

    def get_tensor(param):
        torch = _torch()
        if not hasattr(param, "static_shape"):
            raise TileError(f"get_tensor_supply: {getattr(param, 'name', param)!r} is not a "
                            "tensor parameter")
        if torch.cuda.is_available():
            rng = TorchRandom(len(draws), "cuda")
        else:
            rng = np.random.default_rng(len(draws))
        draws.append(param)
        value = make_input(param, supply, rng)
        return value if arrays.is_torch(value) else arrays.from_numpy(value, True)

    return get_tensor


def _attributes_differ(a, b, check_device, check_dtype, check_layout, check_stride):
    """The first attribute (name, a's, b's) in which two tensors differ, or None."""
    checks = [("shape", tuple(a.shape), tuple(b.shape))]
    if arrays.is_torch(a) and arrays.is_torch(b):
        if check_layout:
            checks.append(("layout", a.layout, b.layout))
        if check_stride:
            checks.append(("stride()", a.stride(), b.stride()))
        if check_device:
            checks.append(("device", a.device, b.device))
    if check_dtype:
        checks.append(("dtype", a.dtype, b.dtype))
    return next(((n, x, y) for n, x, y in checks if x != y), None)


def torch_assert_close(tensor_a, tensor_b, rtol=1e-2, atol=1e-3, max_mismatched_ratio=0.001,
                       verbose: bool = False, equal_nan: bool = True, check_device: bool = True,
                       check_dtype: bool = True, check_layout: bool = True,
                       check_stride: bool = False, base_name: str = "LHS",
                       ref_name: str = "RHS"):
    """AssertionError unless a and b (torch tensors or numpy arrays) agree in shape (and, as
    asked, device, dtype, layout, stride) and at most int(numel * max_mismatched_ratio)
    elements differ beyond atol + rtol * |b|. Returns True."""
    differ = _attributes_differ(tensor_a, tensor_b, check_device, check_dtype, check_layout,
                                check_stride)
    if differ is not None:
        name, x, y = differ
        raise AssertionError(f"The values for attribute '{name}' do not match: {x} != {y}.")
    found = mismatch(tensor_a, tensor_b, atol, rtol, equal_nan)
    allowed = int(found.total * max_mismatched_ratio)
    if verbose:
        print(f"Number of mismatched elements: {found.count} / {found.total} "
              f"(allowed: {allowed})")
    if found.count > allowed:
        raise AssertionError(
            f"Too many mismatched elements: {found.count} > {allowed} "
            f"({max_mismatched_ratio * 100:.2f}% allowed, but got "
            f"{found.count / max(1, found.total) * 100:.2f}%); "
            f"{found.describe_first(base_name, ref_name)}; greatest absolute difference "
            f"{found.max_abs_diff()}")
    return True
