"""Passes that decide where work goes on a CUDA GPU: instruction selection, warp
specialization, software pipelines, epilogue staging, persistence, rasterization and the final
barriers."""
