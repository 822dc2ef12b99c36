"""Change points (level shifts) shared by the cells of one framework/backend: a change of
code moves one backend's cells together at one commit, the machine moves every backend.

- :func:`group_shifts`: the shifts of a backend's median cell, judged by the SD of a median
  over that many cells (each cell's value at a commit comes from its own process).
- :func:`code_shift`: those shifts as a shift of each of the backend's cells from their
  commit on, which :func:`mhabench.analysis.history.regressions.regressions` takes out before it
  estimates the run effects again (backfitting): otherwise a backend's slowed cells pull
  each later run's effect their way, and their own shift shrinks below what holds.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mhabench.analysis.history.change_points import classify, fit_shifts, median_se, z_score
from mhabench.analysis.history.runs import MAD_TO_SD

MIN_GROUP_CELLS = 3  # a framework/backend with fewer cells is judged cell by cell only
POLISH = 4  # median polish of the group's cells x commits (2-3 passes settle it)
MIN_SERIES_CHANGES = 6  # fewer changes of the groups' series cannot tell their scatter


@dataclass(frozen=True)
class GroupShift:
    """A shift shared by the cells of one framework/backend at one commit: the median of
    its cells' run-adjusted changes, judged by the SD of a median over that many cells
    (each cell's value at a commit comes from its own process)."""

    machine: str
    env_name: str
    group: str
    before: str  # the last commit on the old level, and the first on the new
    after: str
    ratio: float
    z: float
    cells: int  # cells of the group measured on both sides
    verdict: str  # holds, candidate or noise (disturbed: rests on disturbed runs)
    reason: str


def group_members(labels: Sequence[str]) -> dict[str, list[int]]:
    """Each framework/backend's rows (``labels[i]``: row i's group, "" for none) with at
    least :data:`MIN_GROUP_CELLS` rows."""
    out: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        if label:
            out.setdefault(label, []).append(i)
    return {g: rows for g, rows in out.items() if len(rows) >= MIN_GROUP_CELLS}


def group_series(rows: list[int], deviations: np.ndarray, disturbed: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """One framework/backend's median cell: (the positions it has enough cells at, its
    median deviation there, the typical number of cells), leaving out a cell's value where
    it timed under load; None with fewer than two such positions."""
    values = np.where(disturbed[rows], np.nan, deviations[rows])
    counts = np.isfinite(values).sum(axis=0)
    keep = np.flatnonzero(counts >= MIN_GROUP_CELLS)
    if len(keep) < 2:
        return None
    v = values[:, keep]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        g = np.nanmedian(v, axis=0)
        for _ in range(POLISH):  # each cell's level again from the group's series
            g = np.nanmedian(v - np.nanmedian(v - g[None, :], axis=1)[:, None], axis=0)
    return keep, g, int(np.median(counts[keep]))


def series_scale(series: Sequence[np.ndarray]) -> float | None:
    """The SD of one commit's value of a group's median cell, from the changes from commit
    to commit of every group's series (their own shifts taken out): robust, as a cell's
    noise (:func:`mhabench.analysis.history.runs.noise_scales`). None below
    :data:`MIN_SERIES_CHANGES` changes."""
    changes = np.concatenate([np.diff(s) for s in series]) if series else np.array([])
    if len(changes) < MIN_SERIES_CHANGES:
        return None
    return float(MAD_TO_SD * np.median(np.abs(changes - np.median(changes))) / math.sqrt(2))


def group_shifts(key: tuple[str, str, str], group: str, rows: list[int],
                series: tuple[np.ndarray, np.ndarray, int], sigmas: np.ndarray,
                commits: Sequence[str], threshold: float, run_disturbed: np.ndarray,
                series_sd: float | None = None
                ) -> list[tuple[GroupShift, tuple[int, int], tuple[int, int]]]:
    """The shifts of one framework/backend's median cell (``series``: its
    :func:`group_series` from deviations with the run effects removed). Its SD: that of a
    median over n independent cells, median_se(n) * sigma / sqrt(n), or ``series_sd``
    (:func:`series_scale`) where larger: the cells of one run are not independent on a VM
    whose bursts slow a few seconds of cells together. Each with the old and the new
    level's spans of positions in ``commits``."""
    keep, g, n = series
    sigma = max(float(median_se(n) * np.median(sigmas[rows]) / math.sqrt(n)), series_sd or 0.0)
    out = []
    for seg_b, seg_a, change in fit_shifts(g, sigma, threshold):
        n_b, n_a = seg_b[1] - seg_b[0], seg_a[1] - seg_a[0]
        z = z_score(change, sigma, n_b, n_a)
        clean = (int((~run_disturbed[keep[seg_b[0]:seg_b[1]]]).sum()),
                 int((~run_disturbed[keep[seg_a[0]:seg_a[1]]]).sum()))
        if not min(clean):
            verdict, reason = "disturbed", "rests only on disturbed runs"
        else:
            verdict, reason = classify(z, clean, seg_a, n_b, n_a, len(g) - 1)
        # back to positions in ``commits`` (the commits the group has enough cells at)
        span_b, span_a = (int(keep[seg_b[0]]), int(keep[seg_b[1] - 1]) + 1), (
            int(keep[seg_a[0]]), int(keep[seg_a[1] - 1]) + 1)
        out.append((GroupShift(key[0], key[1], group, commits[span_b[1] - 1],
                              commits[span_a[0]], math.exp(change), z, n, verdict, reason),
                    span_b, span_a))
    return out


def code_shift(shape: tuple[int, int], members: dict[str, list[int]],
               found: Sequence[tuple[str, GroupShift, tuple[int, int]]]) -> np.ndarray:
    """Cells x commits of log shifts: each group shift found (``(group, shift, new level's
    span)``) added to every cell of its group from its first new commit on."""
    out = np.zeros(shape)
    for group, shift, span_a in found:
        out[np.ix_(members[group], range(span_a[0], shape[1]))] += math.log(shift.ratio)
    return out
