"""Which SDPA kernel wins here? The fused call forced to each kernel, with no fallback.

torch's scaled_dot_product_attention forced to flash, efficient, cudnn or math (through
``torch.nn.attention.sdpa_kernel``), JAX's ``dot_product_attention`` forced to xla or
cudnn (``implementation=``): the ``fused_<kernel>`` backends of ``mhabench.core.backends``. A
kernel that cannot take a cell (dtype, GQA, head width, device) is n/a with the library's
reason. On a CPU only flash, math and xla exist; the GPU grid (``scripts/gpu-grid``) runs
them all, in float32 and bfloat16.
"""

from mhabench.core.backends import FORCED

from .common import DEVICE_PARAMS, DTYPES, FRAMEWORKS, THREADS, AttentionBenchmark, grid


class ForcedKernels(AttentionBenchmark):
    param_names = ["framework", "backend", "batch", "n", "d", "heads", "kv_heads", "device",
                   "dtype", "threads"]
    params = [FRAMEWORKS, list(FORCED), [grid(tiny=2, quick=2, full=8)],
              [grid(tiny=32, quick=512, full=512)], [grid(tiny=32, quick=256, full=256)],
              grid(tiny=[4], quick=[8], full=[1, 8, 64]),
              grid(tiny=[4, 2], quick=[8, 2], full=[8, 2]),
              DEVICE_PARAMS, DTYPES, [THREADS]]
    records_kernel = True  # the forced kernel must be the one that ran
