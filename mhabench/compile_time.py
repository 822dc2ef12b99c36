"""The one-time cost of ``torch.compile``: cold compile seconds of a config's step.

:func:`compile_seconds` builds the config's step with dynamo's in-process caches cleared
(``torch._dynamo.reset()``) and inductor's on-disk caches bypassed
(``force_disable_caches``), times its first call (trace + compile + run) and subtracts a
steady call (the median of a few). Divide by the per-call saving over eager to get the
calls it takes to pay the compile back.

The reset drops every compiled graph in the process: a compiled step built before then has
nothing to run and raises as a recompile, so ``timing.prepare``'s cache is cleared too.
"""

from __future__ import annotations

import statistics
import time

from mhabench.config import AttentionConfig


def compile_seconds(config: AttentionConfig, steady_calls: int = 5) -> float:
    """Seconds the first call of ``config``'s step spends beyond a steady call, cold."""
    import torch

    from mhabench.timing import float32_matmul_precision, prepare
    from mhabench.torch_attention import make_step

    if config.framework != "torch":
        raise ValueError(f"compile_seconds times torch.compile; got framework="
                         f"{config.framework!r}")
    torch._dynamo.reset()
    prepare.cache_clear()
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
    return first - statistics.median(steady)
