"""Regressions across commits: each cell's history judged by what varies between
processes, whole-run shifts set apart, steps confirmed by re-measurement.

1. Each cell's history on one machine and environment is put in commit order (asv's
   ``Git.get_revisions``, as ``asv publish``, when the git repository is at hand).
2. How each whole run moved is set apart from each cell's level (a median polish of the
   log values, :mod:`mhabench.analysis.runs`); a run that moved as a whole, or was timed
   while other processes took the machine (``mhabench.machine_load``), is reported as a
   run, not as a regression of each of its cells.
3. asv's step detection (its Potts solver, :func:`asv.step_detect.solve_potts_approx`,
   and :func:`asv.step_detect.detect_regressions` with the threshold) finds the upward
   steps of each cell's run-adjusted log values, a new level costing :data:`GAMMA` times
   the cell's noise. The noise is the cell's commit-to-commit scatter (its benchmark's,
   if larger): the samples of one commit come from one process and scatter far less than
   processes do, so a test on pooled samples (asv compare's Mann-Whitney) calls noise a
   change; four in five "confirmed" steps of a real history were noise that way.
4. Each step's size over its noise (``z``: the level change over the SD of the two
   levels) and its support decide: it **holds** when ``z >= Z_HOLD`` with at least two
   undisturbed commits on each side; otherwise, from ``Z_CANDIDATE`` up, it is a
   **candidate** (at the newest commit, resting on one commit, or below ``Z_HOLD``);
   a step resting only on disturbed runs is **disturbed**; the rest is noise.
5. ``mhabench confirm`` re-runs the candidates (and the steps that hold) at the commits on
   either side in 16 fresh interleaved rounds (``asv continuous``, the gate's second
   stage); its verdicts (:mod:`mhabench.analysis.confirmations`) make a step
   **confirmed** or **cleared**.

``peakmem_``, ``mem_`` and ``track_`` cells (one value per commit) are judged the same
way, by their history alone.

As in asv, a higher value is worse for every benchmark type.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from asv import step_detect

from mhabench.analysis.confirmations import Confirmation
from mhabench.analysis.runs import Run, log_matrix, noise_scales, run_effects, runs
from mhabench.machine_load import CellLoad

TIME_KINDS = ("time",)
VALUE_KINDS = ("peakmem", "mem", "track")
HISTORY_KEY = ("machine", "env_name", "benchmark", "cell")
GAMMA = 3.0  # a new level must cut the absolute deviation by 3 noise SDs (asv's Potts)
Z_HOLD = 4.0  # a step this many SDs of its two levels' difference, on 2+ commits a side
Z_CANDIDATE = 3.0  # from here a step is worth re-measuring
# A level is a median of its commits: its SE over the mean's, by the number of commits
# (1 and 2: the mean itself; 4: the mean of the middle two), sqrt(pi / 2) for many.
MEDIAN_SE = {1: 1.0, 2: 1.0, 3: 1.16, 4: 1.09, 5: 1.2}


def median_se(n: int) -> float:
    return MEDIAN_SE.get(n, math.sqrt(math.pi / 2))
# What the report shows for each verdict, and whether it counts as a regression.
CONFIRMED_VERDICTS = ("confirmed", "holds")
LISTED_VERDICTS = ("confirmed", "holds", "candidate", "cleared", "disturbed")


@dataclass(frozen=True)
class Order:
    """The commits of the results, oldest first, and where that order came from."""

    commits: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class History:
    """One cell's values on one machine and environment, in commit order."""

    machine: str
    env_name: str
    benchmark: str
    cell: str
    kind: str
    unit: str
    commits: tuple[str, ...]
    values: tuple[float, ...]
    samples: tuple[tuple[float, ...] | None, ...]
    asv_cell: str = ""  # asv's name with parameters (``name(repr, ...)``)


@dataclass(frozen=True)
class Step:
    """An upward step in a history: ``after`` is the first commit on the new level."""

    history: History
    before: int  # index of the last commit on the old level
    after: int
    level_before: float  # the fitted levels, run shifts removed, in the values' unit
    level_after: float
    verdict: str  # confirmed, holds, candidate, cleared, disturbed or noise
    reason: str  # the verdict in words
    z: float  # the level change over the SD of the difference of the two levels
    support: tuple[int, int]  # undisturbed commits on the old and the new level
    noise: float  # the cell's SD between processes, relative (0.05: 5 %)
    confirmation: Confirmation | None = None

    @property
    def ratio(self) -> float:
        return self.level_after / self.level_before if self.level_before else math.inf

    @property
    def commit(self) -> str:
        return self.history.commits[self.after]

    @property
    def confirmed(self) -> bool:
        return self.verdict in CONFIRMED_VERDICTS


@dataclass
class Verdicts:
    """Every upward step of the histories judged, and every run's shift and load."""

    steps: list[Step]
    runs: dict[tuple[str, str, str], list[Run]] = field(default_factory=dict)  # (machine,
    # env, kind) -> each commit's run, oldest first

    def listed(self) -> list[Step]:
        return [s for s in self.steps if s.verdict in LISTED_VERDICTS]

    def count(self, verdict: str) -> int:
        return sum(s.verdict == verdict for s in self.steps)

    def disturbed_runs(self) -> list[tuple[tuple[str, str, str], Run]]:
        return [(key, run) for key, group in self.runs.items() for run in group
                if run.disturbed]


def beside_results(results: str | Path, name: str) -> Path:
    """The folder ``name`` beside an asv results folder (``.asv/load`` for
    ``.asv/results``): where mhabench keeps what it adds to asv's results."""
    return Path(results).resolve().parent / name


def commit_order(frame: pd.DataFrame, repo: str | Path | None) -> Order:
    """The results' commits in git order (asv's ``Git.get_revisions``: ``git rev-list
    --all --date-order``), or, when ``repo`` is None, not a git repository or lacks some
    of the commits, by the commit date asv recorded in each results file (saying so)."""
    commits = sorted(set(frame["commit"].dropna()))
    dates = frame.groupby("commit")["date"].max()
    by_date = tuple(sorted(commits, key=lambda c: (dates.get(c, pd.NaT), c)))
    fallback = "the commit dates asv recorded in the results files"
    if repo is None:
        return Order(by_date, f"{fallback} (no git repository given)")
    try:
        from asv.plugins.git import Git

        if not Git.is_local_repo(str(repo)):
            return Order(by_date, f"{fallback} ({str(repo)!r} is not a git repository)")
        revisions = Git(str(repo), str(repo)).get_revisions(set(commits))
    except Exception as exc:  # asv raises its own ProcessError / UserError types
        return Order(by_date, f"{fallback} (git failed in {str(repo)!r}: {exc})")
    missing = [c for c in commits if c not in revisions]
    if missing:
        return Order(by_date, f"{fallback} ({len(missing)} of {len(commits)} commits are not "
                              f"in the git history of {str(repo)!r})")
    return Order(tuple(sorted(commits, key=revisions.__getitem__)),
                 f"the git history of {str(repo)!r} (as asv publish orders it)")


def histories(frame: pd.DataFrame, order: Order, kinds: Iterable[str]) -> list[History]:
    """Every cell of the given benchmark kinds measured at two or more commits."""
    rank = {c: i for i, c in enumerate(order.commits)}
    rows = frame[frame["kind"].isin(list(kinds))]
    out = []
    for key, g in rows.groupby(list(HISTORY_KEY), sort=True, dropna=False):
        g = (g.assign(_rank=g["commit"].map(rank)).sort_values(["_rank", "date"], kind="stable")
             .drop_duplicates("commit", keep="last"))
        if len(g) < 2:
            continue
        records = g.to_dict("records")
        samples = tuple(tuple(map(float, r["samples"])) if isinstance(r.get("samples"),
                                                                      (list, tuple)) else None
                        for r in records)
        out.append(History(*map(str, key), kind=str(records[0]["kind"]),
                           unit=str(records[0]["unit"]),
                           commits=tuple(str(r["commit"]) for r in records),
                           values=tuple(float(r["value"]) for r in records),
                           samples=samples, asv_cell=str(records[-1].get("asv_cell") or "")))
    return out

def _segments(right: Sequence[int]) -> list[tuple[int, int]]:
    out, left = [], 0
    for r in right:
        out.append((left, r))
        left = r
    return out


def _judge(history: History, y: np.ndarray, disturbed: np.ndarray, sigma: float,
           threshold: float, confirmations: Mapping[tuple[str, str, str, str], Confirmation],
           runs_at: Mapping[int, Run]) -> list[Step]:
    """The upward steps of one history's run-adjusted log values ``y``."""
    right, levels, dists = step_detect.solve_potts_approx(list(y), [1.0] * len(y),
                                                          gamma=GAMMA * sigma)
    segments = _segments(right)
    fitted = [(left, r, math.exp(level), float(np.exp(y[left:r]).min()),
               math.exp(level) * abs(dist / (r - left)))
              for (left, r), level, dist in zip(segments, levels, dists, strict=True)]
    _, _, jumps = step_detect.detect_regressions(fitted, threshold - 1)
    out = []
    last = len(y) - 1
    for before, after, _, _ in jumps or ():
        seg_b = next(s for s in segments if s[0] <= before < s[1])
        seg_a = next(s for s in segments if s[0] == after)
        level_b, level_a = (math.exp(levels[segments.index(s)]) for s in (seg_b, seg_a))
        n_b, n_a = seg_b[1] - seg_b[0], seg_a[1] - seg_a[0]
        clean = (int((~disturbed[seg_b[0]:seg_b[1]]).sum()),
                 int((~disturbed[seg_a[0]:seg_a[1]]).sum()))
        z = math.log(level_a / level_b) / (sigma * math.hypot(median_se(n_b) / math.sqrt(n_b),
                                                             median_se(n_a) / math.sqrt(n_a)))
        key = (history.machine, history.asv_cell, history.commits[before],
               history.commits[after])
        found = confirmations.get(key)
        if found is not None:
            verdict = found.verdict
            reason = (f"{found.verdict} by {found.rounds} interleaved rounds (asv continuous"
                      f" at factor {found.factor:g}: "
                      + ("n/a" if found.ratio is None else f"{found.ratio:.2f}x") + ")")
        elif not clean[0] or not clean[1]:
            k = seg_a[0] if not clean[1] else seg_b[0]
            verdict, reason = "disturbed", "rests only on a disturbed run: " + _why(
                runs_at.get(k), disturbed[k])
        elif z >= Z_HOLD and min(clean) >= 2:
            verdict = "holds"
            reason = (f"holds over the history: {z:.1f} SDs, {clean[0]} and {clean[1]} "
                      "undisturbed commits either side")
        elif z >= Z_CANDIDATE:
            verdict = "candidate"
            if seg_a == (last, last + 1):
                reason = "candidate: at the newest commit"
            elif min(n_b, n_a) == 1 or min(clean) < 2:
                reason = "candidate: rests on one commit"
            else:
                reason = f"candidate: {z:.1f} SDs, below {Z_HOLD:g}"
        else:
            verdict, reason = "noise", f"within the noise ({z:.1f} SDs)"
        out.append(Step(history, before, after, level_b, level_a, verdict, reason, z, clean,
                        math.expm1(sigma), found))
    return out


def _why(run: Run | None, cell_disturbed: bool) -> str:
    if run is not None and run.moved:
        return f"the whole run at {run.commit[:8]} moved {run.factor:.2f}x"
    if run is not None and run.loaded:
        return (f"other processes took {run.other_cores:.2f} cores while the run at "
                f"{run.commit[:8]} timed")
    return "other processes took the machine while this cell timed" if cell_disturbed else (
        "disturbed")


def regressions(histories_: Sequence[History], threshold: float,
                loads: Mapping[tuple[str, str, str], CellLoad] | None = None,
                confirmations: Mapping[tuple[str, str, str, str], Confirmation] | None = None,
                order: Order | None = None) -> Verdicts:
    """Judge every upward step of at least ``threshold`` in ``histories_`` (see the
    module's docstring). ``loads``: (commit, env, asv cell) -> the machine's load while the
    cell timed (``mhabench.machine_load.read_records``); ``confirmations``: re-measured
    steps (``mhabench.analysis.confirmations.load_confirmations``)."""
    loads, confirmations = loads or {}, confirmations or {}
    verdicts = Verdicts([])
    groups: dict[tuple[str, str, str], list[History]] = {}
    for h in histories_:
        family = "time" if h.kind in TIME_KINDS else h.kind
        groups.setdefault((h.machine, h.env_name, family), []).append(h)
    for key, members in sorted(groups.items()):
        seen = {c for h in members for c in h.commits}
        commits = [c for c in (order.commits if order else ()) if c in seen]
        commits += sorted(seen - set(commits))
        position = {c: i for i, c in enumerate(commits)}
        x = log_matrix([{position[c]: v for c, v in zip(h.commits, h.values, strict=True)}
                        for h in members], len(commits))
        level, run = run_effects(x)
        cell_loads = [[loads.get((c, h.env_name, h.asv_cell)) for c in commits]
                      for h in members]
        group_runs = runs(x, level, run, commits, cell_loads)
        verdicts.runs[key] = group_runs
        runs_at = {r.position: r for r in group_runs}
        run_disturbed = np.array([runs_at[k].disturbed if k in runs_at else False
                                  for k in range(len(commits))])
        disturbed = np.array([[run_disturbed[k] or bool(load and load.disturbed)
                               for k, load in enumerate(row)] for row in cell_loads])
        residuals = x - run[None, :]
        sigmas = noise_scales(residuals, disturbed, [h.benchmark for h in members])
        for i, h in enumerate(members):
            index = [position[c] for c in h.commits]
            steps = _judge(h, residuals[i, index], disturbed[i, index], float(sigmas[i]),
                           threshold, confirmations,
                           {j: runs_at[k] for j, k in enumerate(index) if k in runs_at})
            verdicts.steps += steps
    return verdicts


def sample_summary(samples: Sequence[float] | None, value: float) -> str:
    """``n=10 median 50.1 (IQR 48.0-52.3)`` in the values' unit; the value alone without
    samples."""
    if not samples:
        return f"{value:.4g} (no samples)"
    q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [
        samples[0]] * 3
    return f"n={len(samples)} median {statistics.median(samples):.4g} (IQR {q[0]:.4g}-{q[2]:.4g})"
