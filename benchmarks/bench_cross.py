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

from .common import (
    BACKENDS,
    DEVICE_PARAMS,
    DTYPES,
    FRAMEWORKS,
    GRID,
    GRID_NEW_BACKENDS,
    THREADS,
    AttentionBenchmark,
    grid,
    newer_backends_where,
)

LENGTHS = grid(tiny=[8, 64], quick=[64, 1024], full=[64, 512, 4096])


class SelfVsCross(AttentionBenchmark):
    param_names = ["framework", "backend", "cross", "batch", "n", "m", "d", "heads", "device",
                   "dtype", "threads"]
    params = [FRAMEWORKS, grid(tiny=["batched"], quick=["batched", "fused"],
                               full=BACKENDS) + grid(tiny=[], quick=GRID_NEW_BACKENDS,
                                                     full=GRID_NEW_BACKENDS),
              [False, True], [grid(tiny=2, quick=2, full=8)], LENGTHS, LENGTHS,
              [grid(tiny=32, quick=256, full=256)], grid(tiny=[4], quick=[8], full=[1, 8, 64]),
              DEVICE_PARAMS, DTYPES, [THREADS]]
    keep = staticmethod(newer_backends_where(lambda c: c.cross and c.n < c.m))
    records_memory = GRID != "quick"  # the quick grid's budget (module docstring)
    keep_memory = staticmethod(newer_backends_where(lambda c: False))
