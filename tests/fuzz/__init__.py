"""A differential fuzzer of tile programs.

Random valid programs (generator.py) are described by small specs (spec.py), rendered as
TileLang source (render.py) and run on the interpreter, both emulators and nvcc for sm_80 and
sm_90a (runner.py); what they should compute comes from the spec alone, in numpy
(reference.py over numerics.py), never from tilecraft. A failing program is shrunk
(shrink.py) to a small one whose source can be pasted into a regression test
(tests/unit/test_fuzz_regressions.py). test_fuzz.py runs a fixed slice in CI; the command line
runs as many as one asks for:

    python3 -m tests.fuzz --n 2000 --seed 0 [--kinds gemm,reduce] [--targets interp,emulator] [-j 2]
"""
