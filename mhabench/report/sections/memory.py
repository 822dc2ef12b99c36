"""Sections on what a step writes to memory: the attention kernel each fused cell ran
(``track_kernel``) and the step's own memory (``track_step_bytes``) against the cost
model, in the same form as the time sections."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mhabench.analysis.tracks import kernel_table, step_memory_table, track_values
from mhabench.core.kernel_codes import KERNEL_CODES, SCORE_TERMS, score_term
from mhabench.report.context import Context
from mhabench.report.render.formatting import size_text
from mhabench.report.types import Plot, Section, Table


def kernels_section(ctx: Context) -> Section:
    table = ctx.kernels if ctx.kernels is not None else kernel_table(ctx.results.frame)
    if table.empty:
        return Section("", "", absent="No track_kernel results: which kernel the fused and "
                       "reference cells ran is unknown.")
    counts = (table.groupby(["machine", "framework", "backend", "device", "dtype", "kernel"])
              .size().rename("cells").reset_index())
    # the cells worth a look first: fallbacks to math, then kernels other than predicted
    first = np.select([table["note"].str.startswith("fallback"), table["note"].ne("")],
                      [0, 1], 2)
    section = Section("", "", tables=[
        Table("counts", "Kernels that ran, per framework, backend, device and dtype", counts),
        Table("cells", "Every fused and reference cell: the kernel that ran (fallbacks and "
              "kernels other than predicted first)",
              table.iloc[np.argsort(first, kind="stable")]
              .reset_index(drop=True), detail=True)])
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
        Table("by-mode", "Step memory per backend and mode", pd.DataFrame(by_mode)),
        Table("cells", "Every cell: the step's own memory against the model's working set",
              table, detail=True, rank="measured/model", rank_order="far from 1")])
    section.text.append(
        "Measured: the live peak of the step's own allocations, the most bytes it had "
        "allocated and not freed at once (torch, CPU: the profiler's memory events; JAX, CPU: "
        "the C allocator's, every large block on fresh pages for that call, or XLA's buffer "
        "plan where that is larger (the plan leaves out what YNNPACK fusions allocate, and "
        "the heap sees the plan only now and then); CUDA: torch's caching "
        "allocator, XLA's buffer plan). Model: the cost model's working set for the kernel "
        "that ran (three copies of the map where the kernel writes it, plus activations and "
        "weights). "
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
    _rss_crosscheck(section, ctx, table)
    return section


# RSS and live peak agree when they differ by less than this share of the live peak or
# these MiB (page rounding, the C allocator's headers, small buffers).
AGREE_SHARE, AGREE_MIB = 0.1, 4.0


def _rss_crosscheck(section: Section, ctx: Context, table: pd.DataFrame) -> None:
    """The RSS high-water reading (``track_step_rss_bytes``, CPU cells) beside the live
    peak: a table, and a paragraph on where and why they differ."""
    rss = track_values(ctx.results.frame, "track_step_rss_bytes") / 2**20
    rss = rss[~rss.index.duplicated(keep="last")]  # a config in several classes: one row
    cells = table.join(rss.rename("RSS (MiB)"), on=["machine", "config_id"], how="inner")
    if cells.empty:
        return
    maps = cells["model map (MiB)"].where(cells["model map (MiB)"] > 0)
    diff = cells["RSS (MiB)"] - cells["measured (MiB)"]
    cells = cells[["machine", "config_id", "framework", "backend", "mode", "heads"]].assign(**{
        "live peak (MiB)": cells["measured (MiB)"], "RSS (MiB)": cells["RSS (MiB)"],
        "RSS - live (MiB)": diff, "RSS - live (maps)": diff / maps})
    section.tables.append(Table("rss", "CPU cells: the RSS high-water reading beside the "
                                "live peak (track_step_bytes)", cells, detail=True,
                                rank="RSS - live (MiB)", rank_order="far from 0"))
    tolerance = np.maximum(AGREE_SHARE * cells["live peak (MiB)"], AGREE_MIB)
    more, less = cells[diff > tolerance], cells[diff < -tolerance]

    def where(rows: pd.DataFrame) -> str:
        counts = rows.groupby(["framework", "backend"]).size()
        return ", ".join(f"{fw}/{be} {n}" for (fw, be), n in counts.items())

    text = (f"Cross-check: the RSS high-water reading (track_step_rss_bytes, its own "
            "process: the peak RSS growth of one call, on the heap as the timing process keeps "
            f"it) agrees with the live peak within {AGREE_SHARE:.0%} or {AGREE_MIB:g} MiB in "
            f"{len(cells) - len(more) - len(less)} of {len(cells)} CPU cells.")
    if len(more):
        text += (f" RSS reads more in {len(more)} ({where(more)}; median "
                 f"{more['RSS - live (MiB)'].median():,.0f} MiB more, at most "
                 f"{more['RSS - live (maps)'].max():,.1f} attention maps): it counts every page "
                 "the step touched, so a block the step freed whose pages the C allocator did "
                 "not hand to its next allocation counts twice. Which free chunk takes an "
                 "allocation depends on the heap's history in that process, so such a cell can "
                 "read a map more in one run than in the next; the live peak cannot. For torch "
                 "it also holds memory outside torch's allocator (BLAS and oneDNN scratch).")
    if len(less):
        text += (f" RSS reads less in {len(less)} ({where(less)}): pages resident before "
                 "the step that it reused, buffers it held but never wrote, or (JAX) the "
                 "previous call's temporaries, which XLA frees on its own thread, going during "
                 "this one.")
    section.text.append(text)
