"""How close does each attention kernel come to the GPU's peak, at the shapes people time?

The chapter's shape (batch 2-8, n = 512, d = 256) leaves a GPU launch-bound. These classes
take the shapes FlashAttention's and cuDNN's published sweeps use: bfloat16, head width
p = 128 (and 64), h = 16 and 32 query heads, MHA and GQA 8:1, and 16k tokens per step
(batch x n = 16384 at n = 512, 2k, 8k and 16k), causal and not; decode over batch x KV
length. Every fused
call, each of its forced kernels, and the newer backends (torch.compile, FlexAttention,
JAX blockwise); the report turns the times into TFLOP/s and TB/s against the calibrated
peak (``bench_calibration``) and the spec sheet's (``mhabench.report.sections.gpu``).

They exist where the grid asks for CUDA (the full grid, ``scripts/gpu-grid``): on a CPU
grid their cells would all be n/a. Each CUDA sample starts from a cold L2
(``mhabench.measure.cache_flush``), and the GPU's clocks and throttle state go into each
cell's record (``mhabench.measure.conditions.gpu_state``). Time only: no memory or device-time
process (a lent GPU's minutes go to more cells), and the kernel is recorded for the unforced fused
call alone (a forced one cannot fall back).
"""

from typing import Any

from mhabench.bench.axes import FRAMEWORKS
from mhabench.bench.cells import skip_cells
from mhabench.bench.common import DEVICES, DTYPES, THREADS
from mhabench.bench.methods import (
    AttentionBenchmark,
    kernel_code,
    prepare,
    record_load,
    settle,
    settle_warm,
)
from mhabench.core import backends
from mhabench.core.config import AttentionConfig
from mhabench.core.grids import NEWER_BACKENDS
from mhabench.measure.profiler.kernel_detect import library_call

TOKENS = 16384  # batch x n of every prefill cell
N = [512, 2048, 8192, 16384]
BATCH = sorted({TOKENS // n for n in N})
# The default fused call, its forced kernels, then the newer backends.
PEAK_BACKENDS = [b for b in ("fused", *backends.FORCED, *NEWER_BACKENDS)
                 if b in backends.names()]
CUDA = [d for d in DEVICES if d == "cuda"]
BF16 = [d for d in DTYPES if d == "bfloat16"]
F32 = [d for d in DTYPES if d == "float32"]
# Decode: h = 32 query heads over 8 K/V heads of width 128 (d = 4096); the batch x KV length
# points run from cuDNN's hardest (batch 1, 2k) to a cache of 8.6 GB (batch 64, 32k).
DECODE_POINTS = {(1, 2048), (1, 32768), (16, 8192), (64, 2048), (64, 32768)}
DECODE_BACKENDS = [b for b in ("batched", "fused", "flex", "blockwise")
                   if b in backends.names()]
# (d, h, h_kv) of PeakPrefillShapes: p = 64 at h = 16; h = 32 of width 128; GQA 8:1 at
# h = 16 and 32.
OTHER_SHAPES = {(1024, 16, 16), (4096, 32, 32), (2048, 16, 2), (4096, 32, 4)}


def prefill_tokens(c: AttentionConfig) -> bool:
    return c.batch * c.n == TOKENS


def other_prefill_shape(c: AttentionConfig) -> bool:
    return prefill_tokens(c) and (c.d, c.heads, c.kv_heads) in OTHER_SHAPES


def decode_point(c: AttentionConfig) -> bool:
    return (c.batch, c.m) in DECODE_POINTS


def unforced_fused(c: AttentionConfig) -> bool:
    """Which kernel the unforced fused call picks; a forced one cannot fall back."""
    return c.backend == "fused" and library_call(c)


class PeakBenchmark(AttentionBenchmark):
    """What the peak classes share. Time only: no memory or device-time process."""

    # A long step needs few samples; asv's significance test still gets 10 a side.
    repeat = (10, 30, 1.0)
    warmup_time = 0.2
    timeout = 600


if CUDA and BF16:
    class L2Reference(PeakBenchmark):
        """What the cold L2 costs: the smallest decode cell (torch's fused call, batch 1,
        2k cached tokens: 8 MiB of K/V and 80 MiB of weights against an H200's 60 MB L2)
        timed cold (``time_step``) and warm (``time_step_warm``); first, as it is cheap."""

        param_names = ["framework", "backend", "mode", "batch", "n", "m", "d", "heads",
                       "kv_heads", "device", "dtype", "threads"]
        params = [["torch"], ["fused"], ["decode"], [1], [1], [2048], [4096], [32], [8],
                  CUDA, BF16, [THREADS]]
        skip_params = skip_cells(param_names, params)

        def setup(self, *params: Any) -> None:
            prepare(self, params)

        def teardown(self, *params: Any) -> None:
            record_load(self, params)

        def time_step(self, *params: Any) -> None:
            self.step()

        time_step.setup = settle

        def time_step_warm(self, *params: Any) -> None:
            self.step()

        time_step_warm.setup = settle_warm

        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, unforced_fused)

    class PeakPrefill(PeakBenchmark):
        """Forward, bfloat16, h = 16 heads of width 128 (d = 2048), MHA: the figures the
        published sweeps quote, per kernel and n."""

        param_names = ["framework", "backend", "mode", "batch", "n", "d", "heads", "kv_heads",
                       "device", "dtype", "threads"]
        params = [FRAMEWORKS, PEAK_BACKENDS, ["forward"], BATCH, N, [2048], [16], [16],
                  CUDA, BF16, [THREADS]]
        skip_params = skip_cells(param_names, params, prefill_tokens)

        def setup(self, *params: Any) -> None:
            prepare(self, params)

        def teardown(self, *params: Any) -> None:
            record_load(self, params)

        def time_step(self, *params: Any) -> None:
            self.step()

        time_step.setup = settle

        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, prefill_tokens,
                                              unforced_fused)

    class PeakDecode(PeakBenchmark):
        """One cached decode step, bfloat16, GQA 32:8 of width 128: bytes of K/V per second."""

        param_names = ["framework", "backend", "mode", "batch", "n", "m", "d", "heads",
                       "kv_heads", "device", "dtype", "threads"]
        params = [FRAMEWORKS, DECODE_BACKENDS, ["decode"], sorted({b for b, _ in DECODE_POINTS}),
                  [1], sorted({m for _, m in DECODE_POINTS}), [4096], [32], [8],
                  CUDA, BF16, [THREADS]]
        skip_params = skip_cells(param_names, params, decode_point)

        def setup(self, *params: Any) -> None:
            prepare(self, params)

        def teardown(self, *params: Any) -> None:
            record_load(self, params)

        def time_step(self, *params: Any) -> None:
            self.step()

        time_step.setup = settle

        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, decode_point,
                                              unforced_fused)

    class PeakCausal(PeakBenchmark):
        """PeakPrefill's cells with the causal mask: a kernel that skips the masked tiles
        does about half the attention work (the report counts half, as FlashAttention's
        figures do)."""

        param_names = ["framework", "backend", "mode", "batch", "n", "d", "heads", "kv_heads",
                       "causal", "device", "dtype", "threads"]
        params = [FRAMEWORKS, PEAK_BACKENDS, ["forward"], BATCH, N, [2048], [16], [16],
                  [True], CUDA, BF16, [THREADS]]
        skip_params = skip_cells(param_names, params, prefill_tokens)

        def setup(self, *params: Any) -> None:
            prepare(self, params)

        def teardown(self, *params: Any) -> None:
            record_load(self, params)

        def time_step(self, *params: Any) -> None:
            self.step()

        time_step.setup = settle

        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, prefill_tokens,
                                              unforced_fused)

    class PeakPrefillShapes(PeakBenchmark):
        """Forward, bfloat16, the other shapes: p = 64, h = 32, GQA 8:1."""

        param_names = ["framework", "backend", "mode", "batch", "n", "d", "heads", "kv_heads",
                       "device", "dtype", "threads"]
        params = [FRAMEWORKS, PEAK_BACKENDS, ["forward"], BATCH, N, [1024, 2048, 4096],
                  [16, 32], [2, 4, 16, 32], CUDA, BF16, [THREADS]]
        skip_params = skip_cells(param_names, params, other_prefill_shape)

        def setup(self, *params: Any) -> None:
            prepare(self, params)

        def teardown(self, *params: Any) -> None:
            record_load(self, params)

        def time_step(self, *params: Any) -> None:
            self.step()

        time_step.setup = settle

        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, other_prefill_shape,
                                              unforced_fused)

    class PeakTrain(PeakBenchmark):
        """Forward and backward, bfloat16, h = 16 heads of width 128."""

        param_names = ["framework", "backend", "mode", "batch", "n", "d", "heads", "kv_heads",
                       "device", "dtype", "threads"]
        params = [FRAMEWORKS, PEAK_BACKENDS, ["train"], BATCH, N, [2048], [16], [16],
                  CUDA, BF16, [THREADS]]
        skip_params = skip_cells(param_names, params, prefill_tokens)

        def setup(self, *params: Any) -> None:
            prepare(self, params)

        def teardown(self, *params: Any) -> None:
            record_load(self, params)

        def time_step(self, *params: Any) -> None:
            self.step()

        time_step.setup = settle

        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, prefill_tokens,
                                              unforced_fused)


if CUDA and F32:
    class PeakFloat32(PeakBenchmark):
        """Forward in float32 (true float32 matmuls, no TF32), h = 16 heads of width 128:
        the kernels that take it (math, efficient, XLA) against float32's peak."""

        param_names = ["framework", "backend", "mode", "batch", "n", "d", "heads", "kv_heads",
                       "device", "dtype", "threads"]
        params = [FRAMEWORKS, PEAK_BACKENDS, ["forward"], BATCH, N, [2048], [16], [16],
                  CUDA, F32, [THREADS]]
        skip_params = skip_cells(param_names, params, prefill_tokens)

        def setup(self, *params: Any) -> None:
            prepare(self, params)

        def teardown(self, *params: Any) -> None:
            record_load(self, params)

        def time_step(self, *params: Any) -> None:
            self.step()

        time_step.setup = settle

        def track_kernel(self, *params: Any) -> int:
            return kernel_code(self)

        track_kernel.unit = "kernel code"
        track_kernel.skip_params = skip_cells(param_names, params, prefill_tokens,
                                              unforced_fused)
