"""Layout and Fragment algebra, checked by enumeration."""
import numpy as np
import pytest

from tilecraft.ir.expr import Const, Var
from tilecraft.layout import (Fragment, Layout, LayoutError, fully_replicated, identity_layout,
                              linear_layout, make_partition, reduce_fragment, render_fragment)
from tilecraft.layout.layout import evaluate


def transpose_layout(rows, cols):
    return Layout((rows, cols), lambda i, j: [j * rows + i],
                  inverse_fn=lambda o: [o % rows, o // rows])


def test_forward_substitutes_and_simplifies():
    lay = linear_layout((4, 8))
    i = Var("i")
    (e,) = lay.forward([i + 1, 3])
    assert repr(e) == "i * 8 + 11"
    (c,) = lay.forward([2, 5])
    assert isinstance(c, Const) and c.value == 21
    assert lay.output_shape == (32,)
    assert lay.table().shape == (4, 8, 1)
    assert lay.is_bijective() and lay.check()
    with pytest.raises(LayoutError):
        lay.forward([1])


def test_inverse_round_trip():
    lay = transpose_layout(4, 6)
    inv = lay.inverse()
    assert inv.shape == (24,) and inv.is_bijective() and inv.check()
    assert np.array_equal(lay.compose(inv).table(), identity_layout((4, 6)).table())
    assert inv.inverse().is_equal(lay)
    assert [int(x.value) for x in lay.backward([13])] == [1, 3]


def test_non_bijective_and_unknown_inverse_are_refused():
    squash = Layout((4, 4), lambda i, j: [i])
    assert not squash.is_injective() and not squash.is_bijective()
    with pytest.raises(LayoutError, match="bijective"):
        squash.inverse()
    no_inverse = Layout((4,), lambda i: [3 - i])
    assert no_inverse.is_bijective()
    with pytest.raises(LayoutError, match="closed-form"):
        no_inverse.inverse()
    gappy = Layout((4,), lambda i: [2 * i], inverse_fn=lambda o: [o // 2])
    assert gappy.is_injective() and not gappy.is_bijective() and gappy.check()
    wrong = Layout((4,), lambda i: [i], inverse_fn=lambda o: [o // 2])
    with pytest.raises(LayoutError, match="inverse disagrees"):
        wrong.check()


def test_reshape_permute_repeat_expand():
    lay = transpose_layout(4, 6)
    flat = lay.reshape((24,))
    assert flat.check() and flat.is_bijective()
    assert np.array_equal(flat.table().reshape(4, 6, 1), lay.table())
    back = flat.reshape((2, 2, 6))
    assert back.check() and np.array_equal(back.table().reshape(4, 6, 1), lay.table())

    perm = lay.permute((1, 0))
    assert perm.shape == (6, 4) and perm.check()
    assert np.array_equal(perm.table()[..., 0], lay.table()[..., 0].T)

    rep = lay.repeat(1, 3)            # 1 output: copies stacked after each other
    assert rep.shape == (4, 18) and rep.is_bijective() and rep.check()
    assert rep.table()[1, 6 + 2, 0] == 24 + lay.table()[1, 2, 0]
    ident = identity_layout((4, 6)).repeat(0, 2)   # multi-output: offset its own output dim
    assert ident.output_shape == (8, 6) and ident.check()

    exp = lay.expand((3,))
    assert exp.shape == (3, 4, 6) and exp.output_shape == (3, 24)
    assert exp.is_bijective() and exp.check()
    with pytest.raises(LayoutError):
        lay.reshape((5, 5))


def test_compose_requires_matching_range():
    with pytest.raises(LayoutError):
        linear_layout((4, 8)).compose(linear_layout((4, 4)))
    with pytest.raises(LayoutError):
        identity_layout((4, 4)).compose(linear_layout((4, 4, 4)))


def test_describe_names_the_map():
    text = transpose_layout(2, 3).describe()
    assert "Layout(2, 3)" in text and "i1 * 2 + i0" in text


# --- fragments ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape,threads,vector", [((64, 64), 128, 4), ((16, 32), 128, 1),
                                                  ((8, 8), 128, 2), ((256,), 32, 8)])
def test_partition(shape, threads, vector):
    frag = make_partition(shape, threads, vector)
    assert frag.check()
    total = int(np.prod(shape))
    assert frag.num_threads == threads
    assert frag.locals_per_thread == -(-total // (threads * vector)) * vector
    flat = np.arange(total).reshape(shape)
    tab = frag.table()[..., 0, :]
    # `vector` consecutive elements sit in consecutive locals of one thread
    run = flat // vector
    assert np.array_equal(tab[..., 0], run % threads)
    assert np.array_equal(tab[..., 1] % vector, flat % vector)
    if total % (threads * vector) == 0:
        assert frag.is_bijective()
    with pytest.raises(LayoutError):
        make_partition((3, 3), 32, 2)


def test_fully_replicated():
    frag = fully_replicated((4, 8), 64)
    assert frag.check() and frag.replicate == 64 and frag.is_fully_replicated()
    assert frag.locals_per_thread == 32
    tab = frag.table()
    assert np.array_equal(tab[2, 3, :, 0], np.arange(64))
    t, l = Var("t"), Var("l")
    got = evaluate(frag.logical_of(t, l) + [frag.rep_of(t, l)], {t: np.int64(5), l: np.int64(11)}, ())
    assert [int(g) for g in got] == [1, 3, 5]


def test_fragment_both_ways():
    frag = make_partition((16, 16), 32, 2)
    i, j = Var("i"), Var("j")
    thread, local = frag.forward([i, j])
    t, l = Var("t"), Var("l")
    back = frag.logical_of(t, l)
    tab = frag.table()[..., 0, :]
    vals = evaluate([thread, local], {i: np.arange(16)[:, None], j: np.arange(16)[None]}, (16, 16))
    assert np.array_equal(np.stack(vals, -1), tab)
    ii, jj = evaluate(back, {t: tab[..., 0], l: tab[..., 1]}, (16, 16))
    assert np.array_equal(ii, np.indices((16, 16))[0]) and np.array_equal(jj, np.indices((16, 16))[1])
    inv = frag.inverse()
    assert inv.shape == (32, 8) and inv.is_bijective() and inv.check()


def test_fragment_repeat_replicate_bind():
    base = make_partition((4, 8), 16, 2)
    on_threads = base.repeat(0, 2, on_thread=True)
    assert on_threads.shape == (8, 8) and on_threads.num_threads == 32 and on_threads.check()
    on_locals = base.repeat(1, 3)
    assert on_locals.shape == (4, 24) and on_locals.num_threads == 16
    assert on_locals.locals_per_thread == 3 * base.locals_per_thread and on_locals.check()
    rep = base.replicate_over(4)
    assert rep.replicate == 4 and rep.num_threads == 64 and rep.check()
    assert np.array_equal(rep.table()[..., 1, 0], base.table()[..., 0, 0] + 16)
    rep2 = rep.replicate_over(2)
    assert rep2.replicate == 8 and rep2.num_threads == 128 and rep2.check()
    bound = rep.bind_thread_range(128)
    assert bound.thread_offset == 128 and bound.num_threads == 64 and bound.check()
    assert bound.table()[..., 0].min() == 128
    assert bound.repeat(0, 2, on_thread=True).check()
    assert reduce_fragment(bound, 1).check()


def test_check_catches_broken_fragments():
    clash = Fragment((4, 4), lambda i, j: (i, 0))            # four elements in one slot
    with pytest.raises(LayoutError, match="slot used twice"):
        clash.check()
    twice = Fragment((4,), lambda i, rep: (i, 0), replicate=2)  # replica on the same thread
    with pytest.raises(LayoutError, match="held twice"):
        twice.check()
    wrong = Fragment((4,), lambda i: (i, 0), logical_fn=lambda t, l: [0])
    with pytest.raises(LayoutError, match="inverse disagrees"):
        wrong.check()
    local_by_rep = Fragment((4,), lambda i, rep: (i + 4 * rep, rep), replicate=2)
    with pytest.raises(LayoutError, match="replica"):
        local_by_rep.check()


def test_reduce_partition_and_failure():
    frag = make_partition((8, 32), 64, 4)
    red = reduce_fragment(frag, 1)   # each row spread over 8 threads, 4 locals each
    assert red.replicate == 8 and red.check()
    with pytest.raises(LayoutError):
        reduce_fragment(Fragment((4, 4), lambda i, j: ((i * j) % 4 + 4 * i, 0), threads=16), 1)


def test_reduce_of_a_partial_partition_counts_only_the_holders():
    """32 elements dealt to 64 threads leave threads 32..63 empty; the reduction's replicas are
    the holders, so it spans 32 threads and each of its slots maps back to its own thread."""
    frag = make_partition((4, 8), 64)
    assert frag.num_threads == 64
    red = reduce_fragment(frag, 1)
    assert red.replicate == 8 and red.num_threads == 32 and red.check()
    for t in range(red.num_threads):
        for l in range(red.locals_per_thread):
            idx = [int(x.value) for x in red.logical_of(t, l)]
            assert int(red.thread_of(idx, int(red.rep_of(t, l).value)).value) == t


def test_render():
    text = render_fragment(make_partition((2, 4), 4, 2))
    assert "T0:0" in text and "T3:1" in text
    assert "T0+3:0" in render_fragment(fully_replicated((2, 2), 4))
    assert "5" in render_fragment(linear_layout((2, 3)))
