"""sm_90a instruction inference and the wgmma lowering, checked on the IR (no GPU needed)."""
import re
import sys
from pathlib import Path

import pytest

import tilecraft.language as T
from tilecraft.errors import TileError
from tilecraft.ir.tileop import Gemm
from tilecraft.ir.visitor import walk
from tilecraft.layout import gemm_c_fragment, wgmma_c_fragment
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.schedule.infer_instructions import infer_instructions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
import kernels  # noqa: E402


def gemm_func(bm=128, bn=256, bk=64, threads=256, trans_A=False, trans_B=False, dtype="float16",
              a_in_registers=False, stages=3):
    return kernels.gemm(1024, 1024, 512, bm, bn, bk, dtype, "float32", trans_A, trans_B,
                        threads, a_in_registers, T.GemmWarpPolicy.Square, stages)


def chosen(func, arch="sm_90a", configs=None):
    out = infer_instructions(func, arch, configs)
    return [n.instruction for n in walk(out) if isinstance(n, Gemm)]


NO_WS = {"tl.disable_warp_specialized": True}


def lowered_text(func, arch="sm_90a", configs=None):
    return pipelines.cuda(func, arch, None, configs).script()


def test_sm90a_picks_wgmma_and_older_gpus_mma_sync():
    assert chosen(gemm_func()) == ["wgmma"]
    assert chosen(gemm_func(), "sm_80") == ["mma"]
    assert chosen(gemm_func(), "sm_90a", {"tl.disable_wgmma": True}) == ["mma"]


@pytest.mark.parametrize("kwargs", [dict(bm=32, bn=64, threads=128),     # M below one m64 band
                                    dict(threads=96, bm=64, bn=64),       # not whole warpgroups
                                    dict(dtype="float32", bm=64, bn=64, threads=128)])
def test_gemms_wgmma_cannot_take_stay_on_mma_sync(kwargs):
    assert chosen(gemm_func(**kwargs)) == ["mma"]


def test_accumulator_of_one_band_per_warpgroup_is_the_mma_layout_over_warps():
    assert wgmma_c_fragment(128, 256, 2, 1).is_equal(gemm_c_fragment(128, 256, 8, 1))
    assert wgmma_c_fragment(64, 256, 1, 2).is_equal(gemm_c_fragment(64, 256, 4, 2))


@pytest.mark.parametrize("shape", [(128, 128, 1, 1), (256, 64, 2, 1), (192, 128, 1, 1),
                                   (128, 256, 1, 2)])
def test_accumulator_with_several_instructions_per_warpgroup_is_a_bijection(shape):
    frag = wgmma_c_fragment(*shape)
    assert frag.check()
    m, n, gm, gn = shape
    # thread 0 holds row 64 of the block in its second instruction when a group issues two
    insts = m // gm // 64
    if insts > 1:
        thread, local = frag.table()[64, 0, 0]
        assert thread == 0 and local == n // gn // 2


def descriptors(text):
    return re.findall(r"make_smem_desc\(T\.address_of\((\w+)\[[^\]]*\]\), (\d), (\d+), (\d+)\)",
                      text)


def test_descriptors_of_k_major_a_and_n_major_b():
    text = lowered_text(gemm_func(bm=128, bn=256, bk=64))
    # A 128 x 64 fp16: 128-byte rows (mode 1), 8-row groups 1024 bytes apart.
    # B 64 x 256 fp16 stored K x N: slabs of 64 columns, each 64 rows x 128 bytes = 8192 apart.
    assert ("A_s", "1", "16", "1024") in descriptors(text)
    assert ("B_s", "1", "8192", "1024") in descriptors(text)
    assert "tc::wgmma_m64n256k16_f32_f16<0, 1>" in text


def test_descriptors_of_64_byte_swizzle_and_transposed_operands():
    text = lowered_text(gemm_func(bm=64, bn=64, bk=32, threads=128, trans_A=True, trans_B=True))
    # A stored 32 x 64 (K x M): MN-major, slab 64 wide of 32 rows; B stored 64 x 32 (N x K):
    # K-major 64-byte rows (mode 2), 8-row groups 512 bytes apart.
    assert ("A_s", "1", "4096", "1024") in descriptors(text)
    assert ("B_s", "2", "16", "512") in descriptors(text)
    assert "tc::wgmma_m64n64k16_f32_f16<1, 0>" in text


def test_register_a_uses_the_rs_form_and_packs_words():
    text = lowered_text(gemm_func(bm=64, bn=128, bk=32, threads=128, a_in_registers=True))
    assert "tc::wgmma_m64n128k16_f32_f16_rs<1>" in text
    assert "tc::pack_half2" in text


def test_batches_are_fenced_committed_and_waited_and_barriers_fence_the_async_proxy():
    text = lowered_text(gemm_func(), configs=NO_WS)
    order = [text.index(s) for s in ("tc::wgmma_fence()", "tc::wgmma_m64n256k16",
                                     "tc::wgmma_commit_group()", "tc::wgmma_wait_group<0>()",
                                     "tc::wgmma_fence_registers<128>")]
    assert order == sorted(order)
    lines = text.splitlines()
    syncs = [i for i, line in enumerate(lines) if "tc::syncthreads()" in line]
    # (a kernel that also issues TMA stores waits for them to read their tiles in between)
    assert syncs and all("tc::fence_proxy_async_shared()" in lines[i - 1] or
                         ("tc::fence_proxy_async_shared()" in lines[i - 2] and
                          "tc::tma_store_wait<0>()" in lines[i - 1]) for i in syncs)
    assert "fence_proxy_async" not in lowered_text(gemm_func(), "sm_80")


def one_block_gemm(M, N, K, dtype, accum, out):
    """C = A @ B by one block of 128 threads, the accumulator cleared by T.gemm itself."""
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), out)):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), dtype)
            B_s = T.alloc_shared((K, N), dtype)
            C_f = T.alloc_fragment((M, N), accum)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=True)
            T.copy(C_f, C)
    return main


def test_clear_accum_zeroes_through_the_first_k_step():
    text = lowered_text(one_block_gemm(128, 128, 64, "float16", "float32", "float32"))
    assert re.search(r"wgmma_m64n128k16_f32_f16<0, 1>\([^;]*\(kk > 0\)", text) or \
        "T.if_then_else(kk > 0, 1, 0)" in text


def test_a_gemm_pinned_to_wgmma_that_cannot_use_it_names_the_reason():
    import dataclasses
    from tilecraft.ir.visitor import Mutator

    class Pin(Mutator):
        def visit_Gemm(self, op):
            return dataclasses.replace(op, instruction="wgmma")
    func = Pin().visit(gemm_func(bm=32, bn=64, threads=128))
    with pytest.raises(TileError, match="pinned to wgmma.*m64nNk16"):
        infer_instructions(func, "sm_90a")


@pytest.mark.parametrize("N,paired", [(256, True), (255, False)])
def test_accumulator_epilogue_stores_column_pairs_when_rows_are_even(N, paired):
    from tilecraft.backends.cuda.codegen.cuda import emit_cuda
    func = kernels.gemm(256, N, 128, 128, 128, 64, "float16", "float32", False, False, 256,
                        False, T.GemmWarpPolicy.Square, 2)
    # Stored from registers (the epilogue is not staged through shared memory here).
    text = emit_cuda(pipelines.cuda(func, "sm_90a", 227 * 1024,
                                    {"tl.disable_epilogue_staging": True}))[0]
    assert ("tc::st_global_32(" in text and "tc::pack_half2(C_f[" in text) == paired
    if not paired:  # an odd row length leaves pairs misaligned: one element at a time
        assert "= tc::cvt<half_t>(C_f[" in text


def test_integer_epilogues_are_not_packed_as_floats():
    from tilecraft.backends.cuda.codegen.cuda import emit_cuda
    main = one_block_gemm(64, 64, 64, "int8", "int32", "int16")
    text = emit_cuda(pipelines.cuda(main, "sm_80", 163 * 1024))[0]
    assert "pack_bf162" not in text and "pack_half2" not in text
    assert "((short)C_f[" in text  # one element at a time, converted as an integer
