"""Exercise 8: multi-head (kv_heads = h) against grouped-query (a middle group count) and
multi-query (kv_heads = 1) attention at the chapter's shape.

The framework layers (``reference``) support MHA only: their GQA/MQA cells show n/a. The
newer backends (torch.compile, FlexAttention, JAX blockwise) take the grouped cell only on
the quick grid (its time budget); every cell on the full one. The quick grid runs no
memory process here: grouping changes the step's memory through its KV cache, which
bench_decode measures at the same three group counts; tiny and full measure it here too.
"""

from .common import (
    BACKENDS,
    DEVICE_PARAMS,
    DTYPES,
    FRAMEWORKS,
    GRID,
    GRID_NEW_BACKENDS,
    THREADS,
    AttentionBenchmark,
    grid,
    newer_backends_where,
)


class MhaGqaMqa(AttentionBenchmark):
    param_names = ["framework", "backend", "batch", "n", "d", "heads", "kv_heads", "device",
                   "dtype", "threads"]
    params = [FRAMEWORKS, BACKENDS + GRID_NEW_BACKENDS, [grid(tiny=2, quick=2, full=8)],
              [grid(tiny=32, quick=512, full=512)], [grid(tiny=32, quick=256, full=256)],
              [grid(tiny=4, quick=16, full=32)],
              grid(tiny=[4, 1], quick=[16, 4, 1], full=[32, 8, 4, 1]),
              DEVICE_PARAMS, DTYPES, [THREADS]]
    keep = staticmethod(newer_backends_where(lambda c: c.kv_heads not in (c.heads, 1)))
    records_memory = GRID != "quick"  # the quick grid's budget (module docstring)
    keep_memory = staticmethod(newer_backends_where(lambda c: False))
