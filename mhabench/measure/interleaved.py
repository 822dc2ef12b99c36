"""Time several configs interleaved: round-robin over the configs for several rounds.

Timing configs one after another lets a slow minute of a shared machine (another job,
a hypervisor's steal) land on a few configs only; round-robin spreads any drift over all
of them alike, and the median per config drops the rounds it hit hardest. Each visit
first makes ``warmup`` untimed calls, and more until they have taken ``warmup_s`` (none
where ``warmup`` is 0), so the config's weights, inputs and code paths are back in the
caches as they are between asv's back-to-back samples, then ``repeats`` timed calls: after
the sample's other configs, one warm call leaves a sub-millisecond step slower than in a
process of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from mhabench.core.config import AttentionConfig
from mhabench.measure.timing import (
    Measurement,
    before_sample,
    configure_process,
    prepare,
    timed_call,
)

WARMUP_S = 0.02  # each visit's warm calls take at least this long


def measure_interleaved(configs: Sequence[AttentionConfig], rounds: int = 5,
                        repeats: int = 2, warmup: int = 1, threads: int | None = None,
                        on_error: Callable[[AttentionConfig, ValueError], None] | None = None,
                        progress: Callable[[str], None] = lambda _: None,
                        warmup_s: float = WARMUP_S,
                        probe: Callable[[], float] | None = None
                        ) -> dict[AttentionConfig, Measurement]:
    """``rounds`` x ``repeats`` timings per config, visited round-robin; one
    :class:`Measurement` per config that could be prepared. A config whose build raises
    ValueError (UnavailableError included) is passed to ``on_error`` (or re-raised) and
    left out. ``probe`` (e.g. :func:`mhabench.measure.conditions.speed.probe`) is read right after
    each visit's timed calls, and kept beside each of them (``Measurement.probes_s``)."""
    for name, value in (("rounds", rounds), ("repeats", repeats)):
        if value < 1:
            raise ValueError(f"{name}={value} is not allowed; it must be at least 1")
    used = configure_process(threads)
    steps: dict[AttentionConfig, Callable[[], Any]] = {}
    for i, config in enumerate(configs, 1):
        progress(f"[{i}/{len(configs)}] prepare {config.id}")
        try:
            # prepare() caches a few steps only; keeping each here keeps it alive.
            steps[config] = prepare(config, max(warmup, 1))
        except ValueError as exc:
            if on_error is None:
                raise
            on_error(config, exc)
    times: dict[AttentionConfig, list[float]] = {c: [] for c in steps}
    probes: dict[AttentionConfig, list[float]] = {c: [] for c in steps}
    for r in range(rounds):
        progress(f"round {r + 1}/{rounds} over {len(steps)} configs")
        for config, step in steps.items():
            start, calls = time.perf_counter(), 0
            while warmup and (calls < warmup or time.perf_counter() - start < warmup_s):
                step()
                calls += 1
            for _ in range(repeats):
                before_sample(config)  # a cold L2 on a GPU, as in asv's samples
                times[config].append(timed_call(step))
            if probe is not None:
                probes[config].extend([probe()] * repeats)
    return {c: Measurement(c, tuple(t), used, tuple(probes[c])) for c, t in times.items()}
