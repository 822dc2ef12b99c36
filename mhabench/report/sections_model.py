"""Sections about the calibrated time model: the per-head decomposition of each head sweep
(with how well the model fits it), the fitted coefficients and the leave-out check, and
the random off-grid validation that ``mhabench validate --save`` wrote."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mhabench.analysis.decomposition import GOOD_R2, GOOD_RESIDUAL, decompose, verdict
from mhabench.analysis.timemodel import FEATURE_LABELS, FEATURES, GROUP_KEY, MIN_CELLS
from mhabench.analysis.validation import error_summary, leave_out
from mhabench.report.context import (
    MAX_PLOTS,
    Context,
    group_key,
    head_sweeps,
    is_chapter,
    shape,
)
from mhabench.report.types import Plot, Section, Table

TARGET_MEDIAN_ERROR = 0.15
PERCENT = {"median_rel_error": "median error (%)", "worst_rel_error": "worst error (%)",
           "flop_rate_median_rel_error": "FLOP model median error (%)",
           "flop_rate_worst_rel_error": "FLOP model worst error (%)"}


# ----- per-head decomposition -------------------------------------------------------------
def decomposition_section(ctx: Context) -> Section:
    rows, residuals, plots = [], [], []
    for key, group in head_sweeps(ctx.timings):
        model = ctx.models.get(group_key(key))
        if model is None:
            continue
        dec = decompose(model, group)
        names = {"machine": key["machine"], "framework": key["framework"],
                 "backend": key["backend"], "mode": key["mode"], "shape": shape(key)}
        good = dec.good_fit
        rows.append({**names, "chapter": is_chapter(key),
                     "slowest/fastest": group["value"].max() / group["value"].min(),
                     "R^2 on sweep": dec.r2,
                     "worst residual (%)": 100 * dec.residuals[np.argmax(np.abs(dec.residuals))],
                     "good fit": good,
                     "trend measured (ms)": 1e3 * dec.trend_measured_s,
                     "trend model (ms)": 1e3 * dec.trend_model_s,
                     "trend unexplained (%)": 100 * dec.unexplained,
                     # shares only where the fit earns them; otherwise n/a, not a number
                     **{f"share {f} (%)": 100 * dec.shares[f] if good else np.nan
                        for f in FEATURES},
                     "map/per-head separable": model.separable,
                     "verdict": verdict(dec, model.separable)})
        for h, measured, predicted, residual in zip(dec.heads, dec.measured, dec.predicted,
                                                    dec.residuals, strict=True):
            residuals.append({**names, "h": h, "measured (ms)": 1e3 * measured,
                              "model (ms)": 1e3 * predicted, "residual (%)": 100 * residual})
        if len(plots) < MAX_PLOTS and (is_chapter(key) or len(plots) < 2):
            x = group["heads"].astype(float).tolist()
            series = {FEATURE_LABELS[f]: (x, (1e3 * dec.terms[f]).tolist()) for f in FEATURES}
            plots.append(Plot(f"Model terms against h: {key['machine']} {key['framework']}/"
                              f"{key['backend']} {key['mode']}, {shape(key)} (R^2 "
                              f"{dec.r2:.2f})", "heads h", "time (ms)", series,
                              style="stacked", points={"measured": group["time_ms"].tolist()}))
    if not rows:
        return Section("", "", absent="No head sweep with a fitted time model in the results.")
    table = pd.DataFrame(rows)
    section = Section("", "", plots=plots, tables=[
        Table("decomposition", "Each sweep's h-trend split into the time model's terms "
              "(shares only where the model fits the sweep)", table),
        Table("residuals", "The model against each sweep's measurement at every h",
              pd.DataFrame(residuals))])
    section.text.append(
        "Time is fitted (non-negative least squares, per machine/framework/backend/device) as "
        "FLOPs x s/FLOP + map elements (batch*h*n*m) x s/element (plus an extra s/element "
        "for maps larger than a cache size fitted per group) + key/value elements read "
        "(batch*m*2*width) x s/element + h x s/head + a constant. At "
        "fixed d the FLOP term does not change with h, so the h-trend is split between the "
        "attention-map traffic and the fixed per-head cost. Shares are each term's change from "
        "the smallest to the largest h over the model's total change.")
    section.text.append(
        f"A share is named only where the model fits the sweep itself: R^2 >= {GOOD_R2:g} on "
        f"the sweep and every h within {100 * GOOD_RESIDUAL:.0f}% of its measurement (one "
        "timing's run-to-run noise on shared machines is often 10-20%). Elsewhere the verdict "
        "says how much of the measured h-trend (t at the largest h minus t at the smallest) "
        "the terms leave unexplained; the residuals table shows the fit at each h.")
    for (fw, be), g in table.groupby(["framework", "backend"], sort=True):
        chapter = g[g["chapter"]]
        g = chapter if len(chapter) else g  # the chapter's sweep, else the steepest one
        r = g.iloc[int(np.argmax(g["slowest/fastest"].to_numpy()))]
        section.text.append(f"{fw}/{be}: {r['verdict']} (sweep ratio "
                            f"{r['slowest/fastest']:.2f}x, {r['shape']}).")
    return section


# ----- calibrated time model --------------------------------------------------------------
def _ranges(model: object) -> str:
    return ", ".join(f"{k} {lo}" + (f"-{hi}" if hi != lo else "")
                     for k, (lo, hi) in getattr(model, "ranges", {}).items())


def _coefficients(ctx: Context) -> pd.DataFrame:
    cal = ctx.calibration.set_index(["machine", "framework", "device", "dtype"])
    rows = []
    for key, model in sorted(ctx.models.items()):
        c = model.coef
        where = (key[0], key[1], key[3], key[4])
        bw = float(cal.loc[where, "bandwidth_gbs"]) if where in cal.index else np.nan
        rows.append({**dict(zip(GROUP_KEY, key, strict=True)), "cells": model.cells,
                     "terms fitted": " + ".join(model.features)
                     + (" (reduced: too few cells for the full model)" if model.reduced
                        else ""),
                     "R^2": model.r2,
                     "in-sample median error (%)": 100 * model.median_rel_error,
                     "FLOP rate (GFLOP/s)": 1e-9 / c["flops"] if c["flops"] > 0 else np.inf,
                     "map (ns/element)": 1e9 * c["map"],
                     "map bytes/element at copy bandwidth": c["map"] * bw * 1e9,
                     "beyond cache (ns/element)": 1e9 * c["spill"],
                     "cache size (MiB)": (model.cache_bytes or np.nan) / 2**20,
                     "K/V read (ns/element)": 1e9 * c["kv"],
                     "decode K/V beyond cache (ns/element)": 1e9 * c["kv_spill"],
                     "K/V cache size (MiB)": (model.kv_cache_bytes or np.nan) / 2**20,
                     "per head (us)": 1e6 * c["heads"], "fixed (ms)": 1e3 * c["const"],
                     "fitted ranges": _ranges(model)})
    for key, cells in sorted((ctx.underdetermined or {}).items()):
        rows.append({**dict(zip(GROUP_KEY, key, strict=True)), "cells": cells,
                     "terms fitted": f"none: under-determined (fewer than {MIN_CELLS} cells)"})
    coef = pd.DataFrame(rows)
    if coef["map bytes/element at copy bandwidth"].isna().all():
        coef = coef.drop(columns="map bytes/element at copy bandwidth")
    return coef


def timemodel_section(ctx: Context) -> Section:
    if not ctx.models:
        return Section("", "", absent="Too few timed cells to fit a time model "
                                      f"({MIN_CELLS} per group).")
    section = Section("", "", tables=[Table("coefficients", "Fitted coefficients per group "
                                            "(and groups too small to fit)",
                                            _coefficients(ctx))])
    section.text.append(
        "Each group gets the richest model with fewer coefficients (non-zero terms) than it "
        f"has cells, down to FLOPs + a constant; a group with fewer than {MIN_CELLS} cells "
        "is not fitted. Predictions outside the fitted ranges of batch, n, m, d, heads and "
        "kv_heads (or at a mode, cross or masked value never fitted) are marked as "
        "extrapolations, here and in mhabench predict.")
    errors = leave_out(ctx.timings)
    if errors.empty:
        section.text.append("Too few cells per group for a leave-out check (each fold needs "
                            f"{MIN_CELLS} training cells).")
        return section
    overall = error_summary(errors).iloc[0]
    per_group = error_summary(errors, by=["framework", "backend", "device"])
    per_group[list(PERCENT)] = 100 * per_group[list(PERCENT)].astype(float)
    per_group[["cells", "extrapolated"]] = per_group[["cells", "extrapolated"]].astype(int)
    section.tables.append(Table("leave-out", "Leave-out relative error (%) per group: "
                                "calibrated model and the plain FLOP model at one rate",
                                per_group.rename(columns=PERCENT)))
    section.tables.append(Table("leave-out-cells", "Every left-out cell: measured, predicted "
                                "and where it lies outside its fold's fitted ranges",
                                errors.drop(columns="extrapolated")))
    met = "meets" if overall["median_rel_error"] <= TARGET_MEDIAN_ERROR else "misses"
    inside = errors[~errors["extrapolated"]]
    section.text.append(
        f"Leave-out validation ({int(overall['cells'])} cells, each predicted by a fit "
        "without it: every 5th cell of a group left out in turn): calibrated model median "
        f"relative error {100 * overall['median_rel_error']:.1f}%, worst "
        f"{100 * overall['worst_rel_error']:.1f}% ({met} the {100 * TARGET_MEDIAN_ERROR:.0f}% "
        f"target); the plain FLOP model at one fitted rate: median "
        f"{100 * overall['flop_rate_median_rel_error']:.1f}%, worst "
        f"{100 * overall['flop_rate_worst_rel_error']:.1f}%. "
        f"{int(overall['extrapolated'])} of the predictions were extrapolations"
        + (f"; inside the fitted ranges the median error is "
           f"{100 * inside['rel_error'].median():.1f}%." if len(inside) else ".")
        + " These cells come from the grid the model's terms were chosen on; the random "
        "validation section tests configs off it.")
    section.plots.append(Plot(
        "Left-out cells: predicted against measured", "measured (ms)", "predicted (ms)",
        {"calibrated model": ((1e3 * errors["measured_s"]).tolist(),
                              (1e3 * errors["predicted_s"]).tolist()),
         "FLOP model, one rate": ((1e3 * errors["measured_s"]).tolist(),
                                  (1e3 * errors["flop_rate_s"]).tolist())},
        logx=True, logy=True, style="scatter", diagonal=True))
    return section


# ----- random validation off the grid -----------------------------------------------------
def validation_section(ctx: Context) -> Section:
    data = ctx.validation
    if data is None:
        return Section("", "", absent="No random validation given: run mhabench validate "
                                      "--results DIR --save FILE.json on the results' machine "
                                      "and pass --validation FILE.json.")
    rows = pd.DataFrame(data["rows"])
    if rows.empty:
        return Section("", "", absent="The validation file holds no timed configs.")
    s = data["summary"]
    table = pd.DataFrame({
        "config": rows["config_id"], "measured (ms)": 1e3 * rows["measured_s"],
        "predicted (ms)": 1e3 * rows["predicted_s"], "error (%)": 100 * rows["signed_error"],
        "FLOP model (ms)": 1e3 * rows["flop_rate_s"],
        "FLOP model error (%)": 100 * (rows["flop_rate_s"] / rows["measured_s"] - 1),
        "extrapolation": rows["extrapolation"].fillna("")})
    section = Section("", "", tables=[Table("random-configs", "Random configs off the grid, "
                                            "timed fresh: measured against predicted", table)])

    def line(part: dict, what: str) -> str:
        if not part.get("cells"):
            return f"{what}: none"
        return (f"{what} ({part['cells']}): median {100 * part['median_rel_error']:.1f}%, "
                f"worst {100 * part['worst_rel_error']:.1f}% (FLOP model "
                f"{100 * part['flop_rate_median_rel_error']:.1f}% / "
                f"{100 * part['flop_rate_worst_rel_error']:.1f}%)")
    section.text.append(
        f"{len(rows)} configs drawn at random (seed {data.get('seed')}) from a space wider "
        "than the benchmark grid (odd widths, head counts off the powers of two, n != m, GQA "
        "ratios, masking, each size from half the smallest to twice the largest fitted), "
        f"timed fresh on host {data.get('host')!r} against the models of machine "
        f"{data.get('machine')!r} ({data.get('created', '')[:19]}): the model could not have "
        "been tuned on them. Relative error, calibrated model: "
        + "; ".join((line(s["all"], "all"), line(s["inside"], "inside the fitted ranges"),
                     line(s["extrapolated"], "extrapolated"))) + ".")
    section.plots.append(Plot(
        "Random configs: predicted against measured", "measured (ms)", "predicted (ms)",
        {"calibrated model": ((1e3 * rows["measured_s"]).tolist(),
                              (1e3 * rows["predicted_s"]).tolist()),
         "FLOP model, one rate": ((1e3 * rows["measured_s"]).tolist(),
                                  (1e3 * rows["flop_rate_s"]).tolist())},
        logx=True, logy=True, style="scatter", diagonal=True))
    return section
