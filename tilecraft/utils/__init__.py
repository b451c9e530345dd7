"""TileLang's `tilelang.utils` names tilecraft has: `tensor` (TensorSupplyType, map_torch_type,
get_tensor_supply, torch_assert_close)."""
from . import tensor  # noqa: F401
