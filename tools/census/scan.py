"""What an example file holds, read from its syntax tree without running it: the kernels it
defines (each `@T.prim_func` function, and each function that `@tilelang.jit` turns into a
kernel directly, TileLang's eager form), whether it has a `__main__` block, its `test_*`
functions, and whether it imports tilelang at all."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass(frozen=True)
class KernelDef:
    name: str
    line: int        # the first decorator's line: the function's co_firstlineno
    end_line: int
    eager: bool      # @tilelang.jit on the kernel itself (no nested @T.prim_func)


@dataclass
class FileScan:
    kernels: list = field(default_factory=list)
    factories: list = field(default_factory=list)  # (line, end_line) of each @jit function
    has_main: bool = False
    tests: list = field(default_factory=list)
    imports_tilelang: bool = False

    def kernel_at(self, line: int) -> KernelDef | None:
        """The innermost kernel whose source holds `line`."""
        inside = [k for k in self.kernels if k.line <= line <= k.end_line]
        return min(inside, key=lambda k: k.end_line - k.line) if inside else None

    def kernels_within(self, line: int, end_line: int) -> list:
        return [k for k in self.kernels if line <= k.line and k.end_line <= end_line]


def _dotted(node) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _first_line(fn) -> int:
    return min([d.lineno for d in fn.decorator_list] + [fn.lineno])


def _launches_kernel(fn) -> bool:
    """A `with T.Kernel(...)` in fn's own body (not in a nested function)."""
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, (ast.With, ast.AsyncWith)):
            if any(_dotted(item.context_expr).endswith("Kernel") for item in node.items):
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _is_main_guard(node) -> bool:
    return isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and \
        "__name__" in ast.unparse(node.test)


def scan_source(text: str) -> FileScan:
    tree = ast.parse(text)
    found = FileScan()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.imports_tilelang |= any(a.name.split(".")[0] == "tilelang" for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.imports_tilelang |= (node.module or "").split(".")[0] == "tilelang"
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = [_dotted(d) for d in node.decorator_list]
        if any(n.endswith("prim_func") for n in names):
            found.kernels.append(KernelDef(node.name, _first_line(node), node.end_lineno, False))
        elif any(n.split(".")[-1] == "jit" for n in names):
            found.factories.append((_first_line(node), node.end_lineno))
            if _launches_kernel(node):
                found.kernels.append(KernelDef(node.name, _first_line(node), node.end_lineno,
                                               True))
    for node in tree.body:
        if _is_main_guard(node):
            found.has_main = True
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            found.tests.append(node.name)
    found.kernels.sort(key=lambda k: k.line)
    return found


def scan_file(path: str) -> FileScan:
    with open(path, encoding="utf-8") as f:
        return scan_source(f.read())
