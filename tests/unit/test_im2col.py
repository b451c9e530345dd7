"""T.c2d_im2col / T.im2col: a tile of an NHWC image's im2col matrix, against numpy's im2col at
ragged shapes (padding 0 / 1 / 2, stride 1 / 2, dilation 2, channels that are not a multiple of
the tile, rows and columns past the matrix's end) on the interpreter and the sm_80 / sm_90a
emulators; the same asynchronous 16-byte copies as the T.Parallel gather it stands for; and
clear errors for what it does not take."""
import sys

import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.language.im2col import output_size

from error_expect import expect


def im2col_matrix(img, K, S, D, P):
    """[N OH OW, K K C] in numpy: rows (n, oh, ow), columns (kh, kw, c), zero padding."""
    N, H, W, C = img.shape
    OH, OW = output_size(H, K, S, D, P), output_size(W, K, S, D, P)
    x = np.pad(img, ((0, 0), (P, P), (P, P), (0, 0)))
    cols = [x[:, kh * D:kh * D + (OH - 1) * S + 1:S, kw * D:kw * D + (OW - 1) * S + 1:S]
            for kh in range(K) for kw in range(K)]
    return np.stack(cols, axis=3).reshape(N * OH * OW, K * K * C)


def tiles_of(N, H, W, C, K, S, D, P, block_M, block_K, im2col=T.c2d_im2col):
    """Every (block_M, block_K) tile of the im2col matrix, written to out[row tile, col tile]."""
    OH, OW = output_size(H, K, S, D, P), output_size(W, K, S, D, P)
    rows, cols = -(-N * OH * OW // block_M), -(-K * K * C // block_K)

    @T.prim_func
    def main(img: T.Tensor((N, H, W, C), "float16"),
             out: T.Tensor((rows, cols, block_M, block_K), "float16")):
        with T.Kernel(cols, rows, threads=128) as (bx, by):
            col = T.alloc_shared((block_M, block_K), "float16")
            im2col(img, col, by, bx, K, S, D, P)
            T.copy(col, out[by, bx, :, :])
    return main, rows, cols


SHAPES = [  # N, H, W, C, K, S, D, P, block_M, block_K
    (2, 7, 9, 16, 3, 1, 1, 1, 32, 32),
    (1, 11, 10, 8, 3, 2, 2, 2, 64, 32),    # stride, dilation, padding 2
    (2, 6, 5, 12, 3, 1, 1, 0, 16, 64),     # channels not a multiple of 8, no padding
    (3, 5, 5, 24, 1, 1, 1, 0, 32, 16),     # 1x1
]


@pytest.mark.parametrize("target", ["interp", "emulator", "emulator:sm_90a"])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(i) for i in range(len(SHAPES))])
def test_tiles_match_numpy(shape, target):
    N, H, W, C, K, S, D, P, block_M, block_K = shape
    func, rows, cols = tiles_of(*shape)
    img = np.random.default_rng(C).uniform(-1, 1, (N, H, W, C)).astype(np.float16)
    kernel = tilecraft.compile(func, out_idx=[-1], target=target)
    got = kernel(img)
    if target.startswith("emulator"):
        assert kernel.reports == []
    want = np.zeros((rows * block_M, cols * block_K), np.float16)
    matrix = im2col_matrix(img, K, S, D, P)
    want[:matrix.shape[0], :matrix.shape[1]] = matrix
    got = got.transpose(0, 2, 1, 3).reshape(rows * block_M, cols * block_K)
    np.testing.assert_array_equal(got, want)


def test_im2col_is_the_same_op():
    assert T.im2col is T.c2d_im2col


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_same_copies_as_the_gather_it_stands_for(example, arch):
    conv2d = example("conv2d")
    args = (2, 40, 9, 11, 24, 3, 3, 1, 2, 2)
    texts = [tilecraft.compile(conv2d.convolution.__wrapped__(*args, use_im2col=u),
                               target=arch).get_kernel_source() for u in (True, False)]
    for name in ("tc::cp_async_cg_16((&data_shared[", "data["):
        assert texts[0].count(name) == texts[1].count(name) > 0, name
    assert "tc::cp_async_cg_16((&data_shared[" in texts[0]


CHANGES = {}


def _program():
    args = dict(img="img", col="col", kernel=3, stride=1, dilation=1, pad=1,
                eviction_policy=None)
    args.update(CHANGES)

    @T.prim_func
    def main(img: T.Tensor((1, 8, 8, 16), "float16"), out: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            col = T.alloc_shared((64, 64), "float16")
            frag = T.alloc_fragment((64, 64), "float16")
            tiles = {"img": img, "col": col, "frag": frag, "out": out}
            T.c2d_im2col(tiles[args["img"]], tiles[args["col"]], 0, 0, args["kernel"], args["stride"], args["dilation"], args["pad"], eviction_policy=args["eviction_policy"])  # <- here
            T.copy(col, out)
    tilecraft.compile(main, target="interp")


@pytest.mark.parametrize("changes, message", [
    (dict(img="col"), "the image must be a global [N, H, W, C] tensor"),
    (dict(col="frag"), "the column tile must be a 2-d shared buffer"),
    (dict(kernel=0), "kernel must be an int >= 1"),
    (dict(stride=1.5), "stride must be an int >= 1"),
    (dict(pad=-1), "pad must be an int >= 0"),
    (dict(kernel=5, dilation=3, pad=0), "does not fit the image's H = 8"),
    (dict(eviction_policy="evict_sometimes"), "eviction_policy must be evict_normal"),
])
def test_errors_name_the_constraint(changes, message, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "CHANGES", changes)
    expect(_program, message, "T.c2d_im2col(")


def test_an_eviction_policy_it_cannot_apply_is_said(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "CHANGES", dict(eviction_policy="evict_first"))
    with pytest.warns(UserWarning, match="eviction_policy='evict_first' is not applied"):
        _program()


IM2COL_TMA = [  # (N, C, H, W, F, K), (stride, padding, dilation), config
    ((2, 32, 7, 9, 32, 3), (1, 1, 1), dict(block_M=64, block_N=32, block_K=32, num_stages=2)),
    ((1, 32, 11, 10, 16, 3), (2, 2, 2), dict(block_M=64, block_N=64, block_K=32)),
    ((3, 128, 5, 5, 32, 1), (1, 0, 1), dict(block_M=64, block_N=32, block_K=64)),  # 3 images
]


@pytest.mark.parametrize("shape, conv, config", IM2COL_TMA,
                         ids=[str(i) for i in range(len(IM2COL_TMA))])
def test_tma_im2col_loads_the_tile_on_sm90a(example, shape, conv, config):
    """Where C is a multiple of block_K the producer loads the tile in TMA's im2col mode (no
    gather left), and the sm_90a emulator, which walks the filter positions as the hardware
    does, gives the convolution at ragged shapes, across images and past the last one."""
    conv2d = example("conv2d")
    (N, C, H, W, F, K), (S, P, D) = shape, conv
    func = conv2d.convolution.get_tir(N, C, H, W, F, K, K, S, P, D, **config)
    text = tilecraft.compile(func, target="sm_90a").get_kernel_source()
    assert "tc::tma_load_im2col_4d((&data_shared[" in text
    assert "tc::cp_async_cg_16((&data_shared[" not in text and "data[" not in text
    rng = np.random.default_rng(C + H)
    data = rng.uniform(-1, 1, (N, H, W, C)).astype(np.float16)
    weight = rng.uniform(-1, 1, (K, K, C, F)).astype(np.float16)
    kernel = tilecraft.compile(func, out_idx=[-1], target="emulator:sm_90a")
    got = kernel(data, weight.reshape(K * K * C, F)).astype(np.float32)
    assert kernel.reports == []
    want = conv2d.ref_program(data, weight, S, P, D).reshape(got.shape)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-3


def test_tma_im2col_needs_a_filter_tap_per_tile(example):
    """A tile whose channels straddle two filter taps (C not a multiple of block_K) keeps the
    16-byte gather: one im2col load reads one tap."""
    conv2d = example("conv2d")
    func = conv2d.convolution.get_tir(2, 48, 7, 7, 32, 3, 3, 1, 1, 1, block_K=32)
    text = tilecraft.compile(func, target="sm_90a").get_kernel_source()
    assert "tma_load_im2col" not in text and "tc::cp_async_cg_16((&data_shared[" in text


def test_im2col_tensor_maps_are_checked():
    from tilecraft.backends.cuda.runtime.tensor_map import check_im2col
    from tilecraft.errors import TileError
    shape, strides = (64, 9, 7, 2), (128, 128 * 9, 128 * 63)   # C, W, H, N of float16
    spec = check_im2col(1024, "float16", shape, strides, 64, 128, (-1, -1), (-1, -1), "128B",
                        (1, 2, 2, 1))
    assert spec.box_bytes == 64 * 128 * 2 and spec.tiled.element_strides == (1, 2, 2, 1)
    for args, message in [((64, 128, (-200, -1), (-1, -1)), "signed 8-bit"),
                          ((64, 512, (-1, -1), (-1, -1)), "pixels per column"),
                          ((128, 128, (-1, -1), (-1, -1)), "span of the 128B swizzle"),
                          ((64, 128, (-1,), (-1, -1)), "lower has 1 entries")]:
        with pytest.raises(TileError, match=message):
            check_im2col(1024, "float16", shape, strides, *args, "128B")
    with pytest.raises(TileError, match="rank 3 to 5"):
        check_im2col(1024, "float16", (64, 9), (128,), 64, 128, (), (), "128B")
