"""Decoding one token at a time (Exercises 7.2 and 8); each class times distinct work.

- ``KVCacheDecode``: a real self-attention decode step (mode=decode): the new token's q, k
  and v are projected, k and v written into a KV cache preallocated for m + 1 positions,
  and q attends over all m + 1; each call starts from the same fill level m. For MHA, GQA
  and MQA: what fewer KV-cache bytes per step buy.
- ``PrefixDecode``: the same token without a cache (mode=prefix, the baseline Exercise 8
  implies): causal attention over the whole prefix of m + 1 tokens, recomputed per token.
- ``CrossDecodeSource`` (Exercise 7.2): one new query cross-attends to a source of m tokens
  whose key/value projections are cached (mode=decode, cross) or recomputed every step
  (mode=forward, cross, n=1).

The framework layers have no cached-key/value step, so there is no ``reference`` here.
"""

from typing import Any

from mhabench.bench.axes import FRAMEWORKS, RECORD_KERNELS, WHERE
from mhabench.bench.cells import on_cpu, on_cuda, skip_cells
from mhabench.bench.common import CPU, CUDA, GRID, grid
from mhabench.bench.methods import (
    AttentionBenchmark,
    device_seconds,
    kernel_code,
    prepare,
    record_load,
    rss_bytes,
    settle,
    step_bytes,
)
from mhabench.core.config import AttentionConfig
from mhabench.measure.profiler.kernel_detect import library_call

# The loop backend's decode is a Python loop over heads: full grid only, but for the KV
# cache's time cells on the quick grid (below).
DECODE_BACKENDS = grid(tiny=["loop", "batched", "fused"], quick=["batched", "fused"],
                       full=["loop", "batched", "fused"])
# The quick grid times the loop backend's cached decode too (time only): the calibration
# design keeps the loop backend at h <= 16, where its caches fit the CPU's caches, and no
# other cell tells the time model what a loop decode step over a larger cache costs (it
# slices each query head's keys and values out of the cache).
KV_DECODE_BACKENDS = grid(tiny=DECODE_BACKENDS, quick=["loop", "batched", "fused"],
                          full=DECODE_BACKENDS)
BATCH = [grid(tiny=2, quick=4, full=8)]
D = [grid(tiny=32, quick=256, full=1024)]
HEADS = grid(tiny=4, quick=16, full=16)
KV_HEADS = grid(tiny=[HEADS, 1], quick=[HEADS, HEADS // 4, 1], full=[HEADS, HEADS // 4, 1])
SOURCE = grid(tiny=[16], quick=[512, 4096], full=[128, 1024, 4096, 16384])
# Exercise 7.2 recomputes the source's K/V projections every step: one length in quick.
CROSS_SOURCE = grid(tiny=[16], quick=[1024], full=[128, 1024, 4096, 16384])
# The no-cache step recomputes an (m + 1)^2 map per token: shorter prefixes.
PREFIX = grid(tiny=[16], quick=[512], full=[128, 1024, 4096])


def kv_cache_memory(c: AttentionConfig) -> bool:
    """The loop backend's cached decode is timed only on the quick grid: no memory."""
    return GRID != "quick" or c.backend != "loop"


class KVCacheDecode(AttentionBenchmark):
    param_names = ["framework", "backend", "mode", "batch", "n", "m", "d", "heads", "kv_heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, KV_DECODE_BACKENDS, ["decode"], BATCH, [1], SOURCE, D, [HEADS],
              KV_HEADS, *WHERE]
    # Every registered backend's cells: mhabench init's module narrows the backend axis.
    skip_params = skip_cells(param_names, params, every_backend=True)

    def setup(self, *params: Any) -> None:
        prepare(self, params)

    def teardown(self, *params: Any) -> None:
        record_load(self, params)

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = settle

    def track_step_bytes(self, *params: Any) -> int:
        return step_bytes(self)

    track_step_bytes.unit = "bytes"
    track_step_bytes.skip_params = skip_cells(param_names, params, kv_cache_memory,
                                              every_backend=True)

    if GRID == "full" and CPU:
        def track_step_rss_bytes(self, *params: Any) -> int:
            return rss_bytes(self)

        track_step_rss_bytes.unit = "bytes"
        track_step_rss_bytes.skip_params = skip_cells(param_names, params, on_cpu,
                                                      every_backend=True)

    if RECORD_KERNELS:
        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, library_call,
                                              every_backend=True)

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, on_cuda,
                                                      every_backend=True)


class PrefixDecode(AttentionBenchmark):
    param_names = ["framework", "backend", "mode", "batch", "n", "m", "d", "heads", "kv_heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, DECODE_BACKENDS, ["prefix"], BATCH, [1], PREFIX, D, [HEADS],
              grid(tiny=[HEADS], quick=[HEADS], full=KV_HEADS), *WHERE]
    skip_params = skip_cells(param_names, params)

    def setup(self, *params: Any) -> None:
        prepare(self, params)

    def teardown(self, *params: Any) -> None:
        record_load(self, params)

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = settle

    def track_step_bytes(self, *params: Any) -> int:
        return step_bytes(self)

    track_step_bytes.unit = "bytes"

    if GRID == "full" and CPU:
        def track_step_rss_bytes(self, *params: Any) -> int:
            return rss_bytes(self)

        track_step_rss_bytes.unit = "bytes"
        track_step_rss_bytes.skip_params = skip_cells(param_names, params, on_cpu)

    if RECORD_KERNELS:
        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, library_call)

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, on_cuda)


class CrossDecodeSource(AttentionBenchmark):
    param_names = ["framework", "backend", "mode", "cross", "batch", "n", "m", "d", "heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, DECODE_BACKENDS, ["decode", "forward"], [True], BATCH, [1],
              CROSS_SOURCE, D, [HEADS], *WHERE]
    skip_params = skip_cells(param_names, params)

    def setup(self, *params: Any) -> None:
        prepare(self, params)

    def teardown(self, *params: Any) -> None:
        record_load(self, params)

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = settle

    def track_step_bytes(self, *params: Any) -> int:
        return step_bytes(self)

    track_step_bytes.unit = "bytes"

    if GRID == "full" and CPU:
        def track_step_rss_bytes(self, *params: Any) -> int:
            return rss_bytes(self)

        track_step_rss_bytes.unit = "bytes"
        track_step_rss_bytes.skip_params = skip_cells(param_names, params, on_cpu)

    if RECORD_KERNELS:
        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, library_call)

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, on_cuda)
