"""Exercise 6.4: does the head count h cost nothing at fixed width d?

The class is ``mhabench.bench.heads``'s, which a user's suite (``mhabench init``) reuses;
subclassed here, asv names it ``bench_heads.HeadsAtFixedWidth``."""

from mhabench.bench import heads


class HeadsAtFixedWidth(heads.HeadsAtFixedWidth):
    """h from 1 to 64 at the chapter's width (``mhabench.bench.heads``)."""
