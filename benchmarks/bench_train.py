"""A forward pass against forward + backward (one training step of the layer).

The classes live in ``mhabench.suite.bench.train``, which a user's suite (``mhabench init``)
reuses; exported here, asv names them ``bench_train.<Class>``."""

from mhabench.suite.bench import train
from mhabench.suite.bench.reuse import export

ForwardVsTrain = export(train.ForwardVsTrain, __name__)
