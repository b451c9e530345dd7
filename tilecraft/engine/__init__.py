"""TileLang's `tilelang.engine` names scripts import: the CUDA post-processing callback."""
