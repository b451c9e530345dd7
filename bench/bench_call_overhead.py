"""Host time of calling a compiled kernel from Python, beside torch's own launches: the median
over calls of the time the call takes to return, each call made on an idle GPU (synchronized
before, not timed), so what is measured is the host's work, not a full launch queue.

Kernels: a one-line element-wise kernel in place (`x += 1` on one tensor, beside torch's
`x.add_(1)`) and returning a new tensor (beside torch's `x + 1`); MLA decode at KV 1024 (four
tensors in, one out, five TMA tensor maps), for which also the time per call of a loop of calls
left to run ahead (no synchronization) shows whether the host or the GPU sets the pace. Where
TileLang is installed, the two one-line kernels compiled by it from the same source are timed
too, and where Triton is, an empty Triton kernel. The cases alternate over rounds; each row is
the median of its rounds' medians.

    python3 bench/bench_call_overhead.py [--calls 2000] [--rounds 3] [--tag call_overhead]

Results: bench/overhead.md.
"""
import argparse
import time
from statistics import median

import torch

from common import B, D, H, OUT, PE, mla_inputs, torch_mla, write_results
from mla_decode import flash_mla_decode
from tilecraft.carver.recommend import underlying
import tilecraft
import tilecraft.language as T


def one_liners(T, jit, n=4096, block=256):
    """(x + 1 into a new tensor, x += 1 in place) written in `T`, compiled by `jit`."""
    @T.prim_func
    def add_one(A: T.Tensor((n,), "float32"), Out: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                Out[bx * block + i] = A[bx * block + i] + 1.0

    @T.prim_func
    def add_one_(A: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                A[bx * block + i] = A[bx * block + i] + 1.0

    return jit(add_one, out_idx=[-1]), jit(add_one_)


def peers():
    """[(name, call)] of TileLang's one-liners and an empty Triton kernel, where installed."""
    out = []
    try:
        import tilelang
        import tilelang.language as TL
    except ImportError:
        tilelang = None
    if tilelang is not None:
        x = torch.randn(4096, device="cuda")
        new, inplace = one_liners(TL, tilelang.compile)
        assert torch.equal(new(x), x + 1)
        out += [("TileLang add_one (x + 1, new tensor)", lambda: new(x)),
                ("TileLang add_one_ (x += 1, in place)", lambda: inplace(x))]
    try:
        import triton
    except ImportError:
        triton = None
    if triton is not None:
        @triton.jit
        def empty(x):
            pass
        y = torch.empty(1, device="cuda")
        empty[(1,)](y)
        out.append(("Triton empty kernel (one tensor)", lambda: empty[(1,)](y)))
    return out


def host_us(fn, calls):
    """Median host time of fn, each call on an idle GPU."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
        torch.cuda.synchronize()
    return median(times) / 1e3


def loop_us(fn, calls):
    """Time per call of `calls` calls left to run ahead, to the last one's end."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - start) / calls / 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="call_overhead")
    args = parser.parse_args()
    x = torch.randn(4096, device="cuda")
    new, inplace = one_liners(T, tilecraft.compile)
    assert torch.equal(new(x), x + 1)
    y = x.clone()
    inplace(y)
    assert torch.equal(y, x + 1)
    q, q_pe, kv, k_pe = mla_inputs(1024)
    mla = tilecraft.compile(underlying(flash_mla_decode)(B, H, 1, 1024, D, PE), out_idx=[-1],
                            pass_configs={"tl.enable_fast_math": True})
    ref = torch_mla(q.float(), q_pe.float(), kv.float(), k_pe.float())
    assert float((mla(q, q_pe, kv, k_pe).float() - ref).norm() / ref.norm()) < 1e-2
    cases = [("torch x.add_(1)", lambda: x.add_(1), False),
             ("add_one_ (x += 1, in place)", lambda: inplace(x), False),
             ("torch x + 1", lambda: x + 1, False),
             ("add_one (x + 1, new tensor)", lambda: new(x), False),
             ("torch empty_like (allocation alone)", lambda: torch.empty_like(q), False),
             ("MLA decode KV 1024", lambda: mla(q, q_pe, kv, k_pe), True),
             ("torch MLA reference (einsum + softmax)", lambda: torch_mla(q, q_pe, kv, k_pe),
              True)] + [(name, fn, False) for name, fn in peers()]
    times = {name: [] for name, _, _ in cases}
    loops = {name: [] for name, _, looped in cases if looped}
    for _ in range(args.rounds):
        for name, fn, looped in cases:
            times[name].append(host_us(fn, args.calls))
            if looped:
                loops[name].append(loop_us(fn, args.calls))
    add = median(times["torch x.add_(1)"])
    rows = []
    for name, _, looped in cases:
        row = {"call": name, "host_us": median(times[name]), "rounds": times[name],
               "vs_add_": median(times[name]) / add,
               "loop_us": median(loops[name]) if looped else None}
        rows.append(row)
        print(f"{name}: host {row['host_us']:.1f} us per call ({row['vs_add_']:.2f}x torch's "
              "x.add_(1))" + (f", {row['loop_us']:.1f} us per call in a loop" if looped else ""),
              flush=True)
    write_results(args.out, args.tag, rows, [
        ("call", lambda r: r["call"]), ("host us per call", lambda r: f"{r['host_us']:.1f}"),
        ("vs torch x.add_(1)", lambda r: f"{r['vs_add_']:.2f}"),
        ("us per call, looped", lambda r: "-" if r["loop_us"] is None else f"{r['loop_us']:.1f}")],
        notes=f"host: median over {args.rounds} rounds of the median over {args.calls} calls of "
              "the time a call takes to return, each on an idle GPU; looped: time per call of "
              "as many calls run back to back, to the last one's end (the larger of the host's "
              "and the GPU's pace).")


if __name__ == "__main__":
    main()
