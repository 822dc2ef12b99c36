"""Finding and sizing the change points of one series of log values (level shifts; asv's
step detection calls them steps, a word that elsewhere in mhabench means a timed call),
and each one's size over the noise it must beat.

- :func:`fit_shifts`: asv's Potts solver (:func:`asv.step_detect.solve_potts_approx`), a new level
  costing :data:`GAMMA` noise SDs, and :func:`asv.step_detect.detect_regressions` at the
  threshold: the upward shifts that leave the series worse than it was.
- :func:`z_score`: a level change over the SD of the difference of its two levels (each the
  median of its commits).
- :func:`classify`: holds, candidate or noise by that ``z`` and the shift's support.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from asv import step_detect

GAMMA = 3.0  # a new level must cut the absolute deviation by 3 noise SDs (asv's Potts)
Z_HOLD = 4.0  # a shift this many SDs of its two levels' difference, on 2+ commits a side
Z_CANDIDATE = 3.0  # from here a shift is worth re-measuring
# A level is a median of its commits: its SE over the mean's, by the number of commits
# (1 and 2: the mean itself; 4: the mean of the middle two), sqrt(pi / 2) for many.
MEDIAN_SE = {1: 1.0, 2: 1.0, 3: 1.16, 4: 1.09, 5: 1.2}


def median_se(n: int) -> float:
    return MEDIAN_SE.get(n, math.sqrt(math.pi / 2))


def _segments(right: Sequence[int]) -> list[tuple[int, int]]:
    out, left = [], 0
    for r in right:
        out.append((left, r))
        left = r
    return out


def fit_shifts(y: np.ndarray, sigma: float, threshold: float
         ) -> list[tuple[tuple[int, int], tuple[int, int], float]]:
    """asv's step detection on log values ``y``: (old level's segment, new level's
    segment, log level change) of each upward shift that detect_regressions keeps."""
    right, levels, dists = step_detect.solve_potts_approx(list(y), [1.0] * len(y),
                                                          gamma=GAMMA * sigma)
    segments = _segments(right)
    fitted = [(left, r, math.exp(level), float(np.exp(y[left:r]).min()),
               math.exp(level) * abs(dist / (r - left)))
              for (left, r), level, dist in zip(segments, levels, dists, strict=True)]
    _, _, jumps = step_detect.detect_regressions(fitted, threshold - 1)
    out = []
    for before, after, _, _ in jumps or ():
        i_b = next(i for i, s in enumerate(segments) if s[0] <= before < s[1])
        i_a = next(i for i, s in enumerate(segments) if s[0] == after)
        seg_b = _same_level(y, segments, levels, i_b, -1, math.log(threshold), levels[i_a])
        seg_a = _same_level(y, segments, levels, i_a, +1, math.log(threshold), levels[i_b])
        out.append((seg_b, seg_a, float(np.median(y[seg_a[0]:seg_a[1]])
                                        - np.median(y[seg_b[0]:seg_b[1]]))))
    return out


def _same_level(y: np.ndarray, segments: Sequence[tuple[int, int]], levels: Sequence[float],
                i: int, way: int, within: float, other: float) -> tuple[int, int]:
    """Segment ``i`` widened over its neighbours away from the shift (``way`` -1: earlier,
    +1: later) while the next one's level lies within ``within`` (the threshold, in log) of
    the widened span's median, or nearer it than halfway to ``other`` (the level across
    the shift). A change below the threshold is no shift, though the Potts solver splits a
    series whose noise is small at such wiggles and leaves the shift resting on one commit;
    nor is a partial return after a burst of the machine, which would otherwise set the
    shift's size by the burst and charge the excess to the later runs
    (docs/research.md, "Regressions across commits")."""
    lo = hi = i
    while 0 <= (nxt := lo - 1 if way < 0 else hi + 1) < len(segments):
        here = float(np.median(y[segments[lo][0]:segments[hi][1]]))
        if abs(levels[nxt] - here) >= max(within, abs(here - other) / 2):
            break
        lo, hi = min(lo, nxt), max(hi, nxt)
    return segments[lo][0], segments[hi][1]


def z_score(change: float, sigma: float, n_b: int, n_a: int) -> float:
    """A level change over the SD of the difference of two medians of n_b and n_a values
    of SD ``sigma``."""
    return change / (sigma * math.hypot(median_se(n_b) / math.sqrt(n_b),
                                        median_se(n_a) / math.sqrt(n_a)))


def classify(z: float, clean: tuple[int, int], seg_a: tuple[int, int], n_b: int, n_a: int,
              last: int) -> tuple[str, str]:
    """holds, candidate or noise, and why (the undisturbed case)."""
    if z >= Z_HOLD and min(clean) >= 2:
        return "holds", (f"holds over the history: {z:.1f} SDs, {clean[0]} and {clean[1]} "
                         "undisturbed commits either side")
    if z < Z_CANDIDATE:
        return "noise", f"within the noise ({z:.1f} SDs)"
    if seg_a == (last, last + 1):
        return "candidate", "candidate: at the newest commit"
    if min(n_b, n_a) == 1 or min(clean) < 2:
        return "candidate", "candidate: rests on one commit"
    return "candidate", f"candidate: {z:.1f} SDs, below {Z_HOLD:g}"


