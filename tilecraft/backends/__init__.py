"""The backends: one package per kind of GPU code the compiler emits (today backends/cuda).

A backend provides its pass pipeline (`pipeline.steps(target, configs, smem_limit)`, one list per
GPU generation), the answers the target-neutral passes and the cost model need of its
instructions (`pipeline.RULES`, passes/instruction_rules.py), the lowering of tile ops to its
thread code, its code generator and headers, its runtime (toolchain, driver, launcher, cache)
and an emulator of its lowered code. Target-neutral modules never import a backend; the
compiler (tilecraft/compiler.py) picks the backend for a target.
"""
