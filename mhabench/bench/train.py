"""A forward pass against forward + backward (one training step of the attention layer)."""

from typing import Any

from mhabench.bench.axes import BACKENDS, FEW_HEADS, FRAMEWORKS, RECORD_KERNELS, SHAPE, WHERE
from mhabench.bench.cells import on_cpu, on_cuda, skip_cells
from mhabench.bench.common import CPU, CUDA, GRID
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
from mhabench.measure.profiler.kernel_detect import library_call


class ForwardVsTrain(AttentionBenchmark):
    param_names = ["framework", "backend", "mode", "batch", "n", "d", "heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, BACKENDS, ["forward", "train"], [SHAPE.batch], [SHAPE.n], [SHAPE.d],
              FEW_HEADS, *WHERE]
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

    # The RSS cross-check of the step's memory: one more process a cell, full grid only.
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
