"""The section "Across releases": one commit timed in an ordered list of dependency sets (a
package's releases) by ``mhabench releases``, read from the ``releases.json`` beside the
results: each cell's time per release as a table and a plot, the changes between adjacent
releases with their intervals and verdicts, the kernel each release ran where it changed,
and compile times."""

from __future__ import annotations

from typing import Any

from mhabench.analysis.comparisons.releases import (
    cell_order,
    changes,
    changes_frame,
    compile_frame,
    finding,
    kernels_frame,
    labels,
    load_summary,
    packages_frame,
    short_cell,
    times_frame,
    what,
)
from mhabench.report.context import Context
from mhabench.report.types import Plot, Section, Table

SECTION_ID = "releases"
PLOTTED = 8  # cells drawn, those that moved most from the first release to the last


def releases_section(ctx: Context) -> Section:
    summary = load_summary(ctx.results.root)
    if summary is None:
        return Section("", "", absent="No release sweep beside these results (mhabench "
                       "releases SET SET ... writes one; report on its results folder).")
    section = Section("", "", facts={"summary": summary})
    settings = summary.get("settings", {})
    section.text.append(
        f"Commit {summary['commit'][:8]} timed in one asv environment per release, oldest "
        "first: " + "; ".join(f"{r['label']} ({r['describe']}, `{r.get('env_name')}`)"
                              for r in summary["releases"]) + ".")
    section.text.append(
        f"Every release ran {settings.get('rounds')} rounds of fresh processes, their order "
        "forward and then reversed, one median a process. A release's time is the median of "
        "its fast processes (within 1.25x of its fastest); each release is compared with the "
        "one before it as the gate compares two commits, and a step is slower or faster "
        f"only where its 95 % interval clears 1.0 and its ratio passes "
        f"{settings.get('factor')}x. A release where a cell failed is passed over: its step "
        "runs from the last release that timed it.")
    if summary.get("left_out"):
        section.text.append("Left out of the range: " + "; ".join(summary["left_out"]) + ".")
    section.text.append(finding(summary))
    seconds = summary.get("seconds", {})
    if seconds:
        section.text.append("Time taken: " + ", ".join(f"{k} {v:.0f} s"
                                                      for k, v in seconds.items()) + ".")
    plot = times_plot(summary)
    if plot is not None:
        section.plots.append(plot)
    section.tables.append(Table("times", "Each cell's time at each release (ms), the last "
                                "release against the first, its changes", times_frame(summary),
                                detail=True, rank="last/first", rank_order="far from 1"))
    section.tables.append(Table("changes", "The changes between adjacent releases: verdict, "
                                "ratio to the release before, interval and the kernel each "
                                "ran", changes_frame(summary), detail=True, rank="ratio",
                                rank_order="far from 1"))
    kernels = kernels_frame(summary)
    if len(kernels):
        section.tables.append(Table("kernels", "The kernel each release ran, where it "
                                    "changed", kernels, detail=True))
    compiled = compile_frame(summary)
    if len(compiled):
        section.tables.append(Table("compile", "Compile time at each release: one process a "
                                    "release, no verdict", compiled))
    section.tables.append(Table("packages", "What each release had installed",
                                packages_frame(summary)))
    return section


def times_plot(summary: dict[str, Any]) -> Plot | None:
    """Time against release, one line per cell (the :data:`PLOTTED` that moved most), a
    dashed line before each release where a cell changed."""
    names = labels(summary)
    drawn = [c for c in cell_order(summary) if any(t is not None for t in c["times"].values())]
    if not drawn:
        return None
    series: dict[str, tuple[list[float], list[float]]] = {}
    for cell in drawn[:PLOTTED]:
        points = [(float(i), cell["times"][label] * 1e3) for i, label in enumerate(names)
                  if cell["times"].get(label) is not None]
        label = short_cell(cell["cell"])
        series[label if label not in series else cell["cell"]] = (
            [x for x, _ in points], [y for _, y in points])
    shown = "" if len(drawn) <= PLOTTED else (f": the {PLOTTED} of {len(drawn)} cells that "
                                              "moved most")
    marks = sorted({names.index(c["to"]) - 0.5 for c in changes(summary)})
    return Plot(f"Time per release, {what(summary)}{shown}", "release (oldest first)",
                "time (ms)", series, logy=True, xticks=names, marks=marks)
