"""Exercise 8: multi-head (kv_heads = h) against grouped-query (a middle group count) and
multi-query (kv_heads = 1) attention at the chapter's shape.

The framework layers (``reference``) support MHA only: their GQA/MQA cells show n/a. The
newer backends (torch.compile, FlexAttention, JAX blockwise) take the grouped cell only on
the quick grid (its time budget); every cell on the full one. The quick grid runs no
memory process here: grouping changes the step's memory through its KV cache, which
bench_decode measures at the same three group counts; tiny and full measure it here too.
"""

from mhabench.bench.common import (
    BACKENDS,
    CHAPTER,
    FRAMEWORKS,
    GRID_NEW_BACKENDS,
    NEW_BACKENDS,
    WHERE,
    grid,
    newer_backends_where,
    parameters,
)
from mhabench.bench.methods import DeviceTime, KernelTrack, StepMemory, StepRss, TimeStep


class MhaGqaMqa(TimeStep, StepMemory, StepRss, KernelTrack, DeviceTime):
    param_names, params = parameters(
        framework=FRAMEWORKS, backend=BACKENDS + GRID_NEW_BACKENDS, **CHAPTER.axes(),
        heads=[grid(tiny=4, quick=16, full=32)],
        kv_heads=grid(tiny=[4, 1], quick=[16, 4, 1], full=[32, 8, 4, 1]), **WHERE)
    keep = staticmethod(newer_backends_where(lambda c: c.kv_heads not in (c.heads, 1)))
    # No memory process on the quick grid (its budget: module docstring); on tiny the
    # chapter's backends and plug-ins (the newer ones' memory is the head sweep's).
    keep_memory = staticmethod(grid(tiny=lambda c: c.backend not in NEW_BACKENDS,
                                    quick=lambda c: False, full=lambda c: True))
