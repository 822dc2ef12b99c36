"""The time model's numerics, on rows of features divided by measured time.

:func:`nnls` (scipy's non-negative least squares on relative residuals) chooses the terms,
the cache sizes and the coefficients; :func:`pulled_nnls` does the same pulled toward prior
coefficients (a group with few cells borrowing its framework's rates,
:mod:`mhabench.analysis.prediction.timemodel`); :func:`distinct_columns` drops the columns a fit
cannot tell apart, :func:`r_squared` scores one.

Why relative residuals, ``predicted / measured - 1``, and not log ones: a shared VM's timing
noise is one-sided. A cell timed in a slow stretch reads up to 2x its quick time, never
faster (:mod:`mhabench.measure.conditions.speed`), and a log residual counts such a cell as far off
as one read at half its time, lifting the fit toward the slow cells. A relative residual
bounds what a slow cell can pull (a cell read 2x slow is at most 0.5 under its
prediction) while an over-prediction costs in full. (A log refit under a soft-L1 loss left
off-grid configs over-predicted: docs/research.md.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.optimize

# The weight of a prior coefficient in :func:`pulled_nnls`: a coefficient at twice (or 0)
# its prior costs as much as one cell about 17 % off (sqrt(0.03)), so the cells move it
# wherever they tell it, and where they cannot tell it (few cells, terms that move
# together) it stays near the prior. Off-grid configs fit alike over a wide range of it.
PRIOR_WEIGHT = 0.03


def nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ||A x - b||_2 subject to x >= 0, by :func:`scipy.optimize.nnls`.

    Columns are scaled to unit norm first: the features differ by ten orders of
    magnitude (FLOPs vs a constant), which would otherwise swamp the solver's tolerances.
    """
    scaled, norms = _unit_columns(A)
    x, _ = scipy.optimize.nnls(scaled, np.asarray(b, dtype=float))
    return x / norms


def _unit_columns(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``A`` with each non-zero column scaled to unit norm, and the norms (1 for zero ones)."""
    A = np.asarray(A, dtype=float)
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0] = 1.0
    return A / norms, norms


def pulled_nnls(A: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """:func:`nnls` of ``A x = 1`` (relative residuals) with each coefficient that has a prior
    (``prior`` > 0; 0: none) pulled toward it: one more row per such coefficient, the residual
    sqrt(:data:`PRIOR_WEIGHT`) * (x / prior - 1)."""
    A = np.asarray(A, dtype=float)
    prior = np.asarray(prior, dtype=float)
    held = np.flatnonzero(prior > 0)
    pull = np.zeros((len(held), A.shape[1]))
    pull[np.arange(len(held)), held] = np.sqrt(PRIOR_WEIGHT) / prior[held]
    return nnls(np.vstack([A, pull]),
                np.concatenate([np.ones(len(A)), np.full(len(held), np.sqrt(PRIOR_WEIGHT))]))


def r_squared(measured: np.ndarray, predicted: np.ndarray) -> float:
    """The coefficient of determination of ``predicted`` for ``measured`` (NaN when the
    measurements are all equal)."""
    total = float(np.sum((measured - measured.mean()) ** 2))
    if total == 0:
        return float("nan")
    return 1.0 - float(np.sum((measured - predicted) ** 2)) / total


def distinct_columns(X: np.ndarray, columns: Sequence[int]) -> list[int]:
    """``columns`` less each one equal to an earlier one: the fit cannot tell two equal
    columns apart (``projects_kv`` is ``const`` where no cell is a cross decode step, the
    training FLOPs are the FLOPs where every cell is a training step), so the earlier
    feature takes the cost and the later is not fitted."""
    kept: list[int] = []
    for i in columns:
        if not any(np.array_equal(X[:, i], X[:, j]) for j in kept):
            kept.append(i)
    return kept
