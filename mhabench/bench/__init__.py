"""The asv benchmark classes and their machinery, run by mhabench's own ``benchmarks/`` and
by a user's repository (``mhabench init``).

``common`` configures the process when imported (threads, pre-imported frameworks, JAX's
compilation cache, a memory cap): only asv benchmark modules, and tests that stand in for
them, import it. ``heads``, ``gqa``, ``train`` and ``decode`` are the question modules a
user's suite reuses.
"""
