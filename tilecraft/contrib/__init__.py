"""TileLang's `tilelang.contrib` helpers a kernel script calls (nvcc)."""
