"""Which SDPA kernel wins here? The fused call forced to each kernel, with no fallback.

torch's scaled_dot_product_attention forced to flash, efficient, cudnn or math (through
``torch.nn.attention.sdpa_kernel``), JAX's ``dot_product_attention`` forced to xla or
cudnn (``implementation=``): the ``fused_<kernel>`` backends of ``mhabench.core.backends``. A
kernel that cannot take a cell (dtype, GQA, head width, device) is n/a with the library's
reason. On a CPU only flash, math and xla exist; the GPU grid (``scripts/gpu-grid``) runs
them all, in float32 and bfloat16.
"""

from mhabench.bench.common import CHAPTER, FEW_HEADS, FRAMEWORKS, WHERE, grid, parameters
from mhabench.bench.methods import DeviceTime, KernelTrack, StepMemory, StepRss, TimeStep
from mhabench.core.backends import FORCED


# KernelTrack: the forced kernel must be the one that ran.
class ForcedKernels(TimeStep, StepMemory, StepRss, KernelTrack, DeviceTime):
    param_names, params = parameters(
        framework=FRAMEWORKS, backend=list(FORCED), **CHAPTER.axes(), heads=FEW_HEADS,
        kv_heads=grid(tiny=[4, 2], quick=[8, 2], full=[8, 2]), **WHERE)
