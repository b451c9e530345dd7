"""T.cumsum with fewer lines than threads scans each line with a group of lanes (a segment per
lane, the segment totals combined by shuffles): run on the thread-level emulator against numpy,
forward and reverse, shared and fragment tiles, lines longer and shorter than the lanes'
segments, more lines than groups; with a line per thread the serial scan stays."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda


def scan_kernel(rows, n, reverse, threads, where):
    @T.prim_func
    def main(X: T.Tensor((rows, n), "float32"), Y: T.Tensor((rows, n), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            if where == "fragment":
                x = T.alloc_fragment((rows, n), "float32")
            else:
                x = T.alloc_shared((rows, n), "float32")
            T.copy(X, x)
            T.cumsum(x, dim=1, reverse=reverse)
            T.copy(x, Y)
    return main


@pytest.mark.parametrize("rows, n, reverse, threads, where", [
    (1, 64, False, 128, "shared"),      # one line: a warp, two elements a lane
    (1, 64, True, 128, "fragment"),
    (3, 50, False, 128, "fragment"),    # a ragged last segment, a group with no line
    (5, 7, True, 64, "shared"),         # fewer elements than lanes
    (2, 100, False, 32, "fragment"),    # 16 lanes a line, segments of 7
    (200, 48, False, 128, "fragment"),  # more lines than threads: serial lines
])
def test_cumsum_matches_numpy(rows, n, reverse, threads, where):
    X = np.random.default_rng(rows * n).standard_normal((rows, n)).astype(np.float32)
    kernel = tilecraft.compile(scan_kernel(rows, n, reverse, threads, where), out_idx=[-1],
                               target="emulator")
    Y = kernel(X)
    assert kernel.reports == []
    want = np.cumsum(X[:, ::-1], axis=1)[:, ::-1] if reverse else np.cumsum(X, axis=1)
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-5)


def test_one_line_is_scanned_by_a_warp():
    text = emit_cuda(pipelines.cuda_sm80(scan_kernel(1, 64, False, 128, "shared")))[0]
    assert text.count("tc::shfl_xor(scan_total[1], ") == 5   # 32 lanes: five steps
    assert "for (int k" not in text


def test_a_line_per_thread_stays_serial():
    text = emit_cuda(pipelines.cuda_sm80(scan_kernel(200, 48, False, 128, "fragment")))[0]
    assert "shfl_xor" not in text and "for (int k" in text
