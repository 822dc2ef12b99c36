"""Residuals of the time model against each config field: where a feature is missing.

A model that follows what each kernel does leaves residuals with no trend in any field;
a trend (say, under-prediction growing as the head width p shrinks) names the work a
feature does not count. :func:`field_residuals` joins the leave-out predictions
(:func:`mhabench.analysis.prediction.validation.leave_out`: each cell predicted by a fit without it)
with the cells' fields; :func:`field_trends` gives each field's rank correlation with the
signed residual, pooled over groups, and the share of groups where it is strong.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mhabench.analysis.prediction.timemodel import GROUP_KEY
from mhabench.analysis.results import head_widths

# Field -> axis label; p and h_kv/h are derived from the config fields.
RESIDUAL_FIELDS = {"n": "queries n", "m": "keys m", "d": "width d", "heads": "heads h",
                   "p": "head width p = d/h", "kv_ratio": "key/value heads h_kv/h",
                   "batch": "batch"}
# |Spearman rho| from which a field's trend counts as strong within a group.
STRONG_TREND = 0.5
MIN_TREND_CELLS = 6  # fewer cells (or fewer than 3 distinct values): no trend is judged


def field_residuals(errors: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """One row per predicted cell: its group, fields (and p, h_kv/h, mode) and the signed
    relative residual ``predicted / measured - 1``."""
    keep = [*GROUP_KEY, "config_id"]
    given = [c for c in ("head_dim",) if c in cells]  # a head width set apart from d
    fields = cells[[*keep, "n", "m", "d", *given, "batch", "kv_heads", "mode"]]
    out = errors.drop(columns=[c for c in ("heads",) if c in errors]).merge(
        cells[[*keep, "heads"]], on=keep).merge(fields, on=keep)
    out["p"] = head_widths(out)
    out["kv_ratio"] = out["kv_heads"] / out["heads"]
    out["residual"] = out["predicted_s"] / out["measured_s"] - 1
    return out


def _rho(x: pd.Series, y: pd.Series) -> float:
    if len(x) < MIN_TREND_CELLS or x.nunique() < 3:
        return float("nan")
    return float(x.rank().corr(y.rank()))


def field_trends(residuals: pd.DataFrame) -> pd.DataFrame:
    """Per field: the pooled rank correlation of the signed residual with the field, the
    groups where it could be judged and those with a strong trend (|rho| >=
    :data:`STRONG_TREND`), and a one-line verdict."""
    rows = []
    for name, label in RESIDUAL_FIELDS.items():
        per_group = [_rho(g[name], g["residual"])
                     for _, g in residuals.groupby(list(GROUP_KEY), sort=True)]
        judged = [r for r in per_group if not np.isnan(r)]
        strong = [r for r in judged if abs(r) >= STRONG_TREND]
        pooled = _rho(residuals[name], residuals["residual"])
        if not judged:
            verdict = "too few values to judge"
        elif len(strong) * 3 <= len(judged):
            verdict = "no trend in most groups"
        else:
            way = "rises" if np.median(strong) > 0 else "falls"
            verdict = (f"residual {way} with {label} in {len(strong)}/{len(judged)} groups "
                       "(a missing or mis-shaped feature)")
        rows.append({"field": label, "pooled rank correlation": pooled,
                     "groups judged": len(judged), "groups with a strong trend": len(strong),
                     "verdict": verdict})
    return pd.DataFrame(rows)
