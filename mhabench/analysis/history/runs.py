"""What a history's shifts are judged against: how each whole run moved, and each cell's
commit-to-commit noise.

The unit of evidence is the process. In the shipped grids (tiny, quick: ``rounds = 1``)
every sample of a cell at one commit comes from one asv process, and the samples of one
process share its state (heap layout, frequency, neighbours on the VM): they scatter far
less than fresh processes do (``scripts/gate_design.py`` shows it on recorded gate runs),
so a test that pools them as independent calls noise a change.
The full grid's two rounds are concatenated by asv without their boundaries. So a cell's
noise is measured where processes differ: between its commits, as the robust scale of the
changes from commit to commit (:func:`noise_scales`).

Processes also drift together: a second job on the machine, or a slower day, moves every
cell of a run. :func:`run_effects` separates that from each cell's own level by a median
polish of the log values (cells x commits), and :class:`Run` says when a run moved or was
disturbed (the load other processes put on the machine while it timed,
``mhabench.measure.conditions.machine_load``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from mhabench.measure.conditions.machine_load import DISTURBED_CORES, CellLoad

MIN_RUN_CELLS = 5  # fewer cells at a commit cannot tell a run's offset from a cell's shift
RUN_MOVE = 1.10  # a run that ran this much slower (or faster) than the runs beside it ...
MOVED_SHARE = 2 / 3  # ... with this share of its cells moved that way, moved as a whole
SIGMA_FLOOR = 0.01  # 1 %: no cell is steadier than that between processes here
MAD_TO_SD = 1.4826  # a normal distribution's SD over its median absolute deviation
PRIOR_CHANGES = 8  # the weight of a cell's benchmark's noise in its own, in changes
LOCAL_CELLS = 6  # the cells timed nearest a cell (other backends) that tell the machine's
MIN_LOCAL_CELLS = 3  # state then, and the fewest that can


@dataclass(frozen=True)
class Run:
    """One commit's run of one machine, environment and benchmark kind, as a whole."""

    commit: str
    position: int  # in the commit order, oldest first
    factor: float  # how much slower than its cells' own levels the run ran (median)
    moved_share: float  # share of its cells that moved that way by at least half as much
    cells: int
    other_cores: float | None  # median over its cells: other processes' CPU share
    disturbed_cells: int  # cells whose own record says another process took a core
    # how far it ran from the runs beside it (the nearer of the two, 1.0 unless it is
    # beyond both the same way): a burst, where ``factor`` also holds a slow drift
    departure: float = 1.0

    @property
    def moved(self) -> bool:
        """A burst: beyond the runs on both sides (the one side, at an end) by RUN_MOVE,
        with most of its cells. A drift or a lasting shift is not one: the run effects
        take it out of every cell's values."""
        return (abs(math.log(self.departure)) >= math.log(RUN_MOVE)
                and self.moved_share >= MOVED_SHARE)

    @property
    def loaded(self) -> bool:
        return self.other_cores is not None and self.other_cores >= DISTURBED_CORES

    @property
    def disturbed(self) -> bool:
        """Moved as a whole, or timed while other processes took the machine."""
        return self.moved or self.loaded


def _log(values: np.ndarray) -> np.ndarray:
    """Log values; a cell with zero or negative values (a kernel code of 0) is shifted to
    stay positive, so its changes still read as ratios of something."""
    low = np.nanmin(values) if np.isfinite(values).any() else 1.0
    return np.log(values if low > 0 else values - low + 1.0)


def log_matrix(values: Sequence[Mapping[int, float]], commits: int) -> np.ndarray:
    """Cells x commits of log values (NaN where a cell was not measured)."""
    out = np.full((len(values), commits), np.nan)
    for i, row in enumerate(values):
        raw = np.full(commits, np.nan)
        for position, value in row.items():
            raw[position] = value
        out[i] = _log(raw)
    return out


def run_effects(x: np.ndarray, groups: Sequence[str] | None = None, iterations: int = 4
                ) -> tuple[np.ndarray, np.ndarray]:
    """Median polish of ``x`` (cells x commits, log values): (each cell's level, each
    commit's run effect), with the run effects' median 0. A commit with fewer than
    :data:`MIN_RUN_CELLS` cells gets no run effect.

    A commit's run effect is the median of its cells' deviations weighted so that each
    of ``groups`` (each cell's framework/backend; "" for a cell of its own) weighs the
    same: the machine moves every backend, a change of code moves one. Unweighted, a
    backend with many cells that slowed would pull the median its way, taking that much
    from its own shift and charging it to every other cell."""
    labels = [g or f"#{i}" for i, g in enumerate(groups)] if groups is not None else [
        f"#{i}" for i in range(len(x))]
    sizes = {g: labels.count(g) for g in set(labels)}
    weights = np.array([1.0 / sizes[g] for g in labels])
    enough = np.isfinite(x).sum(axis=0) >= MIN_RUN_CELLS
    run = np.zeros(x.shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows or columns
        level = np.nanmedian(x, axis=1)
        for _ in range(iterations):
            for k in np.flatnonzero(enough):
                run[k] = _weighted_median(x[:, k] - level, weights)
            if enough.any():
                run[enough] -= np.median(run[enough])
            level = np.nanmedian(x - run[None, :], axis=1)
    return level, run


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    keep = np.isfinite(values)
    order = np.argsort(values[keep])
    v, w = values[keep][order], weights[keep][order]
    cumulative = np.cumsum(w) / w.sum()
    i = int(np.searchsorted(cumulative, 0.5))
    # halfway between two values where the weight splits exactly (as the plain median)
    return float((v[i] + v[i + 1]) / 2) if np.isclose(cumulative[i], 0.5) and i + 1 < len(
        v) else float(v[i])


def runs(x: np.ndarray, level: np.ndarray, run: np.ndarray, commits: Sequence[str],
         loads: Sequence[Sequence[CellLoad | None]]) -> list[Run]:
    """Each commit's :class:`Run`; ``loads[cell][commit]`` is a cell's recorded load."""
    out = []
    for k, commit in enumerate(commits):
        column = x[:, k]
        seen = np.isfinite(column)
        if not seen.any():
            continue
        deviation = column[seen] - level[seen]
        same_way = (np.sign(deviation) == np.sign(run[k])) & (
            np.abs(deviation) >= abs(run[k]) / 2)
        recorded = [row[k] for row in loads if row[k] is not None]
        other = float(np.median([r.other_cores for r in recorded])) if recorded else None
        out.append(Run(commit, k, float(math.exp(run[k])),
                       float(same_way.mean()) if run[k] else 0.0, int(seen.sum()), other,
                       sum(r.disturbed for r in recorded)))
    return [replace(r, departure=_departure(r, out[i - 1] if i else None,
                                            out[i + 1] if i + 1 < len(out) else None))
            for i, r in enumerate(out)]


def _departure(run: Run, *beside: Run | None) -> float:
    gaps = [math.log(run.factor / b.factor) for b in beside if b is not None]
    if not gaps or not (all(g > 0 for g in gaps) or all(g < 0 for g in gaps)):
        return 1.0
    return math.exp(min(gaps, key=abs))


def local_effects(deviations: np.ndarray, starts: np.ndarray, groups: Sequence[str]
                  ) -> np.ndarray:
    """Each cell's share of its run's slowdown at the moment it was timed: the median
    deviation of the :data:`LOCAL_CELLS` cells of other frameworks/backends (a change of
    code moves one) whose processes started nearest it in the same run. ``deviations``:
    cells x commits of log values less each cell's level, run effect and own shifts;
    ``starts``: when each cell's process began (NaN unknown). 0 where fewer than
    :data:`MIN_LOCAL_CELLS` such cells are known.

    Why: a cell's asv process times it for a tenth of a second, and a shared VM slows for
    seconds at a time: a run's cells are slowed in blocks, and a backend's cells, which asv
    times side by side, together, which one run effect per commit cannot follow."""
    out = np.zeros_like(deviations)
    labels = np.asarray([g or f"#{i}" for i, g in enumerate(groups)])
    for k in range(deviations.shape[1]):
        known = np.flatnonzero(np.isfinite(starts[:, k]) & np.isfinite(deviations[:, k]))
        if len(known) <= MIN_LOCAL_CELLS:
            continue
        known = known[np.argsort(starts[known, k], kind="stable")]  # in timing order
        t, d, own = starts[known, k], deviations[known, k], labels[known]
        # On either side, each of the LOCAL_CELLS nearest cells of other backends comes
        # at most a longest stretch of one backend's cells after the one before: look
        # only that far.
        breaks = np.flatnonzero(own[1:] != own[:-1])
        stretch = int(np.diff(np.r_[-1, breaks, len(own) - 1]).max())
        reach = min((LOCAL_CELLS + 1) * (stretch + 1), len(known) - 1)
        offsets = np.arange(-reach, reach + 1)
        beside = np.arange(len(known))[:, None] + offsets[None, :]
        inside = (beside >= 0) & (beside < len(known))
        beside = np.clip(beside, 0, len(known) - 1)
        gaps = np.abs(t[beside] - t[:, None])
        gaps[~inside | (own[beside] == own[:, None])] = np.inf  # itself, its own backend's
        m = min(LOCAL_CELLS, gaps.shape[1])
        nearest = np.argpartition(gaps, m - 1, axis=1)[:, :m]
        values = np.where(np.isfinite(np.take_along_axis(gaps, nearest, axis=1)),
                          d[np.take_along_axis(beside, nearest, axis=1)], np.nan)
        enough = np.isfinite(values).sum(axis=1) >= MIN_LOCAL_CELLS
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # rows without enough cells
            out[known[enough], k] = np.nanmedian(values[enough], axis=1)
    return out


def noise_scales(residuals: np.ndarray, disturbed: np.ndarray, groups: Sequence[str]
                 ) -> np.ndarray:
    """Each cell's noise between processes, as the SD of one commit's log value, from its
    changes from commit to commit over ``residuals`` (cells x commits, run effects
    removed), leaving out changes into or out of a ``disturbed`` commit of that cell.

    A cell's own scale (the median absolute deviation of its changes, robust to the shift
    among them) rests on a handful of changes, so it is shrunk towards its group's (its
    benchmark's cells') median scale, which counts as :data:`PRIOR_CHANGES` changes: a lucky
    quiet history does not make noise look like a shift, nor a short one a blind spot.
    Never below :data:`SIGMA_FLOOR`."""
    own = np.full(len(residuals), np.nan)
    count = np.zeros(len(residuals))
    for i, row in enumerate(residuals):
        keep = np.isfinite(row) & ~disturbed[i]
        changes = np.diff(row[keep])
        if len(changes):
            mad = np.median(np.abs(changes - np.median(changes))) if len(changes) > 2 else (
                np.median(np.abs(changes)))
            own[i], count[i] = MAD_TO_SD * mad / math.sqrt(2), len(changes)  # 2 commits a change
    groups_ = np.asarray(groups)
    overall = float(np.nanmedian(own)) if np.isfinite(own).any() else SIGMA_FLOOR
    out = np.empty(len(residuals))
    for group in set(groups):
        members = groups_ == group
        known = own[members & np.isfinite(own)]
        pooled = max(float(np.median(known)) if len(known) >= 3 else overall, SIGMA_FLOOR)
        n = count[members]
        mine = np.nan_to_num(own[members], nan=pooled)
        out[members] = np.sqrt((n * mine**2 + PRIOR_CHANGES * pooled**2) / (n + PRIOR_CHANGES))
    return np.fmax(out, SIGMA_FLOOR)
