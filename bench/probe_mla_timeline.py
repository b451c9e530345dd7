"""Per-block timeline of MLA decode: %globaltimer stamps patched into the generated source of
examples/mla_decode.py (B64 H128, dim 512 + 64, the default 64 x 64 tiles, 2 stages, seesaw) at
a block's entry, when the query and the first KV block have landed, at the end of each
warpgroup's loop, when the output's TMA store is issued and at the block's exit; written to a
torch buffer whose address is compiled in. Each run is synchronized and preceded by an L2 flush
(dirty: a 256 MiB buffer overwritten; clean: read); per stamp, the median over 35 runs of the
earliest, median and latest block, from the earliest entry, then per-block spans.

    python3 bench/probe_mla_timeline.py 1024,4096 builtin
"""
import os
import sys
from statistics import median

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]
import probe_mla_memory as probe  # noqa: E402
from bench_gemm import warm_gpu  # noqa: E402
from bench_mla import mla_inputs, torch_mla  # noqa: E402

GT = ('__device__ __forceinline__ unsigned long long tc_gt() { unsigned long long t; '
      'asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); return t; }\n'
      '__device__ __forceinline__ unsigned tc_smid() { unsigned s; '
      'asm volatile("mov.u32 %0, %smid;" : "=r"(s)); return s; }\n')
NAMES = ["entry", "smid", "q_ready", "kv0_ready", "wg0_loop_end", "wg1_loop_end",
         "store_issued", "exit", "producer_done", "slot_freed_k2", "wg1_kv1_ready"]


def sub(src, old, new, count=1):
    assert src.count(old) == count, (old, src.count(old))
    return src.replace(old, new)


def trace(addr):
    def patch(src):
        src = src.replace('extern "C"', GT + 'extern "C"', 1)
        src = sub(src, "  const int by = tc_raster.y;\n", "  const int by = tc_raster.y;\n"
                  f"  unsigned long long* tc_tr = (unsigned long long*){addr}ULL + "
                  "(blockIdx.y * gridDim.x + blockIdx.x) * 16;\n"
                  "  if (tx == 0) { tc_tr[0] = tc_gt(); tc_tr[1] = tc_smid(); }\n")
        src = sub(src, "    tc::mbarrier_wait_parity((&tma_ready[0]), 0);\n",
                  "    tc::mbarrier_wait_parity((&tma_ready[0]), 0);\n"
                  "    if (tx == 0) tc_tr[2] = tc_gt();\n")
        old = ("        tc::mbarrier_wait_parity((&tma_full[0]), 2 * k2 / 2 % 2);\n"
               "        tc::wgmma_fence();")
        src = src.replace(old, old.replace("\n        tc::wgmma_fence();",
                          "\n        if (tx == 0 && k2 == 0) tc_tr[3] = tc_gt();"
                          "\n        tc::wgmma_fence();"), 1)
        old = ("        tc::mbarrier_wait_parity((&tma_full[1]), (2 * k2 + 1) / 2 % 2);\n"
               "        tc::wgmma_fence();")
        src = sub(src, old, old.replace("\n        tc::wgmma_fence();",
                  "\n        if (wtx == 0 && k2 == 0) tc_tr[10] = tc_gt();"
                  "\n        tc::wgmma_fence();"))
        src = sub(src, "    // mla_decode.py:58\n    logsum[0] = logsum_wg[0];",
                  "    if (wtx == 0) tc_tr[4 + tx / 128] = tc_gt();\n"
                  "    // mla_decode.py:58\n    logsum[0] = logsum_wg[0];")
        src = sub(src, "      tc::tma_store_commit();\n",
                  "      tc::tma_store_commit();\n      tc_tr[6] = tc_gt();\n")
        src = sub(src, "  tc::tma_store_wait<0>();\n}", "  tc::tma_store_wait<0>();\n"
                  "  if (tx == 0) tc_tr[7] = tc_gt();\n}")
        src = sub(src, "      }\n    }\n  } else {\n    tc::setmaxnreg_inc",
                  "      }\n      tc_tr[8] = tc_gt();\n    }\n  } else {\n    tc::setmaxnreg_inc")
        old = "        tc::mbarrier_wait_parity((&tma_empty[k % 2]), k / 2 % 2 ^ 1);\n"
        src = sub(src, old, old + "        if (k == 2) tc_tr[9] = tc_gt();\n")
        return src
    return patch


def main():
    os.environ["TILECRAFT_DISABLE_CACHE"] = "1"
    warm_gpu()
    buf = torch.zeros(4096 * 16, dtype=torch.int64, device="cuda")
    probe.ARMS["trace"] = trace(buf.data_ptr())
    scratch = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    for seqlen in (int(x) for x in sys.argv[1].split(",")):
        q, q_pe, kv, k_pe = mla_inputs(seqlen)
        ref = torch_mla(q.float(), q_pe.float(), kv.float(), k_pe.float())
        for arm in sys.argv[2].split(","):
            kern = probe.build(seqlen, arm + "+trace")
            out = kern(q, q_pe, kv, k_pe)
            print(arm, "rel err %.1e" % float((out.float() - ref).norm() / ref.norm()))
            for flush in ("dirty", "clean"):
                rows, times = [], []
                for it in range(40):
                    scratch.zero_() if flush == "dirty" else scratch.sum()
                    s, e = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                    s.record()
                    kern(q, q_pe, kv, k_pe)
                    e.record()
                    torch.cuda.synchronize()
                    if it < 5:
                        continue
                    t = buf[:128 * 16].view(128, 16).cpu()
                    times.append(s.elapsed_time(e) * 1000)
                    rows.append(t)
                # (each run waits for the host's launch: the event time includes it)
                print(f"KV {seqlen} {arm} {flush}: event median {median(times):.1f} us")
                stats = {}
                for i, name in enumerate(NAMES):
                    if name == "smid":
                        continue
                    per = []
                    for t in rows:
                        t0 = int(t[:, 0].min())
                        col = sorted(int(v) - t0 for v in t[:, i])
                        per.append((col[0], col[len(col) // 2], col[-1]))
                    stats[name] = [median(p[j] for p in per) / 1000 for j in range(3)]
                    print(f"  {name:14s} min {stats[name][0]:6.1f}  med {stats[name][1]:6.1f}  "
                          f"max {stats[name][2]:6.1f} us")
                # per-block durations
                for a, b in (("entry", "q_ready"), ("q_ready", "kv0_ready"),
                             ("kv0_ready", "wg0_loop_end"), ("wg0_loop_end", "store_issued"),
                             ("store_issued", "exit")):
                    ia, ib = NAMES.index(a), NAMES.index(b)
                    d = [median(sorted(int(x) for x in (t[:, ib] - t[:, ia]))) for t in rows]
                    print(f"  per-block {a}->{b}: median {median(d) / 1000:.2f} us")


if __name__ == "__main__":
    main()
