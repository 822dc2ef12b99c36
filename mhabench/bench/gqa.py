"""Exercise 8: multi-head (kv_heads = h) against grouped-query (a middle group count) and
multi-query (kv_heads = 1) attention at the chapter's shape.

The framework layers (``reference``) support MHA only: their GQA/MQA cells show n/a. The
newer backends (torch.compile, FlexAttention, JAX blockwise) take the grouped cell only on
the quick grid (its time budget); every cell on the full one. The quick grid runs no
memory process here: grouping changes the step's memory through its KV cache, which
bench_decode measures at the same three group counts; tiny and full measure it here too.
"""

from typing import Any

from mhabench.bench.axes import (
    BACKENDS,
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


def runs(c: AttentionConfig) -> bool:
    """The newer backends at the grouped cell only, but on the full grid."""
    return GRID == "full" or c.backend not in NEWER or c.kv_heads not in (c.heads, 1)


def measures_memory(c: AttentionConfig) -> bool:
    """On tiny the chapter's backends and plug-ins (the newer ones' memory is the head
    sweep's); every cell on full (the quick grid has no memory process here)."""
    return GRID == "full" or c.backend not in NEWER


class MhaGqaMqa(AttentionBenchmark):
    param_names = ["framework", "backend", "batch", "n", "d", "heads", "kv_heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, BACKENDS + GRID_NEWER, [SHAPE.batch], [SHAPE.n], [SHAPE.d],
              [grid(tiny=4, quick=16, full=32)],
              grid(tiny=[4, 1], quick=[16, 4, 1], full=[32, 8, 4, 1]), *WHERE]
    # Every registered backend's cells: mhabench init's module narrows the backend axis.
    skip_params = skip_cells(param_names, params, runs, every_backend=True)

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
        track_step_bytes.skip_params = skip_cells(param_names, params, runs, measures_memory,
                                                  every_backend=True)

    if GRID == "full" and CPU:
        def track_step_rss_bytes(self, *params: Any) -> int:
            return rss_bytes(self)

        track_step_rss_bytes.unit = "bytes"
        track_step_rss_bytes.skip_params = skip_cells(param_names, params, runs, on_cpu,
                                                      every_backend=True)

    if RECORD_KERNELS:
        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, runs, library_call,
                                              every_backend=True)

    if CUDA:
        def track_device_seconds(self, *params: Any) -> float:
            return device_seconds(self)

        track_device_seconds.unit = "seconds"
        track_device_seconds.skip_params = skip_cells(param_names, params, runs, on_cuda,
                                                      every_backend=True)
