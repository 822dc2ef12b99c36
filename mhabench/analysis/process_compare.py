"""Two sides of one cell compared with the timing process as the unit of evidence.

Samples of one process agree with each other far better than processes agree: on a shared
VM about a third of fresh processes run 1.4-1.6x slow for their whole life, and bursts slow
whole stretches of a run. So each side's evidence is one number per process, the median of
its samples, and the machine's slow mode is set apart by keeping each side's *fast*
processes: those within :data:`FAST_MARGIN` of that side's fastest. The ratio is the median
of the new side's fast processes over the base side's, and its confidence interval a
percentile bootstrap that resamples processes (each draw picks its own fast set), so the
interval is as wide as the processes disagree, however many samples each took.

A cell counts as changed when the interval clears 1.0 and the ratio clears the factor;
:func:`verdict` says which way. Two stages make a verdict (:func:`two_stage`): a screen
passes on every cell whose ratio leans past :data:`SCREEN_FACTOR`, and a confirmation on
fresh processes must find it changed the same way. ``mhabench gate``, ``mhabench confirm``
and ``mhabench versions`` all judge their processes through this one module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# A process within this factor of its side's fastest counts as run in the machine's fast
# mode; slower ones (the slow third of fresh processes read 1.4-1.6x) are set apart.
FAST_MARGIN = 1.25
DRAWS = 2000  # bootstrap resamples
LEVEL = 0.95  # two-sided confidence level of the interval
SCREEN_FACTOR = 1.05  # a screen ratio past this either way goes on to fresh processes
FACTOR = 1.05  # a change: the interval clears 1.0 and the ratio passes this


@dataclass(frozen=True)
class Comparison:
    """new / base for one cell, from the two sides' per-process medians."""

    ratio: float  # median of new's fast processes over median of base's
    low: float  # the confidence interval of the ratio
    high: float
    base_processes: int
    new_processes: int
    base_fast: int  # processes kept as the machine's fast mode
    new_fast: int

    @property
    def clears_one(self) -> bool:
        return self.low > 1.0 or self.high < 1.0

    def as_dict(self) -> dict[str, float | int]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high,
                "base_processes": self.base_processes, "new_processes": self.new_processes,
                "base_fast": self.base_fast, "new_fast": self.new_fast}


def fast_median(medians: np.ndarray, margin: float = FAST_MARGIN) -> float:
    """The median of the processes within ``margin`` of the fastest (``medians`` > 0)."""
    floor = float(np.min(medians))
    return float(np.median(medians[medians <= floor * margin]))


def compare(base: Sequence[float], new: Sequence[float], *, margin: float = FAST_MARGIN,
            draws: int = DRAWS, level: float = LEVEL, seed: int = 0) -> Comparison:
    """Compare two sides' per-process medians (seconds; at least two processes a side)."""
    a = np.asarray([v for v in base if math.isfinite(v) and v > 0], dtype=float)
    b = np.asarray([v for v in new if math.isfinite(v) and v > 0], dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"need at least two timed processes a side, got {len(a)} and "
                         f"{len(b)}")
    ratio = fast_median(b, margin) / fast_median(a, margin)
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(a), size=(draws, len(a)))
    ib = rng.integers(0, len(b), size=(draws, len(b)))
    boot = np.array([fast_median(b[jb], margin) / fast_median(a[ja], margin)
                     for ja, jb in zip(ia, ib, strict=True)])
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(boot, [tail, 100 - tail])
    return Comparison(ratio, float(low), float(high), len(a), len(b),
                      int(np.sum(a <= a.min() * margin)), int(np.sum(b <= b.min() * margin)))


def lean(result: Comparison, factor: float = SCREEN_FACTOR) -> str:
    """"+" (slower) or "-" (faster) where the ratio passes ``factor`` that way, "" where it
    does not: what a screen passes on to fresh processes."""
    if result.ratio >= factor:
        return "+"
    if result.ratio <= 1 / factor:
        return "-"
    return ""


def verdict(result: Comparison, factor: float = FACTOR) -> str:
    """"slower" or "faster" where the interval clears 1.0 and the ratio passes ``factor``
    that way; "unchanged" otherwise."""
    if result.low > 1.0 and result.ratio >= factor:
        return "slower"
    if result.high < 1.0 and result.ratio <= 1 / factor:
        return "faster"
    return "unchanged"


def two_stage(screen: Comparison, confirm: Comparison | None, *,
              screen_factor: float = SCREEN_FACTOR, factor: float = FACTOR) -> str:
    """The verdict of a cell the screen passed on: "slower" or "faster" where the
    confirmation's fresh processes find it changed (:func:`verdict`) the way the screen
    leaned, "cleared" otherwise (a flag against the screen's lean is noise in one stage:
    counting it would double the false flags and catch no real change)."""
    said = verdict(confirm, factor) if confirm is not None else "unchanged"
    way = lean(screen, screen_factor)
    return said if said != "unchanged" and (said == "slower") == (way == "+") else "cleared"
