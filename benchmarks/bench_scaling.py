"""Equation 10.3.3: time against n and against d at a few head counts.

Four or more points per curve, so the report can fit the n^2 d (scores, mixing) and n d^2
(projections) terms of the 8nd^2 + 4n^2 d model and see the per-head overhead it leaves out.
"""

from mhabench.bench.common import (
    BACKENDS,
    CHAPTER,
    FEW_HEADS,
    FRAMEWORKS,
    GRID,
    WHERE,
    grid,
    parameters,
)
from mhabench.bench.methods import DeviceTime, StepMemory, StepRss, TimeStep

SCALING_BACKENDS = grid(tiny=["fused"], quick=["batched", "fused"], full=BACKENDS)
BATCH = [grid(tiny=1, quick=2, full=8)]


# No KernelTrack: n does not change which kernel runs; bench_heads records it.
class ScalingInN(TimeStep, StepMemory, StepRss, DeviceTime):
    """Sequence length n (self-attention, m = n) at fixed width d."""

    param_names, params = parameters(
        framework=FRAMEWORKS, backend=SCALING_BACKENDS, batch=BATCH,
        n=grid(tiny=[16, 32, 64], quick=[128, 256, 512, 1024],
               full=[128, 256, 512, 1024, 2048, 4096]),
        d=[CHAPTER.d], heads=FEW_HEADS, **WHERE)


# No KernelTrack: head widths d/h >= 16 here, the same kernel as bench_heads.
class ScalingInD(TimeStep, StepMemory, StepRss, DeviceTime):
    """Width d at fixed sequence length n."""

    param_names, params = parameters(
        framework=FRAMEWORKS, backend=SCALING_BACKENDS, batch=BATCH,
        n=[grid(tiny=32, quick=256, full=512)],
        d=grid(tiny=[16, 32, 64], quick=[128, 256, 512, 1024],
               full=[64, 128, 256, 512, 1024, 2048]),
        heads=FEW_HEADS, **WHERE)
    # d changes no b*h*n*m term, the memory model's subject: ScalingInN and the head sweep
    # measure how memory grows on the quick grid (its budget); tiny and full also here.
    keep_memory = staticmethod(lambda c: GRID != "quick")
