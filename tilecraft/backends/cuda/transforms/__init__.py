"""Rewrites of lowered CUDA code that shape what the GPU issues: loop rotations (mma fragment
loads, wgmma), the warpgroup seesaw and ping-pong, wgmma batching and overlap, alternating k
direction."""
