"""Regressions across commits (docs/regressions.md): each cell's history judged by what
varies between processes, whole-run offsets set apart, shifts confirmed by re-measurement.

1. Each cell's history on one machine and environment is put in commit order (asv's
   ``Git.get_revisions``, as ``asv publish``, when the git repository is at hand).
2. How each whole run moved is set apart from each cell's level (a median polish of the
   log values, :mod:`mhabench.analysis.history.runs`); a run that moved as a whole, or was timed
   while other processes took the machine (``mhabench.measure.conditions.machine_load``), is
   reported as a run, not as a regression of each of its cells. Where the load records say when
   each cell's process started, the machine's state at that moment is set apart too.
3. asv's step detection finds the upward shifts of each cell's run-adjusted log values
   (:mod:`mhabench.analysis.history.change_points`). The noise they must beat is the cell's
   commit-to-commit scatter: one commit's samples come from one process and scatter far
   less than processes do, so a test on pooled samples calls noise a change.
4. Each shift's size over its noise and its support decide: it **holds** (enough SDs, two
   or more undisturbed commits on each side), is a **candidate** (at the newest commit,
   resting on one commit, or smaller), is **disturbed** (rests only on disturbed runs), or
   is noise.
5. A change of one framework/backend moves all its cells at one commit: their median is
   judged the same way (:mod:`mhabench.analysis.history.group_change_points`), and each cell that
   moved the same way takes the group's verdict; then the run effects are estimated again
   with the groups' shifts taken out (a change of code is no move of the machine's).
6. ``mhabench confirm`` re-runs the candidates (and the shifts that hold) at the commits on
   either side in fresh interleaved rounds (:func:`mhabench.compare.gate.confirm`); its
   verdicts (:mod:`mhabench.analysis.history.confirmations`) make a shift **confirmed** or
   **cleared**.

``peakmem_``, ``mem_`` and ``track_`` cells (one value per commit) are judged the same way,
by their history alone. As in asv, a higher value is worse for every benchmark type.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mhabench.analysis.history.change_points import classify, fit_shifts, z_score
from mhabench.analysis.history.confirmations import Confirmation
from mhabench.analysis.history.group_change_points import (
    GroupShift,
    code_shift,
    group_members,
    group_series,
    group_shifts,
    series_scale,
)
from mhabench.analysis.history.runs import (
    Run,
    local_effects,
    log_matrix,
    noise_scales,
    run_effects,
    runs,
)
from mhabench.measure.conditions.machine_load import CellLoad

TIME_KINDS = ("time",)
VALUE_KINDS = ("peakmem", "mem", "track")
HISTORY_KEY = ("machine", "env_name", "benchmark", "cell")
# Which verdict wins when a cell's own shift and its group's meet at one commit.
RANK = {"noise": 0, "disturbed": 1, "candidate": 2, "holds": 3, "cleared": 4, "confirmed": 4}
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
    group: str = ""  # framework/backend of an attention cell, "" for others


@dataclass(frozen=True)
class Shift:
    """An upward shift in a history: ``after`` is the first commit on the new level."""

    history: History
    before: int  # index of the last commit on the old level
    after: int
    level_before: float  # the fitted levels, run offsets removed, in the values' unit
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
    """Every upward shift of the histories judged, and every run's offset and load."""

    shifts: list[Shift]
    groups: list[GroupShift] = field(default_factory=list)
    runs: dict[tuple[str, str, str], list[Run]] = field(default_factory=dict)  # (machine,
    # env, kind) -> each commit's run, oldest first

    def listed(self) -> list[Shift]:
        return [s for s in self.shifts if s.verdict in LISTED_VERDICTS]

    def count(self, verdict: str) -> int:
        return sum(s.verdict == verdict for s in self.shifts)

    def disturbed_runs(self) -> list[tuple[tuple[str, str, str], Run]]:
        return [(key, run) for key, group in self.runs.items() for run in group
                if run.disturbed]


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


def _group(row: Mapping[str, Any]) -> str:
    framework, backend = row.get("framework"), row.get("backend")
    return f"{framework}/{backend}" if isinstance(framework, str) and isinstance(
        backend, str) else ""


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
                           samples=samples, asv_cell=str(records[-1].get("asv_cell") or ""),
                           group=_group(records[-1])))
    return out

def _judge(history: History, y: np.ndarray, disturbed: np.ndarray, sigma: float,
           threshold: float, confirmations: Mapping[tuple[str, str, str, str], Confirmation],
           runs_at: Mapping[int, Run]) -> list[Shift]:
    """The upward shifts of one history's run-adjusted log values ``y``."""
    return [_shift(history, y, disturbed, sigma, seg_b, seg_a, confirmations, runs_at)
            for seg_b, seg_a, _ in fit_shifts(y, sigma, threshold)]


def _shift(history: History, y: np.ndarray, disturbed: np.ndarray, sigma: float,
          seg_b: tuple[int, int], seg_a: tuple[int, int],
          confirmations: Mapping[tuple[str, str, str, str], Confirmation],
          runs_at: Mapping[int, Run], group: GroupShift | None = None) -> Shift:
    """One cell's shift from the old level's commits ``seg_b`` to the new level's ``seg_a``
    (indices into its history), judged by its own noise, or by its group's shift."""
    level_b, level_a = (float(np.median(y[a:b])) for a, b in (seg_b, seg_a))
    n_b, n_a = seg_b[1] - seg_b[0], seg_a[1] - seg_a[0]
    clean = (int((~disturbed[seg_b[0]:seg_b[1]]).sum()),
             int((~disturbed[seg_a[0]:seg_a[1]]).sum()))
    z = z_score(level_a - level_b, sigma, n_b, n_a)
    before, after = seg_b[1] - 1, seg_a[0]
    found = confirmations.get((history.machine, history.asv_cell, history.commits[before],
                               history.commits[after]))
    if found is not None:
        verdict = found.verdict
        interval = ("" if found.low is None or found.high is None
                    else f" [{found.low:.2f}, {found.high:.2f}]")
        reason = (f"{found.verdict} by {found.rounds} interleaved rounds of fresh processes "
                  f"(factor {found.factor:g}: "
                  + ("n/a" if found.ratio is None else f"{found.ratio:.2f}x{interval}") + ")")
    elif not clean[0] or not clean[1]:
        k = seg_a[0] if not clean[1] else seg_b[0]
        verdict, reason = "disturbed", "rests only on a disturbed run: " + _why(
            runs_at.get(k), disturbed[k])
    elif group is not None:
        verdict, reason = group.verdict, (
            f"{group.verdict} with its backend: {group.group} moved {group.ratio:.2f}x at "
            f"{group.after[:8]} over {group.cells} cells ({group.z:.1f} SDs of the group); "
            f"this cell {math.exp(level_a - level_b):.2f}x")
    else:
        verdict, reason = classify(z, clean, seg_a, n_b, n_a, len(y) - 1)
    return Shift(history, before, after, math.exp(level_b), math.exp(level_a), verdict,
                reason, z, clean, math.expm1(sigma), found)


def _why(run: Run | None, cell_disturbed: bool) -> str:
    if run is not None and run.moved:
        return f"the whole run at {run.commit[:8]} moved {run.factor:.2f}x"
    if run is not None and run.loaded:
        return (f"other processes took {run.other_cores:.2f} cores while the run at "
                f"{run.commit[:8]} timed")
    return "other processes took the machine while this cell timed" if cell_disturbed else (
        "disturbed")


BACKFIT_PASSES = 4  # run effects, group shifts, run effects without them, ... (2 suffice)


@dataclass
class _Fit:
    """One machine, environment and kind's runs, noise and group shifts."""

    runs: list[Run]
    disturbed: np.ndarray  # cells x commits: timed under load, or in a disturbed run
    residuals: np.ndarray  # log values less the run's and the moment's effects (cells x
    # commits)
    sigmas: np.ndarray  # each cell's noise between processes
    groups: list[tuple[str, list[int], GroupShift, tuple[int, int], tuple[int, int]]]


def _fit(key: tuple[str, str, str], members: Sequence[History], x: np.ndarray,
         commits: Sequence[str], cell_loads: Sequence[Sequence[CellLoad | None]],
         loaded: np.ndarray, threshold: float) -> _Fit:
    """Run effects, time-local effects and group shifts by backfitting: the machine's
    effects are estimated with the group shifts found so far taken out of their cells (a
    change of code is not the machine's), until the shifts found stay the same. Time-local
    effects need each cell's start (its load record); memory and track values get none."""
    labels = [h.group for h in members]
    member_rows = group_members(labels)
    starts = np.array([[np.nan if load is None or load.start is None or key[2] != "time"
                        else load.start for load in row] for row in cell_loads],
                      dtype=float).reshape(x.shape)
    moved = np.zeros_like(x)
    for _ in range(BACKFIT_PASSES):
        # the levels and run effects without the moment's (which would feed one backend's
        # shift, through its neighbours' levels, back into its own residuals)
        level, run = run_effects(x - moved, labels)
        local = local_effects(x - moved - run[None, :] - level[:, None], starts, labels)
        found_runs = runs(x - moved, level, run, commits, cell_loads)
        runs_at = {r.position: r for r in found_runs}
        run_disturbed = np.array([runs_at[k].disturbed if k in runs_at else False
                                  for k in range(len(commits))])
        residuals = x - run[None, :] - local
        disturbed = loaded | run_disturbed[None, :]
        sigmas = noise_scales(residuals, disturbed, [h.benchmark for h in members])
        # A run that moved as a whole stays in the group's series (its effect is taken
        # out; it only does not count as clean evidence), so the shift is placed at its
        # commit; a cell timed under load is left out of the median.
        series = {group: found for group, rows in member_rows.items()
                  if (found := group_series(rows, residuals - level[:, None], loaded))
                  is not None}
        # the groups' scatter with their own shifts out (a group's shift is the same for
        # each of its cells at a commit, so it comes off its median cell as it is)
        series_sd = series_scale([g - moved[member_rows[group][0], keep]
                                  for group, (keep, g, _) in series.items()])
        found = [(group, member_rows[group], *shift) for group, one in series.items()
                 for shift in group_shifts(key, group, member_rows[group], one, sigmas,
                                         commits, threshold, run_disturbed, series_sd)]
        new = code_shift(x.shape, member_rows, [(g, s, a) for g, _, s, _, a in found])
        done = np.allclose(new, moved, atol=1e-3)
        moved = new
        if done:
            break
    return _Fit(found_runs, disturbed, residuals, sigmas, found)


def regressions(histories_: Sequence[History], threshold: float,
                loads: Mapping[tuple[str, str, str], CellLoad] | None = None,
                confirmations: Mapping[tuple[str, str, str, str], Confirmation] | None = None,
                order: Order | None = None) -> Verdicts:
    """Judge every upward shift of at least ``threshold`` in ``histories_`` (see the
    module's docstring). ``loads``: (commit, env, asv cell) -> the machine's load while the
    cell timed (``mhabench.measure.conditions.machine_load.read_records``); ``confirmations``:
    re-measured shifts (``mhabench.analysis.history.confirmations.load_confirmations``)."""
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
        cell_loads = [[loads.get((c, h.env_name, h.asv_cell)) for c in commits]
                      for h in members]
        loaded = np.array([[bool(load and load.disturbed) for load in row]
                           for row in cell_loads])
        fit = _fit(key, members, x, commits, cell_loads, loaded, threshold)
        verdicts.runs[key] = fit.runs
        runs_at = {r.position: r for r in fit.runs}
        disturbed, residuals, sigmas = fit.disturbed, fit.residuals, fit.sigmas
        cell_shifts: dict[int, dict[int, Shift]] = {}  # member -> after position -> shift
        for i, h in enumerate(members):
            index = [position[c] for c in h.commits]
            own = {j: runs_at[k] for j, k in enumerate(index) if k in runs_at}
            for shift in _judge(h, residuals[i, index], disturbed[i, index], float(sigmas[i]),
                               threshold, confirmations, own):
                cell_shifts.setdefault(i, {})[index[shift.after]] = shift
        for _, rows, found, seg_b, seg_a in fit.groups:
            verdicts.groups.append(found)
            if found.verdict not in ("holds", "candidate"):
                continue
            for i in rows:  # each cell of the group, judged with the group
                h = members[i]
                index = [position[c] for c in h.commits]
                at = {k: j for j, k in enumerate(index)}
                b = [at[k] for k in range(*seg_b) if k in at]
                a = [at[k] for k in range(*seg_a) if k in at]
                if not b or not a or a[0] != b[-1] + 1:
                    continue
                shift = _shift(h, residuals[i, index], disturbed[i, index], float(sigmas[i]),
                             (b[0], b[-1] + 1), (a[0], a[-1] + 1), confirmations,
                             {j: runs_at[k] for j, k in enumerate(index) if k in runs_at},
                             found)
                old = cell_shifts.get(i, {}).get(seg_a[0])
                # a cell that moved the group's way takes its verdict (its scatter
                # may hide the shift, or put it a commit beside: the group's is better)
                if shift.ratio > 1 and (old is None or RANK[shift.verdict] >= RANK[
                        old.verdict]):
                    mine = cell_shifts.setdefault(i, {})
                    mine[seg_a[0]] = shift
                    for k in (seg_a[0] - 1, seg_a[0] + 1):
                        near = mine.get(k)
                        if near is not None and near.ratio > 1 and near.confirmation is None:
                            del mine[k]
        verdicts.shifts += [shift for i in sorted(cell_shifts)
                           for _, shift in sorted(cell_shifts[i].items())]
    return verdicts
