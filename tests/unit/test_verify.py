"""The IR verifier accepts what the frontend builds and names what is broken."""
import dataclasses

import pytest

import tilecraft.language as T
from tilecraft.errors import TileInternalError
from tilecraft.ir import dtypes as dt
from tilecraft.ir.buffer import Buffer
from tilecraft.ir.expr import Var, BufferLoad, const
from tilecraft.ir.stmt import BufferStore, SeqStmt, stmts_of
from tilecraft.ir.verify import problems, verify


def scale_func():
    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            t = T.alloc_fragment((32,), "float32")
            T.copy(X[bx * 32], t)
            for i in T.Parallel(32):
                t[i] = t[i] * 3.0
            T.copy(t, Y[bx * 32])
    return main


def with_kernel_body(func, body):
    kernel = func.body
    return dataclasses.replace(func, body=dataclasses.replace(kernel, body=body))


def test_frontend_output_is_sound():
    assert problems(scale_func()) == []


def test_unallocated_buffer_is_reported():
    func = scale_func()
    stray = Buffer("stray", (4,), dt.float32, "shared.dyn")
    body = SeqStmt(stmts_of(func.body.body) + (BufferStore(stray, (const(0),), const(1.0)),))
    found = problems(with_kernel_body(func, body))
    assert any("stray is used before it is allocated" in text for text, _ in found)


def test_variable_out_of_scope_is_reported():
    func = scale_func()
    ghost = Var("ghost")
    y = func.params[1]
    body = SeqStmt(stmts_of(func.body.body) + (BufferStore(y, (ghost,), const(0.0)),))
    found = problems(with_kernel_body(func, body))
    assert any("variable ghost" in text for text, _ in found)


def test_wrong_index_count_and_store_type_are_reported():
    func = scale_func()
    y = func.params[1]
    bad = BufferStore(y, (const(0), const(0)), const(1, dt.int32))
    found = [t for t, _ in problems(with_kernel_body(func, SeqStmt(stmts_of(func.body.body) + (bad,))))]
    assert any("indexed with 2" in t for t in found)
    assert any("has a value of type int32" in t for t in found)


def test_verify_raises_internal_error_naming_the_producer():
    func = scale_func()
    x = func.params[0]
    bad = BufferStore(x, (BufferLoad(x, (const(0),)),), const(0.0))  # float index
    with pytest.raises(TileInternalError) as info:
        verify(with_kernel_body(func, SeqStmt(stmts_of(func.body.body) + (bad,))), after="a pass")
    assert "internal error in a pass" in str(info.value)
    assert "index of X has type float32" in str(info.value)
