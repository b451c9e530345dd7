"""TMA loads through host-encoded tensor maps on a Hopper GPU, compared with torch slicing.

One block of 128 threads: thread 0 initialises an mbarrier (fenced for the async proxy), then
arms it with the box's byte count and issues one tc::tma_load_2d of a 64 x 64 fp16 box of a
[100, 200] fp16 tensor into 1024-byte-aligned shared memory; every thread waits on phase 0 and
copies the shared tile to the (poisoned) output as it lies there.

* no swizzle: the output is the box, row-major, with zeros where it leaves the tensor (a box at
  the ragged corner, and one at negative coordinates).
* 128B swizzle (a 64-element = 128-byte inner extent): the 16-byte chunk c of box row r lies at
  chunk c ^ (r % 8) of that row; un-swizzled on the host it must equal the plain box.
The tensor map reaches the kernel by value, as a `const __grid_constant__ tc::TensorMap`.
Needs an sm_90 GPU, torch and nvcc; skipped elsewhere.
"""
import pytest

from gpu_requirements import require_hopper

torch = require_hopper("TMA needs")

from tilecraft.backends.cuda.runtime import CudaKernel, CudaModule, compile_cubin  # noqa: E402
from tilecraft.backends.cuda.runtime.tensor_map import encode_tensor, encode_tiled  # noqa: E402

ROWS, COLS, BOX = 100, 200, 64
BOX_BYTES = BOX * BOX * 2

SOURCE = r"""
#include "tilecraft/tc.h"

// Dynamic shared memory: the tile at the first 1024-byte boundary, the mbarrier after it.
extern "C" __global__ void __launch_bounds__(128, 1)
    tma_load_box(const __grid_constant__ tc::TensorMap map, int c0, int c1, int box_bytes,
                 uint16_t* __restrict__ out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t base = tc::smem_addr(smem);
  unsigned char* tile = smem + ((1024u - (base & 1023u)) & 1023u);
  uint64_t* bar = reinterpret_cast<uint64_t*>(tile + box_bytes);
  if (threadIdx.x == 0) {
    tc::prefetch_tma_descriptor(&map);
    tc::mbarrier_init(bar, 1);
    tc::fence_barrier_init();  // make the initialised barrier visible to the async proxy
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tc::mbarrier_arrive_expect_tx(bar, box_bytes);
    tc::tma_load_2d(tile, &map, bar, c0, c1);
  }
  tc::mbarrier_wait_parity(bar, 0);
  const uint16_t* t = reinterpret_cast<const uint16_t*>(tile);
  for (int i = threadIdx.x; i < box_bytes / 2; i += blockDim.x) out[i] = t[i];
}
"""


@pytest.fixture(scope="module")
def kernel():
    compiled = compile_cubin(SOURCE, "sm_90a")
    return CudaKernel(CudaModule(compiled.cubin), "tma_load_box",
                      [("tensormap",), "int32", "int32", "int32", ("ptr", "uint16")],
                      block=(128,), dynamic_smem=BOX_BYTES + 1024 + 8, grid_fn=lambda a: (1,))


@pytest.fixture(scope="module")
def source():
    torch.manual_seed(0)
    return torch.randn(ROWS, COLS, device="cuda").to(torch.float16)


def _expected(x, row, col):
    """x[row:row+64, col:col+64] with zeros outside the tensor (row / col may be negative)."""
    want = torch.zeros(BOX, BOX, dtype=x.dtype, device=x.device)
    r0, r1 = max(row, 0), min(row + BOX, ROWS)
    c0, c1 = max(col, 0), min(col + BOX, COLS)
    if r0 < r1 and c0 < c1:
        want[r0 - row:r1 - row, c0 - col:c1 - col] = x[r0:r1, c0:c1]
    return want


def _load(kernel, tensor_map, row, col):
    out = torch.full((BOX, BOX), 0x7E01, dtype=torch.int16, device="cuda")  # fp16 NaN bits
    kernel(tensor_map, col, row, BOX_BYTES, out)  # c0 = column (innermost), c1 = row
    torch.cuda.synchronize()
    return out.view(torch.float16)


def _assert_bits_equal(got, want):
    same = got.view(torch.int16) == want.view(torch.int16)
    assert bool(same.all()), (f"{int((~same).sum())} of {same.numel()} elements differ; first "
                              f"at {tuple(int(i) for i in (~same).nonzero()[0])}")


def _unswizzle_128b(tile):
    """Undo the 128-byte swizzle of a [64, 64] fp16 tile (8 chunks of 8 elements per row)."""
    rows = torch.arange(BOX, device=tile.device)[:, None]
    chunks = torch.arange(8, device=tile.device)[None, :]
    where = (chunks ^ (rows % 8))[:, :, None].expand(BOX, 8, 8)
    return tile.view(BOX, 8, 8).gather(1, where).view(BOX, BOX)


@pytest.mark.parametrize("row, col", [(0, 64), (32, 0), (64, 192), (-8, -16)],
                         ids=["interior", "interior2", "ragged_corner", "negative_corner"])
def test_tma_load_plain(kernel, source, row, col):
    tensor_map = encode_tiled(source.data_ptr(), "float16", (COLS, ROWS), (COLS * 2,),
                              (BOX, BOX))
    got = _load(kernel, tensor_map, row, col)
    _assert_bits_equal(got, _expected(source, row, col))


@pytest.mark.parametrize("row, col", [(32, 64), (64, 192)], ids=["interior", "ragged_corner"])
def test_tma_load_swizzle_128b(kernel, source, row, col):
    tensor_map = encode_tensor(source, (BOX, BOX), swizzle="128B")
    got = _load(kernel, tensor_map, row, col)
    want = _expected(source, row, col)
    _assert_bits_equal(_unswizzle_128b(got), want)
    # rows with r % 8 != 0 really were permuted (the random data has no repeated chunks)
    moved = got.view(torch.int16)[1:8] != want.view(torch.int16)[1:8]
    assert bool(moved.any()), "the 128B-swizzled tile came back unswizzled"


def test_encode_tensor_matches_explicit_arguments(source):
    assert encode_tensor(source, (BOX, BOX)) == \
        encode_tiled(source.data_ptr(), torch.float16, (COLS, ROWS), (2, COLS * 2), (BOX, BOX))
