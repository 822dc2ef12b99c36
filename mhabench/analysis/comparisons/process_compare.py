"""Two sides of one cell compared with the timing process as the unit of evidence.

Samples of one process agree with each other far better than processes agree: on a shared
VM some fresh processes run 1.25-1.9x slow for their whole life, and a cell can also have
a fast mode that a process lands in, or not, for its whole life (:mod:`modes`). So each
side's evidence is one number per process, the median of its samples, and the ratio is
the factor that lines up the two sides' *levels*
(:func:`~mhabench.analysis.comparisons.modes.align`): a change of the cell moves every level; a
change of how often processes land in each mode moves none, and is reported on its own
(:attr:`Comparison.mix_p`). The confidence interval is a percentile bootstrap that resamples
processes, so it is as wide as the processes disagree, however many samples each took.

A cell counts as changed when the interval clears 1.0 and the ratio clears the factor;
:func:`verdict` says which way. Two stages make a verdict (:func:`two_stage`): a screen
passes on every cell whose ratio leans past :data:`SCREEN_FACTOR`, and a confirmation on
fresh processes must find it changed the same way. ``mhabench gate``, ``mhabench confirm``
and ``mhabench versions`` all judge their processes through this one module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mhabench.analysis.comparisons.modes import BANDWIDTH, Mode, Overlap, mix_p, modes

DRAWS = 1000  # bootstrap resamples
FAST_MARGIN = 1.25  # the machine's slow mode runs 1.25-1.9x slow
FEW = 8  # processes a side below which a screen looks at the fast processes too
LEVEL = 0.95  # two-sided confidence level of the interval
SCREEN_FACTOR = 1.05  # a screen ratio past this either way goes on to fresh processes
FACTOR = 1.05  # a change: the interval clears 1.0 and the ratio passes this
# Resamples whose best alignment lies this far (log units) from the peak nearest the data's
# count as lining up other levels; past this share of them the alignment is in doubt.
FLIP_APART = 0.02
FLIPS = 0.2
MIX_LEVEL = 0.05  # a mix shift worth a line: Fisher's p below this


@dataclass(frozen=True)
class Comparison:
    """new / base for one cell, from the two sides' per-process medians."""

    ratio: float  # the factor that lines up new's levels with base's
    low: float  # the confidence interval of the ratio
    high: float
    base_processes: int
    new_processes: int
    modes: tuple[Mode, ...] = field(default=())  # both sides lined up, fastest first
    mix_p: float | None = None  # Fisher's p of the sides' mode shares (None: one mode)
    # new / base of each side's fastest processes (those within FAST_MARGIN of its
    # fastest): over few processes, where half a side's ran in the machine's slow mode,
    # their level and the other side's can line up as well as the true one, and this
    # reading tells the screen to look again
    fast_ratio: float | None = None

    @property
    def clears_one(self) -> bool:
        return self.low > 1.0 or self.high < 1.0

    @property
    def mix_shifted(self) -> bool:
        """The sides land in the cell's modes differently (Fisher's p below
        :data:`MIX_LEVEL`)."""
        return self.mix_p is not None and self.mix_p < MIX_LEVEL

    def describe_modes(self, unit: float = 1e3, suffix: str = "ms") -> str:
        """"two modes, 23 and 29 ms: 7 of 20 processes in the 23 ms mode at new, 0 of 20 at
        base (Fisher p = 0.008)"; "one mode" where there is one."""
        if len(self.modes) < 2:
            return "one mode"
        words = {2: "two", 3: "three", 4: "four"}
        levels = [f"{m.level * unit:.3g}" for m in self.modes]
        main = max(self.modes, key=lambda m: m.base + m.new)
        others = [m for m in self.modes if m is not main]
        # the mode whose share moved most, against the main one
        moved = max(others, key=lambda m: abs(m.new / self.new_processes
                                              - m.base / self.base_processes))
        text = (f"{words.get(len(self.modes), len(self.modes))} modes, "
                f"{', '.join(levels[:-1])} and {levels[-1]} {suffix}: {moved.new} of "
                f"{self.new_processes} processes in the {moved.level * unit:.3g} {suffix} "
                f"mode at new, {moved.base} of {self.base_processes} at base")
        return text + (f" (Fisher p = {self.mix_p:.2g})" if self.mix_p is not None else "")

    def as_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high,
                "base_processes": self.base_processes, "new_processes": self.new_processes,
                "modes": [m.as_dict() for m in self.modes], "mix_p": self.mix_p,
                "fast_ratio": self.fast_ratio}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Comparison:
        """The inverse of :meth:`as_dict`; reads files written before modes were
        recorded (their ``base_fast``/``new_fast`` counts are dropped)."""
        keep = {k: data[k] for k in ("ratio", "low", "high", "base_processes",
                                     "new_processes")}
        found = tuple(Mode(**m) for m in data.get("modes") or ())
        return Comparison(**keep, modes=found, mix_p=data.get("mix_p"),
                          fast_ratio=data.get("fast_ratio"))


def fast_level(logs: np.ndarray, margin: float = FAST_MARGIN) -> float:
    """The median of the log process medians within ``margin`` of the fastest."""
    return float(np.median(logs[logs <= logs.min() + np.log(margin)]))


def _logs(values: Sequence[float]) -> np.ndarray:
    return np.log(np.asarray([v for v in values if math.isfinite(v) and v > 0], dtype=float))


def compare(base: Sequence[float], new: Sequence[float], *, draws: int = DRAWS,
            level: float = LEVEL, seed: int = 0) -> Comparison:
    """Compare two sides' per-process medians (seconds; at least two processes a side)."""
    a, b = _logs(base), _logs(new)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"need at least two timed processes a side, got {len(a)} and "
                         f"{len(b)}")
    span = (min(a.min(), b.min()) - 4 * BANDWIDTH, max(a.max(), b.max()) + 4 * BANDWIDTH)
    whole = Overlap.of(a, b, span)
    top = whole.best()
    shift = whole.shift(top)
    # Each resample's best shift, and the top of the peak nearest this one: where the
    # resamples often line up other levels instead (half a side's processes in the slow
    # mode, or in a fast one), the data do not say which alignment holds and the interval
    # spans them all; otherwise it is the spread of this alignment alone.
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(a), size=(draws, len(a)))
    ib = rng.integers(0, len(b), size=(draws, len(b)))
    best, near = np.empty(draws), np.empty(draws)
    for i, (ja, jb) in enumerate(zip(ia, ib, strict=True)):
        drawn = Overlap.of(a[ja], b[jb], span)
        best[i], near[i] = drawn.shift(drawn.best()), drawn.shift(drawn.climb(top))
    flipped = float(np.mean(np.abs(best - near) > FLIP_APART))
    boot = best if flipped > FLIPS else near
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    # A percentile bootstrap over few processes is too narrow (four a side resample into
    # a few dozen distinct sets): its arms are widened by Student's t over the normal
    # quantile for the smaller side, 1.6x at four processes, 1.1x at twelve.
    from scipy.stats import norm, t

    n = min(len(a), len(b))
    widen = float(t.ppf(1 - tail / 100, n - 1) / norm.ppf(1 - tail / 100))
    low, high = np.exp(shift - widen * (shift - lo)), np.exp(shift + widen * (hi - shift))
    found = modes(a, b - shift)
    return Comparison(float(np.exp(shift)), float(low), float(high), len(a), len(b),
                      tuple(found), mix_p(found),
                      float(np.exp(fast_level(b) - fast_level(a))))


def lean(result: Comparison, factor: float = SCREEN_FACTOR) -> str:
    """"+" (slower) or "-" (faster) where the ratio passes ``factor`` that way, "" where it
    does not: what a screen passes on to fresh processes. Over fewer than :data:`FEW`
    processes a side the fast processes' ratio (:attr:`Comparison.fast_ratio`) counts too:
    two slow processes of four can line up with the other side's level as well as the
    true alignment does."""
    few = min(result.base_processes, result.new_processes) < FEW
    for ratio in (result.ratio, result.fast_ratio if few else None):
        if ratio is not None and ratio >= factor:
            return "+"
        if ratio is not None and ratio <= 1 / factor:
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
