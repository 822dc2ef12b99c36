"""The machine's speed at one moment: a fixed reference computation, timed.

On a shared host the same step runs at different speeds from one moment to the next,
and nothing the guest can read says so (no steal time, no other process): slow stretches
last from milliseconds to seconds (docs/measurement.md has the figures). A grid cell is
one process timed over a fraction of a second, so a slow stretch lands on some cells and
not on others, and a time model fitted on them learns the stretches.

:func:`probe` times a small matmul (the cores) and a 2 MiB copy (the memory path) and
returns the geometric mean of their medians, in seconds. Timed right beside a step, its
ratio to the machine's fast reading (:func:`fast_reference`: a low quantile of many
probes) estimates how much slower than its fast state the machine ran then. It takes
part of the slow stretches out, not all: each kernel slows by its own factor, and the
probe is one number. Numpy only, one thread, about 2 ms a probe.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

PROBE_REPEATS = 25  # timed calls of each part; the median of each is kept
FAST_QUANTILE = 0.1  # the machine's fast reading: this quantile of its probes
_MATRIX = np.random.default_rng(0).random((32, 32), dtype=np.float32)
_SOURCE = np.ones(1 << 19, dtype=np.float32)  # 2 MiB: past L2, inside L3
_TARGET = np.empty_like(_SOURCE)


def _median_call(call: Callable[[], object], repeats: int) -> float:
    for _ in range(3):  # back in the caches after whatever ran before
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def probe(repeats: int = PROBE_REPEATS) -> float:
    """Seconds of the reference computation now: the geometric mean of the median 32x32
    float32 matmul and the median 2 MiB copy (see the module docstring)."""
    matmul = _median_call(lambda: _MATRIX @ _MATRIX, repeats)
    copy = _median_call(lambda: np.copyto(_TARGET, _SOURCE), repeats)
    return math.sqrt(matmul * copy)


def fast_reference(probes: Sequence[float]) -> float:
    """The machine's fast reading: the :data:`FAST_QUANTILE` of ``probes``. A ValueError
    names an empty or non-positive set."""
    values = [float(p) for p in probes]
    if not values or min(values) <= 0 or not all(map(math.isfinite, values)):
        raise ValueError(f"probes={values[:5]!r}... are not allowed; a reference needs at "
                         "least one positive, finite probe time")
    return float(np.quantile(values, FAST_QUANTILE))


def slowdown(probe_s: float, reference_s: float) -> float:
    """How much slower than its fast state the machine ran when ``probe_s`` was read (1:
    fast; never below 1, a probe quicker than the reference is the reference's noise)."""
    return max(1.0, probe_s / reference_s)
