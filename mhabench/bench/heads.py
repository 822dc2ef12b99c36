"""Exercise 6.4: does the head count h cost nothing at fixed width d?

The chapter's shape (d=256, n=512, batch 8) on the full grid, h from 1 to 64, for every
framework and backend (the quick grid takes batch 2, as its other classes do: its time
budget). ``reference`` is the framework's own layer (torch.nn.MultiheadAttention,
flax.nnx.MultiHeadAttention); then torch.compile, FlexAttention and JAX blockwise (the
tiny grid takes blockwise only). The report takes slowest/fastest over h per backend.
"""

from typing import Any

from mhabench.bench.axes import FRAMEWORKS, NEWER, RECORD_KERNELS, SHAPE, SWEEP_BACKENDS, WHERE
from mhabench.bench.cells import on_cuda, skip_cells
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
from mhabench.core.grids import HEAD_SWEEP
from mhabench.measure.profiler.kernel_detect import library_call


def rss_cross_check(c: AttentionConfig) -> bool:
    """The RSS cross-check beside the live peak (the report's memory section), within the
    quick grid's budget: CPU cells of the chapter's backends and plug-ins at h > 1; every
    CPU cell on the full grid."""
    return c.device == "cpu" and (GRID == "full" or c.backend not in NEWER and c.heads > 1)


class HeadsAtFixedWidth(AttentionBenchmark):
    param_names = ["framework", "backend", "batch", "n", "d", "heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, SWEEP_BACKENDS, [SHAPE.batch], [SHAPE.n], [SHAPE.d],
              grid(tiny=[1, 4, 16], quick=[1, 8, 64], full=list(HEAD_SWEEP)), *WHERE]
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

    if CPU:
        def track_step_rss_bytes(self, *params: Any) -> int:
            return rss_bytes(self)

        track_step_rss_bytes.unit = "bytes"
        track_step_rss_bytes.skip_params = skip_cells(param_names, params, rss_cross_check,
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
