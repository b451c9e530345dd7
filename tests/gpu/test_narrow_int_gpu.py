"""On the GPU: narrow-integer arithmetic wraps at its type's width and the fp4 -> float16
unpacking gives numpy's bits (the program of tests/unit/test_narrow_int_arith.py)."""
import pathlib
import sys

import numpy as np

from gpu_requirements import require_cuda

torch = require_cuda()

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
import tilecraft  # noqa: E402
import test_narrow_int_arith as nia  # noqa: E402


def test_narrow_integers_on_the_gpu():
    a, b, h, w = nia.inputs(seed=5)
    kernel = tilecraft.compile(nia.program(), target="cuda")
    tensors = [torch.from_numpy(x).cuda() for x in (a, b, h, w)]
    kernel(*tensors)
    torch.cuda.synchronize()
    want_h, want_w = nia.expected(a, b)
    np.testing.assert_array_equal(tensors[2].cpu().numpy().view(np.uint16),
                                  want_h.view(np.uint16))
    np.testing.assert_array_equal(tensors[3].cpu().numpy(), want_w)
