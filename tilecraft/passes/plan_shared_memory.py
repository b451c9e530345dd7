"""plan_shared_memory: place every shared buffer of a kernel in one dynamic arena.

Offsets are aligned to what each buffer's layout needs (a 128-byte swizzle repeats every 1024
bytes, and the bulk-copy engine wants its tiles at that alignment). Buffers are placed one after
another; the arena's size is the kernel's dynamic shared memory.
"""
from __future__ import annotations

import dataclasses

from ..errors import TileError
from ..ir.buffer import is_shared
from ..ir.stmt import Allocate
from ..ir.visitor import walk


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def plan_shared_memory(func, alignments: dict | None = None, limit: int | None = None):
    """func with attrs smem_offsets {id(buffer): byte offset} and smem_bytes [per kernel]."""
    alignments = alignments or {}
    offsets, sizes = {}, []
    for k in func.kernels():
        top = 0
        for n in walk(k.body):
            if isinstance(n, Allocate) and is_shared(n.buffer.scope) and id(n.buffer) not in offsets:
                b = n.buffer
                count = 1
                for d in b.shape:
                    count *= d
                start = _align(top, max(16, alignments.get(id(b), 16)))
                offsets[id(b)] = start
                top = start + count * b.dtype.bytes
        if limit is not None and top > limit:
            raise TileError(f"kernel needs {top} bytes of shared memory; the target allows "
                            f"{limit} per block (use smaller tiles or fewer stages)", k.span)
        sizes.append(top)
    attrs = dict(func.attrs)
    attrs["smem_offsets"] = offsets
    attrs["smem_bytes"] = sizes
    return dataclasses.replace(func, attrs=attrs)

