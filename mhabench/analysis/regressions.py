"""Regressions across commits, from asv's own statistics.

Each benchmark cell's history on one machine and environment is put in commit order
(asv's ``Git.get_revisions``, the order ``asv publish`` uses, when the git repository is
at hand) and searched for upward steps with asv's step detection (``asv.step_detect``,
the code behind the regressions page of ``asv publish``):

- ``time_`` cells: asv's Potts solver (:func:`asv.step_detect.solve_potts_approx`) over
  the commits' medians, weighted by their samples' 99 % confidence intervals
  (:func:`asv._stats.get_weight`, as ``asv publish``), with a new level costing
  :data:`STEP_PENALTY` median CI half-widths. ``asv publish`` searches the penalty
  itself (``solve_potts_autogamma``); on histories of a few to tens of commits that
  search reads a late step as correlated noise and keeps one level (measured: a 1.3x
  step under 10 % sample noise, 10 samples a commit, found in 10-50 % of 12-commit
  histories, 10 % when it is at the last commit). Each upward step that
  :func:`asv.step_detect.detect_regressions` keeps is then tested between the commits on
  either side with :func:`asv._stats.is_different` (Mann-Whitney U at p < 0.002 on the
  samples, as ``asv compare`` and ``asv continuous``; with too few samples, whether the
  99 % CIs overlap) and must be at least the threshold factor: only then is it confirmed.
- ``peakmem_``, ``mem_`` and ``track_`` cells hold one value per commit and no samples,
  so nothing can test them: asv's ``detect_steps`` as ``asv publish`` runs it (its own
  penalty search) and ``detect_regressions`` with the same threshold decide alone.

As in asv, a higher value is worse for every benchmark type.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from asv import _stats, step_detect

STEP_PENALTY = 1.0  # a new level must cut the weighted deviation by 1 median CI half-width
TIME_KINDS = ("time",)
VALUE_KINDS = ("peakmem", "mem", "track")
HISTORY_KEY = ("machine", "env_name", "benchmark", "cell")
P_THRESHOLD = 0.002  # asv._stats.is_different's default, which asv compare uses


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
    stats: tuple[dict[str, float] | None, ...]  # asv's names: ci_99_a, ci_99_b, ...


@dataclass(frozen=True)
class Step:
    """An upward step in a history: ``after`` is the first commit on the new level."""

    history: History
    before: int  # index of the last commit on the old level
    after: int
    level_before: float  # the step detection's level on each side
    level_after: float
    confirmed: bool | None  # None: no samples or CIs to test with
    test: str  # what asv's test said, in words
    p_value: float | None  # Mann-Whitney U, where the samples allow it

    @property
    def ratio(self) -> float:
        return self.level_after / self.level_before if self.level_before else math.inf

    @property
    def commit(self) -> str:
        return self.history.commits[self.after]


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


def _stats_dict(row: dict[str, Any]) -> dict[str, float] | None:
    lo, hi = row.get("ci99_lo"), row.get("ci99_hi")
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return None
    return {"ci_99_a": float(lo), "ci_99_b": float(hi), "q_25": row.get("q25"),
            "q_75": row.get("q75"), "repeat": row.get("repeat"), "number": row.get("number")}


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
                           samples=samples, stats=tuple(_stats_dict(r) for r in records)))
    return out


def detect(history: History, penalty: float | None = STEP_PENALTY
           ) -> list[tuple[int, int, float, float, float]]:
    """asv's piecewise-constant fit of a history: (left, right, level, min, error) per
    level, in history indices (``asv.step_detect.detect_steps``'s format).

    With every commit's CI known (at least one; the others get their median weight, as in
    asv) and a ``penalty``, asv's solver runs at that penalty; otherwise ``detect_steps``
    searches it as ``asv publish`` does."""
    weights = [_stats.get_weight(s) for s in history.stats]
    known = [w for w in weights if w is not None]
    if penalty is None or not known:
        return step_detect.detect_steps(list(history.values), weights)
    index = [i for i, v in enumerate(history.values) if math.isfinite(v)]
    y = [history.values[i] for i in index]
    median = statistics.median(known)
    w = [(weights[i] if weights[i] is not None else median) / median for i in index]
    # Weights normalised to median 1 keep the fitted deviations in the values' unit (as
    # detect_steps does); 1 / median weight is then the median CI half-width.
    right, levels, dists = step_detect.solve_potts_approx(y, w, gamma=penalty / median)
    steps, left = [], 0
    for r, level, dist in zip(right, levels, dists, strict=True):
        steps.append((index[left], index[r - 1] + 1, level, min(y[left:r]),
                      abs(dist / (r - left))))
        left = r
    return steps


def _test(history: History, a: int, b: int, factor: float
          ) -> tuple[bool | None, str, float | None]:
    """asv compare's question between commits a and b: are they different (asv's test),
    and is b slower by at least ``factor``?"""
    sa, sb = history.samples[a], history.samples[b]
    ta, tb = history.stats[a], history.stats[b]
    if not (sa and sb) and not (ta and tb):
        return None, "no samples or CIs recorded: not testable", None
    enough = bool(sa and sb) and 1 / _stats.binom(len(sa) + len(sb),
                                                  min(len(sa), len(sb))) < P_THRESHOLD
    if not enough and not (ta and tb):
        return None, (f"{len(sa or ())} vs {len(sb or ())} samples, too few for the U test, "
                      "and no CIs"), None
    different = _stats.is_different(list(sa) if sa else None, list(sb) if sb else None,
                                    ta, tb, P_THRESHOLD)
    slower = history.values[b] >= history.values[a] * factor
    if enough:
        p = _stats.mann_whitney_u(list(sa), list(sb))[1]
        text = f"Mann-Whitney U p={p:.2g} ({len(sa)} vs {len(sb)} samples)"
    else:
        p = None
        text = (f"99% CIs {'disjoint' if different else 'overlap'} ({len(sa or ())} vs "
                f"{len(sb or ())} samples: too few for the U test)")
    if different and not slower:
        text += f"; less than {factor:g}x slower"
    return bool(different and slower), text, p


def regressions(histories_: Sequence[History], threshold: float,
                penalty: float | None = STEP_PENALTY, test: bool = True) -> list[Step]:
    """Upward steps that asv's ``detect_regressions`` keeps (relative size ``threshold -
    1``), each tested between its two commits when ``test`` (the time_ rule) or left
    untested (one value per commit: the memory and track_ rule)."""
    out = []
    for history in histories_:
        steps = detect(history, penalty)
        _, _, jumps = step_detect.detect_regressions(steps, threshold - 1)
        level_at = {left: level for left, _, level, _, _ in steps}
        for before, after, level_before, _ in jumps or ():
            if test:
                confirmed, text, p = _test(history, before, after, threshold)
            else:
                confirmed, text, p = None, "one value per commit: no samples to test", None
            out.append(Step(history, before, after, float(level_before),
                            float(level_at.get(after, history.values[after])), confirmed,
                            text, p))
    return out


def sample_summary(samples: Sequence[float] | None, value: float) -> str:
    """``n=10 median 50.1 (IQR 48.0-52.3)`` in the values' unit; the value alone without
    samples."""
    if not samples:
        return f"{value:.4g} (no samples)"
    q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [
        samples[0]] * 3
    return f"n={len(samples)} median {statistics.median(samples):.4g} (IQR {q[0]:.4g}-{q[2]:.4g})"
