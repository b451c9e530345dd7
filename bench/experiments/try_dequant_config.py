"""One dequant_gemm config run on the GPU, checked against torch and timed beside cuBLAS fp16 on
the dequantized weight (3 alternating rounds, cold L2), one process per config so that a config
that fails or hangs costs only itself:
    python3 bench/experiments/try_dequant_config.py MxNxK CONFIG [GROUP] [KEY=1 ...]"""
import sys

import torch

sys.path.insert(0, 'examples')
sys.path.insert(0, 'bench')
import tilecraft  # noqa: E402
from dequant_gemm import dequant_gemm  # noqa: E402

M, N, K = (int(x) for x in sys.argv[1].split('x'))
bm, bn, bk, stages, threads = (int(x) for x in sys.argv[2].removeprefix("rs").split('x'))
group = int(sys.argv[3]) if len(sys.argv) > 3 and '=' not in sys.argv[3] else 32
configs = {k: bool(int(v)) for k, v in (a.split('=') for a in sys.argv[3:] if '=' in a)}
func = dequant_gemm.__wrapped__(M, N, K, group, block_M=bm, block_N=bn, block_K=bk,
                                num_stages=stages, threads=threads,
                                weight_in_registers=sys.argv[2].startswith("rs"))
kernel = tilecraft.compile(func, out_idx=[-1], pass_configs=configs)
g = torch.Generator(device='cuda').manual_seed(0)
A = (torch.rand(M, K, device='cuda', generator=g) * 2 - 1).half()
B = torch.randint(0, 256, (N, K // 2), device='cuda', generator=g, dtype=torch.uint8)
S = (torch.rand(N, -(-K // group), device='cuda', generator=g) * 0.015 + 0.005).half()
C = kernel(A, B, S)
torch.cuda.synchronize()
q = torch.stack((B & 0xF, B >> 4), dim=-1).view(N, -1)[:, :K]
W = (q.half() - 8) * S.repeat_interleave(group, dim=1)[:, :K]
ref = A.float() @ W.float().T
from statistics import median  # noqa: E402
from common import clean_timer, in_rounds  # noqa: E402
Wh = W.contiguous()
ours, cublas = in_rounds(3, [clean_timer(lambda: kernel(A, B, S)), clean_timer(lambda: A @ Wh.T)],
                         0.2)
print(sys.argv[1:], f"rel. error {float((C.float() - ref).norm() / ref.norm()):.1e}, "
      f"registers {kernel.n_regs}: {median(ours) * 1e3:.1f} us, cuBLAS {median(cublas) * 1e3:.1f}"
      f" us, {median(c / o for c, o in zip(cublas, ours)):.2f}x")
