"""Exercise 8: MHA against GQA and MQA at the chapter's shape.

The classes live in ``mhabench.bench.gqa``, which a user's suite (``mhabench init``)
reuses; exported here, asv names them ``bench_gqa.<Class>``."""

from mhabench.bench import gqa
from mhabench.bench.reuse import export

MhaGqaMqa = export(gqa.MhaGqaMqa, __name__)
