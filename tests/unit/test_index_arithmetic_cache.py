"""The interpreters' integer index arithmetic (interp/values.py, _integer_closure): computed in
int64 and wrapped to its type, and, where it reads only variables and constants, given again
while the variables hold the very same objects; a variable bound to a new object (a loop's next
iteration) computes it afresh, and arithmetic over a load is never kept."""
from types import SimpleNamespace

import numpy as np

from tilecraft.interp.values import Evaluator
from tilecraft.ir import dtypes as dt
from tilecraft.ir.expr import Binary, BufferLoad, Const, Var
from tilecraft.ir.buffer import Buffer

I32 = dt.dtype("int32")


def test_kept_while_the_variables_are_the_same_objects():
    tx, i = Var("tx", I32), Var("i", I32)
    expr = Binary("+", Binary("*", tx, Const(4, I32), I32), i, I32)
    threads = np.arange(8, dtype=np.int64)
    env = {id(tx): threads, id(i): np.int64(3)}
    ev = Evaluator(SimpleNamespace(env=env))
    first = ev.eval(expr)
    assert first.dtype == np.int32 and list(first) == [4 * t + 3 for t in range(8)]
    assert ev.eval(expr) is first                       # same objects: the kept value
    env[id(i)] = np.int64(5)                            # the next iteration: a new object
    assert list(ev.eval(expr)) == [4 * t + 5 for t in range(8)]
    env[id(tx)] = threads + 100                         # new threads' values
    assert list(ev.eval(expr)) == [4 * t + 405 for t in range(8)]


def test_int32_arithmetic_still_wraps():
    x = Var("x", I32)
    expr = Binary("*", x, Const(65536, I32), I32)
    ev = Evaluator(SimpleNamespace(env={id(x): np.int64(65536)}))
    assert int(ev.eval(expr)) == 0                      # 2**32 wraps to 0 in int32


def test_arithmetic_over_a_load_is_computed_each_time():
    buf = Buffer("S", (2,), I32, "local.var")
    data = np.array([7, 0], dtype=np.int32)
    machine = SimpleNamespace(env={}, array_of=lambda b: data,
                              element_index=lambda b, idx: idx)
    expr = Binary("+", BufferLoad(buf, (Const(0, I32),)), Const(1, I32), I32)
    ev = Evaluator(machine)
    assert int(ev.eval(expr)) == 8
    data[0] = 41
    assert int(ev.eval(expr)) == 42
