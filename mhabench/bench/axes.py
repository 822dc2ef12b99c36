"""The parameter values the attention classes share, for the grid in force
(:mod:`mhabench.bench.common` reads it): the device, dtype and thread count of every cell
(:data:`WHERE`, so all three are recorded in the results), the frameworks, the backend
groups and the shape the classes sweep around (:mod:`mhabench.core.grids`).

Convention that makes results self-describing: the ``param_names`` of an attention class
are ``AttentionConfig`` field names plus ``threads`` (or a design's ``point``, a dict of
fields), and every shape field (batch, n, d, heads) is a parameter even when it has one
value, so a result cell's parameters are the config that was timed.
"""

from __future__ import annotations

import os
from typing import Any

from mhabench.bench.common import CUDA, DEVICES, DTYPES, GRID, THREADS, grid
from mhabench.core import backends, config, grids

# Where a cell runs: the values of the last three parameters (device, dtype, threads).
WHERE: list[list[Any]] = [DEVICES, DTYPES, [THREADS]]

FRAMEWORKS = list(config.FRAMEWORKS)
# The chapter's four backends, then every plug-in registered from outside mhabench (entry
# points, MHABENCH_BACKENDS); a plug-in's cells in a framework it does not run are skipped.
BACKENDS = [*grids.CHAPTER_BACKENDS, *backends.plugin_names()]
# mhabench's newer backends (torch.compile, FlexAttention, JAX blockwise), and those the
# grid's sweeps take (tiny: blockwise only, which compiles in under a second).
NEWER = [b for b in grids.NEWER_BACKENDS if b in backends.names()]
GRID_NEWER = [b for b in grids.GRID_NEWER_BACKENDS[GRID] if b in NEWER]
SWEEP_BACKENDS = BACKENDS + GRID_NEWER
SHAPE = grids.SWEEP_SHAPE[GRID]  # the shape the classes sweep around
FEW_HEADS = grids.FEW_HEADS[GRID]  # the head counts of the classes that do not sweep h

# track_kernel: on the CPU-only quick grid the library's choice is fixed (flash, or math
# with dropout; XLA) and a forced kernel cannot fall back (its build fails), so the quick
# grid spends its processes on samples; a GPU run and tiny/full record it.
# MHABENCH_KERNELS=1 records them on any grid (mhabench versions: a kernel changed between
# two dependency sets is what a time alone hides).
RECORD_KERNELS = grid(tiny=True, quick=CUDA, full=True) or os.environ.get("MHABENCH_KERNELS") == "1"
