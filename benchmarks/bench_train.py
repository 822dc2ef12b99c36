"""A forward pass against forward + backward (one training step of the attention layer)."""

from .common import BACKENDS, CHAPTER, FEW_HEADS, FRAMEWORKS, WHERE, parameters
from .methods import DeviceTime, KernelTrack, StepMemory, StepRss, TimeStep


class ForwardVsTrain(TimeStep, StepMemory, StepRss, KernelTrack, DeviceTime):
    param_names, params = parameters(
        framework=FRAMEWORKS, backend=BACKENDS, mode=["forward", "train"], **CHAPTER.axes(),
        heads=FEW_HEADS, **WHERE)
