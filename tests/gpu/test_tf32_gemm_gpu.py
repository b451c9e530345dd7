"""T.gemm on tfloat32 operands, and on float32 ones (TF32 too, as in TileLang), on the GPU
(mma.sync m16n8k8, wgmma where both are K-major): every orientation and a register A operand
at a ragged shape, random inputs, the output poisoned first, against a float64
product; the error must be TF32's (above float32's, within TF32's)."""
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import tilecraft  # noqa: E402
from gpu_helpers import poisoned, rel_error  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_tf32_gemm import CASES, tf32_gemm  # noqa: E402


@pytest.mark.parametrize("dtype", ["tfloat32", "float32"])
@pytest.mark.parametrize("trans_a,trans_b,regs", CASES,
                         ids=["NT", "NN", "TT", "TN", "NT-regs", "NN-regs"])
def test_tf32_gemm_on_the_gpu(trans_a, trans_b, regs, dtype):
    M, N, K = 1000, 520, 776
    kernel = tilecraft.compile(tf32_gemm(M, N, K, trans_a, trans_b, regs, block=(128, 128, 32),
                                         threads=256, stages=3, dtype=dtype))
    a = torch.rand((K, M) if trans_a else (M, K), device="cuda") - 0.5
    b = torch.rand((N, K) if trans_b else (K, N), device="cuda") - 0.5
    c = poisoned(M, N, dtype=torch.float32)
    kernel(a, b, c)
    want = (a.T if trans_a else a).double() @ (b.T if trans_b else b).double()
    err = rel_error(c, want)
    assert 1e-6 < err < 2e-3, err


def test_exact_float32_gemm_on_the_gpu():
    M, N, K = 1000, 520, 776
    kernel = tilecraft.compile(tf32_gemm(M, N, K, False, True, block=(128, 128, 32), threads=256,
                                         stages=3, dtype="float32"),
                               pass_configs={"tl.exact_float32_gemm": True})
    a = torch.rand((M, K), device="cuda") - 0.5
    b = torch.rand((N, K), device="cuda") - 0.5
    c = poisoned(M, N, dtype=torch.float32)
    kernel(a, b, c)
    assert rel_error(c, a.double() @ b.T.double()) < 1e-5
