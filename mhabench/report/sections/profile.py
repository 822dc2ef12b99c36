"""The profiler section: each region's share of traced time, from ``mhabench profile``'s
saved traces (``mhabench report --traces DIR``)."""

from __future__ import annotations

from mhabench.report.context import MAX_PLOTS, Context
from mhabench.report.types import Plot, Section, Table


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
