"""Exercise 7: self- against cross-attention, in both directions.

n queries over m keys/values: few queries over a long source (a decoder reading an
encoder), many queries over a short source (the reverse), and the diagonal n = m both as
self-attention (one tensor feeds queries, keys and values) and as cross-attention. Cells
with n != m and cross=False are not self-attention and show n/a.
"""

from .common import BACKENDS, DEVICE_PARAMS, DTYPES, FRAMEWORKS, THREADS, AttentionBenchmark, grid

LENGTHS = grid(tiny=[8, 64], quick=[64, 1024], full=[64, 512, 4096])


class SelfVsCross(AttentionBenchmark):
    param_names = ["framework", "backend", "cross", "batch", "n", "m", "d", "heads", "device",
                   "dtype", "threads"]
    params = [FRAMEWORKS, grid(tiny=["batched"], quick=["batched", "fused"],
                               full=BACKENDS),
              [False, True], [grid(tiny=2, quick=2, full=8)], LENGTHS, LENGTHS,
              [grid(tiny=32, quick=256, full=256)], grid(tiny=[4], quick=[8], full=[1, 8, 64]),
              DEVICE_PARAMS, DTYPES, [THREADS]]
