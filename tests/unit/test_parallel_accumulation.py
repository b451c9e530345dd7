"""Accumulations T.Parallel iterations would race on (frontend/parallel_accumulation.py): a
store that adds into an element shared by iterations differing in a loop variable is refused at
its line, naming the variable and the element; sums that are well defined are not."""
import numpy as np
import pytest

import tilecraft
import tilecraft.language as T
from tilecraft.errors import TileError


def folded(index):
    """Sums x over j into acc[i, index(j)] inside one T.Parallel nest."""
    @T.prim_func
    def main(X: T.Tensor((8, 64), "float32"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((8, 64), "float32")
            acc = T.alloc_fragment((8, 4), "float32")
            out = T.alloc_fragment((8,), "float32")
            T.copy(X, x)
            T.clear(acc)
            for i, j in T.Parallel(8, 64):
                acc[i, index(j)] += x[i, j]
            T.reduce_sum(acc, out, dim=1)
            T.copy(out, Y)
    return main


@pytest.mark.parametrize("index, names", [(lambda j: j // 16, "j"), (lambda j: 0, "j")])
def test_iterations_adding_into_one_element_are_refused(index, names):
    with pytest.raises(TileError) as e:
        folded(index)
    text = str(e.value)
    assert f"iterations that differ in {names} all add into acc[i, " in text
    assert "T.reduce_sum" in text and "test_parallel_accumulation.py:" in text
    assert "acc[i, index(j)] += x[i, j]" in text          # the source line is shown


def test_a_row_sum_over_a_dropped_variable_is_refused():
    with pytest.raises(TileError, match=r"differ in j all add into s\[i\]"):
        @T.prim_func
        def main(X: T.Tensor((8, 16), "float32"), Y: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_fragment((8,), "float32")
                T.clear(s)
                for i, j in T.Parallel(8, 16):
                    s[i] += X[i, j]
                T.copy(s, Y)


def test_sums_that_are_well_defined_pass():
    """A length-1 loop dimension, an element per iteration, and per-iteration variables."""
    @T.prim_func
    def main(X: T.Tensor((1, 32), "float32"), Y: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32):
            acc = T.alloc_fragment((32,), "float32")
            T.clear(acc)
            for i, j in T.Parallel(1, 32):
                t = T.alloc_var("float32", init=1.0)
                t += X[i, j]
                acc[j] += t
                acc[j] += X[i, j]
            T.copy(acc, Y)

    X = np.random.default_rng(0).standard_normal((1, 32)).astype(np.float32)
    Y = np.full(32, np.nan, np.float32)
    tilecraft.compile(main, target="interp")(X, Y)
    np.testing.assert_allclose(Y, 2 * X[0] + 1, rtol=1e-6)
