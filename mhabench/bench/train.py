"""A forward pass against forward + backward (one training step of the attention layer)."""

from mhabench.bench.common import BACKENDS, CHAPTER, FEW_HEADS, FRAMEWORKS, WHERE, parameters
from mhabench.bench.methods import DeviceTime, KernelTrack, StepMemory, StepRss, TimeStep


class ForwardVsTrain(TimeStep, StepMemory, StepRss, KernelTrack, DeviceTime):
    param_names, params = parameters(
        framework=FRAMEWORKS, backend=BACKENDS, mode=["forward", "train"], **CHAPTER.axes(),
        heads=FEW_HEADS, **WHERE)
