"""Host time of calling a compiled kernel from Python, beside torch's own launches: the median
over calls of the time the call takes to return, each call made on an idle GPU (synchronized
before, not timed), so what is measured is the host's work, not a full launch queue.

Two kernels: a one-line element-wise kernel (one tensor in, one out) and MLA decode at KV 1024
(four tensors in, one out, five TMA tensor maps); for the second, also the time per call of a
loop of calls left to run ahead (no synchronization), which shows whether the host or the GPU
sets the pace.

    python3 bench/bench_call_overhead.py [--calls 2000] [--tag call_overhead]

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


@tilecraft.jit(out_idx=[-1])
def add_one(n, block=256):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), Out: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                Out[bx * block + i] = A[bx * block + i] + 1.0
    return main


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
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="call_overhead")
    args = parser.parse_args()
    x = torch.randn(4096, device="cuda")
    small = add_one(4096)
    assert torch.equal(small(x), x + 1)
    q, q_pe, kv, k_pe = mla_inputs(1024)
    mla = tilecraft.compile(underlying(flash_mla_decode)(B, H, 1, 1024, D, PE), out_idx=[-1],
                            pass_configs={"tl.enable_fast_math": True})
    ref = torch_mla(q.float(), q_pe.float(), kv.float(), k_pe.float())
    assert float((mla(q, q_pe, kv, k_pe).float() - ref).norm() / ref.norm()) < 1e-2
    cases = [("torch x + 1", lambda: x + 1, False),
             ("add_one (jit call)", lambda: small(x), False),
             ("torch empty_like (allocation alone)", lambda: torch.empty_like(q), False),
             ("MLA decode KV 1024 (jit call)", lambda: mla(q, q_pe, kv, k_pe), True),
             ("torch MLA reference (einsum + softmax)", lambda: torch_mla(q, q_pe, kv, k_pe),
              True)]
    rows = []
    for name, fn, looped in cases:
        row = {"call": name, "host_us": host_us(fn, args.calls),
               "loop_us": loop_us(fn, args.calls) if looped else None}
        rows.append(row)
        print(f"{name}: host {row['host_us']:.1f} us per call"
              + (f", {row['loop_us']:.1f} us per call in a loop" if looped else ""), flush=True)
    write_results(args.out, args.tag, rows, [
        ("call", lambda r: r["call"]), ("host us per call", lambda r: f"{r['host_us']:.1f}"),
        ("us per call, looped", lambda r: "-" if r["loop_us"] is None else f"{r['loop_us']:.1f}")],
        notes=f"host: median over {args.calls} calls of the time a call takes to return, each "
              "on an idle GPU; looped: time per call of as many calls run back to back, to the "
              "last one's end (the larger of the host's and the GPU's pace).")


if __name__ == "__main__":
    main()
