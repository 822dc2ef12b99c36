"""How close does each attention kernel come to the GPU's peak, at the shapes people time?

The chapter's shape (batch 2-8, n = 512, d = 256) leaves a GPU launch-bound. These classes
take the shapes FlashAttention's and cuDNN's published sweeps use: bfloat16, head width
p = 128 (and 64), h = 16 and 32 query heads, MHA and GQA 8:1, and 16k tokens per step
(batch x n = 16384 at n = 512, 2k, 8k and 16k), causal and not; decode over batch x KV
length. Every fused
call, each of its forced kernels, and the newer backends (torch.compile, FlexAttention,
JAX blockwise); the report turns the times into TFLOP/s and TB/s against the calibrated
peak (``bench_calibration``) and the spec sheet's (``mhabench.report.sections_gpu``).

They exist where the grid asks for CUDA (the full grid, ``scripts/gpu-grid``): on a CPU
grid their cells would all be n/a. Each CUDA sample starts from a cold L2
(``mhabench.measure.cache_flush``), and the GPU's clocks and throttle state go into each
cell's record (``mhabench.measure.gpu_state``). Time only: no memory or device-time process
(a lent GPU's minutes go to more cells), and the kernel is recorded for the unforced fused
call alone (a forced one cannot fall back).
"""

from mhabench.bench.common import DEVICE_PARAMS, DTYPES, FRAMEWORKS, WHERE, parameters
from mhabench.bench.methods import KernelTrack, TimeStep, WarmL2
from mhabench.core import backends
from mhabench.core.config import AttentionConfig

TOKENS = 16384  # batch x n of every prefill cell
N = [512, 2048, 8192, 16384]
BATCH = sorted({TOKENS // n for n in N})
# The default fused call, its forced kernels, then the newer backends.
PEAK_BACKENDS = [b for b in ("fused", *backends.FORCED, "compiled", "flex", "blockwise")
                 if b in backends.names()]
CUDA = [d for d in DEVICE_PARAMS if d == "cuda"]
BF16 = [d for d in DTYPES if d == "bfloat16"]
F32 = [d for d in DTYPES if d == "float32"]
ON_CUDA_BF16 = {**WHERE, "device": CUDA, "dtype": BF16}  # the last three parameters
# Decode: h = 32 query heads over 8 K/V heads of width 128 (d = 4096); the batch x KV length
# points run from cuDNN's hardest (batch 1, 2k) to a cache of 8.6 GB (batch 64, 32k).
DECODE_POINTS = {(1, 2048), (1, 32768), (16, 8192), (64, 2048), (64, 32768)}
DECODE_BACKENDS = [b for b in ("batched", "fused", "flex", "blockwise")
                   if b in backends.names()]


def _tokens(c: AttentionConfig) -> bool:
    return c.batch * c.n == TOKENS


class _Peak:
    """What the peak classes share (listed first in their bases, so it overrides
    AttentionBenchmark's defaults). Time only: no memory or device-time process."""

    # A long step needs few samples; asv's significance test still gets 10 a side.
    repeat = (10, 30, 1.0)
    warmup_time = 0.2
    timeout = 600
    # Which kernel the unforced fused call picks; a forced one cannot fall back.
    keep_kernel = staticmethod(lambda c: c.backend == "fused")


if CUDA and BF16:
    class L2Reference(_Peak, TimeStep, WarmL2, KernelTrack):
        """What the cold L2 costs: the smallest decode cell (torch's fused call, batch 1,
        2k cached tokens: 8 MiB of K/V and 80 MiB of weights against an H200's 60 MB L2)
        timed cold (``time_step``) and warm (``time_step_warm``); first, as it is cheap."""

        param_names, params = parameters(
            framework=["torch"], backend=["fused"], mode=["decode"], batch=[1], n=[1],
            m=[2048], d=[4096], heads=[32], kv_heads=[8], **ON_CUDA_BF16)

    class PeakPrefill(_Peak, TimeStep, KernelTrack):
        """Forward, bfloat16, h = 16 heads of width 128 (d = 2048), MHA: the figures the
        published sweeps quote, per kernel and n."""

        param_names, params = parameters(
            framework=FRAMEWORKS, backend=PEAK_BACKENDS, mode=["forward"], batch=BATCH, n=N,
            d=[2048], heads=[16], kv_heads=[16], **ON_CUDA_BF16)
        keep = staticmethod(_tokens)

    class PeakDecode(_Peak, TimeStep, KernelTrack):
        """One cached decode step, bfloat16, GQA 32:8 of width 128: bytes of K/V per second."""

        param_names, params = parameters(
            framework=FRAMEWORKS, backend=DECODE_BACKENDS, mode=["decode"],
            batch=sorted({b for b, _ in DECODE_POINTS}), n=[1],
            m=sorted({m for _, m in DECODE_POINTS}), d=[4096], heads=[32], kv_heads=[8],
            **ON_CUDA_BF16)
        keep = staticmethod(lambda c: (c.batch, c.m) in DECODE_POINTS)

    class PeakCausal(_Peak, TimeStep, KernelTrack):
        """PeakPrefill's cells with the causal mask: a kernel that skips the masked tiles
        does about half the attention work (the report counts half, as FlashAttention's
        figures do)."""

        param_names, params = parameters(
            framework=FRAMEWORKS, backend=PEAK_BACKENDS, mode=["forward"], batch=BATCH, n=N,
            d=[2048], heads=[16], kv_heads=[16], causal=[True], **ON_CUDA_BF16)
        keep = staticmethod(_tokens)

    class PeakPrefillShapes(_Peak, TimeStep, KernelTrack):
        """Forward, bfloat16, the other shapes: p = 64, h = 32, GQA 8:1."""

        param_names, params = parameters(
            framework=FRAMEWORKS, backend=PEAK_BACKENDS, mode=["forward"], batch=BATCH, n=N,
            d=[1024, 2048, 4096], heads=[16, 32], kv_heads=[2, 4, 16, 32], **ON_CUDA_BF16)
        # (d, h, h_kv): p = 64 at h = 16; h = 32 of width 128; GQA 8:1 at h = 16 and 32.
        keep = staticmethod(lambda c: _tokens(c) and (c.d, c.heads, c.kv_heads) in {
            (1024, 16, 16), (4096, 32, 32), (2048, 16, 2), (4096, 32, 4)})

    class PeakTrain(_Peak, TimeStep, KernelTrack):
        """Forward and backward, bfloat16, h = 16 heads of width 128."""

        param_names, params = parameters(
            framework=FRAMEWORKS, backend=PEAK_BACKENDS, mode=["train"], batch=BATCH, n=N,
            d=[2048], heads=[16], kv_heads=[16], **ON_CUDA_BF16)
        keep = staticmethod(_tokens)


if CUDA and F32:
    class PeakFloat32(_Peak, TimeStep, KernelTrack):
        """Forward in float32 (true float32 matmuls, no TF32), h = 16 heads of width 128:
        the kernels that take it (math, efficient, XLA) against float32's peak."""

        param_names, params = parameters(
            framework=FRAMEWORKS, backend=PEAK_BACKENDS, mode=["forward"], batch=BATCH, n=N,
            d=[2048], heads=[16], kv_heads=[16], **{**WHERE, "device": CUDA, "dtype": F32})
        keep = staticmethod(_tokens)
