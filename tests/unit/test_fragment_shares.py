"""No thread keeps more of a fragment than its share: for every example's kernels, in the CUDA
generated for sm_80 and sm_90a (no GPU or nvcc needed), each per-thread array `T name[N];` of a
fragment is at most its share of the tile (elements / threads), with a small allowance for
the replication layout inference chooses on purpose:

- twice the share (rounded up): a loop that reads x[i, j // 2] from threads that split the
  pair (i, 2m), (i, 2m + 1) keeps element (i, m) in both;
- 64 bytes (16 registers) in all: a reduction's result is kept by every thread that held part
  of its row, and a fragment every row of a loop reads (x[j] in a loop over (i, j)) by every
  thread that runs its column; both are small vectors;
- none for a fragment the compiler warned about (no partition over the threads exists for it,
  as for G[r] - G[i]): the warning is the documented outcome.

This is what keeps a fragment such as dequant_gemv's 64 x 64 bytes of packed weights from
being copied whole into each of the block's threads (it was: 4096 bytes per thread)."""
import importlib.util
import math
import re
import warnings
from pathlib import Path

import pytest

from tilecraft.backends.cuda.codegen.cuda import emit_cuda
from tilecraft.ir.buffer import FRAGMENT
from tilecraft.ir.stmt import Allocate
from tilecraft.ir.visitor import walk
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.rules import CUDA_RULES

ROOT = Path(__file__).resolve().parents[2]
ARCHS = ("sm_80", "sm_90a")
ALLOWANCE_BYTES = 64



def _compiled_examples():
    """tests/toolkit/test_compile_kernels.py's list of each example's kernels at a GPU-sized
    configuration, which that tier compiles with nvcc: (module, factory, args, per-arch
    kwargs)."""
    spec = importlib.util.spec_from_file_location(
        "compile_kernels", ROOT / "tests" / "toolkit" / "test_compile_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.EXAMPLES


# The same, and the GEMV at a decoding shape, whose packed-weight tile is the largest fragment.
EXAMPLES = _compiled_examples() + [("dequant_gemm", "dequant_gemv", (1, 8192, 8192), {})]

DECLARATION = re.compile(r"^\s*[A-Za-z_][\w:]*(?:\s+[A-Za-z_]\w*)?\s+([A-Za-z_]\w*)\[(\d+)\];",
                         re.M)
NO_PARTITION = re.compile(r"no partition over the threads exists for fragment (\w+)")


def _func(module_name, factory, args, kwargs):
    path = ROOT / "examples" / f"{module_name}.py"
    spec = importlib.util.spec_from_file_location(f"shares_{module_name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, factory).__wrapped__(*args, **kwargs)


def per_thread_arrays(source: str) -> dict:
    """name -> elements of each per-thread array the CUDA source declares."""
    return {name: int(n) for name, n in DECLARATION.findall(source)}


def oversized(func, arch):
    """(message per fragment array beyond its allowance, fragments found in the source)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source, _ = emit_cuda(pipelines.cuda(func, arch))
    unpartitioned = {m.group(1) for w in caught for m in [NO_PARTITION.search(str(w.message))]
                     if m}
    arrays = per_thread_arrays(source)
    bad, found = [], 0
    for kernel in func.kernels():
        for node in walk(kernel.body):
            if not isinstance(node, Allocate) or node.buffer.scope != FRAGMENT:
                continue
            b = node.buffer
            if b.name not in arrays:
                continue
            found += 1
            elements = math.prod(b.static_shape())
            share = math.ceil(elements / kernel.num_threads)
            allowed = max(2 * share, ALLOWANCE_BYTES // b.dtype.bytes)
            if arrays[b.name] > allowed and b.name not in unpartitioned:
                bad.append(f"{b.name}[{arrays[b.name]}]: a {b.static_shape()} {b.dtype} tile "
                           f"over {kernel.num_threads} threads (share {share}, allowed "
                           f"{allowed})")
    return bad, found


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("module_name, factory, args, per_arch", EXAMPLES,
                         ids=[f"{e[1]}{'x'.join(map(str, e[2][:3]))}" for e in EXAMPLES])
def test_no_thread_keeps_more_than_its_share(module_name, factory, args, per_arch, arch):
    func = _func(module_name, factory, args, per_arch.get(arch, {}))
    bad, found = oversized(func, arch)
    assert found, "no fragment array found in the source: the declaration pattern is stale"
    assert not bad, "\n".join(bad)


def test_the_declaration_pattern():
    source = ("  half_t A_local[32];\n  unsigned char B_packed_local[32];\n"
              "  float prod[64];\n  x[3] = 1;\n")
    assert per_thread_arrays(source) == {"A_local": 32, "B_packed_local": 32, "prod": 64}


def test_a_fragment_no_partition_follows_is_named_at_its_line():
    import tilecraft.language as T
    from tilecraft.passes.infer_layouts import infer_layouts

    @T.prim_func
    def main(G: T.Tensor((32,), "float32"), Y: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            g = T.alloc_fragment((32,), "float32")
            o = T.alloc_fragment((32, 32), "float32")
            T.copy(G, g)
            for r, i in T.Parallel(32, 32):
                o[r, i] = g[r] - g[i]  # <- two positions
            T.copy(o, Y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        infer_layouts(main.kernels()[0], CUDA_RULES)
    found = [w for w in caught if NO_PARTITION.search(str(w.message))]
    assert len(found) == 1 and NO_PARTITION.search(str(found[0].message)).group(1) == "g"
    assert "g[r], g[i]" in str(found[0].message)
    lines = Path(__file__).read_text().splitlines()
    assert "# <- two positions" in lines[found[0].lineno - 1]
    assert found[0].filename == __file__


def test_a_free_layout_keeps_every_thread_busy():
    """The GEMV's tiles staged through shared memory: no global copy ranks the fragments'
    layouts, and one that deals each thread 64 consecutive weights of a row (half the 256
    threads idle, but a row's reduction within one warp) looked cheaper than 32 weights a
    thread until the cost counted the nest's arithmetic done by its busiest thread."""
    func = _func("dequant_gemm", "dequant_gemv_fast", (1, 8192, 8192),
                 dict(block_N=4, block_K=2048, threads=256, num_stages=3, through_shared=True))
    source, _ = emit_cuda(pipelines.cuda(func, "sm_90a"))
    arrays = per_thread_arrays(source)
    assert arrays["partial"] == 4 * 2048 // 256 and arrays["B_local"] == 16
    assert "tx < 128" not in source
