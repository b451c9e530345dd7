"""The CUDA backend: NVIDIA GPUs from sm_80 (mma.sync, cp.async) to sm_90a (wgmma, TMA, warp
specialization, clusters).

- pipeline.py: the passes of each generation, sm80() and sm90a(), sharing the tile prefix.
- rules.py: what the target-neutral passes and the cost model ask of the instructions.
- schedule/: passes that decide where work goes (instructions, warp specialization, software
  pipelines, epilogue staging, persistence, rasterization, final barriers).
- lower_tile_ops.py and tileops/: tile ops and T.Parallel nests to per-thread CUDA code.
- transforms/: rewrites of the lowered code that shape what is issued (loop rotations,
  warpgroup seesaw and ping-pong, wgmma batching and overlap).
- codegen/: CUDA C++ text and the header library (codegen/include/tilecraft).
- runtime/: nvcc, the driver, launches, the program cache, the device.
- emulator/: runs the lowered code on the CPU, thread by thread, with a race checker.
"""
