"""The unchanged dequant_gemv example with and without serial-loop fragment prefetch
(schedule/prefetch_fragments.SERIAL_PREFETCH_BYTES), beside TileLang on the same source, in
alternating rounds. Run with TILECRAFT_DISABLE_CACHE=1 from bench/."""
import sys
from statistics import median

from common import build_under_tilelang, clean_timer, example_under_tilelang, in_rounds, warm_gpu
from dequant_gemm import dequant_gemv
import tilecraft
from tilecraft.backends.cuda.schedule import prefetch_fragments as pf
import torch

GROUP = 32
theirs = example_under_tilelang("dequant_gemm")
warm_gpu()
for text in (sys.argv[1] if len(sys.argv) > 1 else "1024x8192,8192x8192,28672x8192").split(","):
    N, K = (int(x) for x in text.split("x"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    A = (torch.rand(1, K, device="cuda", generator=gen) * 2 - 1).half()
    B = torch.randint(0, 256, (N, K // 2), device="cuda", generator=gen, dtype=torch.uint8)
    S = (torch.rand(N, K // GROUP, device="cuda", generator=gen) * 0.015 + 0.005).half()
    q = torch.stack((B & 0xF, B >> 4), dim=-1).view(N, K)
    ref = A.float() @ ((q.float() - 8) * S.float().repeat_interleave(GROUP, dim=1)).T
    arms = []
    for budget in (0, 128):
        pf.SERIAL_PREFETCH_BYTES = budget
        k = tilecraft.compile(dequant_gemv.__wrapped__(1, N, K, GROUP), out_idx=[-1])
        arms.append((f"prefetch {budget}", k, k.n_regs))
    t = build_under_tilelang(theirs, "dequant_gemv", 1, N, K, GROUP)
    if t is not None:
        arms.append(("TileLang", t, None))
    for label, k, _ in arms:
        out = torch.full((1, N), float("nan"), device="cuda", dtype=torch.float16)
        out = k(A, B, S)
        err = float((out.float() - ref).norm() / ref.norm())
        assert err < 1e-2, (label, err)
    times = in_rounds(3, [clean_timer(lambda k=k: k(A, B, S)) for _, k, _ in arms], 0.2)
    base = times[0]
    for (label, _, regs), tt in zip(arms, times):
        print(f"{N}x{K} {label}: {median(tt)*1e3:.1f} us, vs no prefetch "
              f"{median([b / x for b, x in zip(base, tt)]):.2f}x, regs {regs}", flush=True)
