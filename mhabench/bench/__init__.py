"""The asv benchmark classes and their machinery, run by mhabench's own ``benchmarks/`` and
by a user's repository (``mhabench init``).

``common`` reads the grid and where cells run from the environment and configures the
process when imported (threads, pre-imported frameworks, JAX's compilation cache, a memory
cap): only asv benchmark modules, and tests that stand in for them, import it. ``axes``
holds the parameter values the classes share, ``cells`` which cells a class or method
skips, ``methods`` what each class's methods call. ``heads``, ``gqa``, ``train`` and
``decode`` are the question classes a user's suite reuses, each written out whole.
"""
