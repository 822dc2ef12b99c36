"""The modes of a cell's timing processes, and how two sides' modes line up.

A process keeps one speed for its whole life, and that speed is not always one level:
besides the machine's slow stretches, a cell can have a fast mode (alignment, page
placement, which core), and how often a process lands in it can move with code that does
not touch the cell (heap and code layout). So two sides are compared by their *levels*,
not by their mixes:

- :func:`align` finds the factor that best lines up the two sides' densities of log
  process medians: the argmax of their Bhattacharyya coefficient (the overlap of the
  square roots of the two densities) over shifts. The square root weighs each level by
  the root of its share, so levels that both sides have line up even where their shares
  differ (7 of 20 processes fast on one side, none on the other), while a level shift of
  the whole cell still moves every level together.
- :func:`modes` splits the processes of both sides, lined up, at the antimodes of their
  density: each :class:`Mode` has a level and a count per side.
- :func:`mix_p` tests whether the two sides land in the modes equally often (Fisher's
  exact test of the main mode against the others): a mix shift is reported as such, never
  as a speed-up or a slowdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Kernel width of the densities, in log units: process medians within one mode scatter a
# few per cent, a fast mode sits 15-25 % below its cell's main one.
BANDWIDTH = 0.03
GRID_STEP = 0.004  # resolution of the shift search, log units (the fit refines it)
# A mode: a peak of the pooled density whose valley to its neighbour falls below this
# share of the lower peak, holding at least MODE_LEAST processes.
DIP = 0.6
MODE_LEAST = 3


def density(x: np.ndarray, grid: np.ndarray, bandwidth: float = BANDWIDTH) -> np.ndarray:
    """A Gaussian kernel density of ``x`` on ``grid`` (both log units)."""
    z = (grid[None, :] - x[:, None]) / bandwidth
    return np.exp(-0.5 * z * z).sum(axis=0) / (len(x) * bandwidth * np.sqrt(2 * np.pi))


@dataclass(frozen=True)
class Overlap:
    """The Bhattacharyya coefficient of two sides' densities of log process medians, at
    every shift of the new side on a grid of :data:`GRID_STEP`."""

    values: np.ndarray
    zero: int  # the index of shift 0

    @staticmethod
    def of(base: np.ndarray, new: np.ndarray, span: tuple[float, float] | None = None,
           bandwidth: float = BANDWIDTH) -> Overlap:
        """Over the log values ``span`` (default: both sides' range and some margin)."""
        lo, hi = span or (min(base.min(), new.min()) - 4 * bandwidth,
                          max(base.max(), new.max()) + 4 * bandwidth)
        grid = np.arange(lo, hi + GRID_STEP, GRID_STEP)
        root_a = np.sqrt(density(base, grid, bandwidth))
        root_b = np.sqrt(density(new, grid, bandwidth))
        return Overlap(np.correlate(root_b, root_a, mode="full"), len(root_a) - 1)

    def best(self) -> int:
        return int(np.argmax(self.values))

    def climb(self, k: int) -> int:
        """The top of the peak reached uphill from index ``k``."""
        v = self.values
        while True:
            up = [j for j in (k - 1, k + 1) if 0 <= j < len(v) and v[j] > v[k]]
            if not up:
                return k
            k = max(up, key=lambda j: v[j])

    def shift(self, k: int) -> float:
        """Index ``k``'s shift (log units), refined by a parabola through its neighbours."""
        offset = 0.0
        if 0 < k < len(self.values) - 1:
            left, mid, right = self.values[k - 1:k + 2]
            curve = left - 2 * mid + right
            offset = 0.5 * (left - right) / curve if curve < 0 else 0.0
        return (k - self.zero + offset) * GRID_STEP


def align(base: np.ndarray, new: np.ndarray, bandwidth: float = BANDWIDTH) -> float:
    """The shift (log units) that best lines up ``new``'s levels with ``base``'s (both log
    process medians): the argmax of the Bhattacharyya coefficient of the two densities,
    refined by a parabola through the best grid point and its neighbours."""
    overlap = Overlap.of(base, new, bandwidth=bandwidth)
    return overlap.shift(overlap.best())


@dataclass(frozen=True)
class Mode:
    """One level of a cell's processes, both sides lined up."""

    level: float  # seconds, on the base side's scale (the new side's divided by the ratio)
    base: int  # processes of each side in it
    new: int

    def as_dict(self) -> dict[str, float | int]:
        return {"level": self.level, "base": self.base, "new": self.new}


def modes(base: np.ndarray, new: np.ndarray, bandwidth: float = BANDWIDTH) -> list[Mode]:
    """The modes of both sides' log process medians, ``new`` already lined up with
    ``base``, fastest first: the pooled density split at every valley lower than
    :data:`DIP` of its lower neighbouring peak, where both parts hold at least
    :data:`MODE_LEAST` processes."""
    pooled = np.concatenate([base, new])
    side = np.concatenate([np.zeros(len(base), bool), np.ones(len(new), bool)])
    order = np.argsort(pooled)
    pooled, side = pooled[order], side[order]
    grid = np.arange(pooled[0] - 3 * bandwidth, pooled[-1] + 3 * bandwidth, GRID_STEP / 2)
    f = density(pooled, grid, bandwidth)
    peaks = [i for i in range(1, len(f) - 1) if f[i] >= f[i - 1] and f[i] > f[i + 1]]
    cuts: list[int] = []  # split positions into the sorted pooled values
    last_peak = peaks[0] if peaks else 0
    for peak in peaks[1:]:
        valley = last_peak + int(np.argmin(f[last_peak:peak + 1]))
        at = int(np.searchsorted(pooled, grid[valley]))
        start = cuts[-1] if cuts else 0
        if (f[valley] < DIP * min(f[last_peak], f[peak]) and at - start >= MODE_LEAST
                and len(pooled) - at >= MODE_LEAST):
            cuts.append(at)
            last_peak = peak
        elif f[peak] > f[last_peak]:
            last_peak = peak  # the higher peak stands for the merged part
    out = []
    for part, sides in zip(np.split(pooled, cuts), np.split(side, cuts), strict=True):
        level = float(np.exp(np.median(part)))
        out.append(Mode(level, int(np.sum(~sides)), int(np.sum(sides))))
    return out


def mix_p(found: Sequence[Mode]) -> float | None:
    """Fisher's exact test (two-sided) of how often each side's processes land in the
    main mode (the one holding the most) rather than another: small where the sides mix
    their modes differently; None with one mode."""
    if len(found) < 2:
        return None
    from scipy.stats import fisher_exact

    main = max(found, key=lambda m: m.base + m.new)
    base_rest = sum(m.base for m in found) - main.base
    new_rest = sum(m.new for m in found) - main.new
    return float(fisher_exact([[main.base, base_rest], [main.new, new_rest]]).pvalue)
