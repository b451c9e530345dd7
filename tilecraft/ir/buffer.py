"""Buffers (a named n-d array in one memory scope) and rectangular regions of them."""
from __future__ import annotations

from dataclasses import dataclass, field

from .dtypes import DType
from .expr import BufferLoad, Const, Expr, convert
from ..errors import Span, TileError, current_span

# Scopes, as TileLang names them.
GLOBAL = "global"
SHARED = "shared.dyn"
FRAGMENT = "local.fragment"
LOCAL = "local"
LOCAL_VAR = "local.var"
SCOPES = (GLOBAL, SHARED, "shared", FRAGMENT, LOCAL, LOCAL_VAR)


def is_shared(scope: str) -> bool:
    return scope.startswith("shared")


@dataclass(eq=False)
class Buffer:
    name: str
    shape: tuple  # ints, or Exprs for symbolic dims
    dtype: DType
    scope: str = GLOBAL
    span: Span | None = field(default=None, repr=False)
    # (lo, hi) every element is known to stay in, for the integer bounds of index arithmetic
    # (a count the compiler keeps, such as a persistent kernel's ring rounds); None: unknown.
    value_bounds: tuple | None = field(default=None, repr=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def static_shape(self) -> tuple | None:
        """The shape as Python ints, or None when a dim is symbolic."""
        out = []
        for s in self.shape:
            if isinstance(s, int):
                out.append(s)
            elif isinstance(s, Const):
                out.append(int(s.value))
            else:
                return None
        return tuple(out)

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n = n * s
        return n

    @property
    def data(self) -> "BufferData":
        """The buffer's storage, as TileLang's `T.Tensor(shape, dtype, A.data)` takes it to
        view it in another shape."""
        return BufferData(self)

    def __getitem__(self, key):
        """`A[i, j]` is a load (tile origin when used by T.copy); `A[a:b, :]` a region."""
        span = current_span()
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is Ellipsis for k in key):
            raise TileError(f"buffer {self.name}: `...` is not supported in an index", span)
        if len(key) != self.ndim:
            raise TileError(f"buffer {self.name} has {self.ndim} dimension(s) but is indexed "
                            f"with {len(key)}", span)
        if any(isinstance(k, slice) for k in key):
            return BufferRegion.from_slices(self, key, span)
        return BufferLoad(self, tuple(_index(self, k, d, span) for d, k in enumerate(key)), span)

    def __setitem__(self, key, value):
        raise TileError(f"buffer {self.name}: element stores are only allowed inside a kernel "
                        "body", None)

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype}, {self.scope})"

    def region(self) -> "BufferRegion":
        return BufferRegion(self, tuple((convert(0), _dim_expr(s)) for s in self.shape))


@dataclass(frozen=True, eq=False)
class BufferData:
    """A buffer's storage (`A.data`): what a view of it in another shape is made from."""
    buffer: Buffer


def _dim_expr(s) -> Expr:
    return convert(s) if not isinstance(s, Expr) else s


def _index(buffer: Buffer, k, d: int, span) -> Expr:
    from .expr import is_python_number
    if not isinstance(k, Expr) and not is_python_number(k):
        raise TileError(f"buffer {buffer.name}: index {d} must be an integer expression, "
                        f"got {type(k).__name__}", span)
    e = convert(k)
    if not (e.dtype.is_int or e.dtype.is_bool):
        raise TileError(f"buffer {buffer.name}: index {d} has type {e.dtype}; indices must be "
                        "integers", span)
    if isinstance(e, Const):
        extent = buffer.shape[d]
        if e.value < 0 or (isinstance(extent, int) and e.value >= extent and
                           buffer.scope != GLOBAL):
            raise TileError(f"buffer {buffer.name}: index {e.value} is out of range for "
                            f"dimension {d} of extent {extent}", span)
    return e


@dataclass(eq=False)
class BufferRegion:
    """A rectangle of a buffer: per dimension (start, extent)."""
    buffer: Buffer
    ranges: tuple  # of (start Expr, extent Expr)
    span: Span | None = field(default=None, repr=False)

    @staticmethod
    def from_slices(buffer: Buffer, key, span) -> "BufferRegion":
        from .linear import simplify
        ranges = []
        for d, k in enumerate(key):
            if isinstance(k, slice):
                if k.step is not None:
                    raise TileError(f"buffer {buffer.name}: slices with a step are not supported",
                                    span)
                start = convert(0) if k.start is None else _index(buffer, k.start, d, span)
                stop = _dim_expr(buffer.shape[d]) if k.stop is None else convert(k.stop)
                extent = simplify(stop - start)
                if isinstance(extent, Const) and extent.value <= 0:
                    raise TileError(f"buffer {buffer.name}: slice of dimension {d} is empty "
                                    f"(extent {extent.value})", span)
                ranges.append((simplify(start), extent))
            else:
                ranges.append((_index(buffer, k, d, span), convert(1)))
        return BufferRegion(buffer, tuple(ranges), span)

    @property
    def extents(self) -> tuple:
        return tuple(e for _, e in self.ranges)

    @property
    def starts(self) -> tuple:
        return tuple(s for s, _ in self.ranges)

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype

    def covers_whole(self) -> bool:
        """The region is its whole buffer."""
        from .linear import constant_value, equal
        return all(constant_value(start) == 0 and equal(extent, size)
                   for (start, extent), size in zip(self.ranges, self.buffer.shape))

    def static_extents(self) -> tuple | None:
        out = []
        for e in self.extents:
            if not isinstance(e, Const):
                return None
            out.append(int(e.value))
        return tuple(out)


def region_of(x, span=None) -> BufferRegion:
    """A tile-op operand as a region: a whole buffer, a slice, or a single element."""
    if isinstance(x, BufferRegion):
        return x
    if isinstance(x, Buffer):
        return x.region()
    if isinstance(x, BufferLoad):
        return BufferRegion(x.buffer, tuple((i, convert(1)) for i in x.indices), x.span or span)
    raise TileError(f"expected a buffer, a buffer slice or a buffer element, got "
                    f"{type(x).__name__}", span)


def row_major_offset(load: BufferLoad):
    """The element offset of a load in its buffer laid out row-major (a tensor's layout), or
    None when the buffer's shape is not static."""
    shape = load.buffer.shape
    if not all(isinstance(x, int) for x in shape):
        return None
    offset, stride = None, 1
    for idx, extent in zip(reversed(load.indices), reversed(shape)):
        term = idx * stride if stride != 1 else idx
        offset = term if offset is None else term + offset
        stride *= extent
    return offset
