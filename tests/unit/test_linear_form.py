"""ir/linear.py remembers each expression node's structural key and simplified form (nodes are
never changed in place): the remembered values are the ones it computes afresh, and copies
that give the tree new variables (a deep copy, a pickle round trip) do not carry them over,
since a key names variables by identity."""
import copy
import pickle

from tilecraft.ir import dtypes as dt
from tilecraft.ir.expr import LINEAR_FORM, STRUCTURAL_KEY, Var
from tilecraft.ir.linear import _simplified, equal, simplify, structural_key


def index_expr():
    i, j = Var("i", dt.int32), Var("j", dt.int32)
    return (i * 4 + j + 3 - i * 4) // 2 + (j * 2 + 1) % 2, i, j


def test_remembered_key_and_form_are_the_computed_ones():
    e, i, j = index_expr()
    first = structural_key(e)
    assert STRUCTURAL_KEY in e.__dict__ and structural_key(e) is first
    fresh = index_expr()[0]
    assert first != structural_key(fresh)        # other variables, another key
    s = simplify(e)
    assert e.__dict__[LINEAR_FORM] is s and simplify(e) is s
    assert structural_key(s) == structural_key(_simplified(e))
    assert equal(s, e)


def test_copies_with_new_variables_forget_what_was_remembered():
    e, i, j = index_expr()
    key, form = structural_key(e), simplify(e)
    for other in (copy.deepcopy(e), pickle.loads(pickle.dumps(e))):
        assert STRUCTURAL_KEY not in other.__dict__ and LINEAR_FORM not in other.__dict__
        assert structural_key(other) != key           # its variables are new objects
        assert simplify(other) is not form
    same_vars = copy.copy(e)                          # a shallow copy shares the variables
    assert structural_key(same_vars) == key
