"""Compile time is a result: the one-time cold compile of a step (torch.compile, jax.jit).

``track_compile_seconds`` of Exercise 6.4's cells for the backends that compile
(``mhabench.measure.compile_time``: in-process caches cleared, on-disk caches off), each in a
process of its own. The report puts it beside the step time, with the calls it takes to
pay back (compile seconds over the per-call saving against torch's eager batched layout).
Recompiles are errors in every timed step (the compiled backends run under torch's
fail-on-recompile stance; JAX steps are compiled ahead of time and cannot recompile).
"""

from typing import Any

from mhabench.bench.axes import FEW_HEADS, SHAPE, WHERE
from mhabench.bench.cells import config_of, skip_cells, unsupported_as_skip
from mhabench.bench.common import grid
from mhabench.core import backends
from mhabench.core.config import AttentionConfig
from mhabench.core.grids import COMPILING_BACKENDS
from mhabench.measure import timing
from mhabench.measure.compile_time import compile_seconds

COMPILING = [b for b in COMPILING_BACKENDS if b in backends.names()]  # torch's; JAX: all


def compiles(c: AttentionConfig) -> bool:
    """torch's eager backends compile nothing: only its compiling ones and every JAX one."""
    return c.framework == "jax" or c.backend in COMPILING


class CompileTime:
    # The chapter's shape, at batch 8 on the quick grid too (one compile a cell).
    param_names = ["framework", "backend", "batch", "n", "d", "heads",
                   "device", "dtype", "threads"]
    params = [["torch", "jax"],
              grid(tiny=COMPILING[:1] + ["batched"], quick=COMPILING[:1] + ["batched"],
                   full=COMPILING + ["loop", "batched", "fused", "reference", "blockwise"]),
              [grid(tiny=2, quick=8, full=8)], [SHAPE.n], [SHAPE.d], FEW_HEADS, *WHERE]
    skip_params = skip_cells(param_names, params, compiles)
    timeout = grid(tiny=300, quick=300, full=900)

    def setup(self, *params: Any) -> None:
        self.cfg = unsupported_as_skip(lambda: config_of(self.param_names, params))
        unsupported_as_skip(lambda: timing.check_runnable(self.cfg))

    def track_compile_seconds(self, *params: Any) -> float:
        return compile_seconds(self.cfg)

    track_compile_seconds.unit = "seconds"
