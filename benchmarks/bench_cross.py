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

from typing import Any

from mhabench.bench.axes import (
    BACKENDS,
    FEW_HEADS,
    FRAMEWORKS,
    GRID_NEWER,
    NEWER,
    RECORD_KERNELS,
    SHAPE,
    WHERE,
)
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

LENGTHS = grid(tiny=[8, 64], quick=[64, 1024], full=[64, 512, 4096])


def runs(c: AttentionConfig) -> bool:
    """The newer backends at few queries over a long source only, but on the full grid."""
    return GRID == "full" or c.backend not in NEWER or c.cross and c.n < c.m


def measures_memory(c: AttentionConfig) -> bool:
    """On tiny the chapter's backends and plug-ins (the newer ones' memory is the head
    sweep's); every cell on full (the quick grid has no memory process here)."""
    return GRID == "full" or c.backend not in NEWER


class SelfVsCross(AttentionBenchmark):
    param_names = ["framework", "backend", "cross", "batch", "n", "m", "d", "heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS,
              grid(tiny=["batched"], quick=["batched", "fused"], full=BACKENDS)
              + grid(tiny=[], quick=GRID_NEWER, full=GRID_NEWER),
              [False, True], [SHAPE.batch], LENGTHS, LENGTHS, [SHAPE.d], FEW_HEADS, *WHERE]
    skip_params = skip_cells(param_names, params, runs)

    def setup(self, *params: Any) -> None:
        prepare(self, params)

    def teardown(self, *params: Any) -> None:
        record_load(self, params)

    def time_step(self, *params: Any) -> None:
        self.step()

    time_step.setup = settle

    if GRID != "quick":
        def track_step_bytes(self, *params: Any) -> int:
            return step_bytes(self)

        track_step_bytes.unit = "bytes"
        track_step_bytes.skip_params = skip_cells(param_names, params, runs, measures_memory)

    if GRID == "full" and CPU:
        def track_step_rss_bytes(self, *params: Any) -> int:
            return rss_bytes(self)

        track_step_rss_bytes.unit = "bytes"
        track_step_rss_bytes.skip_params = skip_cells(param_names, params, runs, on_cpu)

    if RECORD_KERNELS:
        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, runs, library_call)

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, runs, on_cuda)
