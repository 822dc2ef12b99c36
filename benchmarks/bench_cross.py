"""Exercise 7: self- against cross-attention, in both directions.

n queries over m keys/values: few queries over a long source (a decoder reading an
encoder), many queries over a short source (the reverse), and the diagonal n = m both as
self-attention (one tensor feeds queries, keys and values) and as cross-attention. Cells
with n != m and cross=False are not self-attention and show n/a. The newer backends
(torch.compile, FlexAttention, JAX blockwise) take one cell on the quick grid (few queries
over a long source, as cross-attention), every cell on the full one. The quick grid runs
no memory process here (bench_decode's CrossDecodeSource measures a cross step's memory);
tiny and full measure it here too.
"""

from mhabench.bench.common import (
    BACKENDS,
    CHAPTER,
    FEW_HEADS,
    FRAMEWORKS,
    GRID_NEW_BACKENDS,
    NEW_BACKENDS,
    WHERE,
    grid,
    newer_backends_where,
    parameters,
)
from mhabench.bench.methods import DeviceTime, KernelTrack, StepMemory, StepRss, TimeStep

LENGTHS = grid(tiny=[8, 64], quick=[64, 1024], full=[64, 512, 4096])


class SelfVsCross(TimeStep, StepMemory, StepRss, KernelTrack, DeviceTime):
    param_names, params = parameters(
        framework=FRAMEWORKS,
        backend=grid(tiny=["batched"], quick=["batched", "fused"], full=BACKENDS)
        + grid(tiny=[], quick=GRID_NEW_BACKENDS, full=GRID_NEW_BACKENDS),
        cross=[False, True], batch=[CHAPTER.batch], n=LENGTHS, m=LENGTHS, d=[CHAPTER.d],
        heads=FEW_HEADS, **WHERE)
    keep = staticmethod(newer_backends_where(lambda c: c.cross and c.n < c.m))
    # No memory process on the quick grid (its budget: module docstring); on tiny the
    # chapter's backends and plug-ins (the newer ones' memory is the head sweep's).
    keep_memory = staticmethod(grid(tiny=lambda c: c.backend not in NEW_BACKENDS,
                                    quick=lambda c: False, full=lambda c: True))
