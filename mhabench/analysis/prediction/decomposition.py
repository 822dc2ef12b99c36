"""Split a head sweep's measured times into the time model's terms, and say what the split
can and cannot explain.

A share of the h-trend is named only when the model fits the sweep itself well: R^2 of
at least :data:`GOOD_R2` on the sweep *and* every head count's residual within
:data:`GOOD_RESIDUAL` of its measurement (the run-to-run noise of one timing on shared
machines is often 10-20 %). Otherwise the verdict says how much of the measured trend the
terms leave unexplained instead of attributing it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from mhabench.analysis.prediction.solvers import r_squared
from mhabench.analysis.prediction.timemodel import FEATURES, TimeModel
from mhabench.analysis.results import config_from_row

GOOD_R2 = 0.9
GOOD_RESIDUAL = 0.2


@dataclass(frozen=True)
class Decomposition:
    """One head sweep split into the model's terms (seconds), per head count."""

    heads: tuple[int, ...]
    terms: pd.DataFrame  # index: h; columns: FEATURES
    measured: np.ndarray
    predicted: np.ndarray
    r2: float

    @property
    def residuals(self) -> np.ndarray:
        """predicted / measured - 1 at each h."""
        return self.predicted / self.measured - 1

    @property
    def good_fit(self) -> bool:
        return bool(self.r2 >= GOOD_R2 and np.abs(self.residuals).max() <= GOOD_RESIDUAL)

    @property
    def trend_measured_s(self) -> float:
        return float(self.measured[-1] - self.measured[0])

    @property
    def trend_model_s(self) -> float:
        return float(self.predicted[-1] - self.predicted[0])

    @property
    def shares(self) -> dict[str, float]:
        """Each term's change from the smallest to the largest h over the model's total
        change (FLOPs do not change with h at fixed d, so their share is ~0)."""
        change = self.terms.iloc[-1] - self.terms.iloc[0]
        total = float(change.sum())
        return {f: (float(change[f]) / total if total > 0 else float("nan")) for f in FEATURES}

    @property
    def unexplained(self) -> float:
        """The part of the measured h-trend the model's terms do not reproduce (negative
        when the model's trend overshoots); NaN when the measured time does not grow."""
        if self.trend_measured_s <= 0:
            return float("nan")
        return 1.0 - self.trend_model_s / self.trend_measured_s


def decompose(model: TimeModel, sweep: pd.DataFrame) -> Decomposition:
    """Split a head sweep (cells of one group that differ only in h) into model terms."""
    sweep = sweep.sort_values("heads")
    configs = [config_from_row(r) for r in sweep.to_dict("records")]
    heads = tuple(int(h) for h in sweep["heads"])
    terms = pd.DataFrame([model.terms(c) for c in configs], index=list(heads))
    measured = sweep["value"].to_numpy(dtype=float)
    predicted = terms.sum(axis=1).to_numpy()
    return Decomposition(heads, terms, measured, predicted, r_squared(measured, predicted))


def verdict(dec: Decomposition, separable: bool,
            map_term: str = "map written and read") -> str:
    """One sentence: which cost explains the h-trend, or how much of it is unexplained.
    ``map_term`` names the b*h*n*m term for the sweep's kernel (traffic to a map it
    writes, or per-score work where the map stays in tiles: core.kernel_codes.SCORE_TERMS)."""
    worst = int(np.argmax(np.abs(dec.residuals)))
    fit = (f"R^2 {dec.r2:.2f} on the sweep, worst residual {100 * dec.residuals[worst]:+.0f}% "
           f"at h={dec.heads[worst]}")
    if dec.trend_measured_s <= 0:
        return f"the measured time does not grow with h: no trend to explain ({fit})"
    if not dec.good_fit:
        gap = (f"leave {100 * dec.unexplained:.0f}% of the measured h-trend unexplained"
               if dec.unexplained >= 0 else
               f"overshoot the measured h-trend by {-100 * dec.unexplained:.0f}%")
        return (f"the model does not fit this sweep ({fit}; a share is named only at R^2 >= "
                f"{GOOD_R2:g} with every residual within {100 * GOOD_RESIDUAL:.0f}%): its "
                f"terms give {1e3 * dec.predicted[-1]:.3g} ms at h={dec.heads[-1]} against "
                f"{1e3 * dec.measured[-1]:.3g} ms measured, and {gap}")
    shares = dec.shares
    if not np.isfinite(list(shares.values())).all():
        return f"the model's time does not grow with h: no trend to explain ({fit})"
    # The b*h*n*m term and its beyond-cache part are one cost.
    growing = {"map": shares["map"] + shares["spill"], "heads": shares["heads"]}
    if not separable:
        both = 100 * sum(growing.values())
        return (f"the {map_term} and the per-head cost together explain {both:.0f}% of the "
                f"trend (not separable: every cell fitted has the same batch*n*m; {fit})")
    lead = max(growing, key=growing.get)
    other = "heads" if lead == "map" else "map"
    words = {"map": f"the {map_term} over b*h*n*m scores",
             "heads": "the fixed per-head cost (dispatch/launch)"}
    short = {"map": f"the {map_term.split(' (')[0]}", "heads": "the fixed per-head cost"}
    return (f"{words[lead]} explains {100 * growing[lead]:.0f}% of the h-trend, "
            f"{short[other]} {100 * growing[other]:.0f}% ({fit})")
