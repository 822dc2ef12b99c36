"""What a culprit search decides from one probe's processes: which half of a stretch of
commits holds a cell's change (:func:`which_half`), whether a confirmation cleared a cell,
and the order in which a stretch's commits are tried as its middle."""

from __future__ import annotations

import numpy as np

from mhabench.analysis.comparisons.process_compare import FACTOR, Comparison, compare, verdict

Timed = dict[str, dict[str, list[float] | None]]  # cell -> commit -> process medians
SURE = 0.95  # a half holds the step in this share of bootstrap draws
SETTLED = 4  # processes a side after which a half whose ratio sits within the factor is
# quiet: a search's batch (one batch of rounds decides a clear half)


def compared(timed: Timed, cell: str, a: str, b: str) -> Comparison | None:
    by = timed.get(cell, {})
    x, y = by.get(a), by.get(b)
    if not x or not y or len(x) < 2 or len(y) < 2:
        return None
    return compare(x, y)


def merge(into: Timed, more: Timed) -> None:
    for cell, by in more.items():
        for commit, medians in by.items():
            have = into.setdefault(cell, {})
            if medians is None or have.get(commit, []) is None:
                have[commit] = None
            else:
                have[commit] = [*have.get(commit, []), *medians]


def middles(lo: int, hi: int) -> list[int]:
    """The commits between ``lo`` and ``hi``, the middle first, then outward."""
    mid = (lo + hi) // 2
    order = [mid]
    for step in range(1, hi - lo):
        order += [i for i in (mid + step, mid - step) if lo < i < hi]
    return order


def cleared(result: Comparison, way: str) -> bool:
    """The confirmation reads no change the screen's way: its interval stays within the
    factor, or its ratio leans the other way past it."""
    if way == "+":
        return result.high < FACTOR or result.ratio <= 1 / FACTOR
    return result.low > 1 / FACTOR or result.ratio >= FACTOR


def low_share(timed: Timed, cell: str, trio: list[str], draws: int = 400,
               seed: int = 0) -> float:
    """The share of bootstrap draws (each commit's processes resampled) in which the low
    half moved further than the high half: near 1 where one step lies in the low half,
    near 0 where it lies in the high one."""
    from mhabench.analysis.comparisons.modes import align

    logs = [np.log(np.asarray(timed[cell][c], dtype=float)) for c in trio]
    rng = np.random.default_rng(seed)
    wins = 0
    for _ in range(draws):
        a, m, b = (x[rng.integers(0, len(x), len(x))] for x in logs)
        wins += abs(align(a, m)) > abs(align(m, b))
    return wins / draws


def which_half(timed: Timed, cell: str, trio: list[str], *, final: bool,
               settled: int = SETTLED) -> str:
    """Where ``cell``'s change between trio[0] and trio[2] lies, from the probe's
    processes: "low", "high", "both" (each half changed), "none" (the ends no longer
    differ), or "" while unclear (``final``: the likelier half where still unclear;
    ``settled``: see :func:`quiet`)."""
    low, high = (compared(timed, cell, trio[i], trio[i + 1]) for i in (0, 1))
    if low is None or high is None:
        return "none" if final else ""
    said = verdict(low), verdict(high)
    if said[0] != "unchanged" and said[1] != "unchanged":
        return "both"
    share = low_share(timed, cell, trio)
    side = "low" if share >= SURE else "high" if share <= 1 - SURE else ""
    if side:
        # the other half may hold a second, smaller change: it must read none, or its
        # own change is waited for
        other = high if side == "low" else low
        if quiet(other, settled) or final:
            return side
        return ""
    span = compared(timed, cell, trio[0], trio[2])
    if span is None or verdict(span) == "unchanged":
        # the ends, measured together, no longer differ: the change did not recur here
        banded = span is not None and FACTOR > span.high and span.low > 1 / FACTOR
        if banded or final:
            return "none"
    if final:
        return "low" if share >= 0.5 else "high"
    return ""


def quiet(half: Comparison, settled: int = SETTLED) -> bool:
    """A half that holds no change of its own: its ratio within the factor and, on at
    least ``settled`` processes a side, or where its interval lies within the factor,
    nothing more to wait for."""
    within = 1 / FACTOR < half.ratio < FACTOR
    banded = 1 / FACTOR < half.low and half.high < FACTOR
    enough = min(half.base_processes, half.new_processes) >= settled
    return within and (enough or banded)
