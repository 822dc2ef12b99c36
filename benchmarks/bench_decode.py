"""Decoding one token at a time (Exercises 7.2 and 8).

- ``KVCacheDecode``: one new query (n = 1) attends to a cache of m already projected
  keys/values (mode=decode), for MHA, GQA and MQA: what KV-cache bytes per token buy.
- ``CrossDecodeSource``: one new query cross-attends to a source of m tokens whose key and
  value projections are cached (mode=decode) or recomputed every step (mode=forward).

The framework layers have no cached-key/value step, so there is no ``reference`` here.
"""

from .common import DEVICE_PARAMS, DTYPES, FRAMEWORKS, THREADS, AttentionBenchmark, grid

DECODE_BACKENDS = ["loop", "batched", "fused"]
BATCH = [grid(tiny=2, quick=4, full=8)]
D = [grid(tiny=32, quick=256, full=1024)]
HEADS = grid(tiny=4, quick=16, full=16)
SOURCE = grid(tiny=[16], quick=[4096], full=[128, 1024, 4096, 16384])


class KVCacheDecode(AttentionBenchmark):
    param_names = ["framework", "backend", "mode", "batch", "n", "m", "d", "heads",
                   "kv_heads", "device", "dtype", "threads"]
    params = [FRAMEWORKS, DECODE_BACKENDS, ["decode"], BATCH, [1], SOURCE, D, [HEADS],
              grid(tiny=[HEADS, 1], quick=[HEADS, HEADS // 4, 1], full=[HEADS, HEADS // 4, 1]),
              DEVICE_PARAMS, DTYPES, [THREADS]]


class CrossDecodeSource(AttentionBenchmark):
    param_names = ["framework", "backend", "mode", "cross", "batch", "n", "m", "d", "heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, DECODE_BACKENDS, ["decode", "forward"], [True], BATCH, [1], SOURCE,
              D, [HEADS], DEVICE_PARAMS, DTYPES, [THREADS]]
