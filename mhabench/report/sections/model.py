"""Sections about the calibrated time model: the per-head decomposition of each head sweep
(with how well the model fits it), the fitted coefficients and the leave-out check (the
random off-grid validation is :mod:`mhabench.report.sections.validation`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mhabench.analysis.fast_speed import BURSTY_P90, grid_steadiness
from mhabench.analysis.prediction.decomposition import (
    GOOD_R2,
    GOOD_RESIDUAL,
    Decomposition,
    decompose,
    verdict,
)
from mhabench.analysis.prediction.residuals import RESIDUAL_FIELDS, field_residuals, field_trends
from mhabench.analysis.prediction.timemodel import (
    FEATURE_LABELS,
    FEATURES,
    GROUP_KEY,
    MIN_CELLS,
    timing_cells,
)
from mhabench.analysis.prediction.validation import (
    error_summary,
    leave_out,
)
from mhabench.core.kernel_codes import SCORE_TERMS
from mhabench.report.context import (
    Context,
    exercise_sweeps,
    group_key,
    head_sweeps,
    is_chapter,
    shape,
    sweep_id,
)
from mhabench.report.types import Plot, Section, Table

TARGET_MEDIAN_ERROR = 0.15
PERCENT = {"median_rel_error": "median error (%)", "worst_rel_error": "worst error (%)",
           "flop_rate_median_rel_error": "FLOP model median error (%)",
           "flop_rate_worst_rel_error": "FLOP model worst error (%)"}


# ----- per-head decomposition -------------------------------------------------------------
MAX_DECOMPOSITION_PLOTS = 4


def term_labels(term: str) -> dict[str, str]:
    """The model's term labels with the b*h*n*m term named for what the kernel does."""
    return {**FEATURE_LABELS, "map": f"{term} (b*h*n*m)", "spill": f"{term}, beyond cache"}


def _sweep_plot(key: dict, group: pd.DataFrame, dec: Decomposition, term: str
                ) -> tuple[tuple, Plot]:
    """A sweep's model terms stacked against h, with its rank among the plots."""
    x = group["heads"].astype(float).tolist()
    labels = term_labels(term)
    # only the terms this sweep has: a component zero at every h draws nothing
    series = {labels[f]: (x, (1e3 * dec.terms[f]).tolist()) for f in FEATURES
              if dec.terms[f].any()}
    # the chapter's layout first, then kernels that keep the map in tiles
    rank = (key["backend"] != "batched", key["dtype"] != "float32",
            term == SCORE_TERMS[True], key["framework"], key["backend"])
    return rank, Plot(
        f"Model terms against h: {key['machine']} {key['framework']}/"
        f"{key['backend']} {key['dtype']} {key['mode']}, {shape(key)} (R^2 "
        f"{dec.r2:.2f})", "heads h", "time (ms)", series, style="stacked",
        points={"measured": group["time_ms"].tolist()})


def _decompositions(ctx: Context) -> tuple[list[dict], list[dict], list[tuple]]:
    """Each head sweep with a fitted model, split into its terms: (one row per sweep, one
    row per sweep and h, (machine, rank, plot) of the sweeps worth a plot)."""
    rows, residuals, candidates = [], [], []
    sweeps = head_sweeps(ctx.timings)
    exercise = {sweep_id(k) for k, _ in exercise_sweeps(sweeps)}
    for key, group in sweeps:
        model = ctx.models.get(group_key(key))
        if model is None:
            continue
        dec = decompose(model, group)
        term = ctx.score_term(key["machine"], key["framework"], key["backend"], key["device"])
        names = {"machine": key["machine"], "framework": key["framework"],
                 "backend": key["backend"], "dtype": key["dtype"], "mode": key["mode"],
                 "shape": shape(key)}
        good = dec.good_fit
        rows.append({**names, "chapter": is_chapter(key), "Exercise 6.4 sweep": sweep_id(key)
                     in exercise, "slowest/fastest": group["value"].max() / group["value"].min(),
                     "R^2 on sweep": dec.r2,
                     "worst residual (%)": 100 * dec.residuals[np.argmax(np.abs(dec.residuals))],
                     "good fit": good, "b*h*n*m term": term,
                     "trend measured (ms)": 1e3 * dec.trend_measured_s,
                     "trend model (ms)": 1e3 * dec.trend_model_s,
                     "trend unexplained (%)": 100 * dec.unexplained,
                     # shares only where the fit earns them; otherwise n/a, not a number
                     **{f"share {f} (%)": 100 * dec.shares[f] if good else np.nan
                        for f in FEATURES},
                     "map/per-head separable": model.separable,
                     "verdict": verdict(dec, model.separable, term)})
        for h, measured, predicted, residual in zip(dec.heads, dec.measured, dec.predicted,
                                                    dec.residuals, strict=True):
            residuals.append({**names, "h": h, "measured (ms)": 1e3 * measured,
                              "model (ms)": 1e3 * predicted, "residual (%)": 100 * residual})
        if sweep_id(key) in exercise or (not exercise and len(candidates) < 2):
            candidates.append((key["machine"], *_sweep_plot(key, group, dec, term)))
    return rows, residuals, candidates


def _decomposition_summary(table: pd.DataFrame) -> pd.DataFrame:
    """The Exercise 6.4 sweeps' rows (every sweep's where none is one), shares summed."""
    shown = table[table["Exercise 6.4 sweep"]] if table["Exercise 6.4 sweep"].any() else table
    return shown.assign(**{
        "share b*h*n*m (%)": shown["share map (%)"] + shown["share spill (%)"],
        "share per head (%)": shown["share heads (%)"]})[
        ["machine", "framework", "backend", "dtype", "shape", "slowest/fastest",
         "R^2 on sweep", "good fit", "b*h*n*m term", "share b*h*n*m (%)",
         "share per head (%)", "trend unexplained (%)"]]


def _decomposition_method() -> list[str]:
    """What the model's terms are, and when a share is named."""
    return [
        "Time is fitted (per machine/framework/backend/device: non-negative least squares "
        "on relative residuals picks the terms, cache sizes and coefficients) as "
        "FLOPs x s/FLOP (training steps' FLOPs at a rate of their own, and FLOPs and "
        "scores again where n, m, d or p is not a multiple of 16 floats) + scores (b*h*n*m) "
        "x s/score (plus an extra s/score for maps larger than a cache size fitted per "
        "group, and for a decode step's scores, each a dot product with a cache row) + a "
        "decode step's key/value elements read from its cache "
        "(batch*m*2*width, and beyond a cache size, and again where the step copies them "
        "first: a K/V repeat, or XLA's copy of a JAX cache) x s/element + projection "
        "weights read x s/weight (a training step's weight gradients written, again) + the "
        "loop backend's per-head passes over activations "
        "(b*d*(n*h + m*h_kv)) + h x s/head + a constant, and a second one for steps that "
        "project keys/values (all but cross decode) (mhabench.analysis.prediction.features says "
        "what each counts and why). At fixed d the FLOP term does not change with "
        "h, so the h-trend is split between the b*h*n*m term and the fixed per-head cost. "
        f"The b*h*n*m term is the {SCORE_TERMS[True]} where the kernel writes the map "
        f"(explicit ops, math, XLA), and {SCORE_TERMS[False]} where it keeps the map in "
        "tiles (flash, efficient, cuDNN, flex, blockwise). Shares are each term's change "
        "from the smallest to the largest h over the model's total change. Where the "
        "asv run recorded speed probes, each cell is fitted at the machine's fast speed: "
        "divided by the slowdown its probe read (the model predicts the machine in its "
        "fast stretches; mhabench.analysis.fast_speed).",
        f"A share is named only where the model fits the sweep itself: R^2 >= {GOOD_R2:g} on "
        f"the sweep and every h within {100 * GOOD_RESIDUAL:.0f}% of its measurement (one "
        "timing's run-to-run noise on shared machines is often 10-20%). Elsewhere the verdict "
        "says how much of the measured h-trend (t at the largest h minus t at the smallest) "
        "the terms leave unexplained; the residuals table shows the fit at each h."]


def _decomposition_verdicts(table: pd.DataFrame) -> list[str]:
    """One verdict per machine/framework/backend: its Exercise 6.4 sweep's, else its
    steepest sweep's."""
    lines = []
    several = table["machine"].nunique() > 1
    for (machine, fw, be), g in table.groupby(["machine", "framework", "backend"], sort=True):
        chapter = g[g["Exercise 6.4 sweep"]]
        g = chapter if len(chapter) else g  # the exercise's sweep, else the steepest one
        r = g.iloc[int(np.argmax(g["slowest/fastest"].to_numpy()))]
        lines.append(f"{fw}/{be}{f' on {machine}' if several else ''}: {r['verdict']} "
                     f"(sweep ratio {r['slowest/fastest']:.2f}x, {r['shape']}).")
    return lines


def decomposition_section(ctx: Context) -> Section:
    rows, residuals, candidates = _decompositions(ctx)
    if not rows:
        return Section("", "", absent="No head sweep with a fitted time model in the results.")
    table = pd.DataFrame(rows)
    # every machine gets its share of the plots, each its most telling sweeps first
    machines = sorted({m for m, _, _ in candidates})
    share = max(2, MAX_DECOMPOSITION_PLOTS // max(1, len(machines)))
    facets = [p for m in machines for _, _, p in sorted(
        (c for c in candidates if c[0] == m), key=lambda c: c[1])[:share]]
    # one figure: the terms keep one colour across the sweeps, under one legend
    plots = [Plot("Model terms against h, stacked, with each sweep's measured time",
                  "heads h", "time (ms)", {}, style="stacked", facets=facets)] if facets else []
    section = Section("", "", plots=plots, tables=[
        Table("summary", "The Exercise 6.4 sweeps split into the time model's terms (shares "
              "only where the model fits the sweep)", _decomposition_summary(table)),
        Table("decomposition", "Each sweep's h-trend split into the time model's terms "
              "(shares only where the model fits the sweep)", table),
        Table("residuals", "The model against each sweep's measurement at every h",
              pd.DataFrame(residuals), detail=True, rank="residual (%)",
              rank_order="far from 0")])
    section.text.extend(_decomposition_method())
    section.text.extend(_decomposition_verdicts(table))
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
        writes = ctx.writes_map(key[0], key[1], key[2], key[3])
        rows.append({**dict(zip(GROUP_KEY, key, strict=True)), "cells": model.cells,
                     "terms fitted": " + ".join(model.features)
                     + (" (reduced: too few cells for the full model)" if model.reduced
                        else "")
                     + (" (pooled: few cells per term, pulled toward the framework's rates)"
                        if model.pooled else ""),
                     "R^2": model.r2,
                     "in-sample median error (%)": 100 * model.median_rel_error,
                     "FLOP rate (GFLOP/s)": 1e-9 / c["flops"] if c["flops"] > 0 else np.inf,
                     "unaligned FLOP rate (GFLOP/s)":
                     1e-9 / (c["flops"] + c["unaligned_flops"])
                     if c["flops"] + c["unaligned_flops"] > 0 else np.inf,
                     "training FLOP rate (GFLOP/s)": 1e-9 / (c["flops"] + c["train_flops"])
                     if c["flops"] + c["train_flops"] > 0 else np.inf,
                     "b*h*n*m term": SCORE_TERMS[writes],
                     "b*h*n*m (ns/score)": 1e9 * c["map"],
                     "unaligned, again (ns/score)": 1e9 * c["unaligned_map"],
                     "unaligned, per row (ns/row)": 1e9 * c["unaligned_rows"],
                     "decode scores, again (ns/score)": 1e9 * c["decode_scores"],
                     # bytes moved per score only means something where the map is written
                     "map bytes/score at copy bandwidth": c["map"] * bw * 1e9 if writes
                     else np.nan,
                     "beyond cache (ns/score)": 1e9 * c["spill"],
                     "cache size (MiB)": (model.cache_bytes or np.nan) / 2**20,
                     "K/V read (ns/element)": 1e9 * c["kv"],
                     "decode K/V beyond cache (ns/element)": 1e9 * c["kv_spill"],
                     "K/V cache size (MiB)": (model.kv_cache_bytes or np.nan) / 2**20,
                     "decode K/V copied (ns/element)": 1e9 * c["kv_copy"],
                     "per head (us)": 1e6 * c["heads"], "fixed (ms)": 1e3 * c["const"],
                     "fixed, projecting K/V (ms)": 1e3 * c["projects_kv"],
                     "fixed, masked (ms)": 1e3 * c["masked"],
                     "fitted ranges": _ranges(model)})
    for key, cells in sorted((ctx.underdetermined or {}).items()):
        rows.append({**dict(zip(GROUP_KEY, key, strict=True)), "cells": cells,
                     "terms fitted": f"none: under-determined (fewer than {MIN_CELLS} cells)"})
    coef = pd.DataFrame(rows)
    if coef["map bytes/score at copy bandwidth"].isna().all():
        coef = coef.drop(columns="map bytes/score at copy bandwidth")
    return coef


def predicted_plot(title: str, errors: pd.DataFrame) -> Plot:
    """Both models' predictions against the measurements (``measured_s``, ``predicted_s``,
    ``flop_rate_s``), log-log with the diagonal: the leave-out and the random sample."""
    measured = (1e3 * errors["measured_s"]).tolist()
    return Plot(title, "measured (ms)", "predicted (ms)",
                {"calibrated model": (measured, (1e3 * errors["predicted_s"]).tolist()),
                 "FLOP model, one rate": (measured, (1e3 * errors["flop_rate_s"]).tolist())},
                logx=True, logy=True, style="scatter", diagonal=True)


def percent_table(summary: pd.DataFrame) -> pd.DataFrame:
    """An :func:`error_summary` with its errors in percent under :data:`PERCENT`'s names."""
    summary[list(PERCENT)] = 100 * summary[list(PERCENT)].astype(float)
    summary[["cells", "extrapolated"]] = summary[["cells", "extrapolated"]].astype(int)
    return summary.rename(columns=PERCENT)


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
        "kv_heads (or at a mode, cross, masked or causal value never fitted) are marked as "
        "extrapolations, here and in mhabench predict.")
    errors = leave_out(ctx.timings)
    if errors.empty:
        section.text.append("Too few cells per group for a leave-out check (each fold needs "
                            f"{MIN_CELLS} training cells).")
        return section
    overall = error_summary(errors).iloc[0]
    per_machine, per_group = (percent_table(error_summary(errors, by=by)) for by in (
        ["machine"], ["machine", "framework", "backend", "device"]))
    section.tables[:0] = [
        Table("accuracy", "Leave-out relative error (%) per machine: calibrated model and the "
              "plain FLOP model at one rate", per_machine),
        Table("leave-out", "Leave-out relative error (%) per group", per_group)]
    section.tables.append(Table("leave-out-cells", "Every left-out cell: measured, predicted "
                                "and where it lies outside its fold's fitted ranges",
                                errors.drop(columns="extrapolated"), detail=True,
                                rank="rel_error"))
    section.facts["leave_out"] = errors
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
    steady = grid_steadiness(ctx.results.frame)
    if len(steady):
        section.facts["steadiness"] = steady
        section.tables.append(Table("grid-speed", "How slow the machine ran while the grid's "
                                    "newest cells timed (their speed probes against its "
                                    "fast reading)", steady))
        for r in steady.to_dict("records"):
            section.text.append(
                f"The grid's {r['cells']} newest time cells on {r['machine']} read a median "
                f"slowdown of x{r['median slowdown']:.2f} and a 90th percentile of "
                f"x{r['90th percentile']:.2f}"
                + (f": past x{BURSTY_P90:g}, the grid was timed in bursts that the probes "
                   "catch only in part (whole classes of cells 1.3-1.8x slow at a probe "
                   "slowdown near 1 were seen so). Re-time it on a quiet stretch before "
                   "judging the model by it." if r["bursty"] else "."))
    section.plots.append(predicted_plot("Left-out cells: predicted against measured", errors))
    _residual_plots(section, errors, ctx)
    return section


def _residual_plots(section: Section, errors: pd.DataFrame, ctx: Context) -> None:
    """The left-out cells' signed residuals against each field: a trend names work that
    no feature counts (the features were chosen from these plots)."""
    residuals = field_residuals(errors, timing_cells(ctx.timings))
    if residuals.empty:
        return
    labels = residuals["framework"] + "/" + residuals["backend"]
    ylabel = "predicted / measured - 1 (%)"
    facets = [Plot("", label, ylabel,
                   {lab: (g[name].astype(float).tolist(), (100 * g["residual"]).tolist())
                    for lab, g in residuals.groupby(labels, sort=True)},
                   logx=True, style="scatter", small=True)
              for name, label in RESIDUAL_FIELDS.items()]
    section.plots.append(Plot("Left-out residual against each field", "", ylabel, {},
                              style="scatter", facets=facets))
    trends = field_trends(residuals)
    section.tables.append(Table("residual-trends", "Left-out residuals against each field: "
                                "rank correlation and verdict", trends))
    section.text.append("Residuals against each field (left-out cells): " + "; ".join(
        f"{r['field']}: {r['verdict']}" for r in trends.to_dict("records")) + ".")
