"""A forward pass against forward + backward (one training step of the layer).

The class is ``mhabench.bench.train``'s, which a user's suite (``mhabench init``) reuses;
subclassed here, asv names it ``bench_train.ForwardVsTrain``."""

from mhabench.bench import train


class ForwardVsTrain(train.ForwardVsTrain):
    """Forward and training steps at a few head counts (``mhabench.bench.train``)."""
