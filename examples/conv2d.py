"""2-D convolution as an implicit GEMM (NHWC): out[n, oh, ow, f] = sum over (kh, kw, c) of
data[n, oh * stride + kh * dilation - pad, ow * stride + kw * dilation - pad, c] *
weight[kh, kw, c, f], with zero padding. The GEMM view has M = N * OH * OW rows (output pixels),
K = KH * KW * C (the receptive field) and F columns (filters). Each block builds its im2col
tile of the image in shared memory with T.c2d_im2col (square kernels) or the T.Parallel loop it
stands for (padding handled by T.if_then_else),
copies the matching tile of the HWIO weight (flattened to [KH * KW * C, F], a free reshape),
and accumulates a tile GEMM, pipelined over K. The float32 accumulator is cast to float16 and
copied to the output, whose NHWC layout is the GEMM's [N * OH * OW, F] (the kernel returns it
in that shape; `conv2d` reshapes it). Image sizes, channels and filters need not be multiples of
the tile sizes.
"""
import argparse
import functools

import numpy as np

import tilecraft
import tilecraft.language as T


def out_size(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


# The tiles the default is chosen from, by the tile recommender for the shape (tile_for).
# 192-row tiles are among them because 128- and 256-row tiles leave part of the last wave's
# SMs idle at common shapes: 6272 output pixels by 512 filters make 33 x 4 tiles of 192 x 128,
# one for each of 132 SMs, where 128 x 128 tiles make 1.5 waves. 256 filters a tile are not:
# no shape of bench/conv2d.md ran fastest with them, and the model ranks 192 x 256 first where
# it runs at 0.6x of 192 x 128.
TILE_SPACE = {"block_M": [64, 128, 192, 256], "block_N": [64, 128], "block_K": [64],
              "num_stages": [3, 4], "threads": [128, 256, 384]}
TILE_PARAMETERS = tuple(TILE_SPACE)


@tilecraft.jit(out_idx=[-1])
def convolution(N, C, H, W, F, KH, KW, stride=1, padding=0, dilation=1, block_M=None,
                block_N=None, block_K=None, num_stages=None, threads=None, dtype="float16",
                accum_dtype="float32", use_im2col=None):
    """use_im2col: fill the im2col tile with T.c2d_im2col (square kernels; the default there)
    rather than the T.Parallel gather it stands for. Tile parameters left out are the tile
    recommender's first choice for the shape (tile_for)."""
    use_im2col = KH == KW if use_im2col is None else use_im2col
    block_M, block_N, block_K, num_stages, threads = tile_for(
        (N, C, H, W, F, KH, KW, stride, padding, dilation), block_M=block_M, block_N=block_N,
        block_K=block_K, num_stages=num_stages, threads=threads, dtype=dtype,
        accum_dtype=accum_dtype, use_im2col=use_im2col).values()
    assert not use_im2col or KH == KW, "T.c2d_im2col takes square kernels"
    OH = out_size(H, KH, stride, padding, dilation)
    OW = out_size(W, KW, stride, padding, dilation)
    M_total, K_total = N * OH * OW, KH * KW * C

    @T.prim_func
    def main(
            data: T.Tensor((N, H, W, C), dtype),
            weight: T.Tensor((KH * KW * C, F), dtype),
            out: T.Tensor((M_total, F), dtype),   # NHWC: output pixel m's row of F filters
    ):
        with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(M_total, block_M), threads=threads) as (
                bx, by):
            data_shared = T.alloc_shared((block_M, block_K), dtype)
            weight_shared = T.alloc_shared((block_K, block_N), dtype)
            out_local = T.alloc_fragment((block_M, block_N), accum_dtype)

            T.clear(out_local)
            for k in T.Pipelined(T.ceildiv(K_total, block_K), num_stages=num_stages):
                if use_im2col:
                    T.c2d_im2col(data, data_shared, by, k, KH, stride, dilation, padding)
                else:
                    for i, j in T.Parallel(block_M, block_K):
                        m = by * block_M + i  # output pixel (n, oh, ow)
                        kk = k * block_K + j  # receptive-field index (kh, kw, c)
                        ih = (m % (OH * OW)) // OW * stride + kk // (KW * C) * dilation - padding
                        iw = m % OW * stride + kk // C % KW * dilation - padding
                        valid = m < M_total and kk < K_total and 0 <= ih < H and 0 <= iw < W
                        data_shared[i, j] = T.if_then_else(
                            valid, data[m // (OH * OW), ih, iw, kk % C], 0)
                T.copy(weight[k * block_K, bx * block_N], weight_shared)
                T.gemm(data_shared, weight_shared, out_local)
            T.copy(out_local, out[by * block_M, bx * block_N])

    return main


def tile_for(shape: tuple, **given) -> dict:
    """The five tile parameters of `convolution` for shape (N, C, H, W, F, KH, KW, stride,
    padding, dilation): those given (not None), the others the tile recommender's first
    choice of TILE_SPACE for the shape with them, predicted for the GPU the kernel is compiled
    for. Other keywords given (dtype, ...) are passed to the recommender's builds."""
    fixed = {k: v for k, v in given.items() if v is not None}
    if any(k not in fixed for k in TILE_PARAMETERS):
        fixed = _recommended(tuple(shape), tuple(sorted(fixed.items())))
    return {k: fixed[k] for k in TILE_PARAMETERS}


@functools.lru_cache(maxsize=None)
def _recommended(shape: tuple, fixed: tuple) -> dict:
    fixed = dict(fixed)
    space = {k: v for k, v in TILE_SPACE.items() if k not in fixed}
    best = tilecraft.carver.recommend(convolution, shape, space, target="auto", top=1,
                                      fixed=fixed)
    if not best:
        raise ValueError(f"no tile of {space} fits the convolution {shape} with {fixed}")
    return best[0].config


def ref_program(data, weight, stride, padding, dilation):
    """Direct convolution in float32: data [N, H, W, C], weight [KH, KW, C, F]."""
    N, H, W, C = data.shape
    KH, KW, _, F = weight.shape
    OH = out_size(H, KH, stride, padding, dilation)
    OW = out_size(W, KW, stride, padding, dilation)
    x = np.pad(data.astype(np.float32), ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    out = np.zeros((N, OH, OW, F), np.float32)
    for kh in range(KH):
        for kw in range(KW):
            h0, w0 = kh * dilation, kw * dilation
            patch = x[:, h0:h0 + (OH - 1) * stride + 1:stride, w0:w0 + (OW - 1) * stride + 1:stride]
            out += patch @ weight[kh, kw].astype(np.float32)
    return out


def conv2d(data, weight, stride=1, padding=0, dilation=1, **config):
    """data [N, H, W, C], weight [KH, KW, C, F] (numpy arrays, or torch tensors on the GPU) ->
    out [N, OH, OW, F]."""
    N, H, W, C = data.shape
    KH, KW, _, F = weight.shape
    kernel = convolution(N, C, H, W, F, KH, KW, stride, padding, dilation, **config)
    out = kernel(data, weight.reshape(KH * KW * C, F))
    return out.reshape(N, out_size(H, KH, stride, padding, dilation),
                       out_size(W, KW, stride, padding, dilation), F)


def run(N=2, C=16, H=16, W=16, F=32, KH=3, KW=3, stride=1, padding=1, dilation=1, seed=0,
        **config):
    """Build the kernel, run it on random inputs, check it against ref_program and return the
    largest absolute error."""
    rng = np.random.default_rng(seed)
    data = rng.uniform(-1.0, 1.0, (N, H, W, C)).astype(np.float16)
    weight = rng.uniform(-1.0, 1.0, (KH, KW, C, F)).astype(np.float16)
    out = conv2d(data, weight, stride, padding, dilation, **config)
    ref = ref_program(data, weight, stride, padding, dilation)
    assert out.shape == ref.shape and out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=1e-2, atol=1e-2)
    return float(np.abs(out.astype(np.float32) - ref).max())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--c", type=int, default=16)
    parser.add_argument("--h", type=int, default=16)
    parser.add_argument("--w", type=int, default=16)
    parser.add_argument("--f", type=int, default=32)
    parser.add_argument("--k", type=int, default=3, help="kernel height and width")
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--padding", type=int, default=1)
    parser.add_argument("--dilation", type=int, default=1)
    args = parser.parse_args()
    err = run(args.n, args.c, args.h, args.w, args.f, args.k, args.k, args.stride, args.padding,
              args.dilation)
    print(f"conv2d: ok (max abs error {err:.2e})")
