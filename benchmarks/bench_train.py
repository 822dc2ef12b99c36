"""A forward pass against forward + backward (one training step of the layer).

The classes live in ``mhabench.bench.train``, which a user's suite (``mhabench init``)
reuses; exported here, asv names them ``bench_train.<Class>``."""

from mhabench.bench import train
from mhabench.bench.reuse import export

ForwardVsTrain = export(train.ForwardVsTrain, __name__)
