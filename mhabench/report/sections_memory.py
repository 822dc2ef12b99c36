"""Sections on what a step writes to memory: the attention kernel each fused cell ran
(``track_kernel``) and the step's own memory (``track_step_bytes``) against the cost
model, in the same form as the time sections."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mhabench.analysis.tracks import kernel_table, step_memory_table
from mhabench.core.kernels import KERNEL_CODES, SCORE_TERMS, score_term
from mhabench.report.context import Context
from mhabench.report.formatting import size_text
from mhabench.report.types import Plot, Section, Table


def kernels_section(ctx: Context) -> Section:
    table = ctx.kernels if ctx.kernels is not None else kernel_table(ctx.results.frame)
    if table.empty:
        return Section("", "", absent="No track_kernel results: which kernel the fused and "
                       "reference cells ran is unknown.")
    counts = (table.groupby(["machine", "framework", "backend", "device", "dtype", "kernel"])
              .size().rename("cells").reset_index())
    section = Section("", "", tables=[
        Table("counts", "Kernels that ran, per framework, backend, device and dtype", counts),
        Table("cells", "Every fused and reference cell: the kernel that ran", table,
              detail=True)])
    fallbacks = table[table["note"].str.startswith("fallback")]
    section.text.append(
        "A fused call names a library function, not a kernel: torch's SDPA picks flash, "
        "memory-efficient, cuDNN or the math fallback per cell; JAX's call lowers to XLA "
        "einsum + softmax (which writes the attention map) unless cuDNN is asked for. "
        + (f"{len(fallbacks)} fused cell(s) fell back to math and write the map: "
           + "; ".join(f"{r['machine']} {r['config_id']}" for r in
                       fallbacks.head(8).to_dict("records"))
           + ("; ..." if len(fallbacks) > 8 else "") + "."
           if len(fallbacks) else "No fused cell fell back to the math kernel."))
    return section


def _growth(group: pd.DataFrame) -> float:
    """Slope of log(measured bytes) against log(map elements): about 1 when the step
    writes the map, about 0 when it does not."""
    x = np.log(group["map elements"].astype(float))
    y = np.log(group["measured (MiB)"].clip(lower=1 / 1024))
    if x.nunique() < 2:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


def memory_section(ctx: Context) -> Section:
    table = step_memory_table(ctx.results.frame)
    if table.empty:
        return Section("", "", absent="No track_step_bytes results (the step's own memory).")
    table.insert(table.columns.get_loc("kernel") + 1, "b*h*n*m term",
                 [score_term(k.split(" ")[0]) if k.split(" ")[0] in KERNEL_CODES else ""
                  for k in table["kernel"]])
    keys = ["machine", "framework", "backend", "device"]
    rows = []
    for key, g in table.groupby(keys):
        forward = g[g["mode"] == "forward"]
        rows.append({**dict(zip(keys, key, strict=True)), "cells": len(g),
                     "b*h*n*m term": ", ".join(sorted(set(g["b*h*n*m term"]) - {""})),
                     "median measured/model (forward)": forward["measured/model"].median(),
                     "growth with b*h*n*m (forward)": _growth(forward),
                     "largest measured": size_text(g["measured (MiB)"].max() * 2**20)})
    summary = pd.DataFrame(rows)
    by_mode = [{"machine": m, "framework": fw, "backend": be, "device": dev, "mode": mode,
                "cells": len(g), "median measured/model": g["measured/model"].median(),
                "growth with b*h*n*m": _growth(g),
                "largest measured (MiB)": g["measured (MiB)"].max()}
               for (m, fw, be, dev, mode), g in table.groupby([*keys, "mode"])]
    section = Section("", "", tables=[
        Table("summary", "Step memory per backend: measured against the cost model", summary),
        Table("by-mode", "Step memory per backend and mode", pd.DataFrame(by_mode),
              detail=True),
        Table("cells", "Every cell: the step's own memory against the model's working set",
              table, detail=True)])
    section.text.append(
        "Measured: the memory one step needs above what was resident before it (CPU: peak "
        "RSS reset through /proc/self/clear_refs; CUDA: the allocator's peak, or XLA's buffer "
        "assignment for JAX). Model: the cost model's working set for the kernel that ran "
        "(three copies of the map where the kernel writes it, plus activations and weights). "
        "'growth with b*h*n*m' is the log-log slope of measured memory against the number of "
        f"scores: near 1 where the b*h*n*m term is the {SCORE_TERMS[True]}, near 0 where it "
        f"is {SCORE_TERMS[False]} in tiles that never reach memory.")
    grows = summary.dropna(subset=["growth with b*h*n*m (forward)"])
    if len(grows):
        steep = grows.loc[grows["growth with b*h*n*m (forward)"].idxmax()]
        flat = grows.loc[grows["growth with b*h*n*m (forward)"].idxmin()]
        section.text.append(
            f"Growth with the number of scores (forward) runs from "
            f"{flat['growth with b*h*n*m (forward)']:.2f} ({flat['framework']}/"
            f"{flat['backend']}, {flat['b*h*n*m term']}) to "
            f"{steep['growth with b*h*n*m (forward)']:.2f} ({steep['framework']}/"
            f"{steep['backend']}, {steep['b*h*n*m term']}); the summary has each backend's.")
    for machine, m in table[table["mode"] == "forward"].groupby("machine"):
        series = {}
        for (fw, be), g in m.groupby(["framework", "backend"]):
            g = g.sort_values("map elements")
            series[f"{fw}/{be}"] = (g["map elements"].astype(float).tolist(),
                                    g["measured (MiB)"].tolist())
        section.plots.append(Plot(f"Step memory against the number of scores b*h*n*m "
                                  f"(forward): {machine}", "scores b*h*n*m",
                                  "measured step memory (MiB)", series, logx=True, logy=True,
                                  style="scatter"))
    return section
