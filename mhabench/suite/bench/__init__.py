"""The asv benchmark machinery and the attention classes that both mhabench's own
``benchmarks/`` and a user's repository (``mhabench init``) run.

``common`` configures the process when imported (threads, pre-imported frameworks, JAX's
compilation cache, a memory cap): only asv benchmark modules, and tests that stand in for
them, import it. ``methods`` holds the mixins whose methods asv times or tracks; ``heads``,
``gqa``, ``train`` and ``decode`` are the question modules a user's suite reuses;
``reuse.export`` puts a class into the asv module that names it.
"""
