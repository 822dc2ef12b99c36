"""Exercise 6.4: does the head count h cost nothing at fixed width d?

The classes live in ``mhabench.bench.heads``, which a user's suite (``mhabench init``)
reuses; exported here, asv names them ``bench_heads.<Class>``."""

from mhabench.bench import heads
from mhabench.bench.reuse import export

HeadsAtFixedWidth = export(heads.HeadsAtFixedWidth, __name__)
