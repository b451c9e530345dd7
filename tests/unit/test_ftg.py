"""The FTG view: tile ops as nodes, buffer def-use as edges (paper section 4.1)."""
import tilecraft
import tilecraft.language as T
from tilecraft.ir.ftg import FTG, build_ftgs


def gemm_func(M=128, N=128, K=96, bm=64, bn=64, bk=32):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])
    return main


def edges(g: FTG, carried=None):
    return {(e.src, e.dst, e.buffer.name, e.kind) for e in g.edges
            if carried is None or e.loop_carried == carried}


def test_gemm_nodes_in_program_order():
    (g,) = build_ftgs(gemm_func())
    assert [n.kind for n in g.nodes] == ["fill", "copy", "copy", "gemm", "copy"]
    assert [b.name for b in g.nodes[3].reads] == ["A_s", "B_s", "C_l"]
    assert [b.name for b in g.nodes[3].writes] == ["C_l"]
    assert [len(n.loops) for n in g.nodes] == [0, 1, 1, 1, 0]


def test_gemm_flow_edges():
    (g,) = build_ftgs(gemm_func())
    forward = edges(g, carried=False)
    assert (1, 3, "A_s", "flow") in forward
    assert (2, 3, "B_s", "flow") in forward
    assert (0, 3, "C_l", "flow") in forward
    assert (3, 4, "C_l", "flow") in forward
    # The gemm's own accumulator reaches it again around the loop.
    assert sorted(n.index for n in g.producers(g.nodes[3])) == [0, 1, 2, 3]
    assert sorted(n.index for n in g.consumers(g.nodes[3])) == [3, 4]


def test_gemm_loop_carried_edges():
    (g,) = build_ftgs(gemm_func())
    carried = edges(g, carried=True)
    # The accumulator flows around the k loop; the shared tiles are overwritten after use.
    assert (3, 3, "C_l", "flow") in carried
    assert (3, 1, "A_s", "anti") in carried
    assert (3, 2, "B_s", "anti") in carried
    assert all(g.nodes[e.src].loops and g.nodes[e.dst].loops for e in g.edges if e.loop_carried)


def test_parallel_nest_is_one_node_and_branch_reads_condition():
    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), Mask: T.Tensor((4,), "bool"),
             Y: T.Tensor((64,), "float32")):
        with T.Kernel(4, threads=32) as bx:
            s = T.alloc_shared((16,), "float32")
            T.copy(X[bx * 16], s)
            if Mask[bx]:
                for i in T.Parallel(16):
                    s[i] = s[i] * 2.0
            T.copy(s, Y[bx * 16])

    (g,) = build_ftgs(main)
    assert [n.kind for n in g.nodes] == ["copy", "branch", "parallel", "copy"]
    assert [b.name for b in g.nodes[1].reads] == ["Mask"]
    assert (0, 2, "s", "flow") in edges(g)
    assert (2, 3, "s", "flow") in edges(g)
    assert (0, 2, "s", "output") in edges(g)


def test_one_graph_per_launch_and_text_forms():
    @T.prim_func
    def main(X: T.Tensor((32,), "float32"), Y: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            t = T.alloc_fragment((32,), "float32")
            T.copy(X, t)
            T.copy(t, Y)
        with T.Kernel(1, threads=32) as bx:
            u = T.alloc_fragment((32,), "float32")
            T.copy(Y, u)
            T.copy(u, X)

    graphs = build_ftgs(main)
    assert len(graphs) == 2
    assert graphs[1].describe().splitlines()[0].startswith("n0 copy reads[Y] writes[u]")
    assert "n0 -> n1 flow u" in graphs[1].describe()
    dot = graphs[0].to_dot()
    assert dot.startswith("digraph ftg {") and 'n0 -> n1 [label="t (flow)"];' in dot


def test_kernel_compiles_after_ftg_build():
    kernel = tilecraft.compile(gemm_func(), out_idx=[-1])
    assert len(build_ftgs(kernel.func)) == 1
