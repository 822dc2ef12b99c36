"""Equation 10.3.3: time against n and against d at a few head counts.

Four or more points per curve, so the report can fit the n^2 d (scores, mixing) and n d^2
(projections) terms of the 8nd^2 + 4n^2 d model and see the per-head overhead it leaves out.
No ``track_kernel``: n does not change which kernel runs, and the head widths d/h >= 16
here run the same kernel as bench_heads, which records it.
"""

from typing import Any

from mhabench.bench.axes import BACKENDS, FEW_HEADS, FRAMEWORKS, SHAPE, WHERE
from mhabench.bench.cells import on_cpu, on_cuda, skip_cells
from mhabench.bench.common import CPU, CUDA, GRID, grid
from mhabench.bench.methods import (
    AttentionBenchmark,
    device_seconds,
    prepare,
    record_load,
    rss_bytes,
    settle,
    step_bytes,
)

SCALING_BACKENDS = grid(tiny=["fused"], quick=["batched", "fused"], full=BACKENDS)
BATCH = [grid(tiny=1, quick=2, full=8)]


class ScalingInN(AttentionBenchmark):
    """Sequence length n (self-attention, m = n) at fixed width d."""

    param_names = ["framework", "backend", "batch", "n", "d", "heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, SCALING_BACKENDS, BATCH,
              grid(tiny=[16, 32, 64], quick=[128, 256, 512, 1024],
                   full=[128, 256, 512, 1024, 2048, 4096]),
              [SHAPE.d], FEW_HEADS, *WHERE]
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

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, on_cuda)


class ScalingInD(AttentionBenchmark):
    """Width d at fixed sequence length n."""

    param_names = ["framework", "backend", "batch", "n", "d", "heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, SCALING_BACKENDS, BATCH, [grid(tiny=32, quick=256, full=512)],
              grid(tiny=[16, 32, 64], quick=[128, 256, 512, 1024],
                   full=[64, 128, 256, 512, 1024, 2048]),
              FEW_HEADS, *WHERE]
    skip_params = skip_cells(param_names, params)

    def setup(self, *params: Any) -> None:
        prepare(self, params)

    def teardown(self, *params: Any) -> None:
        record_load(self, params)

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = settle

    # d changes no b*h*n*m term, the memory model's subject: ScalingInN and the head sweep
    # measure how memory grows on the quick grid (its budget); tiny and full also here.
    if GRID != "quick":
        def track_step_bytes(self, *params: Any) -> int:
            return step_bytes(self)

        track_step_bytes.unit = "bytes"

    if GRID == "full" and CPU:
        def track_step_rss_bytes(self, *params: Any) -> int:
            return rss_bytes(self)

        track_step_rss_bytes.unit = "bytes"
        track_step_rss_bytes.skip_params = skip_cells(param_names, params, on_cpu)

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, on_cuda)
