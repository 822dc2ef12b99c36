"""The time model's numerics, on rows of features divided by measured time.

:func:`nnls` (scipy's non-negative least squares on relative residuals) chooses the terms
and cache sizes; :func:`robust_log_fit` refits the chosen terms' coefficients on log
residuals under a soft-L1 loss, optionally pulled toward prior coefficients (a group with
few cells borrowing its framework's rates, :mod:`mhabench.analysis.timemodel`);
:func:`distinct_columns` drops the columns a fit cannot tell apart, :func:`r_squared`
scores one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.optimize

# The coefficients' second stage: log residuals under scipy's soft-L1 loss, quadratic up to
# about this factor error (10 %) and linear beyond, so a cell read 2-3x off by its
# process's noise stops pulling the rest. Against re-predicted validate samples (240
# configs, seeds 200-223, 2026-12-03) this refit moved the median error from 17.5 % to
# 15.9 % and the 90th percentile from 59 % to 46 %; on the three samples drawn after it was
# chosen (72 configs, seeds 221-223): median 17.4 % to 19.0 %, 90th percentile 55 % to 39 %,
# worst 236 % to 82 %.
ROBUST_SCALE = 0.1
# The weight of a prior coefficient in :func:`robust_log_fit`: a coefficient at twice (or
# 0) its prior costs as much as one cell about 17 % off (sqrt(0.03) in log units), so the
# cells move it wherever they tell it, and where they cannot tell it (few cells, terms that
# move together) it stays near the prior. Chosen on 2328 validate configs (seeds 200-750):
# 0.01-0.3 all gave 8.1-8.3 % of configs more than 35 % off as factors either way (8.9 %
# without a prior), 0.03 7.9 %.
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


def robust_log_fit(A: np.ndarray, start: np.ndarray,
                   prior: np.ndarray | None = None) -> np.ndarray:
    """min sum soft_l1(log(A x)) subject to x >= 0 (rows of ``A``: features / measured
    time, so log(A x) is a cell's log factor error), from ``start`` (nnls's solution), by
    :func:`scipy.optimize.least_squares`; columns scaled to unit norm as in :func:`nnls`.

    ``prior``: a coefficient per column (0: none); each adds the residual
    sqrt(:data:`PRIOR_WEIGHT`) * (x / prior - 1), under the same loss."""
    scaled, norms = _unit_columns(A)
    held = np.zeros(len(norms), dtype=bool) if prior is None else np.asarray(prior) > 0
    target = np.asarray(prior, dtype=float)[held] * norms[held] if held.any() else None

    def residuals(x: np.ndarray) -> np.ndarray:
        cells = np.log(np.maximum(scaled @ x, 1e-9))
        if target is None:
            return cells
        return np.concatenate([cells, np.sqrt(PRIOR_WEIGHT) * (x[held] / target - 1)])

    done = scipy.optimize.least_squares(residuals, start * norms, bounds=(0, np.inf),
                                        loss="soft_l1", f_scale=ROBUST_SCALE)
    return done.x / norms


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
