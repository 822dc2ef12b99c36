"""Sections about one machine's newest results: the machine and its calibration, the
Exercise 6.4 head sweep, and measured time against the FLOP model."""

from __future__ import annotations

import pandas as pd

from mhabench.analysis.results import config_from_row, kernel_table, track_values
from mhabench.report.context import (
    Context,
    head_sweeps,
    is_chapter,
    peaks,
    shape,
    sweep_plots,
)
from mhabench.report.types import Plot, Section, Table


def machine_section(ctx: Context) -> Section:
    frame = ctx.results.frame
    rows = []
    for name in ctx.results.machine_names:
        info = ctx.results.machines.get(name, {})
        mine = frame[frame["machine"] == name]
        facts = info.get("facts", {})  # mhabench-machine.json (GPU, versions, precision)
        gpu = (f"{facts['gpu']}, driver {facts.get('driver')}, CUDA {facts.get('cuda')}, "
               f"cuDNN {facts.get('cudnn')}" if facts.get("gpu") else "")
        versions = ", ".join(f"{k} {facts[k]}" for k in ("torch", "jax", "flax")
                             if facts.get(k))
        rows.append({"machine": name, "cpu": info.get("cpu", ""),
                     "cores": info.get("num_cpu", ""), "ram": info.get("ram", ""),
                     "os": info.get("os", ""), "gpu": gpu, "frameworks": versions,
                     "float32 matmul": facts.get("float32_matmul", ""),
                     "commits": mine["commit"].nunique(),
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


def _compile_columns(row: dict, compiles: pd.Series, times: pd.Series) -> dict:
    """Cold compile seconds of the cell (track_compile_seconds) and, for a torch backend
    that compiles, the calls it takes to pay them back against torch's eager batched layout
    of the same cell ("never" where it saves nothing). Empty without compile results."""
    if compiles.empty:
        return {}
    seconds = compiles.get((row["machine"], row["config_id"]))
    even: object = ""
    if seconds is not None and row["framework"] == "torch" and row["backend"] != "batched":
        eager = times.get((row["machine"], config_from_row(row).replace(backend="batched").id))
        if eager is not None:
            saved = eager - row["value"]
            even = round(seconds / saved) if saved > 0 else "never"
    return {"compile (s)": "" if seconds is None else seconds, "break-even calls": even}


def _device_columns(row: dict, device: pd.Series) -> dict:
    """Device busy time (track_device_seconds, CUDA cells) and the host's share of the
    step, wall minus device: the launch and dispatch cost that grows with h on a GPU."""
    if device.empty:
        return {}
    seconds = device.get((row["machine"], row["config_id"]))
    if seconds is None:
        return {"device (ms)": "", "host overhead (ms)": ""}
    return {"device (ms)": seconds * 1e3, "host overhead (ms)": row["time_ms"] - seconds * 1e3}


def exercise_section(ctx: Context) -> Section:
    sweeps = head_sweeps(ctx.timings)
    if not sweeps:
        return Section("", "", absent="No head sweep (one config at several h) in the results.")
    summary, detail, chapter = [], [], []
    ran = kernel_table(ctx.results.frame).set_index(["machine", "config_id"])["kernel"]
    compiles = track_values(ctx.results.frame, "track_compile_seconds")
    device = track_values(ctx.results.frame, "track_device_seconds")
    times = ctx.timings.set_index(["machine", "config_id"])["value"]
    for key, group in sweeps:
        chapter.append(is_chapter(key))
        best = group["value"].min()
        slow = group.loc[group["value"].idxmax()]
        fast = group.loc[group["value"].idxmin()]
        summary.append({"machine": key["machine"], "framework": key["framework"],
                        "backend": key["backend"], "device": key["device"],
                        "mode": key["mode"], "shape": shape(key),
                        "h range": f"{group['heads'].min()}-{group['heads'].max()}",
                        "fastest h": int(fast["heads"]), "fastest (ms)": fast["time_ms"],
                        "slowest h": int(slow["heads"]), "slowest (ms)": slow["time_ms"],
                        "slowest/fastest": slow["value"] / fast["value"]})
        for r in group.to_dict("records"):
            detail.append({"machine": key["machine"], "framework": key["framework"],
                           "backend": key["backend"], "mode": key["mode"],
                           "shape": shape(key), "h": r["heads"], "p = d/h": r["d"] // r["heads"],
                           "kernel": ran.get((r["machine"], r["config_id"]), ""),
                           "time (ms)": r["time_ms"], "t(h)/t(best h)": r["value"] / best,
                           **_compile_columns(r, compiles, times),
                           **_device_columns(r, device)})
    summary = pd.DataFrame(summary)
    section = Section("", "", tables=[
        Table("ratios", "Slowest over fastest head count per sweep", summary),
        Table("sweeps", "Time per head count, relative to the sweep's best h",
              pd.DataFrame(detail))])
    # The chapter's shape (batch 8, n 512, d 256, forward), keyed on the sweep's fields.
    chapter = summary[chapter]
    shown = chapter if len(chapter) else summary
    section.text.append(
        "Exercise 6.4 asks whether h is free at fixed d. Slowest/fastest ratio per framework "
        "and backend" + (" (the chapter's d=256, n=512, batch 8)" if len(chapter) else "")
        + ": " + "; ".join(f"{r['framework']}/{r['backend']} {r['slowest/fastest']:.2f}x "
                           f"(h={r['fastest h']} fastest, h={r['slowest h']} slowest)"
                           for r in shown.to_dict("records")) + ".")
    section.plots = sweep_plots(sweeps, "time (ms)", lambda g: g["time_ms"].tolist(),
                                 "Time per forward pass against h")
    measured = [(key, group.assign(host_ms=[_device_columns(r, device)["host overhead (ms)"]
                                            for r in group.to_dict("records")]))
                for key, group in sweeps if not device.empty]
    measured = [(k, g[g["host_ms"] != ""]) for k, g in measured]
    measured = [(k, g) for k, g in measured if g["heads"].nunique() >= 2]
    if measured:
        section.plots += sweep_plots(measured, "host overhead (ms)",
                                     lambda g: g["host_ms"].astype(float).tolist(),
                                     "Host overhead (wall minus device) against h")
    return section


def model_section(ctx: Context) -> Section:
    t = ctx.timings
    if t.empty:
        return Section("", "", absent="No timed attention configs in the results.")
    flops = t["flops_model"].astype(float)
    achieved = flops / t["value"] / 1e9
    peak = peaks(ctx, t)
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
        p = peaks(ctx, g)
        if p.notna().any():
            pts[f"{fw}/{be}"] = ((g["flops_model"].astype(float) / (p * 1e9) * 1e3).tolist(),
                                 g["time_ms"].tolist())
    if pts:
        section.plots.append(Plot("Measured time against the FLOP model at the matmul peak",
                                  "FLOP model at peak (ms)", "measured (ms)", pts, logx=True,
                                  logy=True, style="scatter", diagonal=True))
    return section
