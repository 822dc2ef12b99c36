"""How well the time model predicts cells it never saw.

Two checks. :func:`leave_out` refits each group without every K-th cell of the grid and
predicts those; the cells come from the same grid the model's terms were chosen on.
``mhabench validate`` times a seeded random sample of configs off the grid
(:mod:`mhabench.analysis.prediction.sampling`) fresh, interleaved, with grid cells beside them that
measure the machine's drift since the grid (:func:`machine_drift`), and
:func:`random_validation` compares: the model could not have been tuned on them. Both
report the plain FLOP model at one rate (the group's median FLOP/s) as the baseline, and
mark every extrapolated prediction."""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mhabench.analysis.prediction.timemodel import (
    GROUP_KEY,
    MIN_CELLS,
    Key,
    TimeModel,
    fit_machine,
    groups,
    timing_cells,
)
from mhabench.analysis.results import config_from_row
from mhabench.core.config import AttentionConfig
from mhabench.core.cost import TRAIN_FACTOR, cost

FOLDS = 5
FORMAT = "mhabench-validation"  # the "kind" of the JSON file validate --save writes
SUMMARY_COLUMNS = ("cells", "median_rel_error", "worst_rel_error",
                   "flop_rate_median_rel_error", "flop_rate_worst_rel_error", "extrapolated")


# ----- leave-out on the grid --------------------------------------------------------------
def leave_out(frame: pd.DataFrame, folds: int = FOLDS) -> pd.DataFrame:
    """K-fold leave-out per group: fit without every K-th cell, predict the left-out ones.

    Also predicts them with the plain FLOP model at one rate (the training cells' median
    FLOP/s), the baseline the calibrated model must beat, and names every field of a
    left-out cell outside the ranges its fold was fitted on. One row per predicted cell.
    """
    folded = {}
    for key, group in timing_cells(frame).groupby(list(GROUP_KEY), sort=True):
        group = group.sort_values(["n", "d", "heads", "config_id"]).reset_index(drop=True)
        k = min(folds, len(group))
        if len(group) - -(-len(group) // k) < MIN_CELLS:
            continue  # too few cells to fit without a fold
        folded[tuple(map(str, key))] = (group, np.arange(len(group)) % k)
    rows = []
    for machine in sorted({key[0] for key in folded}):
        mine = {key: v for key, v in folded.items() if key[0] == machine}
        # Fold i of every group of the machine is left out together, so the machine's
        # K/V cache size is fitted without any of the cells predicted.
        for i in range(max(fold.max() + 1 for _, fold in mine.values())):
            train = {key: g[fold != i] for key, (g, fold) in mine.items()}
            models = fit_machine(train)
            for key, (group, fold) in mine.items():
                rate = flop_rate(train[key])
                for r in group[fold == i].to_dict("records"):
                    config = config_from_row(r)
                    rows.append({**dict(zip(GROUP_KEY, key, strict=True)),
                                 "config_id": r["config_id"], "heads": r["heads"],
                                 "measured_s": r["value"],
                                 "predicted_s": models[key].predict(config),
                                 "flop_rate_s": float(r["flops_model"]) / rate,
                                 "extrapolation": "; ".join(models[key].extrapolation(config))})
    out = pd.DataFrame(rows, columns=[*GROUP_KEY, "config_id", "heads", "measured_s",
                                      "predicted_s", "flop_rate_s", "extrapolation"])
    return _with_errors(out)


def flop_rate(cells: pd.DataFrame) -> float:
    """The plain FLOP model's one rate: the cells' median FLOP/s."""
    return float(np.median(cells["flops_model"].astype(float) / cells["value"]))


def _with_errors(out: pd.DataFrame) -> pd.DataFrame:
    out["rel_error"] = (out["predicted_s"] / out["measured_s"] - 1).abs()
    out["flop_rate_rel_error"] = (out["flop_rate_s"] / out["measured_s"] - 1).abs()
    out["extrapolated"] = out["extrapolation"].astype(str) != ""
    return out


def error_summary(errors: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Median and worst relative error of both models, overall or per group, and how many
    of the predictions were extrapolations."""
    def summary(g: pd.DataFrame) -> pd.Series:
        return pd.Series({"cells": len(g), "median_rel_error": g["rel_error"].median(),
                          "worst_rel_error": g["rel_error"].max(),
                          "flop_rate_median_rel_error": g["flop_rate_rel_error"].median(),
                          "flop_rate_worst_rel_error": g["flop_rate_rel_error"].max(),
                          "extrapolated": int(g["extrapolated"].sum())})
    if errors.empty:
        return pd.DataFrame(columns=[*by, *SUMMARY_COLUMNS])
    if not by:
        return summary(errors).to_frame().T
    return errors.groupby(list(by)).apply(summary, include_groups=False).reset_index()


def random_validation(frame: pd.DataFrame, models: Mapping[Key, TimeModel],
                      configs: Sequence[tuple[Key, AttentionConfig]],
                      measured: Mapping[AttentionConfig, Any],
                      by_group: Mapping[Key, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Compare each config's measurement (``measured[config]``, a
    :class:`mhabench.measure.timing.Measurement`, e.g. from
    :func:`mhabench.measure.interleaved.measure_interleaved`) with the model's prediction
    and the FLOP baseline; one row per measured config (the others are left out).
    ``by_group``: ``groups(frame)`` if already computed."""
    by_group = groups(frame) if by_group is None else by_group
    rows = []
    for key, config in configs:
        if config not in measured:
            continue
        timed, model = measured[config], models[key]
        rows.append({**dict(zip(GROUP_KEY, key, strict=True)), "config_id": config.id,
                     "config": config.to_dict(), "mode": config.mode,
                     "measured_s": timed.median_s, "q25_s": timed.q25_s,
                     "q75_s": timed.q75_s, "repeats": timed.repeats,
                     "predicted_s": model.predict(config),
                     "flop_rate_s": cost(config).flops_model
                     * (TRAIN_FACTOR if config.mode == "train" else 1)
                     / flop_rate(by_group[key]),
                     "extrapolation": "; ".join(model.extrapolation(config))})
    columns = [*GROUP_KEY, "config_id", "config", "mode", "measured_s", "q25_s", "q75_s",
               "repeats", "predicted_s", "flop_rate_s", "extrapolation"]
    out = _with_errors(pd.DataFrame(rows, columns=columns))
    out["signed_error"] = out["predicted_s"] / out["measured_s"] - 1
    return out


# ----- the machine's drift since the grid, from grid cells timed with the sample ----------
def machine_drift(anchors: Sequence[tuple[AttentionConfig, float]],
                  measured: Mapping[AttentionConfig, Any]) -> dict[str, Any]:
    """The median of measured / asv time over the anchors measured (``drift``: 1.2 means
    the machine now runs 1.2x slower than when it timed the grid), and each anchor's."""
    rows = [{"config_id": c.id, "asv_s": asv_s, "measured_s": measured[c].median_s,
             "ratio": measured[c].median_s / asv_s} for c, asv_s in anchors if c in measured]
    if not rows:
        return {"anchors": 0, "drift": None, "rows": rows}
    drift = float(np.median([r["ratio"] for r in rows]))
    # The floor: how far a grid cell re-timed lands from its own grid time once the drift
    # is taken out. A model that reproduced every grid cell exactly would still show this
    # error against fresh timings: the part of the model's error that is the machine's.
    spread = [abs(r["ratio"] / drift - 1) for r in rows]
    return {"anchors": len(rows), "drift": drift, "floor_median": float(np.median(spread)),
            "floor_worst": float(max(spread)), "rows": rows}


def anchored(errors: pd.DataFrame, drift: Mapping[str, Any]) -> dict[str, Any]:
    """Both models' median and worst relative errors (all, inside, extrapolated) with each
    measurement divided by the machine's drift (:func:`machine_drift`'s): the grid's day,
    not today's."""
    if errors.empty:
        return {"cells": 0}
    shifted = _with_errors(errors.assign(measured_s=errors["measured_s"] / drift["drift"]))
    return {"cells": len(errors), "drift": drift["drift"], "anchors": drift["anchors"],
            "floor_median": drift.get("floor_median"), "floor_worst": drift.get("floor_worst"),
            **{part: _part(rows) for part, rows in _parts(shifted).items()}}


def _parts(errors: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {"all": errors, "inside": errors[~errors["extrapolated"]],
            "extrapolated": errors[errors["extrapolated"]]}


def _part(rows: pd.DataFrame) -> dict[str, Any]:
    if rows.empty:
        return {"cells": 0}
    s = error_summary(rows).iloc[0]
    return {k: (int(s[k]) if k in ("cells", "extrapolated") else float(s[k]))
            for k in SUMMARY_COLUMNS}


PART_LABELS = {"all": "all", "inside": "inside the fitted ranges",
               "extrapolated": "extrapolated"}


def part_line(part: Mapping[str, Any], label: str) -> str:
    """One part's figures (all, inside, extrapolated) in words, for the CLI and the report."""
    if not part.get("cells"):
        return f"{label}: none"
    return (f"{label} ({part['cells']} configs): median error "
            f"{100 * part['median_rel_error']:.1f}%, worst {100 * part['worst_rel_error']:.1f}% "
            f"(FLOP model {100 * part['flop_rate_median_rel_error']:.1f}% / "
            f"{100 * part['flop_rate_worst_rel_error']:.1f}%)")


def anchored_line(summary: Mapping[str, Any]) -> str:
    """One sentence on :func:`anchored`'s figures (CLI and report); older files lack them."""
    a = summary.get("anchored") or {}
    if not a.get("cells"):
        return "against the grid's day: no figures (no anchor cells were timed)"
    parts = "; ".join(part_line(a[key], label) for key, label in PART_LABELS.items()
                      if a[key].get("cells"))
    floor = "" if a.get("floor_median") is None else (
        f"; the floor: those grid cells re-timed read within {100 * a['floor_median']:.1f}% "
        f"(median; worst {100 * a['floor_worst']:.1f}%) of their own grid times after the "
        "drift, an error no model of the grid can go below here")
    return (f"against the grid's day (the machine ran x{a['drift']:.2f} the grid's times: "
            f"median of {a.get('anchors', '?')} grid cells timed with the sample; each "
            f"measurement divided by that): {parts}{floor}")


def as_read_line(summary: Mapping[str, Any]) -> str:
    """One sentence on the errors as read (``summary_dict`` of the same timings against a
    model fitted on the grid's cells, neither divided by the moment's slowdown): what the
    speed probes changed (``mhabench.analysis.fast_speed``)."""
    return ("as read (the same timings, and a model fitted on the grid's cells, neither "
            "divided by the moment's slowdown): "
            + "; ".join(part_line(summary[k], label) for k, label in PART_LABELS.items()
                        if summary.get(k, {}).get("cells")))


def common_scale(errors: pd.DataFrame) -> dict[str, Any]:
    """Both models' errors after one scale each: the sample's median of measured / predicted.

    A model fitted on another day (or another host of the same type) meets a machine whose
    speed has moved uniformly, by tens of percent on a shared VM; that moves every raw error
    and favours whichever model happened to err the same way. One scale per model (the
    same single parameter for both) removes it and leaves what a model is for: how the
    time changes from one config to another. The scales themselves say how far today's
    machine is from the fit's. Errors here are factors (``max(p/m, m/p) - 1``)."""
    if errors.empty:
        return {"cells": 0}
    out: dict[str, Any] = {"cells": len(errors)}
    for prefix, column in (("", "predicted_s"), ("flop_rate_", "flop_rate_s")):
        ratio = errors["measured_s"] / errors[column]
        scale = float(ratio.median())
        # A miss as a factor either way (2x over or 2x under both read 100 %): after a
        # scale, under-predictions are as likely as over-predictions, and the plain
        # relative error caps the former at 100 % however far they miss.
        rel = np.exp(np.log(scale / ratio).abs()) - 1
        out[f"{prefix}scale"] = scale
        out[f"{prefix}median_factor_error"] = float(rel.median())
        out[f"{prefix}worst_factor_error"] = float(rel.max())
    return out


def summary_dict(errors: pd.DataFrame, drift: Mapping[str, Any] | None = None
                 ) -> dict[str, Any]:
    """Overall, inside-the-fitted-ranges and extrapolated median/worst errors; the same
    against the grid's day where anchor cells measured the machine's drift
    (:func:`anchored`); and all of them after one common scale per model
    (:func:`common_scale`)."""
    out: dict[str, Any] = {part: _part(rows) for part, rows in _parts(errors).items()}
    if drift and drift.get("drift"):
        out["anchored"] = anchored(errors, drift)
    return {**out, "common_scale": common_scale(errors)}


def common_scale_line(summary: Mapping[str, Any]) -> str:
    """One sentence on :func:`common_scale`'s figures (CLI and report); older files lack
    them."""
    c = summary.get("common_scale") or {}
    if not c.get("cells"):
        return "after one common scale per model: no figures (file written before they were)"
    return (f"after one common scale per model (measured / predicted, median: calibrated "
            f"model x{c['scale']:.2f}, FLOP model x{c['flop_rate_scale']:.2f}), all "
            f"{c['cells']} configs, error as a factor either way: median "
            f"{100 * c['median_factor_error']:.1f}%, worst "
            f"{100 * c['worst_factor_error']:.1f}% (FLOP model "
            f"{100 * c['flop_rate_median_factor_error']:.1f}% / "
            f"{100 * c['flop_rate_worst_factor_error']:.1f}%)")


# ----- the saved file ---------------------------------------------------------------------
def validation_payload(errors: pd.DataFrame, drift: Mapping[str, Any] | None = None,
                       **meta: Any) -> dict[str, Any]:
    """What ``mhabench validate --json/--save`` writes (the report's validation section
    reads it back with :func:`load_validation`); ``drift``: :func:`machine_drift`'s."""
    return {"kind": FORMAT, "version": 1, "host": platform.node(),
            "created": datetime.now(UTC).isoformat(), **meta,
            "summary": summary_dict(errors, drift), "anchors": (drift or {}).get("rows", []),
            "rows": errors.to_dict(orient="records")}


def save_validation(payload: dict[str, Any], path: str | Path) -> Path:
    """Write ``payload`` as JSON to a new file (an existing file is never overwritten)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("x", encoding="utf-8") as fh:  # "x": FileExistsError if it exists
        json.dump(payload, fh, indent=1, default=str)
        fh.write("\n")
    return path


def load_validation(path: str | Path) -> dict[str, Any]:
    """A file written by ``mhabench validate --save``; ValueError names what is wrong."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--validation {str(path)!r} is not readable JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("kind") != FORMAT or "rows" not in data:
        raise ValueError(f"--validation {str(path)!r} is not a file written by "
                         "mhabench validate --save")
    return data
