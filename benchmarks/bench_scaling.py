"""Equation 10.3.3: time against n and against d at a few head counts.

Four or more points per curve, so the report can fit the n^2 d (scores, mixing) and n d^2
(projections) terms of the 8nd^2 + 4n^2 d model and see the per-head overhead it leaves out.
"""

from .common import (
    BACKENDS,
    DEVICE_PARAMS,
    DTYPES,
    FRAMEWORKS,
    GRID,
    THREADS,
    AttentionBenchmark,
    grid,
)

SCALING_BACKENDS = grid(tiny=["fused"], quick=["batched", "fused"], full=BACKENDS)
HEADS = grid(tiny=[4], quick=[8], full=[1, 8, 64])
BATCH = [grid(tiny=1, quick=2, full=8)]


class ScalingInN(AttentionBenchmark):
    """Sequence length n (self-attention, m = n) at fixed width d."""

    records_kernel = False  # n does not change which kernel runs; bench_heads records it

    param_names = ["framework", "backend", "batch", "n", "d", "heads", "device", "dtype",
                   "threads"]
    params = [FRAMEWORKS, SCALING_BACKENDS, BATCH,
              grid(tiny=[16, 32, 64], quick=[128, 256, 512, 1024],
                   full=[128, 256, 512, 1024, 2048, 4096]),
              [grid(tiny=32, quick=256, full=256)], HEADS, DEVICE_PARAMS, DTYPES, [THREADS]]


class ScalingInD(AttentionBenchmark):
    """Width d at fixed sequence length n."""

    records_kernel = False  # head widths d/h >= 16 here: the same kernel as bench_heads
    # d changes no b*h*n*m term, the memory model's subject: ScalingInN and the head sweep
    # measure how memory grows on the quick grid (its budget); tiny and full also here.
    records_memory = GRID != "quick"

    param_names = ["framework", "backend", "batch", "n", "d", "heads", "device", "dtype",
                   "threads"]
    params = [FRAMEWORKS, SCALING_BACKENDS, BATCH, [grid(tiny=32, quick=256, full=512)],
              grid(tiny=[16, 32, 64], quick=[128, 256, 512, 1024],
                   full=[64, 128, 256, 512, 1024, 2048]),
              HEADS, DEVICE_PARAMS, DTYPES, [THREADS]]
