"""What a tile program moves and computes, counted on its tile graph: bytes per memory level,
tensor-core and CUDA-core operations, L2 reuse between blocks (l2model). Target-neutral; the
cost model (carver) prices these counts for a Target, and backend passes consult them (block
rasterization, L2 prefetch)."""
