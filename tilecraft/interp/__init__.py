"""The tile-level reference interpreter (numpy): the CPU target and the semantic oracle."""
from .machine import Machine, register_extern
from .values import Pointer
