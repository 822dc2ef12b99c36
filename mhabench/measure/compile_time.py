"""The one-time cost of compiling a config's step, cold: a result beside the step time.

- torch (``compiled``, and any backend that compiles on its first call): dynamo's
  in-process caches cleared (``torch._dynamo.reset()``), inductor's on-disk caches
  bypassed (``force_disable_caches``); the first call's time (trace + compile + run) less
  a steady call (the median of a few). An eager backend reads about 0.
- JAX (every backend: each step is ``jax.jit`` compiled ahead of time): in-process caches
  cleared (``jax.clear_caches()``) and the persistent compilation cache off; the step's
  trace + lower + compile, as ``mhabench.layers.jax.decode.compile_traced`` records it.

Divide by the per-call saving over the eager layout to get the calls it takes to pay the
compile back (the report's break-even column).

The torch reset drops every compiled graph in the process: a compiled step built before
then has nothing to run and raises as a recompile, so ``timing.prepare``'s cache is
cleared too. Call this in a process of its own (asv's ``track_compile_seconds`` is).
"""

from __future__ import annotations

import statistics
import time

from mhabench.core.config import AttentionConfig


def compile_seconds(config: AttentionConfig, steady_calls: int = 5) -> float:
    """Seconds ``config``'s step spends compiling, cold (see the module docstring)."""
    from mhabench.measure.timing import float32_matmul_precision, prepare

    prepare.cache_clear()
    if config.framework == "jax":
        import jax

        from mhabench.layers.jax.steps import make_step

        jax.clear_caches()
        enabled = jax.config.jax_enable_compilation_cache
        jax.config.update("jax_enable_compilation_cache", False)
        try:
            with float32_matmul_precision("jax"):
                return make_step(config).compiled.compile_seconds
        finally:
            jax.config.update("jax_enable_compilation_cache", enabled)
    import torch

    from mhabench.layers.torch.steps import make_step

    torch._dynamo.reset()
    with torch.compiler.config.patch(force_disable_caches=True), \
            float32_matmul_precision("torch"):
        step = make_step(config)
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
    steady = []
    for _ in range(steady_calls):
        start = time.perf_counter()
        step()
        steady.append(time.perf_counter() - start)
    return max(first - statistics.median(steady), 0.0)
