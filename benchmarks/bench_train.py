"""A forward pass against forward + backward (one training step of the attention layer)."""

from .common import BACKENDS, DEVICE_PARAMS, DTYPES, FRAMEWORKS, THREADS, AttentionBenchmark, grid


class ForwardVsTrain(AttentionBenchmark):
    param_names = ["framework", "backend", "mode", "batch", "n", "d", "heads", "device",
                   "dtype", "threads"]
    params = [FRAMEWORKS, BACKENDS, ["forward", "train"], [grid(tiny=2, quick=2, full=8)],
              [grid(tiny=32, quick=512, full=512)], [grid(tiny=32, quick=256, full=256)],
              grid(tiny=[4], quick=[8], full=[1, 8, 64]), DEVICE_PARAMS, DTYPES, [THREADS]]
