"""Chunked gated delta net forward (examples/chunk_gated_delta_net.py: three kernels behind
`chunk_gated_delta_rule`, flash-linear-attention's signature) beside flash-linear-attention's
`chunk_gated_delta_rule` (Triton), in one process on one GPU, at the paper's shapes (table 17:
B 1 with T 16k / 32k / 64k and B 64 with T 1k / 2k / 4k; H 32, DK = DV = 128).

    python3 bench/bench_gated_delta_net.py [--shapes 1x16384,...] [--dtype bfloat16]
                                           [--backward] [--rounds 3] [--compile-only]
                                           [--tag ...] [--out dir]

Both sides get the same inputs (unit-norm keys, log decays in (-0.1, -0.01), beta in
(0.1, 0.9), a random initial state, the final state returned), each timer starts from a cold L2
and the two alternate in rounds; ratio = median over rounds of fla's time / ours. Our three
kernels are also timed one by one in the last round. fla is imported from where pip put it
(`fla` of the flash-linear-attention / fla-core wheels); without it only ours is timed.
--compile-only builds the kernels (nvcc included; with --backward the backward's too), prints
the seconds each took and times nothing (TILECRAFT_DISABLE_CACHE=1 for cold compiles).

--backward times the backward instead: ours (examples/chunk_gated_delta_net_bwd.py's
`chunk_gated_delta_rule_bwd`, five launches that recompute the forward's intermediates) beside
fla's autograd backward of the same forward (`torch.autograd.grad` of o and the final state,
the graph kept: fla's backward kernels only, with the inverse its forward saved), the gradients
of o and of the final state random; each gradient compared with fla's.

Results: bench/gated_delta_net.md.
"""
import argparse
import time
from statistics import median

from common import OUT, add_arm_options, in_rounds, show_results, warm_gpu
import chunk_gated_delta_net as gdn
import chunk_gated_delta_net_bwd as gdn_bwd
from tilecraft.profiler import cuda_median_ms

SHAPES = "1x16384,1x32768,1x65536,64x1024,64x2048,64x4096"
H, D = 32, 128


def timer(fn):
    return lambda: cuda_median_ms(fn, 2, 10, "clean")


def inputs(B, T, dtype, seed=0):
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape):
        return torch.rand(*shape, device="cuda", generator=gen)
    q = (rand(B, T, H, D) * 2 - 1).to(dtype)
    k = torch.nn.functional.normalize(rand(B, T, H, D) * 2 - 1, dim=-1).to(dtype)
    v = (rand(B, T, H, D) * 2 - 1).to(dtype)
    g = -(rand(B, T, H) * 0.09 + 0.01)
    beta = rand(B, T, H) * 0.8 + 0.1
    h0 = rand(B, H, D, D) * 2 - 1
    return q, k, v, g, beta, h0


def state_block_dv(B, requested):
    """chunk_state's block_DV as chunk_gated_delta_rule picks it (or as requested)."""
    import torch
    if requested is not None:
        return requested
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return gdn.scan_block_DV(B, H, D, 64, sms)


def compile_all(B, T, dtype, state_dv=64, backward=False):
    """Each kernel of ours for (B, T), compiled (the jit caches them for the timed calls), and
    the seconds each took; with backward, the backward's three kernels too."""
    sizes = (B, T, H, D, D)
    builds = [lambda: gdn.chunk_prepare(*sizes, dtype=dtype),
              lambda: gdn.chunk_state(*sizes, block_DV=state_dv, use_initial_state=True,
                                      dtype=dtype),
              lambda: gdn.chunk_output(*sizes, dtype=dtype)]
    if backward:
        builds += [lambda: gdn_bwd.chunk_bwd_dv_local(*sizes, dtype=dtype),
                   lambda: gdn_bwd.chunk_bwd_state(*sizes, block_DV=state_dv,
                                                   use_final_state_grad=True, dtype=dtype),
                   lambda: gdn_bwd.chunk_bwd_grads(*sizes, threads=256, dtype=dtype)]
    kernels, seconds = [], []
    for build in builds:
        started = time.time()
        kernels.append(build())
        seconds.append(time.time() - started)
    return kernels, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--tag", default="gated_delta_net")
    parser.add_argument("--shapes", default=SHAPES, help="B x T, comma-separated")
    parser.add_argument("--dtype", default="bfloat16", choices=["float16", "bfloat16"])
    parser.add_argument("--state-block-dv", type=int, default=None,
                        help="chunk_state's block_DV (default: the wrapper's choice)")
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--backward", action="store_true", help="time the backward")
    add_arm_options(parser, rounds=3, pass_config=False)
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    if args.compile_only:
        for B, T in shapes:
            kernels, secs = compile_all(B, T, args.dtype, backward=args.backward)
            print(f"B{B} T{T}: compiled in {' / '.join(f'{x:.2f}' for x in secs)} s; "
                  f"registers {[k.n_regs for k in kernels]}", flush=True)
        return

    import torch
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_gdn
    except ImportError:
        fla_gdn = None
    dtype = getattr(torch, args.dtype)
    warm_gpu()
    if args.backward:
        return backward(args, shapes, dtype, fla_gdn)
    rows = []
    for B, T in shapes:
        q, k, v, g, beta, h0 = inputs(B, T, dtype)
        state_dv = state_block_dv(B, args.state_block_dv)
        kernels, _ = compile_all(B, T, args.dtype, state_dv)

        def ours():
            return gdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0,
                                              output_final_state=True, state_block_DV=state_dv)
        o, state = ours()
        row = {"B": B, "T": T, "dtype": args.dtype, "state_block_dv": state_dv}
        timers = [timer(ours)]
        if fla_gdn is not None:
            def theirs():
                return fla_gdn(q, k, v, g, beta, initial_state=h0, output_final_state=True)
            fo, fstate = theirs()
            row["o_vs_fla"] = float((o.float() - fo.float()).norm() / fo.float().norm())
            row["state_vs_fla"] = float((state - fstate.float()).norm() / fstate.float().norm())
            timers.append(timer(theirs))
        times = in_rounds(args.rounds, timers, args.settle)
        row["ours_ms"] = median(times[0])
        if fla_gdn is not None:
            row["fla_ms"] = median(times[1])
            row["vs_fla"] = median([f / x for x, f in zip(times[0], times[1])])
        # the three kernels one by one, on the intermediates of one call
        g_cum, w, u = kernels[0](k, v, g, beta)
        hs, v_new, _ = kernels[1](k, w, u, g_cum, h0)
        parts = [lambda: kernels[0](k, v, g, beta), lambda: kernels[1](k, w, u, g_cum, h0),
                 lambda: kernels[2](q, k, v_new, hs, g_cum)]
        row["parts_ms"] = [timer(p)() for p in parts]
        row["registers"] = [kern.n_regs for kern in kernels]
        print(f"B{B} T{T}: ours {row['ours_ms']:.3f} ms (prepare/state/output "
              f"{'/'.join(f'{x:.3f}' for x in row['parts_ms'])}), fla "
              f"{row.get('fla_ms', float('nan')):.3f} ms, vs fla {row.get('vs_fla', 0):.2f}x; "
              f"o vs fla {row.get('o_vs_fla', 0):.1e}, state {row.get('state_vs_fla', 0):.1e}",
              flush=True)
        rows.append(row)
        del q, k, v, g, beta, h0, o, state, g_cum, w, u, hs, v_new
        torch.cuda.empty_cache()
    columns = [("B x T", lambda r: f"{r['B']}x{r['T']}"),
               ("state block_DV", lambda r: str(r["state_block_dv"])),
               ("ours ms", lambda r: f"{r['ours_ms']:.3f}"),
               ("prepare / state / output ms",
                lambda r: " / ".join(f"{x:.3f}" for x in r["parts_ms"])),
               ("fla ms", lambda r: f"{r['fla_ms']:.3f}" if "fla_ms" in r else "-"),
               ("vs fla", lambda r: f"{r['vs_fla']:.2f}" if "vs_fla" in r else "-"),
               ("o rel. diff", lambda r: f"{r['o_vs_fla']:.1e}" if "o_vs_fla" in r else "-"),
               ("state rel. diff",
                lambda r: f"{r['state_vs_fla']:.1e}" if "state_vs_fla" in r else "-"),
               ("regs", lambda r: "/".join(str(x) for x in r["registers"]))]
    show_results(args.out, args.tag, rows, columns)


GRADS = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


def backward(args, shapes, dtype, fla_gdn):
    import torch
    rows = []
    for B, T in shapes:
        q, k, v, g, beta, h0 = inputs(B, T, dtype)
        gen = torch.Generator(device="cuda").manual_seed(1)
        do = (torch.rand(B, T, H, D, device="cuda", generator=gen) * 2 - 1).to(dtype)
        dht = torch.rand(B, H, D, D, device="cuda", generator=gen) * 2 - 1
        scale = D ** -0.5

        def ours():
            return gdn_bwd.chunk_gated_delta_rule_bwd(q, k, v, g, beta, do, scale=scale,
                                                      initial_state=h0, dht=dht)
        started = time.time()
        mine = ours()
        row = {"B": B, "T": T, "dtype": args.dtype, "first_call_s": time.time() - started}
        timers = [timer(ours)]
        if fla_gdn is not None:
            leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, g, beta, h0)]
            o, state = fla_gdn(*leaves[:5], scale=scale, initial_state=leaves[5],
                               output_final_state=True)

            def theirs():
                return torch.autograd.grad((o, state), leaves, (do, dht), retain_graph=True)
            ref = theirs()
            row["vs_fla_grads"] = {
                name: float((a.float() - b.float()).norm() / b.float().norm())
                for name, a, b in zip(GRADS, mine, ref)}
            timers.append(timer(theirs))
        times = in_rounds(args.rounds, timers, args.settle)
        row["ours_ms"] = median(times[0])
        if fla_gdn is not None:
            row["fla_ms"] = median(times[1])
            row["vs_fla"] = median([f / x for x, f in zip(times[0], times[1])])
        print(f"B{B} T{T} backward: ours {row['ours_ms']:.3f} ms, fla "
              f"{row.get('fla_ms', float('nan')):.3f} ms, vs fla {row.get('vs_fla', 0):.2f}x; "
              f"rel. diff vs fla {row.get('vs_fla_grads')}", flush=True)
        rows.append(row)
        del q, k, v, g, beta, h0, do, dht, mine
        if fla_gdn is not None:
            del o, state, leaves, ref
        torch.cuda.empty_cache()
    columns = [("B x T", lambda r: f"{r['B']}x{r['T']}"),
               ("ours ms", lambda r: f"{r['ours_ms']:.3f}"),
               ("fla ms", lambda r: f"{r['fla_ms']:.3f}" if "fla_ms" in r else "-"),
               ("vs fla", lambda r: f"{r['vs_fla']:.2f}" if "vs_fla" in r else "-"),
               ("largest grad rel. diff",
                lambda r: "%.1e" % max(r["vs_fla_grads"].values()) if "vs_fla_grads" in r
                else "-")]
    show_results(args.out, args.tag + ("_bwd" if args.tag == "gated_delta_net" else ""), rows,
                 columns)


if __name__ == "__main__":
    main()
