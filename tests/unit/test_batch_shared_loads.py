"""batch_shared_loads: an unrolled loop that writes a shared tile from another loads what it
reads before its first store (nvcc would keep every step's load behind the previous step's
store, both being pointers into the one arena). The results are unchanged: test_vector_runs
runs the same kernel on both emulators against the interpreter, and test_operand_ahead the W4A16
GEMM."""
from tilecraft.backends.cuda import pipeline as pipelines
from tilecraft.backends.cuda.codegen.cuda import emit_cuda

from test_vector_runs import unpack_scale

OFF = {"tl.disable_shared_load_batching": True}


def cuda_text(func, configs=None) -> str:
    return emit_cuda(pipelines.cuda(func, "sm_80", configs=configs))[0]


def loads_in_the_storing_loop(text: str) -> int:
    """Shared loads between the header of the loop holding the 16-byte shared store and that
    store."""
    lines = text.splitlines()
    store = next(i for i, line in enumerate(lines) if "tc::st_shared_128((&w[" in line)
    depth = len(lines[store]) - len(lines[store].lstrip())
    header = max(i for i in range(store) if lines[i].lstrip().startswith("for (") and
                 len(lines[i]) - len(lines[i].lstrip()) < depth)
    return sum("tc::ld_shared_" in line for line in lines[header:store])


def test_the_loads_are_issued_before_the_stores():
    text = cuda_text(unpack_scale(64, 128))
    assert "p_run_ahead" in text
    assert loads_in_the_storing_loop(text) == 0


def test_the_pass_config_keeps_each_load_beside_its_store():
    text = cuda_text(unpack_scale(64, 128), OFF)
    assert "_ahead" not in text
    assert loads_in_the_storing_loop(text) == 1


def test_loads_past_the_register_budget_stay_in_place():
    # eight weights a step over 128 threads: a 128 x 256 tile takes 32 steps of 4 bytes (128
    # bytes a thread), a 256 x 512 one 128 steps (512 bytes, past the budget of 256)
    assert "_ahead" in cuda_text(unpack_scale(128, 256, bm=128, bn=256))
    assert "_ahead" not in cuda_text(unpack_scale(256, 512, bm=256, bn=512))
