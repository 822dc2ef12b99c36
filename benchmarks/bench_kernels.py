"""Which SDPA kernel wins here? The fused call forced to each kernel, with no fallback.

torch's scaled_dot_product_attention forced to flash, efficient, cudnn or math (through
``torch.nn.attention.sdpa_kernel``), JAX's ``dot_product_attention`` forced to xla or
cudnn (``implementation=``): the ``fused_<kernel>`` backends of ``mhabench.core.backends``. A
kernel that cannot take a cell (dtype, GQA, head width, device) is n/a with the library's
reason. On a CPU only flash, math and xla exist; the GPU grid (``scripts/gpu-grid``) runs
them all, in float32 and bfloat16.
"""

from typing import Any

from mhabench.bench.axes import FEW_HEADS, FRAMEWORKS, RECORD_KERNELS, SHAPE, WHERE
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
from mhabench.core.backends import FORCED
from mhabench.measure.profiler.kernel_detect import library_call


class ForcedKernels(AttentionBenchmark):
    param_names = ["framework", "backend", "batch", "n", "d", "heads", "kv_heads",
                   "device", "dtype", "threads"]
    params = [FRAMEWORKS, list(FORCED), [SHAPE.batch], [SHAPE.n], [SHAPE.d], FEW_HEADS,
              grid(tiny=[4, 2], quick=[8, 2], full=[8, 2]), *WHERE]
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

    # The forced kernel must be the one that ran.
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
