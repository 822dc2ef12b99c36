"""Exercise 6.4: does the head count h cost nothing at fixed width d?

The chapter's shape (d=256, n=512, batch 8) on the full grid, h from 1 to 64, for every
framework and backend (the quick grid takes batch 2, as its other classes do: at batch 8
this one class took 390 of the quick grid's 820 s of asv run on a 2-core machine).
``reference`` is the framework's own layer (torch.nn.MultiheadAttention,
flax.nnx.MultiHeadAttention); then torch.compile, FlexAttention and JAX blockwise (the
tiny grid takes blockwise only). The report takes slowest/fastest over h per backend.
"""

from mhabench.bench.common import (
    CHAPTER,
    FRAMEWORKS,
    GRID,
    NEW_BACKENDS,
    SWEEP_BACKENDS,
    WHERE,
    grid,
    parameters,
)
from mhabench.bench.methods import DeviceTime, KernelTrack, StepMemory, StepRss, TimeStep
from mhabench.core.config import HEAD_SWEEP


class HeadsAtFixedWidth(TimeStep, StepMemory, StepRss, KernelTrack, DeviceTime):
    param_names, params = parameters(
        framework=FRAMEWORKS, backend=SWEEP_BACKENDS, **CHAPTER.axes(),
        heads=grid(tiny=[1, 4, 16], quick=[1, 8, 64], full=list(HEAD_SWEEP)), **WHERE)
    # The RSS cross-check beside the live peak (the report's memory section), within the
    # quick grid's budget: the chapter's backends and plug-ins at h > 1; all on the full grid.
    keep_rss = staticmethod(lambda c: GRID == "full" or (c.backend not in NEW_BACKENDS
                                                         and c.heads > 1))
