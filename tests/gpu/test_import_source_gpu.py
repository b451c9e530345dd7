"""On the GPU: a device function put in the module by T.import_source, called per thread with
T.access_ptr pointers to its locals (the program of tests/unit/test_import_source.py)."""
import pathlib
import sys

import numpy as np

from gpu_requirements import require_cuda

torch = require_cuda()

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
import tilecraft  # noqa: E402
import test_import_source as tis  # noqa: E402


def test_imported_function_runs_per_thread():
    a, b = tis.inputs(seed=4)
    kernel = tilecraft.compile(tis.program(), target="cuda")
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    kernel(ta, tb)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(tb.cpu().numpy(), tis.expected(a))
