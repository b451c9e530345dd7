"""TileLang's `tilelang.transform` names scripts import: PassConfigKey."""
from .pass_config import PassConfigKey  # noqa: F401
