"""Exercise 8: MHA against GQA and MQA at the chapter's shape.

The class is ``mhabench.bench.gqa``'s, which a user's suite (``mhabench init``) reuses;
subclassed here, asv names it ``bench_gqa.MhaGqaMqa``."""

from mhabench.bench import gqa


class MhaGqaMqa(gqa.MhaGqaMqa):
    """kv_heads = h, a middle group count, and 1 (``mhabench.bench.gqa``)."""
