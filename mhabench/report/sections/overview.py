"""Sections about one machine's newest results: the machine and its calibration, the
Exercise 6.4 head sweep, and measured time against the FLOP model."""

from __future__ import annotations

import pandas as pd

from mhabench.analysis.results import config_from_row, head_widths
from mhabench.analysis.tracks import track_values
from mhabench.report.context import (
    MIN_SWEEP,
    Context,
    exercise_sweeps,
    head_sweeps,
    peaks,
    shape,
    sweep_id,
    sweep_plots,
)
from mhabench.report.render.formatting import date_text, size_text
from mhabench.report.render.palette import FRAMEWORK_NAMES
from mhabench.report.types import Plot, Section, Table


def _gpu(facts: dict) -> str:
    if not facts.get("gpu"):
        return ""
    memory = size_text(facts["gpu_memory_bytes"]) if facts.get("gpu_memory_bytes") else ""
    return ", ".join(filter(None, (facts["gpu"], memory, f"driver {facts.get('driver')}",
                                   f"CUDA {facts.get('cuda')}", f"cuDNN {facts.get('cudnn')}")))


def _versions(info: dict) -> str:
    """torch/jax/flax versions: mhabench's machine facts where written (a GPU run), else the
    versions asv's environment recorded with the results."""
    facts, env = info.get("facts", {}), info.get("versions", {})
    return ", ".join(f"{k} {facts.get(k) or env.get(k)}" for k in ("torch", "jax", "flax")
                     if facts.get(k) or env.get(k))


def machine_section(ctx: Context) -> Section:
    frame, cal = ctx.results.frame, ctx.calibration
    rows = []
    for name in ctx.results.machine_names:
        info = ctx.results.machines.get(name, {})
        mine = frame[frame["machine"] == name]
        facts = info.get("facts", {})  # mhabench-machine.json (GPU, versions, precision)
        rates = cal[(cal["machine"] == name) & (cal["dtype"] == "float32")]["peak_gflops"]
        rows.append({"machine": name, "cpu": info.get("cpu", ""),
                     "cores": info.get("num_cpu", ""), "RAM": size_text(info.get("ram")),
                     "os": info.get("os", ""), "gpu": _gpu(facts),
                     "frameworks": _versions(info),
                     "float32 matmul (GFLOP/s, calibrated)": rates.max() if rates.notna().any()
                     else "",
                     "float32 matmul precision": facts.get("float32_matmul", ""),
                     "commits": mine["commit"].nunique(),
                     "newest run": date_text(mine["started"].max()) if len(mine) else "",
                     "environments": ", ".join(sorted(mine["env_name"].dropna().unique()))})
    table = pd.DataFrame(rows)
    empty = [c for c in table.columns if (table[c].astype(str) == "").all()]
    section = Section("", "", tables=[Table("machines", "Machines in the results",
                                            table.drop(columns=empty))])
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


def _sweep_row(key: dict, group: pd.DataFrame, exercise: bool) -> dict:
    slow = group.loc[group["value"].idxmax()]
    fast = group.loc[group["value"].idxmin()]
    ends = group.sort_values("heads")
    return {"machine": key["machine"], "framework": key["framework"],
            "backend": key["backend"], "device": key["device"], "dtype": key["dtype"],
            "mode": key["mode"], "shape": shape(key), "Exercise 6.4 sweep": exercise,
            "h range": f"{group['heads'].min()}-{group['heads'].max()}",
            "at smallest h (ms)": ends["time_ms"].iloc[0],
            "at largest h (ms)": ends["time_ms"].iloc[-1],
            "fastest h": int(fast["heads"]), "slowest h": int(slow["heads"]),
            "slowest/fastest": slow["value"] / fast["value"]}


def _exercise_text(summary: pd.DataFrame) -> list[str]:
    """Per machine, device and dtype: the chapter's layout's ratio in each framework, and
    the fastest backend at the largest h (where the head count costs the most)."""
    out = []
    for (machine, device, dtype, shape_), g in summary.groupby(
            ["machine", "device", "dtype", "shape"], sort=False):
        batched = g[g["backend"] == "batched"]
        layout = ", ".join(f"{r['slowest/fastest']:.1f}x in "
                           f"{FRAMEWORK_NAMES.get(r['framework'], r['framework'])}"
                           for r in batched.to_dict("records"))
        top = g.loc[g["at largest h (ms)"].idxmin()]
        out.append(f"{machine} ({device}, {dtype}, {shape_}, h {g['h range'].iloc[0]}): "
                   + (f"the chapter's layout (batched), slowest/fastest over h: {layout}; "
                      if layout else "")
                   + f"at h={g['h range'].iloc[0].split('-')[-1]} the fastest is "
                   f"{top['framework']}/{top['backend']} ({top['at largest h (ms)']:.3g} ms, "
                   f"{top['slowest/fastest']:.1f}x over its sweep).")
    return out


def exercise_section(ctx: Context) -> Section:
    sweeps = head_sweeps(ctx.timings)
    if not sweeps:
        return Section("", "", absent="No head sweep (one config at several h) in the results.")
    main = exercise_sweeps(sweeps)
    chosen = {sweep_id(k) for k, _ in main}
    summary, detail = [], []
    ran = (ctx.kernels if ctx.kernels is not None else pd.DataFrame(
        columns=["machine", "config_id", "kernel"])).set_index(["machine", "config_id"])["kernel"]
    compiles = track_values(ctx.results.frame, "track_compile_seconds")
    device = track_values(ctx.results.frame, "track_device_seconds")
    times = ctx.timings.set_index(["machine", "config_id"])["value"]
    for key, group in sweeps:
        summary.append(_sweep_row(key, group, sweep_id(key) in chosen))
        best = group["value"].min()
        for r in group.assign(p=head_widths(group)).to_dict("records"):
            detail.append({"machine": key["machine"], "framework": key["framework"],
                           "backend": key["backend"], "dtype": key["dtype"],
                           "mode": key["mode"], "shape": shape(key), "h": r["heads"],
                           "p": r["p"],
                           "kernel": ran.get((r["machine"], r["config_id"]), ""),
                           "time (ms)": r["time_ms"], "t(h)/t(best h)": r["value"] / best,
                           **_compile_columns(r, compiles, times),
                           **_device_columns(r, device)})
    summary = pd.DataFrame(summary)
    ex = summary[summary["Exercise 6.4 sweep"]].sort_values(
        ["machine", "dtype", "at largest h (ms)"]).drop(columns=["Exercise 6.4 sweep", "mode"])
    section = Section("", "", tables=[
        *([Table("summary", "The Exercise 6.4 sweep on each machine: time at the smallest "
                 "and largest h, fastest at the largest h first", ex)] if len(ex) else []),
        Table("ratios", "Slowest over fastest head count, every head sweep", summary),
        Table("sweeps", "Time per head count, relative to the sweep's best h",
              pd.DataFrame(detail), detail=True, rank="t(h)/t(best h)")])
    section.text.append(
        "Exercise 6.4 asks whether h is free at fixed d: at fixed d the FLOP model does not "
        "change with h, while the score elements b*h*n*m grow with it. The sweep shown is "
        "the chapter's (batch 8, n 512, d 256, forward) where it was timed, else the "
        "forward sweep over the most head counts (the quick grid's is at batch 2).")
    section.text += _exercise_text(ex) if len(ex) else [
        f"No sweep over {MIN_SWEEP} or more head counts: too few h for a trend."]
    section.plots = sweep_plots(main, "time (ms)", lambda g: g["time_ms"].tolist(),
                                "Time per forward pass against h")
    measured = [(key, group.assign(host_ms=[_device_columns(r, device)["host overhead (ms)"]
                                            for r in group.to_dict("records")]))
                for key, group in main if not device.empty]
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
    by = table.assign(device=t["device"], framework=t["framework"],
                      backend=t["backend"]).groupby(["machine", "device", "framework",
                                                     "backend"])
    summary = by.agg(**{"cells": ("config", "size"),
                        "median GFLOP/s": ("achieved (GFLOP/s)", "median"),
                        "median % of peak": ("% of matmul peak", "median"),
                        "worst measured/predicted": ("measured/predicted at peak", "max")})
    section = Section("", "", tables=[
        Table("summary", "Achieved rate per machine, framework and backend",
              summary.reset_index()),
        Table("cells", "Each timed cell against the FLOP model (flops_model = 8nd^2 + 4n^2 d "
              "for self-attention MHA)", table.reset_index(drop=True), detail=True,
              rank="measured/predicted at peak")])
    if peak.notna().any():
        best = summary["median % of peak"].dropna()
        section.text.append(
            "The plain FLOP model predicts flops_model / matmul peak, so measured/predicted is "
            "the inverse of the fraction of peak reached."
            + (f" The highest median fraction of the matmul peak: {best.max():.0f}% "
               f"({'/'.join(best.idxmax()[2:])} on {best.idxmax()[0]}); the lowest "
               f"{best.min():.0f}% ({'/'.join(best.idxmin()[2:])})." if len(best) else ""))
    else:
        section.text.append("No calibrated matmul peak, so only achieved GFLOP/s is shown.")
    for machine, m in t.groupby("machine"):
        pts: dict[str, tuple[list[float], list[float]]] = {}
        for (fw, be), g in m.groupby(["framework", "backend"]):
            p = peaks(ctx, g)
            if p.notna().any():
                pts[f"{fw}/{be}"] = ((g["flops_model"].astype(float) / (p * 1e9) * 1e3).tolist(),
                                     g["time_ms"].tolist())
        if pts:
            section.plots.append(Plot(f"Measured time against the FLOP model at the matmul "
                                      f"peak: {machine}", "FLOP model at peak (ms)",
                                      "measured (ms)", pts, logx=True, logy=True,
                                      style="scatter", diagonal=True))
    return section
