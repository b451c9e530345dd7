"""Probes of where MLA decode's memory time goes: each arm patches the generated CUDA source of
examples/mla_decode.py (B64 H128, dim 512 + 64) and is timed beside torch and the unpatched
kernel, in rounds. The compiler's own L2 prefetch (tileops/prefetch.py) is turned off in every
arm but those with `builtin`, so the arms that prefetch compare against none.

  l2res   every iteration loads KV block k % 2: after the first two blocks the loads hit L2, so
          the loop runs as if DRAM cost nothing (the numbers are wrong on purpose; a ceiling)
  order   warpgroup 1 issues its score gemm only after warpgroup 0 has issued its own
  bulkN   the producer prefetches block k + N into L2 (cp.async.bulk.prefetch.L2) after issuing
          block k, each of the two head-group blocks half of it
  fullN   the same, each block all of it (what tileops/prefetch.py does, for N = 1)
  odd2    after issuing an odd block k (the second of a pair), each block prefetches all of
          block k + 2: the next pair's second block (warpgroup 1's, loaded last, when the
          pair's last stage frees) is on its way a whole pair ahead
  tensorN the same, one TMA tensor prefetch per box
  evictq / evictkv / evict   the query's, the KV's or both TMA loads carry an L2 evict_first hint
  evicto  the output's TMA stores carry an L2 evict_first hint
  box     one mbarrier per TMA box of the query and of each KV stage; the score gemm waits for
          each box just before the k-steps that read it
  evictkv0 / evictkv1   only head group 0's (1's) KV loads carry it, the other's evict_normal
  mc      compiled as clusters of the two head-group blocks (tl.enable_tma_multicast): each KV
          block crosses from L2 once, multicast into both blocks
  mcevict with mc: the multicast KV loads carry an L2 evict_first hint (read once, so the
          flush's dirty lines need not be written back to make room for them)
  mcpf    with mc: each block of the cluster prefetches its half of block k + 1 into L2
  mcpfe   the same, the prefetch carrying an L2 evict_first hint
  qfirst  the producer issues block 1 (and later ones) only once the query and block 0 have
          landed, so the 14 MB every block needs before its first gemm are not shared out with
          the next blocks' loads at the start; qonly waits for the query alone
  pair    the two head-group blocks of a batch launched as a cluster (one GPC), no multicast
  builtin the compiler's prefetch left on; with `skipfirst` it skips block 1 (which the producer
          loads right after block 0 anyway), with `late` it starts only once the ring is full

python3 bench/probe_mla_memory.py 1024,4096 base,l2res,full1 (arms joined by '+' combine;
PROBE_FLUSH=clean empties the L2 by reading, not writing: profiler.cuda_median_ms).
"""
import os
import re
import sys
from statistics import median

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "examples")]

import torch  # noqa: E402

import tilecraft  # noqa: E402
import tilecraft.codegen.cuda as cg  # noqa: E402
from bench_gemm import in_rounds, warm_gpu  # noqa: E402
from bench_mla import B, D, H, PE, mla_inputs, torch_mla  # noqa: E402
from mla_decode import flash_mla_decode  # noqa: E402
from tilecraft.carver.recommend import underlying  # noqa: E402
from tilecraft.profiler import cuda_median_ms  # noqa: E402

PE_LOAD = "tc::tma_load_4d((&K_pe_shared[k % 2 * 4096]), (&K_pe_tma), (&tma_full[k % 2 + 2]), " \
          "0, 0, k * 64, bx);\n"
HINTED = r"""__device__ __forceinline__ uint64_t tc_evict_first() { uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p; }
__device__ __forceinline__ uint64_t tc_evict_normal() { uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p)); return p; }
#define TC_HINTED(N, C, ...) asm volatile("cp.async.bulk.tensor." #N "d.shared::cluster.global" \
  ".mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {" C "}], [%2], %3;" :: \
  "r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(map), \
  "r"((uint32_t)__cvta_generic_to_shared(mbar)), "l"(pol), __VA_ARGS__ : "memory")
__device__ __forceinline__ void tc_tma3h(void* dst, const void* map, uint64_t* mbar, int c0,
    int c1, int c2, uint64_t pol) { TC_HINTED(3, "%4, %5, %6", "r"(c0), "r"(c1), "r"(c2)); }
__device__ __forceinline__ void tc_tma4h(void* dst, const void* map, uint64_t* mbar, int c0,
    int c1, int c2, int c3, uint64_t pol) {
  TC_HINTED(4, "%4, %5, %6, %7", "r"(c0), "r"(c1), "r"(c2), "r"(c3)); }
__device__ __forceinline__ void tc_tma4mh(void* dst, const void* map, uint64_t* mbar, int mask,
    int c0, int c1, int c2, int c3, uint64_t pol) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
    ".multicast::cluster.L2::cache_hint [%0], [%1, {%5, %6, %7, %8}], [%2], %3, %4;" ::
    "r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(map),
    "r"((uint32_t)__cvta_generic_to_shared(mbar)), "h"((uint16_t)mask), "l"(pol),
    "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory"); }
"""
LEAD = "    if (tc::is_producer_leader(256)) {\n"


def blocks(src):
    return int(re.search(r"for \(int k = 0; k < (\d+); \+\+k\)", src).group(1))


def l2res(src):
    src, n = re.subn(r"k \* 64, bx\);", "k % 2 * 64, bx);", src)
    assert n == 9, n
    return src


def order(src):
    i = src.index("if (tc::warpgroup_index() == 0) {")
    j = src.index("tc::wgmma_commit_group();\n        tc::wgmma_wait_group<0>();", i)
    src = src[:j] + "tc::wgmma_commit_group();\n        tc::named_barrier_arrive(6, 256);" + \
        src[j + len("tc::wgmma_commit_group();"):]
    k = src.index("tc::wgmma_fence();", src.index("} else {", i))
    return src[:k] + "tc::named_barrier_sync(6, 256);\n        " + src[k:]


def bulk(ahead, half, when="true"):
    def patch(src):
        n = blocks(src)
        cut = "+ (by % 2) * {}" if half else "+ 0 * {}"
        lines = [f"if ({when} && k + {ahead} < {n}) {{"]
        for name, row, size in (("KV", 512, 65536), ("K_pe", 64, 8192)):
            part = size // 2 if half else size
            at = f"reinterpret_cast<const char*>({name} + ((long long)bx * {n * 64} + " \
                 f"(k + {ahead}) * 64) * {row}) {cut.format(part)}"
            lines.append(f'  asm volatile("cp.async.bulk.prefetch.L2.global [%0], {part};" '
                         f':: "l"({at}) : "memory");')
        assert src.count(PE_LOAD) == 1
        return src.replace(PE_LOAD, PE_LOAD + "\n".join(lines) + "}\n")
    return patch


def tensor(ahead):
    def patch(src):
        n = blocks(src)
        fn = "__device__ __forceinline__ void tc_pf4(const void* m, int a, int b, int c, int d) " \
             "{ asm volatile(\"cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, " \
             "%3, %4}];\" :: \"l\"(m), \"r\"(a), \"r\"(b), \"r\"(c), \"r\"(d) : \"memory\"); }\n"
        src = src.replace('extern "C"', fn + 'extern "C"', 1)
        box = re.compile(r"(tc::tma_load_4d\(\(&(?:KV|K_pe)_shared\[[^\]]*\]\), \(&(\w+)\), "
                         r"\(&tma_full\[[^\]]*\]\), (\d+), 0, k \* 64, bx\);)")
        src, c = box.subn(lambda m: m.group(1) + f" if (k + {ahead} < {n}) tc_pf4((&"
                          f"{m.group(2)}), {m.group(3)}, 0, (k + {ahead}) * 64, bx);", src)
        assert c == 9, c
        return src
    return patch


def with_hinted(src):
    return src if HINTED in src else src.replace('extern "C"', HINTED + 'extern "C"', 1)


def evict(query, kv, group=None):
    def patch(src):
        src = with_hinted(src)
        lead = "    if (tc::is_producer_leader(256)) {\n"
        pick = "tc_evict_first()" if group is None else \
            f"by == {group} ? tc_evict_first() : tc_evict_normal()"
        src = src.replace(lead, lead + f"      const uint64_t tc_pol = {pick};\n")
        for on, rank, names in ((query, 3, "Q(?:_pe)?"), (kv, 4, "(?:KV|K_pe)")):
            if on:
                src, c = re.subn(rf"tc::tma_load_{rank}d\(((?:\(&{names}_shared\[[^\]]*\]\)), "
                                 r"[^;]*)\);", rf"tc_tma{rank}h(\1, tc_pol);", src)
                assert c == 9, c
        return src
    return patch


def evict_output(src):
    src, c = re.subn(r"tc::tma_store_3d\(\(&Output_tma\), ([^,]*), ",
                     r"tc::tma_store_3d_hint((&Output_tma), \1, tc::l2_evict_first(), ", src)
    assert c == 8, c
    return src


def mc_evict(src):
    src = with_hinted(src)
    src = src.replace(LEAD, LEAD + "      const uint64_t tc_polm = tc_evict_first();\n")
    src, c = re.subn(r"tc::tma_load_4d_multicast\(([^;]*)\);", r"tc_tma4mh(\1, tc_polm);", src)
    assert c == 9, c
    return src


def mc_prefetch(hinted):
    def patch(src):
        n = blocks(src)
        lines = [f"if (k + 1 < {n}) {{"]
        for name, row, size in (("KV", 512, 65536), ("K_pe", 64, 8192)):
            at = f"reinterpret_cast<const char*>({name} + ((long long)bx * {n * 64} + " \
                 f"(k + 1) * 64) * {row}) + tc::cluster_ctarank() * {size // 2}"
            if hinted:
                lines.append(f'  asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint '
                             f'[%0], {size // 2}, %1;" :: "l"({at}), "l"(tc_evict_first()) '
                             f': "memory");')
            else:
                lines.append(f'  asm volatile("cp.async.bulk.prefetch.L2.global [%0], '
                             f'{size // 2};" :: "l"({at}) : "memory");')
        src = with_hinted(src) if hinted else src
        tail = re.search(r"tc::tma_load_4d_multicast\(\(&K_pe_shared[^;]*;\n\s*}\n", src)
        return src[:tail.end()] + "\n".join(lines) + "}\n" + src[tail.end():]
    return patch


def per_box(src):
    """One mbarrier per TMA box (8 KB) of the query and of each KV stage, in the unused bytes
    after the ring's barriers: the score gemm waits for box kk / 4 before its k-steps kk, so
    it starts on the first boxes of a stage (and of the query, in the first iteration)."""
    src = src.replace("  if (tc::is_block_leader()) {\n", "  uint64_t* tc_box = reinterpret_cast"
                      "<uint64_t*>(tc_smem + 128);\n  if (tc::is_block_leader()) {\n"
                      "    for (int b = 0; b < 25; ++b) tc::mbarrier_init(&tc_box[b], 1);\n", 1)
    src, c = re.subn(r"tc::mbarrier_arrive_expect_tx\(\(&tma_(?:ready\[0\]|full\[k % 2\])\), "
                     r"(?:73728|65536)\);\n", "", src)
    assert c == 2, c
    src, c = re.subn(r"tc::tma_load_3d\(\((&Q(?:_pe)?_shared\[\d+\])\), \(&(Q(?:_pe)?)_tma\), "
                     r"\(&tma_ready\[0\]\), (\d+),", lambda m: (
                         f"tc::mbarrier_arrive_expect_tx(&tc_box[{16 + (8 if m.group(2) == 'Q_pe' else int(m.group(3)) // 64)}], 8192); "
                         f"tc::tma_load_3d(({m.group(1)}), (&{m.group(2)}_tma), "
                         f"(&tc_box[{16 + (8 if m.group(2) == 'Q_pe' else int(m.group(3)) // 64)}]), "
                         f"{m.group(3)},"), src)
    assert c == 9, c
    src, c = re.subn(r"tc::tma_load_4d\(\((&KV_shared\[[^\]]*\])\), \(&KV_tma\), "
                     r"\(&tma_full\[k % 2\]\), (\d+),", lambda m: (
                         f"tc::mbarrier_arrive_expect_tx(&tc_box[k % 2 * 8 + {int(m.group(2)) // 64}], "
                         f"8192); tc::tma_load_4d(({m.group(1)}), (&KV_tma), "
                         f"(&tc_box[k % 2 * 8 + {int(m.group(2)) // 64}]), {m.group(2)},"), src)
    assert c == 8, c
    src = src.replace("    tc::mbarrier_wait_parity((&tma_ready[0]), 0);\n", "")
    # the score gemms: wait box by box inside the unrolled k-step loop
    score = re.compile(r"tc::mbarrier_wait_parity\(\(&tma_full\[([01])\]\), ([^;]*)\);\n"
                       r"(\s*tc::wgmma_fence\(\);\n\s*// [^\n]*\n\s*#pragma unroll\n\s*"
                       r"for \(int (kk\w*) = 0; \4 < 32; \+\+\4\) \{\n)")
    src, c = score.subn(lambda m: m.group(3) + (
        f"if ({m.group(4)} % 4 == 0) {{ if (k2 == 0) tc::mbarrier_wait_parity(&tc_box[16 + "
        f"{m.group(4)} / 4], 0); tc::mbarrier_wait_parity(&tc_box[{m.group(1)} * 8 + "
        f"{m.group(4)} / 4], {m.group(2)}); }}\n"), src)
    assert c == 2, c
    src, c = re.subn(r"(tc::mbarrier_wait_parity\(\(&tma_full\[[23]\]\), [^;]*\);\n)"
                     r"(\s*tc::wgmma_fence\(\);\n\s*// [^\n]*\n\s*#pragma unroll\n\s*"
                     r"for \(int kk_\d+ = 0; kk_\d+ < 4;)", r"if (k2 == 0) "
                     r"tc::mbarrier_wait_parity(&tc_box[24], 0);\n\1\2", src)
    assert c == 2, c
    # the other warpgroup's stage, before the value gemm: all of its boxes
    src, c = re.subn(r"tc::mbarrier_wait_parity\(\(&tma_full\[([01])\]\), ([^;]*)\);",
                     r"for (int b = 0; b < 8; ++b) tc::mbarrier_wait_parity(&tc_box[\1 * 8 + b], "
                     r"\2);", src)
    assert c == 2, c
    assert "tma_ready[0])," not in src.split("mbarrier_init((&tma_ready[0]), 1);")[1]
    return src


def first_loads(waits):
    def patch(src):
        i = src.index(LEAD)
        loop = re.compile(r"for \(int k = 0; k < \d+; \+\+k\) \{\n")
        m = loop.search(src, i)
        wait = " ".join(f"tc::mbarrier_wait_parity((&{b}), 0);" for b in waits)
        return src[:m.end()] + f"        if (k == 1) {{ {wait} }}\n" + src[m.end():]
    return patch


def guard(extra):
    def patch(src):
        src, c = re.subn(r"if \(k \+ 1 < (\d+) && ", lambda m: f"if ({extra} && k + 1 < "
                         f"{m.group(1)} && ", src)
        assert c == 2, c
        return src
    return patch


def paired(src):
    """The two head-group blocks of a batch launched as one cluster (blocks 2i and 2i + 1 of
    the rasterized grid are one batch's), so they run in one GPC; nothing else changes."""
    return src.replace("__launch_bounds__(384, 1) ", "__launch_bounds__(384, 1) "
                       "__cluster_dims__(2, 1, 1) ", 1)


ARMS = {"base": lambda s: s, "pair": paired, "builtin": lambda s: s, "skipfirst": guard("k + 1 >= 2"),
        "late": guard("k >= 2"), "l2res": l2res, "order": order, "evictq": evict(1, 0),
        "evictkv": evict(0, 1), "evict": evict(1, 1), "evictkv0": evict(0, 1, 0),
        "evictkv1": evict(0, 1, 1), "evicto": evict_output, "box": per_box,
        "qfirst": first_loads(("tma_ready[0]", "tma_full[0]", "tma_full[2]")),
        "qonly": first_loads(("tma_ready[0]",)), "mc": lambda s: s, "mcevict": mc_evict,
        "mcpf": mc_prefetch(False),
        "mcpfe": mc_prefetch(True), **{f"bulk{a}": bulk(a, True) for a in (1, 2)},
        **{f"full{a}": bulk(a, False) for a in (1, 2)}, "odd2": bulk(2, False, "k % 2 == 1"),
        **{f"tensor{a}": tensor(a) for a in (1, 2)}}


def build(seqlen, arm, target=None):
    original = cg.emit_cuda

    def patched(lowered):
        src, names = original(lowered)
        for part in sorted(arm.split("+"), key=lambda p: "evict" in p):  # hints last
            if part in ("skipfirst", "late") and "builtin" not in arm:
                raise ValueError(f"{part} changes the compiler's prefetch: add builtin")
            src = ARMS[part](src)
        return src, names
    cg.emit_cuda = patched
    try:
        func = underlying(flash_mla_decode)(B, H, 1, seqlen, D, PE, block_N=64, block_H=64,
                                            num_stages=2, threads=256)
        return tilecraft.compile(func, out_idx=[-1], target=target, pass_configs={
            "tl.enable_fast_math": True, "tl.disable_l2_prefetch": "builtin" not in arm,
            "tl.enable_tma_multicast": any(p.startswith("mc") for p in arm.split("+"))})
    finally:
        cg.emit_cuda = original


def main():
    os.environ["TILECRAFT_DISABLE_CACHE"] = "1"
    arms = sys.argv[2].split(",")
    flush = True if os.environ.get("PROBE_FLUSH", "dirty") == "dirty" else "clean"
    warm_gpu()
    for seqlen in (int(x) for x in sys.argv[1].split(",")):
        q, q_pe, kv, k_pe = mla_inputs(seqlen)
        ref = torch_mla(q.float(), q_pe.float(), kv.float(), k_pe.float())
        kernels = [build(seqlen, a) for a in arms]
        for a, k in zip(arms, kernels):
            out = k(q, q_pe, kv, k_pe)
            print(a, "rel err %.1e" % float((out.float() - ref).norm() / ref.norm()))
        flop = 2.0 * B * H * seqlen * (D + PE) + 2.0 * B * H * seqlen * D
        peer, *ours = in_rounds(3, [lambda: cuda_median_ms(
            lambda: torch_mla(q, q_pe, kv, k_pe), 3, 20, flush)] + [lambda k=k: cuda_median_ms(
                lambda: k(q, q_pe, kv, k_pe), 5, 30, flush) for k in kernels], 1.0)
        print(f"KV {seqlen} torch {flop / median(peer) / 1e9:.0f}", " ".join(
            f"{a} {flop / median(t) / 1e9:.0f} ({median(p / x for p, x in zip(peer, t)):.2f}x)"
            for a, t in zip(arms, ours)), flush=True)


if __name__ == "__main__":
    main()
