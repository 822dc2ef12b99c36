"""Sections on what a step writes to memory: the attention kernel each fused cell ran
(``track_kernel``) and the step's own memory (``track_step_bytes``) against the cost
model, in the same form as the time sections."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mhabench.analysis.results import kernel_table, step_memory_table
from mhabench.report.context import Context
from mhabench.report.types import Plot, Section, Table


def kernels_section(ctx: Context) -> Section:
    table = kernel_table(ctx.results.frame)
    if table.empty:
        return Section("", "", absent="No track_kernel results: which kernel the fused and "
                       "reference cells ran is unknown.")
    counts = (table.groupby(["machine", "framework", "backend", "device", "dtype", "kernel"])
              .size().rename("cells").reset_index())
    section = Section("", "", tables=[
        Table("counts", "Kernels that ran, per framework, backend, device and dtype", counts),
        Table("cells", "Every fused and reference cell: the kernel that ran", table)])
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
    summary = []
    for (machine, fw, be, device, mode), g in table.groupby(
            ["machine", "framework", "backend", "device", "mode"]):
        summary.append({"machine": machine, "framework": fw, "backend": be, "device": device,
                        "mode": mode, "cells": len(g),
                        "median measured/model": g["measured/model"].median(),
                        "growth with b*h*n*m": _growth(g),
                        "largest measured (MiB)": g["measured (MiB)"].max()})
    summary = pd.DataFrame(summary)
    section = Section("", "", tables=[
        Table("summary", "Step memory per backend: measured against the cost model", summary),
        Table("cells", "Every cell: the step's own memory against the model's working set",
              table)])
    section.text.append(
        "Measured: the memory one step needs above what was resident before it (CPU: peak "
        "RSS reset through /proc/self/clear_refs; CUDA: the allocator's peak, or XLA's buffer "
        "assignment for JAX). Model: the cost model's working set for the kernel that ran "
        "(three copies of the map where the kernel writes it, plus activations and weights). "
        "'growth with b*h*n*m' is the log-log slope of measured memory against the map's size:"
        " near 1 for backends that write the map, near 0 for those that keep it in tiles.")
    forward = summary[summary["mode"] == "forward"]
    if len(forward):
        section.text.append("Growth with the map's size (forward): " + "; ".join(
            f"{r['framework']}/{r['backend']} {r['growth with b*h*n*m']:.2f}"
            for r in forward.to_dict("records") if np.isfinite(r["growth with b*h*n*m"]))
            + ".")
    series = {}
    for (fw, be), g in table[table["mode"] == "forward"].groupby(["framework", "backend"]):
        g = g.sort_values("map elements")
        series[f"{fw}/{be}"] = (g["map elements"].astype(float).tolist(),
                                g["measured (MiB)"].tolist())
    if series:
        section.plots.append(Plot("Step memory against the attention map's size (forward)",
                                  "map elements b*h*n*m", "measured step memory (MiB)", series,
                                  logx=True, logy=True, style="scatter"))
    return section
