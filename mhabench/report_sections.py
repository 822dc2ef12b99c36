"""The report's sections computed from a results frame: tables, plots and findings.

Each builder takes the shared :class:`Context` and returns a
:class:`mhabench.report.Section` (ids and titles are filled in by the caller). A section
whose data is absent returns ``Section(absent=...)`` with one line saying what is missing.
Times in tables are milliseconds; every column name carries its unit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mhabench.cost import TRAIN_FACTOR, decoder_step_flops
from mhabench.report import Plot, Section, Table
from mhabench.results import Results, calibration_table
from mhabench.timemodel import (
    FEATURE_LABELS,
    FEATURES,
    GROUP_KEY,
    TimeModel,
    decompose,
    error_summary,
    leave_out,
    timing_cells,
)

# Everything that names a head sweep except h (MHA: kv_heads follows h).
SWEEP_KEY = ("machine", "framework", "backend", "device", "dtype", "mode", "batch", "n", "m",
             "d", "cross", "masked", "dropout")
CONFIG_KEY = (*SWEEP_KEY, "heads", "kv_heads")
TARGET_MEDIAN_ERROR = 0.15
MAX_PLOTS = 6


@dataclass
class Context:
    results: Results
    timings: pd.DataFrame  # newest commit per machine, one row per timed config
    calibration: pd.DataFrame  # machine, framework, device, peak_gflops, bandwidth_gbs
    models: dict[tuple[str, ...], TimeModel]
    traces: pd.DataFrame | None
    threshold: float

    @classmethod
    def from_results(cls, results: Results, models: dict[tuple[str, ...], TimeModel],
                     traces: pd.DataFrame | None, threshold: float) -> Context:
        timings = timing_cells(results.frame).copy()
        timings["time_ms"] = timings["value"] * 1e3
        return cls(results, timings, calibration_table(results.frame), models, traces,
                   threshold)


def _shape(row: Any) -> str:
    """A compact name for a config's shape: b8 n512 m512 d256 (+ cross/masked)."""
    text = f"b{row['batch']} n{row['n']} m{row['m']} d{row['d']}"
    return text + (" cross" if row["cross"] else "") + (" masked" if row["masked"] else "")


def head_sweeps(timings: pd.DataFrame) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """MHA head sweeps: cells that differ only in h, at least two head counts."""
    mha = timings[timings["kv_heads"] == timings["heads"]]
    out = []
    for key, group in mha.groupby(list(SWEEP_KEY), sort=True, dropna=False):
        if group["heads"].nunique() >= 2:
            out.append((dict(zip(SWEEP_KEY, key, strict=True)), group.sort_values("heads")))
    return out


def _is_chapter(key: dict[str, Any]) -> bool:
    return (key["batch"], key["n"], key["d"], key["mode"]) == (8, 512, 256, "forward")


# ----- machine and calibration ------------------------------------------------------------
def machine_section(ctx: Context) -> Section:
    frame = ctx.results.frame
    rows = []
    for name in ctx.results.machine_names:
        info = ctx.results.machines.get(name, {})
        mine = frame[frame["machine"] == name]
        rows.append({"machine": name, "cpu": info.get("cpu", ""),
                     "cores": info.get("num_cpu", ""), "ram": info.get("ram", ""),
                     "os": info.get("os", ""), "commits": mine["commit"].nunique(),
                     "environments": ", ".join(sorted(mine["env_name"].dropna().unique())),
                     "newest result": str(mine["date"].max()) if len(mine) else ""})
    section = Section("", "", tables=[Table("machines", "Machines in the results",
                                            pd.DataFrame(rows))])
    cal = ctx.calibration
    if cal.empty:
        section.text.append("No calibration benchmark results: the matmul peak and memory "
                            "bandwidth below are unknown, so fractions of peak are left out.")
    else:
        section.text.append(
            "The calibration benchmarks give each machine's dense matmul rate (the peak the "
            "attention FLOPs are compared with) and, where measured, its memory bandwidth.")
        section.tables.append(Table("calibration", "Calibration per machine, framework, "
                                    "device and dtype", cal.rename(columns={
                                        "peak_gflops": "matmul peak (GFLOP/s)",
                                        "bandwidth_gbs": "copy bandwidth (GB/s)"})))
    if ctx.results.warnings:
        section.text.append(f"{len(ctx.results.warnings)} loading warning(s), listed at the "
                            "end of the page.")
    return section


# ----- Exercise 6.4 -----------------------------------------------------------------------
def exercise_section(ctx: Context) -> Section:
    sweeps = head_sweeps(ctx.timings)
    if not sweeps:
        return Section("", "", absent="No head sweep (one config at several h) in the results.")
    summary, detail = [], []
    for key, group in sweeps:
        best = group["value"].min()
        slow = group.loc[group["value"].idxmax()]
        fast = group.loc[group["value"].idxmin()]
        summary.append({"machine": key["machine"], "framework": key["framework"],
                        "backend": key["backend"], "device": key["device"],
                        "mode": key["mode"], "shape": _shape(key),
                        "h range": f"{group['heads'].min()}-{group['heads'].max()}",
                        "fastest h": int(fast["heads"]), "fastest (ms)": fast["time_ms"],
                        "slowest h": int(slow["heads"]), "slowest (ms)": slow["time_ms"],
                        "slowest/fastest": slow["value"] / fast["value"]})
        for r in group.to_dict("records"):
            detail.append({"machine": key["machine"], "framework": key["framework"],
                           "backend": key["backend"], "mode": key["mode"],
                           "shape": _shape(key), "h": r["heads"], "p = d/h": r["d"] // r["heads"],
                           "time (ms)": r["time_ms"], "t(h)/t(best h)": r["value"] / best})
    summary = pd.DataFrame(summary)
    section = Section("", "", tables=[
        Table("ratios", "Slowest over fastest head count per sweep", summary),
        Table("sweeps", "Time per head count, relative to the sweep's best h",
              pd.DataFrame(detail))])
    chapter = summary[(summary["shape"] == "b8 n512 m512 d256") & (summary["mode"] == "forward")]
    shown = chapter if len(chapter) else summary
    section.text.append(
        "Exercise 6.4 asks whether h is free at fixed d. Slowest/fastest ratio per framework "
        "and backend" + (" (the chapter's d=256, n=512, batch 8)" if len(chapter) else "")
        + ": " + "; ".join(f"{r['framework']}/{r['backend']} {r['slowest/fastest']:.2f}x "
                           f"(h={r['fastest h']} fastest, h={r['slowest h']} slowest)"
                           for r in shown.to_dict("records")) + ".")
    section.plots = _sweep_plots(sweeps, "time (ms)", lambda g: g["time_ms"].tolist(),
                                 "Time per forward pass against h")
    return section


def _sweep_plots(sweeps: list[tuple[dict[str, Any], pd.DataFrame]], ylabel: str,
                 values: Callable[[pd.DataFrame], list[float]], title: str) -> list[Plot]:
    """One log-log plot per sweep shape, one line per framework/backend."""
    panels: dict[tuple, Plot] = {}
    for key, group in sweeps:
        panel = (key["machine"], key["device"], key["dtype"], key["mode"], _shape(key))
        if panel not in panels:
            if len(panels) >= MAX_PLOTS:
                continue
            panels[panel] = Plot(f"{title}: {key['machine']} {key['device']} {key['dtype']} "
                                 f"{key['mode']}, {_shape(key)}", "heads h", ylabel, {},
                                 logx=True, logy=True)
        panels[panel].series[f"{key['framework']}/{key['backend']}"] = (
            group["heads"].astype(float).tolist(), values(group))
    return list(panels.values())


# ----- measured vs model ------------------------------------------------------------------
def _peaks(ctx: Context, frame: pd.DataFrame) -> pd.Series:
    if ctx.calibration.empty:
        return pd.Series(np.nan, index=frame.index)
    peaks = frame.merge(ctx.calibration, how="left",
                        on=["machine", "framework", "device", "dtype"])
    return pd.Series(peaks["peak_gflops"].to_numpy(dtype=float), index=frame.index)


def model_section(ctx: Context) -> Section:
    t = ctx.timings
    if t.empty:
        return Section("", "", absent="No timed attention configs in the results.")
    flops = t["flops_model"].astype(float)
    achieved = flops / t["value"] / 1e9
    peak = _peaks(ctx, t)
    table = pd.DataFrame({
        "machine": t["machine"], "config": t["config_id"], "time (ms)": t["time_ms"],
        "model (GFLOP)": flops / 1e9, "achieved (GFLOP/s)": achieved,
        "% of matmul peak": 100 * achieved / peak,
        "measured/predicted at peak": t["value"] / (flops / (peak * 1e9))})
    section = Section("", "", tables=[Table("cells", "Each timed cell against the FLOP model "
                                            "(flops_model = 8nd^2 + 4n^2 d for self-attention MHA)",
                                            table.reset_index(drop=True))])
    by = table.assign(framework=t["framework"], backend=t["backend"]).groupby(
        ["framework", "backend"])
    summary = by.agg(**{"cells": ("config", "size"),
                        "median GFLOP/s": ("achieved (GFLOP/s)", "median"),
                        "median % of peak": ("% of matmul peak", "median"),
                        "worst measured/predicted": ("measured/predicted at peak", "max")})
    section.tables.insert(0, Table("summary", "Achieved rate per framework and backend",
                                   summary.reset_index()))
    if peak.notna().any():
        section.text.append(
            "The plain FLOP model predicts flops_model / matmul peak, so measured/predicted is "
            "the inverse of the fraction of peak reached. Median fraction of the matmul peak: "
            + "; ".join(f"{fw}/{be} {r['median % of peak']:.0f}%" for (fw, be), r
                        in summary.iterrows()) + ".")
    else:
        section.text.append("No calibrated matmul peak, so only achieved GFLOP/s is shown.")
    pts: dict[str, tuple[list[float], list[float]]] = {}
    for (fw, be), g in t.groupby(["framework", "backend"]):
        p = _peaks(ctx, g)
        if p.notna().any():
            pts[f"{fw}/{be}"] = ((g["flops_model"].astype(float) / (p * 1e9) * 1e3).tolist(),
                                 g["time_ms"].tolist())
    if pts:
        section.plots.append(Plot("Measured time against the FLOP model at the matmul peak",
                                  "FLOP model at peak (ms)", "measured (ms)", pts, logx=True,
                                  logy=True, style="scatter", diagonal=True))
    return section


# ----- per-head decomposition -------------------------------------------------------------
def _group_key(key: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(key[k]) for k in GROUP_KEY)


def decomposition_section(ctx: Context) -> Section:
    rows, plots = [], []
    for key, group in head_sweeps(ctx.timings):
        model = ctx.models.get(_group_key(key))
        if model is None:
            continue
        dec = decompose(model, group)
        verdict = _verdict(dec["shares"], model.separable)
        rows.append({"machine": key["machine"], "framework": key["framework"],
                     "backend": key["backend"], "mode": key["mode"], "shape": _shape(key),
                     "slowest/fastest": group["value"].max() / group["value"].min(),
                     "R^2 on sweep": dec["r2"],
                     "trend measured (ms)": 1e3 * dec["trend_measured_s"],
                     "trend model (ms)": 1e3 * dec["trend_model_s"],
                     **{f"share {f} (%)": 100 * dec["shares"][f] for f in FEATURES},
                     "map/per-head separable": model.separable, "verdict": verdict})
        if len(plots) < MAX_PLOTS and (_is_chapter(key) or len(plots) < 2):
            x = group["heads"].astype(float).tolist()
            series = {FEATURE_LABELS[f]: (x, (1e3 * dec["terms"][f]).tolist()) for f in FEATURES}
            plots.append(Plot(f"Model terms against h: {key['machine']} {key['framework']}/"
                              f"{key['backend']} {key['mode']}, {_shape(key)}", "heads h",
                              "time (ms)", series, style="stacked",
                              points={"measured": group["time_ms"].tolist()}))
    if not rows:
        return Section("", "", absent="No head sweep with a fitted time model in the results.")
    table = pd.DataFrame(rows)
    section = Section("", "", tables=[Table("decomposition", "Each sweep's h-trend split into "
                                            "the time model's terms", table)], plots=plots)
    section.text.append(
        "Time is fitted (non-negative least squares, per machine/framework/backend/device) as "
        "FLOPs x s/FLOP + map elements (batch*h*n*m) x s/element (plus an extra s/element "
        "for maps larger than a cache size fitted per group) + key/value elements read "
        "(batch*m*2*width) x s/element + h x s/head + a constant. At "
        "fixed d the FLOP term does not change with h, so the h-trend is split between the "
        "attention-map traffic and the fixed per-head cost. Shares are each term's change from "
        "the smallest to the largest h over the model's total change.")
    for (fw, be), g in table.groupby(["framework", "backend"], sort=True):
        chapter = g[(g["shape"] == "b8 n512 m512 d256") & (g["mode"] == "forward")]
        g = chapter if len(chapter) else g  # the chapter's sweep, else the steepest one
        r = g.iloc[int(np.argmax(g["slowest/fastest"].to_numpy()))]
        section.text.append(f"{fw}/{be}: {r['verdict']} (sweep ratio "
                            f"{r['slowest/fastest']:.2f}x, {r['shape']}, "
                            f"R^2 {r['R^2 on sweep']:.2f}).")
    return section


def _verdict(shares: dict[str, float], separable: bool) -> str:
    if not np.isfinite(list(shares.values())).all():
        return "the model's time does not grow with h: no trend to explain"
    # The map term and its beyond-cache part are one cost: traffic over the map.
    growing = {"map": shares["map"] + shares["spill"], "heads": shares["heads"]}
    if not separable:
        both = 100 * sum(growing.values())
        return (f"map traffic and per-head cost together explain {both:.0f}% of the trend "
                "(not separable: every cell fitted has the same batch*n*m)")
    lead = max(growing, key=growing.get)
    other = "heads" if lead == "map" else "map"
    words = {"map": "attention-map traffic (batch*h*n*m elements)",
             "heads": "the fixed per-head cost (dispatch/launch)"}
    return (f"{words[lead]} explains {100 * growing[lead]:.0f}% of the h-trend, "
            f"{words[other].split(' (')[0]} {100 * growing[other]:.0f}%")


# ----- calibrated time model --------------------------------------------------------------
def timemodel_section(ctx: Context) -> Section:
    if not ctx.models:
        return Section("", "", absent="Too few timed cells to fit a time model (2 per group).")
    cal = ctx.calibration.set_index(["machine", "framework", "device", "dtype"])
    rows = []
    for key, model in sorted(ctx.models.items()):
        c = model.coef
        where = (key[0], key[1], key[3], key[4])
        bw = float(cal.loc[where, "bandwidth_gbs"]) if where in cal.index else np.nan
        rows.append({**dict(zip(GROUP_KEY, key, strict=True)), "cells": model.cells,
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
                     "per head (us)": 1e6 * c["heads"], "fixed (ms)": 1e3 * c["const"]})
    coef = pd.DataFrame(rows)
    if coef["map bytes/element at copy bandwidth"].isna().all():
        coef = coef.drop(columns="map bytes/element at copy bandwidth")
    section = Section("", "", tables=[Table("coefficients", "Fitted coefficients per group",
                                            coef)])
    errors = leave_out(ctx.timings)
    if errors.empty:
        section.text.append("Too few cells per group for a leave-out check (each fold needs "
                            f"{len(FEATURES)} training cells).")
        return section
    overall = error_summary(errors).iloc[0]
    per_group = error_summary(errors, by=["framework", "backend", "device"])
    pct = ["median_rel_error", "worst_rel_error", "flop_rate_median_rel_error",
           "flop_rate_worst_rel_error"]
    per_group[pct] = 100 * per_group[pct].astype(float)
    per_group["cells"] = per_group["cells"].astype(int)
    per_group = per_group.rename(columns={
        "median_rel_error": "median error (%)", "worst_rel_error": "worst error (%)",
        "flop_rate_median_rel_error": "FLOP model median error (%)",
        "flop_rate_worst_rel_error": "FLOP model worst error (%)"})
    section.tables.append(Table("leave-out", "Leave-out relative error (%) per group: "
                                "calibrated model and the plain FLOP model at one rate",
                                per_group))
    met = "meets" if overall["median_rel_error"] <= TARGET_MEDIAN_ERROR else "misses"
    section.text.append(
        f"Leave-out validation ({int(overall['cells'])} cells, each predicted by a fit "
        "without it: every 5th cell of a group left out in turn): calibrated model median "
        f"relative error {100 * overall['median_rel_error']:.1f}%, worst "
        f"{100 * overall['worst_rel_error']:.1f}% ({met} the {100 * TARGET_MEDIAN_ERROR:.0f}% "
        f"target); the plain FLOP model at one fitted rate: median "
        f"{100 * overall['flop_rate_median_rel_error']:.1f}%, worst "
        f"{100 * overall['flop_rate_worst_rel_error']:.1f}%.")
    section.plots.append(Plot(
        "Left-out cells: predicted against measured", "measured (ms)", "predicted (ms)",
        {"calibrated model": ((1e3 * errors["measured_s"]).tolist(),
                              (1e3 * errors["predicted_s"]).tolist()),
         "FLOP model, one rate": ((1e3 * errors["measured_s"]).tolist(),
                                  (1e3 * errors["flop_rate_s"]).tolist())},
        logx=True, logy=True, style="scatter", diagonal=True))
    return section


# ----- scaling in n and d -----------------------------------------------------------------
def _exponent_rows(t: pd.DataFrame, axis: str, others: tuple[str, ...]) -> list[dict]:
    rows = []
    for key, g in t.groupby(list(others), sort=True, dropna=False):
        if g[axis].nunique() < 2:
            continue
        x, y = np.log(g[axis].astype(float)), np.log(g["value"].astype(float))
        slope, _ = np.polyfit(x, y, 1)
        fx, fy = np.log(g[axis].astype(float)), np.log(g["flops_model"].astype(float))
        rows.append({**dict(zip(others, key, strict=True)), "axis": axis,
                     "values": ", ".join(map(str, sorted(g[axis].unique()))),
                     "measured exponent": slope,
                     "FLOP model exponent": np.polyfit(fx, fy, 1)[0], "_group": g})
    return rows


def scaling_section(ctx: Context) -> Section:
    t = ctx.timings[~ctx.timings["cross"].astype(bool)]
    base = ("machine", "framework", "backend", "device", "dtype", "mode", "batch", "heads",
            "kv_heads", "masked", "dropout")
    rows = _exponent_rows(t, "n", (*base, "d")) + _exponent_rows(t, "d", (*base, "n"))
    if not rows:
        return Section("", "", absent="No config measured at several n or several d with "
                                      "everything else fixed.")
    plots = []
    for axis in ("n", "d"):
        series = {f"{r['framework']}/{r['backend']} h={r['heads']}":
                  (r["_group"][axis].astype(float).tolist(), r["_group"]["time_ms"].tolist())
                  for r in rows if r["axis"] == axis}
        if series:
            plots.append(Plot(f"Time against {axis} (log-log; the slope is the exponent)",
                              axis, "time (ms)", dict(list(series.items())[:10]),
                              logx=True, logy=True))
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "_group"} for r in rows])
    keep = ["machine", "framework", "backend", "device", "mode", "batch", "heads", "n", "d",
            "axis", "values", "measured exponent", "FLOP model exponent"]
    table = table[keep]
    section = Section("", "", tables=[Table("exponents", "Fitted exponents: time ~ axis^k",
                                            table)], plots=plots)
    for axis in ("n", "d"):
        sub = table[table["axis"] == axis]
        if len(sub):
            section.text.append(
                f"Time grows as {axis}^k with k from {sub['measured exponent'].min():.2f} to "
                f"{sub['measured exponent'].max():.2f} (FLOP model "
                f"{sub['FLOP model exponent'].min():.2f}-{sub['FLOP model exponent'].max():.2f}).")
    return section


# ----- pairs of configs that differ in one field ------------------------------------------
def cross_section(ctx: Context) -> Section:
    t = ctx.timings
    cross = t[t["cross"].astype(bool)]
    if cross.empty:
        return Section("", "", absent="No cross-attention (cross=True) cells in the results.")
    on = ["machine", "framework", "backend", "device", "dtype", "mode", "batch", "n", "d",
          "heads", "kv_heads", "masked", "dropout"]
    selfs = t[~t["cross"].astype(bool)]
    pairs = cross.merge(selfs[[*on, "value", "flops_model"]], how="left", on=on,
                        suffixes=("", "_self"))
    table = pd.DataFrame({
        "machine": pairs["machine"], "framework": pairs["framework"],
        "backend": pairs["backend"], "batch": pairs["batch"], "n (queries)": pairs["n"],
        "m (keys)": pairs["m"], "d": pairs["d"], "h": pairs["heads"],
        "cross (ms)": pairs["time_ms"], "self n=m (ms)": 1e3 * pairs["value_self"],
        "cross/self time": pairs["value"] / pairs["value_self"],
        "cross/self FLOPs": pairs["flops_model"].astype(float)
        / pairs["flops_model_self"].astype(float)})
    section = Section("", "", tables=[Table("cross", "Cross-attention (n queries over m keys) "
                                            "against self-attention over n", table)])
    section.text.append("Cross-attention's cost is linear in m for the scores and mixing and "
                        "the key/value projections (Exercise 7); the table compares each cross "
                        "cell with the self-attention cell of the same n where one was timed.")
    return section


def variants_section(ctx: Context) -> Section:
    t = ctx.timings
    key = ["machine", "framework", "backend", "device", "dtype", "mode", "batch", "n", "m",
           "d", "heads", "cross", "masked", "dropout"]
    rows = []
    for _, g in t.groupby(key, sort=True, dropna=False):
        if g["kv_heads"].nunique() < 2:
            continue
        mha = g[g["kv_heads"] == g["heads"]]["value"]
        for r in g.sort_values("kv_heads", ascending=False).to_dict("records"):
            rows.append({"machine": r["machine"], "framework": r["framework"],
                         "backend": r["backend"], "mode": r["mode"], "shape": _shape(r),
                         "h": r["heads"], "kv heads": r["kv_heads"], "variant": r["variant"],
                         "time (ms)": r["time_ms"],
                         "time / MHA": r["value"] / mha.iloc[0] if len(mha) else np.nan,
                         "parameters": r["params"],
                         "KV cache (bytes/token)": r["kv_cache_bytes_per_token"]})
    if not rows:
        return Section("", "", absent="No config timed at several kv_heads (MHA/GQA/MQA).")
    table = pd.DataFrame(rows)
    section = Section("", "", tables=[Table("variants", "MHA, GQA and MQA: time, parameters "
                                            "and KV-cache bytes per token", table)])
    section.text.append("Fewer key/value heads shrink the key/value projections' parameters "
                        "and the KV cache by h/h_kv; the time column shows what that buys.")
    return section


def decoding_section(ctx: Context) -> Section:
    t = ctx.timings
    # Exercise 7.2's cached-source step; self-attention decode (a KV cache) is other work.
    dec = t[(t["mode"] == "decode") & t["cross"].astype(bool)]
    if dec.empty:
        return Section("", "", absent="No decode-mode (cached keys/values) cells in the "
                                      "results.")
    # Without a cache a decoder step projects the m source tokens again: the same config as
    # a forward cross-attention step of n new queries over m keys.
    on = ["machine", "framework", "backend", "device", "dtype", "batch", "n", "m", "d",
          "heads", "kv_heads", "masked", "dropout"]
    fwd = t[(t["mode"] == "forward") & t["cross"].astype(bool)]
    pairs = dec.merge(fwd[[*on, "value"]], how="left", on=on, suffixes=("", "_nocache"))
    table = pd.DataFrame({
        "machine": pairs["machine"], "framework": pairs["framework"],
        "backend": pairs["backend"], "batch": pairs["batch"], "n (new tokens)": pairs["n"],
        "m (cached)": pairs["m"], "d": pairs["d"], "h": pairs["heads"],
        "kv heads": pairs["kv_heads"], "cached (ms)": pairs["time_ms"],
        "recomputed (ms)": 1e3 * pairs["value_nocache"],
        "recomputed/cached time": pairs["value_nocache"] / pairs["value"],
        "model FLOPs cached": [decoder_step_flops(int(r["d"]), int(r["m"]), int(r["heads"]),
                                                 int(r["kv_heads"]), True) * int(r["batch"])
                               * int(r["n"]) for r in pairs.to_dict("records")],
        "model FLOPs recomputed": [decoder_step_flops(int(r["d"]), int(r["m"]), int(r["heads"]),
                                                      int(r["kv_heads"]), False)
                                   * int(r["batch"]) * int(r["n"])
                                   for r in pairs.to_dict("records")]})
    table["model FLOP ratio"] = table["model FLOPs recomputed"] / table["model FLOPs cached"]
    section = Section("", "", tables=[Table("decode", "Decoder step with cached keys/values "
                                            "against recomputing them", table)])
    if table["recomputed (ms)"].isna().all():
        section.text.append("No matching forward cross-attention cells were timed, so only the "
                            "cached step and the model's FLOP ratio are shown.")
    else:
        section.text.append("Caching the projected source keys/values (Exercise 7.2) removes "
                            "the 4md(h_kv p) projection FLOPs from every step.")
    return section


def train_section(ctx: Context) -> Section:
    t = ctx.timings
    train, fwd = t[t["mode"] == "train"], t[t["mode"] == "forward"]
    if train.empty:
        return Section("", "", absent="No train-mode (forward + backward) cells in the "
                                      "results.")
    on = [k for k in CONFIG_KEY if k != "mode"]
    pairs = train.merge(fwd[[*on, "value"]], how="inner", on=on, suffixes=("", "_fwd"))
    if pairs.empty:
        return Section("", "", absent="Train-mode cells have no forward cell of the same "
                                      "config to compare with.")
    table = pd.DataFrame({
        "machine": pairs["machine"], "framework": pairs["framework"],
        "backend": pairs["backend"], "shape": [_shape(r) for r in pairs.to_dict("records")],
        "h": pairs["heads"], "forward (ms)": 1e3 * pairs["value_fwd"],
        "forward+backward (ms)": pairs["time_ms"],
        "ratio": pairs["value"] / pairs["value_fwd"]})
    section = Section("", "", tables=[Table("train", "Forward + backward against forward",
                                            table)])
    section.text.append(f"The cost model counts a training step as {TRAIN_FACTOR}x the forward "
                        f"FLOPs; measured ratios run from {table['ratio'].min():.2f} to "
                        f"{table['ratio'].max():.2f} (median {table['ratio'].median():.2f}).")
    return section


def frameworks_section(ctx: Context) -> Section:
    t = ctx.timings
    on = [k for k in CONFIG_KEY if k != "framework"]
    torch_, jax_ = t[t["framework"] == "torch"], t[t["framework"] == "jax"]
    pairs = torch_.merge(jax_[[*on, "value"]], how="inner", on=on, suffixes=("", "_jax"))
    if pairs.empty:
        return Section("", "", absent="No config timed in both PyTorch and JAX.")
    table = pd.DataFrame({
        "machine": pairs["machine"], "backend": pairs["backend"], "mode": pairs["mode"],
        "shape": [_shape(r) for r in pairs.to_dict("records")], "h": pairs["heads"],
        "kv heads": pairs["kv_heads"], "PyTorch (ms)": pairs["time_ms"],
        "JAX (ms)": 1e3 * pairs["value_jax"], "JAX/PyTorch": pairs["value_jax"] / pairs["value"]})
    section = Section("", "", tables=[Table("torch-vs-jax", "The same configs in PyTorch and "
                                            "JAX", table)])
    med = table.groupby("backend")["JAX/PyTorch"].median()
    section.text.append("Median JAX/PyTorch time ratio per backend (below 1: JAX faster): "
                        + "; ".join(f"{b} {v:.2f}" for b, v in med.items()) + ".")
    sweeps = [(k, g) for k, g in head_sweeps(t) if k["mode"] == "forward"]
    section.plots = _sweep_plots(sweeps, "time (ms)", lambda g: g["time_ms"].tolist(),
                                 "PyTorch and JAX against h")[:2]
    return section


# ----- across commits and machines --------------------------------------------------------
def regressions_section(ctx: Context) -> Section:
    frame = ctx.results.frame
    if frame.empty or frame.groupby("machine")["commit"].nunique().max() < 2:
        return Section("", "", absent="Each machine's results hold one commit: no commits to "
                                      "compare.")
    rows = []
    key = ["machine", "env_name", "benchmark", "cell"]
    ordered = frame.sort_values("date")
    for k, g in ordered.groupby(key, sort=True):
        g = g.drop_duplicates("commit", keep="last")
        prev = g.shift(1)
        for (_, r), (_, p) in zip(g.iloc[1:].iterrows(), prev.iloc[1:].iterrows(), strict=True):
            ratio = r["value"] / p["value"] if p["value"] else np.inf
            if ratio >= ctx.threshold or ratio <= 1 / ctx.threshold:
                rows.append({**dict(zip(key, k, strict=True)), "commit": str(r["commit"])[:8],
                             "previous commit": str(p["commit"])[:8],
                             "previous": p["value"], "new": r["value"], "unit": r["unit"],
                             "new/previous": ratio,
                             "change": "slower (worse)" if ratio > 1 else "faster (better)"})
    section = Section("", "")
    section.text.append(
        f"A cell is flagged when its value changes by a factor of at least {ctx.threshold:g} "
        "from the previous commit of the same machine and environment (asv compare's "
        "default factor is 1.1); as in asv, a higher value is worse for every benchmark type.")
    if rows:
        section.tables.append(Table("flagged", f"Cells past the {ctx.threshold:g}x threshold",
                                    pd.DataFrame(rows)))
    else:
        section.text.append("No cell passed the threshold.")
    return section


def machines_section(ctx: Context) -> Section:
    t = ctx.timings
    if t["machine"].nunique() < 2:
        return Section("", "", absent="The results hold one machine.")
    pivot = t.pivot_table(index="config_id", columns="machine", values="time_ms",
                          aggfunc="median")
    pivot.columns = [f"{c} (ms)" for c in pivot.columns]
    pivot = pivot.dropna(thresh=2).reset_index()
    section = Section("", "", tables=[Table("machines", "Time per config on each machine",
                                            pivot)])
    if pivot.empty:
        section.text.append("No config was timed on more than one machine.")
    return section


# ----- profiler breakdown -----------------------------------------------------------------
def profile_section(ctx: Context) -> Section:
    b = ctx.traces
    if b is None:
        return Section("", "", absent="No profiler traces given (mhabench report --traces DIR).")
    if b.empty:
        return Section("", "", absent="The traces folder holds no region breakdown.")
    b = b.copy()
    b["fused_group"] = b["fused_group"].fillna("")
    b["share (%)"] = 100 * b["share"].astype(float)
    fused = b[b["fused_group"] != ""][["framework", "config_id", "region", "fused_group"]]
    b["region"] = b["region"].where(b["fused_group"] == "", b["region"] + " [fused]")
    keys = ["framework", "backend", "batch", "n", "m", "d", "heads", "kv_heads"]
    pivot = b.pivot_table(index=keys, columns="region", values="share (%)", aggfunc="sum",
                          fill_value=0.0).reset_index()
    pivot.columns = [c if c in keys else f"{c} (%)" for c in pivot.columns]
    total = b.groupby(keys)["time_s"].sum().rename("regions total (ms)") * 1e3
    pivot = pivot.merge(total.reset_index(), on=keys)
    section = Section("", "", tables=[Table("shares", "Share of traced time per region (%)",
                                            pivot)])
    if len(fused):
        section.tables.append(Table("fused", "Regions XLA fused into one kernel",
                                    fused.drop_duplicates()))
        section.text.append("Regions marked [fused] ran inside one XLA fusion; their time is "
                            "shared by the regions named in fused_group.")
    plots = []
    for (fw, be), g in b.groupby(["framework", "backend"], sort=True):
        g = g[(g["n"] == g["n"].iloc[0]) & (g["d"] == g["d"].iloc[0])]
        if g["heads"].nunique() < 1 or len(plots) >= MAX_PLOTS:
            continue
        share = g.pivot_table(index="heads", columns="region", values="share (%)",
                              aggfunc="sum", fill_value=0.0)
        x = share.index.astype(float).tolist()
        plots.append(Plot(f"Region shares against h: {fw}/{be}, n={g['n'].iloc[0]} "
                          f"d={g['d'].iloc[0]}", "heads h", "share of traced time (%)",
                          {r: (x, share[r].tolist()) for r in share.columns},
                          style="stacked"))
    section.plots = plots
    return section


BUILDERS: dict[str, Callable[[Context], Section]] = {
    "machine": machine_section, "exercise-6-4": exercise_section,
    "measured-vs-model": model_section, "per-head-decomposition": decomposition_section,
    "time-model": timemodel_section, "scaling": scaling_section,
    "self-vs-cross": cross_section, "mha-gqa-mqa": variants_section,
    "decoding": decoding_section, "forward-backward": train_section,
    "torch-vs-jax": frameworks_section, "regressions": regressions_section,
    "machines": machines_section, "profile": profile_section,
}
